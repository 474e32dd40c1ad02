"""The manifest's internal nodes and lowerings that take a `ctx`: generated like
full_codegen entries, checked the same way, given a key operand when they need one,
never registered as operators; and the real package's internal nodes run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from codegen.generate import render
from codegen.manifest import ManifestError, load_manifest
from xla_native_functions.runtime.exec import value_checks

MANIFEST = """\
backend: XLA
full_codegen:
  - abs
supported:
fallback:
internal:
  - "scaled_noise(Tensor self, float scale) -> Tensor"
  - "strided_copy(Tensor base, int[] size) -> Tensor"
"""

LOWERINGS = '''\
def lower_abs(self):
    return self


def lower_scaled_noise(self, scale, *, ctx):
    return self


def lower_strided_copy(base, size):
    return base
'''

SHAPE_FNS = '''\
def abs_output_shape(self):
    return self


def scaled_noise_output_shape(self, scale):
    return self


def strided_copy_output_shape(base, size):
    return base
'''


def _root(tmp_path: Path, lowerings: str = LOWERINGS, shape_fns: str = SHAPE_FNS) -> Path:
    root = tmp_path / "root"
    for folder, text in (("lowerings", lowerings), ("shape_fns", shape_fns), ("runtime", "")):
        (root / folder).mkdir(parents=True)
        (root / folder / "family.py").write_text(text)
    return root


def _render(tmp_path: Path, manifest: str = MANIFEST, **kwargs):
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "manifest.yaml"
    path.write_text(manifest)
    return render(path, root=_root(tmp_path, **kwargs))


def test_internal_nodes_get_ir_classes_and_no_operator_registration(tmp_path):
    files = _render(tmp_path).files
    ir, registry, dispatch = files["ir.py"], files["registry.py"], files["dispatch.py"]
    assert "class ScaledNoise(Node):" in ir and "class StridedCopy(Node):" in ir
    assert 'section = "internal"' in ir
    # by name for the runtime, never as operators
    assert '"scaled_noise": ir.ScaledNoise,' in registry and '"strided_copy": ir.StridedCopy,' in registry
    assert "scaled_noise" not in dispatch and "strided_copy" not in registry.split("NODES = {")[0]
    assert "scaled_noise" not in files["ops.txt"]


def test_a_lowering_with_ctx_gets_a_key_operand(tmp_path):
    ir = _render(tmp_path).files["ir.py"]
    noise = ir.split("class ScaledNoise(Node):")[1].split("\nclass ")[0]
    assert 'arg_names = ("self", "scale", "key",)' in noise
    assert "arg_kinds = (TENSOR, ATTR, TENSOR,)" in noise
    assert "needs_key = True" in noise
    assert "return lower_scaled_noise(self, scale, ctx=LoweringContext(key))" in noise
    assert "return scaled_noise_output_shape(self, scale)" in noise  # the shape function takes no key
    assert "from .lowerings.common import LoweringContext" in ir
    copy = ir.split("class StridedCopy(Node):")[1]
    assert "needs_key" not in copy and 'arg_names = ("base", "size",)' in copy


def test_internal_nodes_are_checked_like_full_codegen(tmp_path):
    with pytest.raises(ManifestError) as info:
        _render(tmp_path, shape_fns=SHAPE_FNS.replace("def strided_copy_output_shape(base, size)",
                                                      "def strided_copy_output_shape(base)"))
    assert "strided_copy_output_shape does not match the schema of strided_copy" in str(info.value)
    with pytest.raises(ManifestError) as info:
        _render(
            tmp_path / "b", lowerings=LOWERINGS.replace("def lower_strided_copy(base, size):\n    return base\n", "")
        )
    assert "def lower_strided_copy(base, size):" in str(info.value)


def test_ctx_must_be_keyword_only_and_last(tmp_path):
    with pytest.raises(ManifestError) as info:
        _render(tmp_path, lowerings=LOWERINGS.replace("def lower_scaled_noise(self, scale, *, ctx)",
                                                      "def lower_scaled_noise(self, scale, ctx)"))
    assert "lower_scaled_noise does not match the schema" in str(info.value)


@pytest.mark.parametrize("entry, message", [
    ('  - "Scaled(Tensor self) -> Tensor"', "entries of 'internal' must be schemas"),
    ("  - strided_copy", "entries of 'internal' must be schemas"),
    ('  - "strided_copy(Tensor base) -> Tensor"', "'strided_copy' is listed twice"),
])
def test_bad_internal_entries(tmp_path, entry, message):
    path = tmp_path / "manifest.yaml"
    path.write_text(MANIFEST + entry + "\n")
    with pytest.raises(ManifestError) as info:
        load_manifest(path)
    assert message in str(info.value)


def test_an_internal_name_may_not_take_an_operators_class_name(tmp_path):
    manifest = MANIFEST.replace('  - "strided_copy(Tensor base, int[] size) -> Tensor"',
                                '  - "abs(Tensor base) -> Tensor"')
    with pytest.raises(ManifestError) as info:
        _render(tmp_path, manifest=manifest)
    assert "'abs' is listed" in str(info.value) or "IR class name Abs is shared" in str(info.value)


def test_the_package_runs_its_internal_nodes_in_every_mode():
    """The real manifest's internal random and view nodes: eagerly, traced, replayed;
    a new key per call (so different numbers), the same numbers for the same seed."""
    import xla_native_functions as xnf
    from xla_native_functions.runtime.exec.registry import NODES

    assert NODES["random_normal"].needs_key and not NODES["strided_read"].needs_key
    x = xnf.to_xla(torch.zeros(64))

    def noisy(x):
        return x + torch.randn_like(x)

    step = xnf.compile(noisy)
    draws = [xnf.to_torch(step(x)) for _ in range(4)]  # traced, traced, replayed, replayed
    assert all(not torch.equal(a, b) for a, b in zip(draws, draws[1:]))
    torch.manual_seed(3)
    first = xnf.to_torch(noisy(x))
    torch.manual_seed(3)
    assert torch.equal(first, xnf.to_torch(noisy(x)))
    base = torch.arange(12.0).reshape(3, 4)
    view = xnf.to_xla(base.clone()).t()[1:]
    torch.testing.assert_close(xnf.to_torch(step(view)).shape, base.t()[1:].shape)


def test_type_promotion_keys_must_name_manifest_entries(tmp_path):
    """shape_fns/common.py's TYPE_PROMOTION is one literal the generator checks: a key
    that names no entry (a typo, a removed op) is an error at its line."""
    root = _root(tmp_path)
    (root / "shape_fns" / "common.py").write_text(
        'TYPE_PROMOTION: dict = {\n    "abs": Promotion.DEFAULT,\n    "abz": Promotion.DEFAULT,\n}\n'
    )
    path = tmp_path / "manifest.yaml"
    path.write_text(MANIFEST)
    with pytest.raises(ManifestError) as info:
        render(path, root=root)
    assert str(info.value) == ("shape_fns/common.py:3: TYPE_PROMOTION names 'abz', which is no operator's "
                               "unambiguous name (`add.Tensor` -> `add_Tensor`)")
    (root / "shape_fns" / "common.py").write_text('TYPE_PROMOTION: dict = {\n    "neg": Promotion.DEFAULT,\n}\n')
    assert render(path, root=root).warnings == [
        "shape_fns/common.py:2: warning: TYPE_PROMOTION names 'neg', which no manifest entry lists (orphan)"]


POLICY_MANIFEST = """\
backend: XLA
policy:
  out_exact_dtype: [abs]
  inplace_rejects_any_overlap: [abs]
  host_only: [abs]
  eager_value_checks: {abs: take}
