"""The shared inputs of the generator tests: a small valid manifest, the synthetic
handwritten half that matches it, and helpers to write and render them."""

from __future__ import annotations

from pathlib import Path

import pytest

from codegen.generate import render
from codegen.manifest import ManifestError, load_manifest

# A small, valid manifest (line numbers matter: the messages quote them).
GOOD_MANIFEST = """\
backend: XLA
full_codegen:
  - abs
  - add.Tensor
supported:
  - nonzero
fallback:
  - kthvalue
"""

# The handwritten half for GOOD_MANIFEST: `def lower_abs` is at line 4,
# `def lower_add_Tensor` at line 8 (likewise for the shape functions).
LOWERINGS = '''\
"""Synthetic lowerings."""


def lower_abs(self):
    return self


def lower_add_Tensor(self, other, *, alpha=1):
    return self
'''
SHAPE_FNS = '''\
"""Synthetic shape functions."""


def abs_output_shape(self):
    return self


def add_Tensor_output_shape(self, other, *, alpha=1):
    return self
'''
IMPLS = '''\
def _helper(x):
    return x


def impl_nonzero(self):
    return self
'''

COUNTS = "full_codegen 2 (+4 in-place/out=), supported 1 (+1 in-place/out=), fallback 1 (+1 in-place/out=)"


def scrub(text: str, tmp_path: Path) -> str:
    return text.replace(str(tmp_path), "<tmp>")


def write_manifest(tmp_path: Path, text: str, name: str = "manifest.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def manifest_error(tmp_path: Path, text: str) -> str:
    """The message of load_manifest's error for a manifest with this text."""
    path = write_manifest(tmp_path, text)
    with pytest.raises(ManifestError) as info:
        load_manifest(path)
    return scrub(str(info.value), tmp_path)


def render_error(tmp_path: Path, manifest_text: str, root: Path) -> str:
    path = write_manifest(tmp_path, manifest_text)
    with pytest.raises(ManifestError) as info:
        render(path, root=root)
    return scrub(str(info.value), tmp_path)


def make_root(
    path: Path, lowerings: str | None = LOWERINGS, shape_fns: str | None = SHAPE_FNS, impls: str | None = IMPLS
) -> Path:
    for folder, text, name in (
        ("lowerings", lowerings, "pointwise.py"),
        ("shape_fns", shape_fns, "pointwise.py"),
        ("runtime", impls, "ops.py"),
    ):
        (path / folder).mkdir(parents=True, exist_ok=True)
        if text is not None:
            (path / folder / name).write_text(text)
    return path
