"""Helpers shared by the lowerings: PyTorch type promotion applied to JAX operands."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from ..shape_fns.common import elementwise_dtypes, normalize_dim, to_numpy_dtype


@dataclass(frozen=True)
class LoweringContext:
    """What a lowering may take besides the schema's arguments, as its keyword-only `ctx`
    parameter: the JAX random key the runtime drew for this call of the op (an operand of
    the executable or graph, so every call gets new numbers without recompiling)."""

    key: Any


def promote_operands(op: str, *operands: Any) -> tuple[tuple[Any, ...], np.dtype]:
    """Cast the operands of elementwise op `op` to its compute dtype (Note [Type
    promotion]) and return them with the NumPy dtype of its result."""
    compute, result = elementwise_dtypes(op, *operands)
    compute_np = to_numpy_dtype(compute)
    converted = tuple(None if x is None else cast(jnp.asarray(x), compute_np) for x in operands)
    return converted, to_numpy_dtype(result)


def promote_scalar_other(op: str, self: Any, other: Any) -> tuple[tuple[Any, Any], np.dtype]:
    """promote_operands for mul, div and floor/trunc division, with their PyTorch CPU
    kernels' rule for a float16/bfloat16 op whose `other` holds one value (a Python number,
    a 0-dim tensor): mul_kernel, div_true_kernel, div_trunc_kernel and div_floor_kernel
    (BinaryOpsKernel.cpp) read that value straight from its own dtype into float32
    (`iter.original_scalar_value<float>(2)`: float64 and int64 round once, to float32) and
    compute in float32, rounding once at the end. So float16 `x * 3001` multiplies by
    3001.0, not by the float16 value 3000, and `x * 0.8976` by 0.8976f, not by 0.89746.
    A one-value first operand (`torch.mul(torch.tensor(s), x)`) and the other ops (add,
    sub, remainder, pow, ...) take it rounded to the op's dtype, as promote_operands
    gives it. Returns the operands, `other` in float32 in that case, and the result dtype."""
    (x, y), out = promote_operands(op, self, other)
    if x.dtype in (jnp.float16, jnp.bfloat16) and np.size(other) == 1:
        y = jnp.asarray(other).astype(jnp.float32)
    return (x, y), out


def opmath(x: Any) -> Any:
    """Upcast float16/bfloat16 to float32, the type PyTorch CPU kernels compute them in
    (its "opmath" type), so a lowering rounds once at the end as PyTorch does."""
    if x is not None and x.dtype in (jnp.float16, jnp.bfloat16):
        return x.astype(jnp.float32)
    return x


_FLOAT8_E4M3FN = to_numpy_dtype(torch.float8_e4m3fn)
_FLOAT8 = frozenset(to_numpy_dtype(d) for d in (torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz,
                                                torch.float8_e5m2fnuz))


def cast(x: Any, dtype: Any) -> Any:
    """`x.astype(dtype)` with PyTorch CPU's float-to-integer conversion. XLA saturates; the
    CPU truncates as x86 does: NaN and values out of range become the smallest int32
    (int64 for 64- and unsigned 32-bit targets), and narrower integers wrap from int32
    (-5.3 -> 251 as uint8, 300.7 -> 44). float64 reaches float16 through float32, as
    c10::Half's only conversion is from float: 1 + 2**-11 + 2**-40 is 1.0, not 1.001.
    A complex value converts its real part (to an integer by the same rule)."""
    dtype = np.dtype(dtype)
    if jnp.iscomplexobj(x) and jnp.issubdtype(dtype, jnp.integer):
        x = jnp.real(x)
    if dtype in _FLOAT8 and x.dtype != dtype:
        # c10's float8 types are made from float: other types reach them through float32
        # (float64 rounds twice, as there). PyTorch saturates to float8_e4m3fn, which has
        # no infinity: values beyond its largest, inf included, become +-448, where XLA's
        # conversion gives NaN.
        if x.dtype not in (np.float32, np.float16, to_numpy_dtype(torch.bfloat16)) and x.dtype not in _FLOAT8:
            x = jnp.real(x).astype(jnp.float32)
        if dtype == _FLOAT8_E4M3FN:
            x = jnp.clip(x, -448, 448)
        return x.astype(dtype)
    if x.dtype == jnp.float64 and dtype == np.float16:
        return x.astype(jnp.float32).astype(dtype)
    if not jnp.issubdtype(x.dtype, jnp.floating) or not jnp.issubdtype(dtype, jnp.integer):
        return x.astype(dtype)
    wide = np.dtype(np.int64) if dtype.itemsize == 8 or dtype == np.uint32 else np.dtype(np.int32)
    limit = 2.0 ** (8 * wide.itemsize - 1)
    xf = x.astype(jnp.float64)
    bad = jnp.isnan(xf) | (xf >= limit) | (xf < -limit)
    return jnp.where(bad, np.iinfo(wide).min, jnp.where(bad, 0, xf).astype(wide)).astype(dtype)


def scalar_to(x: Any, dtype: Any) -> Any:
    """A Scalar (or a 0-d tensor's value) converted to `dtype` the way Scalar.to<T>() does:
    a complex value's real part for a real dtype, then `cast` (float64 to float16 through
    float32, float to integer as x86 truncates)."""
    x = jnp.asarray(x)
    if not jnp.issubdtype(dtype, jnp.complexfloating) and jnp.iscomplexobj(x):
        x = jnp.real(x)
    return cast(x, dtype)


def filled(shape: Any, value: Any, dtype: Any) -> Any:
    """An array of `shape` holding the Scalar `value` converted as scalar_to does (full,
    fill_ and their relatives)."""
    return jnp.broadcast_to(scalar_to(value, dtype), tuple(shape))


# Note [Branching on a Scalar]
# Scalar arguments are runtime operands (a new exponent or norm order compiles nothing),
# so a lowering cannot pick a formula in Python from their value. Computing every
# candidate and selecting elementwise costs the slowest one on every call, and for a
# power that is XLA CPU's scalar powf, about 5 ns per element: 5.4 ms for GPT-2's
# tanh-GELU `x.pow(3.0)` on a 16x64x1024 tensor, against 0.2 ms for x*x*x. So the
# special values that PyTorch's CPU kernels also treat apart are chosen at run time by
# an XLA conditional, which executes one branch.
def switch_on_scalar(value: Any, cases: dict[float, Any], otherwise: Any, *operands: Any) -> Any:
    """`cases[v](*operands)` for the first `v` equal to the runtime scalar `value`, else
    `otherwise(*operands)`; only that branch runs (Note [Branching on a Scalar])."""
    index = jnp.int32(0)
    for i, v in reversed(list(enumerate(cases, start=1))):
        index = jnp.where(value == v, jnp.int32(i), index)
    return lax.switch(index, [otherwise, *cases.values()], *operands)


def arg_reduction_axis(dim: int | None, ndim: int) -> int | None:
    """The axis of an arg-reduction (argmax, argmin, ...): jnp's take one int axis or None
    (flattened); a 0-d tensor has no axis."""
    return None if dim is None or ndim == 0 else normalize_dim(dim, ndim)
