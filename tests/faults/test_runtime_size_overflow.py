"""Sizes whose storage overflows int64 raise PyTorch's RuntimeError instead of aborting
the process inside XLA (Note [Overflowing sizes] in shape_fns/storage_size.py). Each
case runs in a child process: before the fix most of them killed it."""

from __future__ import annotations

import pytest
import torch

from runtime_fault_helpers import outcome, run_cases

_PRELUDE = """
import torch, xla_native_functions as xnf
X = xnf.to_xla(torch.zeros(2))
ONE = xnf.to_xla(torch.zeros(1, 1))

def in_env(make):
    with xnf.default_env():
        return make()

def compiled(fn, *args):
    return xnf.compile(fn)(*args)

def lazily(make):
    with xnf.lazy_mode():
        out = make()
        xnf.mark_step()
    return out
"""

_ON_JAX = {"device": "jax"}
_BIG = 2**62

# name -> (our expression, run in the child; the same call on PyTorch CPU, here)
CASES = {
    "new_empty": ("X.new_empty(2**62, 4)", lambda: torch.zeros(2).new_empty(_BIG, 4)),
    "new_empty_2**32_squared": ("X.new_empty(2**32, 2**32)", lambda: torch.zeros(2).new_empty(2**32, 2**32)),
    "zeros_in_default_env": ("in_env(lambda: torch.zeros(2**62, 4))", lambda: torch.zeros(_BIG, 4)),
    "zeros_on_device": ("torch.zeros(2**62, 4, device='jax')", lambda: torch.zeros(_BIG, 4)),
    "ones": ("torch.ones(2**62, 4, device='jax')", lambda: torch.ones(_BIG, 4)),
    "full": ("torch.full((2**62, 4), 1.5, device='jax')", lambda: torch.full((_BIG, 4), 1.5)),
    "new_full": ("X.new_full((2**62, 4), 2.0)", lambda: torch.zeros(2).new_full((_BIG, 4), 2.0)),
    "new_zeros": ("X.new_zeros(2**62, 4)", lambda: torch.zeros(2).new_zeros(_BIG, 4)),
    "empty_bytes_only": (
        "torch.empty(2**61, device='jax')",
        lambda: torch.empty(2**61),
    ),  # 2**61 elements fit, 2**63 bytes do not
    "empty_float64": (
        "torch.empty(2**61, 2, dtype=torch.float64, device='jax')",
        lambda: torch.empty(2**61, 2, dtype=torch.float64),
    ),
    "empty_strided_sizes": (
        "torch.empty_strided((2**62, 4), (4, 1), device='jax')",
        lambda: torch.empty_strided((_BIG, 4), (4, 1)),
    ),
    "empty_strided_strides": (
        "torch.empty_strided((2, 2), (2**62, 1), device='jax')",
        lambda: torch.empty_strided((2, 2), (_BIG, 1)),
    ),
    "new_empty_strided": (
        "X.new_empty_strided((2, 2), (2**62, 1))",
        lambda: torch.zeros(2).new_empty_strided((2, 2), (_BIG, 1)),
    ),
    "randn": ("torch.randn(2**62, 4, device='jax')", lambda: torch.randn(_BIG, 4)),
    "rand": ("torch.rand(2**62, 4, device='jax')", lambda: torch.rand(_BIG, 4)),
    "randint": ("torch.randint(0, 5, (2**62, 4), device='jax')", lambda: torch.randint(0, 5, (_BIG, 4))),
    "randperm": ("torch.randperm(2**62, device='jax')", lambda: torch.randperm(_BIG)),
    "linspace": ("torch.linspace(0, 1, 2**62, device='jax')", lambda: torch.linspace(0, 1, _BIG)),
    "arange_float_step": ("torch.arange(0, 2**62, 1e-3, device='jax')", lambda: torch.arange(0, _BIG, 1e-3)),
    "arange_integers": ("torch.arange(-2**62, 2**62, device='jax')", lambda: torch.arange(-_BIG, _BIG)),
    "expand": ("ONE.expand(2**62, 4)", lambda: torch.zeros(1, 1).expand(_BIG, 4)),
    "view": ("xnf.to_xla(torch.zeros(0)).view(2**62, 4, 0)", lambda: torch.zeros(0).view(_BIG, 4, 0)),
    "reshape": ("xnf.to_xla(torch.zeros(4)).reshape(2**62, 4)", lambda: torch.zeros(4).reshape(_BIG, 4)),
    "resize_numel": ("xnf.to_xla(torch.zeros(4)).resize_(2**62, 4)", lambda: torch.zeros(4).resize_(_BIG, 4)),
    "resize_bytes": ("xnf.to_xla(torch.zeros(4)).resize_(2**61)", lambda: torch.zeros(4).resize_(2**61)),
    # An expanded view fits (no storage); the values computed from it do not.
    "expanded_view_plus_one": ("ONE.expand(2**61, 2) + 1", lambda: torch.zeros(1, 1).expand(2**61, 2) + 1),
    "expanded_view_contiguous": (
        "ONE.expand(2**61, 2).contiguous()",
        lambda: torch.zeros(1, 1).expand(2**61, 2).contiguous(),
    ),
    # PyTorch words these differently (its out= resize or repeat's size check comes first).
    "out_resize": (
        "torch.zeros(2**62, 4, out=xnf.to_xla(torch.zeros(1)))",
        lambda: torch.zeros(_BIG, 4, out=torch.zeros(1)),
    ),
    "eye": ("torch.eye(2**32, 2**32, device='jax')", lambda: torch.eye(2**32, 2**32)),
    "repeat": ("xnf.to_xla(torch.zeros(2, 2)).repeat(2**62, 4)", lambda: torch.zeros(2, 2).repeat(_BIG, 4)),
    # Compiled and lazy programs check what they record.
    "compiled": ("compiled(lambda a: a + torch.zeros(2**62, 4, device=a.device), X)", lambda: torch.zeros(_BIG, 4)),
    "compiled_expanded_view": (
        "compiled(lambda a: a.expand(2**61, 2) * 2, ONE)",
        lambda: torch.zeros(1, 1).expand(2**61, 2) * 2,
    ),
    "lazy_mode": ("lazily(lambda: X.new_zeros(2**61, 2) + 1)", lambda: torch.zeros(2).new_zeros(2**61, 2) + 1),
}
MESSAGE_DIFFERS = {"out_resize", "eye", "repeat"}


