"""Integer division by zero raises PyTorch CPU's error in eager mode instead of
returning XLA's numbers (runtime/division_checks.py); compiled programs cannot raise
(docs/semantics.md)."""

from __future__ import annotations

import pytest
import torch

import xla_native_functions as xnf

from runtime_fault_helpers import outcome

INTEGER_DTYPES = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]

OPS = {
    "floordiv": lambda a, b: a // b,
    "mod": lambda a, b: a % b,
    "fmod": lambda a, b: torch.fmod(a, b),
    "remainder": lambda a, b: torch.remainder(a, b),
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "floor_divide_out": lambda a, b: torch.floor_divide(a, b, out=torch.empty_like(a)),
    "remainder_out": lambda a, b: torch.remainder(a, b, out=torch.empty_like(a)),
    "ifloordiv": lambda a, b: a.__ifloordiv__(b),
    "imod": lambda a, b: a.__imod__(b),
    "fmod_": lambda a, b: a.fmod_(b),
    "remainder_": lambda a, b: a.remainder_(b),
    "div__trunc": lambda a, b: a.div_(b, rounding_mode="trunc"),
    "div__floor": lambda a, b: a.div_(b, rounding_mode="floor"),
    "rfloordiv": lambda a, b: 7 // a,  # the tensor is the divisor
    "rmod": lambda a, b: 7 % a,
}
DIVISORS = {
    "tensor": lambda dtype: torch.tensor([1, 0], dtype=dtype),
    "python_int": lambda dtype: 0,
    "zero_dim_tensor": lambda dtype: torch.tensor(0, dtype=dtype),
    "zero_dim_cpu_tensor": lambda dtype: torch.tensor(0, dtype=dtype),  # stays on the CPU
    "no_zero": lambda dtype: torch.tensor([2, 1], dtype=dtype),
    "python_float": lambda dtype: 0.0,  # a floating-point result: inf/nan, no error
}


def _run(on_xla: bool, dtype, divisor_kind: str, op: str):
    dividend = torch.tensor([0, 2] if op.startswith("r") else [5, 3], dtype=dtype)
    divisor = DIVISORS[divisor_kind](dtype)
    if op.startswith("r"):
        dividend = torch.tensor([0, 2], dtype=dtype) if divisor_kind != "no_zero" else divisor
    if on_xla:
        dividend = xnf.to_xla(dividend)
        if isinstance(divisor, torch.Tensor) and divisor_kind != "zero_dim_cpu_tensor":
            divisor = xnf.to_xla(divisor)

    def call():
        out = OPS[op](dividend, divisor)
        return xnf.to_torch(out).tolist() if on_xla else out.tolist()

    return outcome(call)


@pytest.mark.parametrize("divisor_kind", sorted(DIVISORS))
@pytest.mark.parametrize("dtype", INTEGER_DTYPES + [torch.bool, torch.float32], ids=str)
@pytest.mark.parametrize("op", sorted(OPS))
def test_integer_division_by_zero_matches_pytorch(op, dtype, divisor_kind):
    expected = _run(False, dtype, divisor_kind, op)
    ours = _run(True, dtype, divisor_kind, op)
    if expected["ok"]:
        assert ours == expected
        return
    assert not ours["ok"] and ours["type"] == expected["type"], (ours, expected)
    if expected["message"] == "ZeroDivisionError":
        assert ours["message"] == "ZeroDivisionError"


def test_pytorch_raises_runtime_error_named_zero_division_error():
    # the exact exception: a RuntimeError whose message is the name, not Python's ZeroDivisionError
    with pytest.raises(RuntimeError, match="^ZeroDivisionError$"):
        torch.tensor([1]) // 0
    with pytest.raises(RuntimeError, match="^ZeroDivisionError$"):
        xnf.to_xla(torch.tensor([1])) // 0


def test_failed_in_place_division_leaves_self_unchanged():
    x = xnf.to_xla(torch.tensor([5, 3]))
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        x.__ifloordiv__(xnf.to_xla(torch.tensor([1, 0])))
    assert xnf.to_torch(x).tolist() == [5, 3]


def test_empty_result_divides_nothing():
    empty = torch.tensor([], dtype=torch.int64)
    assert (xnf.to_xla(empty) // xnf.to_xla(torch.tensor([0]))).shape == (empty // torch.tensor([0])).shape == (0,)


def test_compiled_programs_do_not_raise():
    # docs/semantics.md: a compiled program cannot stop, XLA's numbers stand
    step = xnf.compile(lambda a, b: a // b, replay=False)
    out = step(xnf.to_xla(torch.tensor([5, 3])), xnf.to_xla(torch.tensor([1, 0])))
    assert xnf.to_torch(out).tolist()[0] == 5
