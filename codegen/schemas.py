"""The aten schema database, read from the `native_functions.yaml` and `tags.yaml`
that ship inside the installed torchgen.

A full torchgen parse costs over a second, so the few facts the generator needs of
every function (schema text, tags, whether it is a view, its functional group) are
cached as JSON keyed by the torch version and a hash of both YAML files. The warm
path reads that JSON and never imports torch or torchgen's parser.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class SchemaRecord:
    name: str  # "add.Tensor"
    schema: str  # "add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"
    tags: tuple[str, ...]
    is_view: bool  # returns an alias of an input (torchgen's is_view_op)
    kind: str  # torchgen SchemaKind name: functional, inplace, out, mutable, scratch
    group: str  # the functional signature shared by an op's functional, in-place and out= forms
    composite_implicit: bool  # decomposes before a backend sees it


@dataclass(frozen=True)
class SchemaDatabase:
    torch_version: str
    records: dict[str, SchemaRecord]

    def by_group(self) -> dict[str, list[SchemaRecord]]:
        groups: dict[str, list[SchemaRecord]] = {}
        for r in self.records.values():
            groups.setdefault(r.group, []).append(r)
        return groups


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"the '{name}' package is not installed; install the project with `pip install -e .`")
    return Path(next(iter(spec.submodule_search_locations)))


def _yaml_paths() -> tuple[Path, Path]:
    native = _package_dir("torchgen") / "packaged" / "ATen" / "native"
    return native / "native_functions.yaml", native / "tags.yaml"


def _torch_version() -> str:
    text = (_package_dir("torch") / "version.py").read_text()
    m = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", text)
    return m.group(1) if m else "unknown"


def cache_dir() -> Path:
    root = os.environ.get("XLA_NATIVE_FUNCTIONS_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "xla_native_functions"
    )
    return Path(root)


def _parse_with_torchgen(native_yaml: Path, tags_yaml: Path) -> dict[str, SchemaRecord]:
    from torchgen.gen import parse_native_yaml

    parsed = parse_native_yaml(str(native_yaml), str(tags_yaml))
    records = {}
    for f in parsed.native_functions:
        name = str(f.func.name)
        records[name] = SchemaRecord(
            name=name,
            schema=str(f.func),
            tags=tuple(sorted(f.tags)),
            is_view=f.is_view_op,
            kind=f.func.kind().name,
            group=str(f.func.signature()),
            composite_implicit=f.has_composite_implicit_autograd_kernel,
        )
    return records


def load_schema_database(verbose: bool = False) -> SchemaDatabase:
    native_yaml, tags_yaml = _yaml_paths()
    digest = hashlib.sha256(native_yaml.read_bytes() + b"\0" + tags_yaml.read_bytes()).hexdigest()[:16]
    version = _torch_version()
    path = cache_dir() / f"torchgen-schemas-{version}-{digest}.json"
    if path.exists():
        try:
            raw = json.loads(path.read_text())
            records = {k: SchemaRecord(**{**v, "tags": tuple(v["tags"])}) for k, v in raw["records"].items()}
            return SchemaDatabase(torch_version=version, records=records)
        except (ValueError, KeyError, TypeError):
            pass  # a stale or damaged cache is rebuilt below
    start = time.perf_counter()
    if verbose:
        print(f"parsing torchgen's schema database for torch {version} (cached afterwards)...", file=sys.stderr)
    records = _parse_with_torchgen(native_yaml, tags_yaml)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"torch_version": version, "records": {k: r.__dict__ for k, r in sorted(records.items())}}
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(payload, f)
    os.replace(tmp, path)
    if verbose:
        print(f"  {len(records)} schemas in {time.perf_counter() - start:.2f}s -> {path}", file=sys.stderr)
    return SchemaDatabase(torch_version=version, records=records)