@pytest.fixture(scope="module")
def results():
    return run_cases(_PRELUDE, {name: expr for name, (expr, _) in CASES.items()} | {
        "fits_int64_not_memory": "torch.zeros(2**40, device='jax')",
        "empty_with_huge_leading_dims": "torch.zeros(2**62, 0, 4, device='jax')",
        "still_usable": "float((X + 1).sum())",
    })


@pytest.mark.parametrize("name", sorted(CASES))
def test_overflowing_size_raises_pytorch_error(results, name):
    ours, expected = results[name], outcome(CASES[name][1])
    assert "died" not in ours, f"{name} killed the process ({ours['died']}):\n{ours.get('stderr')}"
    assert not expected["ok"] and expected["type"] == "RuntimeError"
    assert not ours["ok"] and ours["type"] == "RuntimeError", ours
    if name not in MESSAGE_DIFFERS:
        assert ours["message"] == expected["message"]
    else:
        assert "overflow" in ours["message"] or "overflow" in expected["message"]


def test_size_beyond_memory_still_raises_out_of_memory(results):
    # 2**40 floats fit in int64 and not in memory: the allocator's error, as before.
    ours = results["fits_int64_not_memory"]
    assert "died" not in ours and not ours["ok"] and "RuntimeError" in ours["mro"], ours
    assert "memory" in ours["message"].lower()


def test_empty_array_xla_cannot_represent_raises(results):
    # PyTorch makes this empty tensor; XLA aborts on its shape, so it raises instead
    # (docs/semantics.md).
    assert outcome(lambda: torch.zeros(2**62, 0, 4))["ok"]
    ours = results["empty_with_huge_leading_dims"]
    assert "died" not in ours and ours["type"] == "RuntimeError" and "XLA cannot represent" in ours["message"], ours


def test_process_stays_usable_after_overflows(results):
    assert results["still_usable"] == {"ok": True, "value": "2.0"}


def test_ordinary_sizes_are_unaffected():
    from xla_native_functions.shape_fns.storage_size import contiguous_nbytes_overflow, strided_nbytes_overflow

    assert not contiguous_nbytes_overflow((2**61 - 1,), 4)  # 2**63 - 4 bytes: PyTorch's allocator decides
    assert contiguous_nbytes_overflow((2**61,), 4)
    assert contiguous_nbytes_overflow((2**62, 4, 0), 4)  # c10 sees the overflow before the zero
    assert not contiguous_nbytes_overflow((0, 2**62, 4), 4)
    assert not strided_nbytes_overflow((1, 2), (-5, 1), 4) and strided_nbytes_overflow((2, 2), (-1, 1), 4)
