"""Integer division by zero, raised as PyTorch CPU raises it.

PyTorch CPU stops integer `//`, `%`, `fmod`, `remainder` and `div(rounding_mode=
"trunc"/"floor")` with `RuntimeError: ZeroDivisionError` when a divisor is zero; XLA
returns a number instead (-1 for a quotient, the dividend for a remainder). In eager
mode the ops below therefore look at their divisor first when the result is an
integer: a Python number is compared on the host, a tensor costs one read of its
values (as the index checks in runtime/exec/index_checks.py do); floating-point
division, the common case, costs one dtype test. A compiled program cannot stop, so
there XLA's numbers stand (docs/semantics.md).
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import torch

from ..core.context import context
from ..core.convert import X64, host_array
from ..core.tensor import XlaTensor
from .eager import value

MESSAGE = "ZeroDivisionError"


def _integral(x: Any) -> bool:
    """Whether `x` keeps a division's result an integer (bool counts, as in promotion)."""
    if isinstance(x, torch.Tensor):
        return not (x.dtype.is_floating_point or x.dtype.is_complex)
    return isinstance(x, (bool, int))


def _is_bool(x: Any) -> bool:
    return x.dtype == torch.bool if isinstance(x, torch.Tensor) else isinstance(x, bool)


@jax.jit
def _all_nonzero(v):
    return jnp.all(v != 0)


def _has_zero(divisor: Any) -> bool:
    """Whether the divisor holds a zero: on the host for numbers, CPU tensors and arrays
    in host memory; elsewhere one reduction and one read of its result."""
    if not isinstance(divisor, torch.Tensor):
        return divisor == 0
    if not divisor.numel():
        return False
    if not isinstance(divisor, XlaTensor):  # a zero-dim CPU tensor, as PyTorch accepts
        with torch._C._DisableTorchDispatch():
            return not bool(divisor.all())
    array = divisor._store.array
    if isinstance(array, jax.core.Tracer):  # inside a JAX transformation: no values to read
        return False
    if (
        isinstance(array, jax.Array)
        and array.is_fully_addressable
        and all(d.platform == "cpu" for d in array.devices())
    ):
        return not host_array(divisor).all()
    with X64:
        return not bool(_all_nonzero(value(divisor)))


def _to_meta(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
    if isinstance(x, (list, tuple)):
        return type(x)(_to_meta(y) for y in x)
    return x


def _output_is_empty(op: Any, args: tuple, kwargs: dict) -> bool:
    """PyTorch's checks ahead of the division (broadcasting, casting into self or out=),
    run on meta tensors: they raise their own errors first. True when the result has no
    elements, so nothing is divided."""
    with torch._C._DisableTorchDispatch():
        out = op(*_to_meta(args), **{k: _to_meta(v) for k, v in kwargs.items()})
    return out.numel() == 0


def _check(op: Any, dividend: Any, divisor: Any, written: Any, args: tuple, kwargs: dict) -> None:
    if not (_integral(dividend) and _integral(divisor)):
        return
    if _is_bool(dividend) and _is_bool(divisor):
        return  # PyTorch has no kernel for a bool result: the op raises that itself
    if written is not None and _is_bool(written):
        return  # an integer result cannot be written into a bool tensor: the op raises that
    if _has_zero(divisor) and not _output_is_empty(op, args, kwargs):
        raise RuntimeError(MESSAGE)


def _checked(op: Any, handler: Callable[..., Any]) -> Callable[..., Any]:
    names = [a.name for a in op._schema.arguments]
    rounding = "rounding_mode" in names  # div: only its rounding modes divide integers
    in_place = op._schema.name.endswith("_")

    def run(*args, **kwargs):
        first = args[0] if args else None
        floating = first.__class__ is XlaTensor and (first.dtype.is_floating_point or first.dtype.is_complex)
        if context.trace is None and not floating:  # a floating-point self: a floating-point result
            bound = dict(zip(names, args))
            bound.update(kwargs)
            if not rounding or bound.get("rounding_mode") is not None:
                written = bound.get("out", bound["self"] if in_place else None)
                _check(op, bound["self"], bound["other"], written, args, kwargs)
        return handler(*args, **kwargs)

    run.__name__ = getattr(handler, "__name__", "handler")
    run.__wrapped__ = handler
    return run


def wrap(op: Any, handler: Callable[..., Any]) -> Callable[..., Any]:
    """`handler` of `op` run after the division check, if `op` divides `self` by `other`
    with an integer result (`div` only with a rounding mode: true division gives a
    floating-point result)."""
    names = [a.name for a in op._schema.arguments]
    if "self" not in names or "other" not in names:
        return handler
    if op._schema.name.removeprefix("aten::").rstrip("_") == "div" and "rounding_mode" not in names:
        return handler
    return _checked(op, handler)