full_codegen:
  - abs
supported:
fallback:
internal:
  - "scaled_noise(Tensor self, float scale) -> Tensor"
  - "strided_copy(Tensor base, int[] size) -> Tensor"
"""


def test_policy_facts_reach_the_stubs_and_the_runtime(tmp_path):
    files = _render(tmp_path, manifest=POLICY_MANIFEST).files
    dispatch = files["dispatch.py"]
    assert "_rt_write_out((out,), abs(self), (self,), exact_dtype=True)" in dispatch
    assert "_rt_check_in_place_overlap(" not in dispatch  # abs_ has no other tensor operand to compare
    assert '"host_only": {\n        "abs": (),\n    },' in files["registry.py"]
    assert "inplace_rejects_any_overlap" not in files["registry.py"]  # a generator-only fact
    assert '"eager_value_checks": {\n        "abs": (\'take\',),\n    },' in files["registry.py"]


@pytest.mark.parametrize("policy, message", [
    ("  out_exact_dtype: [abz]", "manifest.yaml:3: policy 'out_exact_dtype' names 'abz', which is no listed op's"),
    ("  inplace_rejects_any_overlap: [ab]", "manifest.yaml:3: policy 'inplace_rejects_any_overlap' names 'ab', no "
                                            "listed op's base name"),
    ("  transposed_weight_operands: {abs: [3, 0]}", "manifest.yaml:3: policy 'transposed_weight_operands': abs has 1 "
                                                    "arguments"),
    ("  out_exact_dtypes: [abs]", "manifest.yaml:3: unknown policy fact 'out_exact_dtypes'"),
    ("  host_only: [neg, abs]", "manifest.yaml:3: keep 'host_only' sorted and without repeats"),
    ("  eager_value_checks: {abs: [1]}", "manifest.yaml:3: 'eager_value_checks' maps each op name to a name"),
    ("  eager_value_checks: {ab: take}", "manifest.yaml:3: policy 'eager_value_checks' names 'ab', no listed op's "
                                         "base name"),
])
def test_policy_names_are_checked(tmp_path, policy, message):
    manifest = "backend: XLA\npolicy:\n" + policy + "\n" + MANIFEST.removeprefix("backend: XLA\n")
    with pytest.raises(ManifestError) as info:
        _render(tmp_path, manifest=manifest)
    assert message in str(info.value)


def test_an_unknown_value_check_is_refused_naming_the_known_ones():
    with pytest.raises(RuntimeError, match=r"'eager_value_checks' names unknown check\(s\) take_twice; the checks "
                                           r"are embedding, .*integer_division"):
        value_checks.install({torch.ops.aten.take.default: None}, {"take": ("take_twice",)})


def test_value_checks_wrap_every_form_of_a_named_op_and_only_those():
    def handler(*args, **kwargs):
        return "ran"

    registry = {op: handler for op in (torch.ops.aten.take.default, torch.ops.aten.take.out, torch.ops.aten.abs.default,
                                        torch.ops.aten.div.Tensor, torch.ops.aten.div.Tensor_mode)}
    wrapped = value_checks.install(registry, {"take": ("take",), "div": ("integer_division",)})
    assert wrapped[torch.ops.aten.abs.default] is handler
    assert wrapped[torch.ops.aten.div.Tensor] is handler  # true division: a floating-point result
    assert all(wrapped[op] is not handler and wrapped[op].__wrapped__ is handler
               for op in (torch.ops.aten.take.default, torch.ops.aten.take.out, torch.ops.aten.div.Tensor_mode))
