"""Tensors made from a shape or from another tensor's shape: zeros, ones, *_like, new_*, fill."""

from __future__ import annotations

import jax.numpy as jnp
import jax.scipy.special as jss
from jax import lax
import torch

from ..shape_fns.common import to_numpy_dtype
from .common import filled, scalar_to


def _dtype(dtype, like=None):
    if dtype is not None:
        return to_numpy_dtype(dtype)
    return like.dtype if like is not None else to_numpy_dtype(torch.get_default_dtype())


def lower_zeros(size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return jnp.zeros(size, _dtype(dtype))


def lower_ones(size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return jnp.ones(size, _dtype(dtype))


def lower_zeros_like(self, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return jnp.zeros(self.shape, _dtype(dtype, self))


def lower_ones_like(self, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return jnp.ones(self.shape, _dtype(dtype, self))


def lower_empty_like(self, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    # Uninitialized memory in PyTorch; zeros here (any value is a valid result).
    return jnp.zeros(self.shape, _dtype(dtype, self))


def lower_full_like(self, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return filled(self.shape, fill_value, _dtype(dtype, self))


def lower_new_zeros(self, size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return jnp.zeros(size, _dtype(dtype, self))


def lower_new_ones(self, size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return jnp.ones(size, _dtype(dtype, self))


def lower_new_empty(self, size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return jnp.zeros(size, _dtype(dtype, self))


def lower_new_full(self, size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None):
    return filled(size, fill_value, _dtype(dtype, self))


def lower_fill_Scalar(self, value):
    return filled(self.shape, value, self.dtype)


def lower_fill_Tensor(self, value):
    return filled(self.shape, value, self.dtype)


def lower_zero(self):
    return jnp.zeros_like(self)


def lower_new_empty_strided(self, size, stride, *, dtype=None, layout=None, device=None, pin_memory=None):
    return jnp.zeros(size, _dtype(dtype, self))


def lower_eye(n, *, dtype=None, layout=None, device=None, pin_memory=None):
    return jnp.eye(n, dtype=_dtype(dtype))


def lower_eye_m(n, m, *, dtype=None, layout=None, device=None, pin_memory=None):
    return jnp.eye(n, m, dtype=_dtype(dtype))


# linspace / logspace.
#
# PyTorch's CPU linspace kernel fills the first half as start + step*i and the second
# half as end - step*(steps-1-i). It is compiled with FMA enabled, so each of these is
# one fused multiply-add, rounded once; integer results are that double truncated.
# The values here reproduce those roundings: the fused multiply-add is emulated in
# float64 with exact partial products and error-free sums, so integer outputs
# truncate the same doubles.


def _two_sum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _high_bits(x, drop):
    """x with the low `drop` bits of its float64 significand cleared (so x - hi is exact)."""
    bits = lax.bitcast_convert_type(x, jnp.int64)
    return lax.bitcast_convert_type(bits & ~((1 << drop) - 1), jnp.float64)


def _fma64(a, n, c):
    """a*n + c in float64 with one rounding (up to a rare double rounding), for integral
    n < 2**52. The product is split into four exactly representable partial products,
    so XLA contracting any of them into a fused multiply-add cannot change a bit."""
    ah = _high_bits(a, 27)
    al = a - ah
    nh = jnp.floor(n * 2.0**-26) * 2.0**26
    nl = n - nh
    s, e1 = _two_sum(ah * nh, c)
    s, e2 = _two_sum(s, ah * nl)
    s, e3 = _two_sum(s, al * nh)
    s, e4 = _two_sum(s, al * nl)
    return s + ((e1 + e2) + (e3 + e4))


def _float_to_int(x, out):
    # C++ converts out-of-range values of narrow integer types modulo 2**bits (through
    # a wider integer); XLA would saturate.
    if jnp.dtype(out).itemsize < 8 and out != jnp.dtype(jnp.bool_):
        return x.astype(jnp.int64).astype(out)
    return x.astype(out)


def _exact_divisor(n, dtype):
    # XLA turns a division by a constant into a multiplication by its rounded
    # reciprocal; a divisor it cannot see keeps the division correctly rounded.
    return lax.optimization_barrier(jnp.asarray(n, dtype))


def _rounded_product(a, n):
    """a*n rounded to a's dtype, for integral n: formed from exact partial sums so that
    XLA cannot contract it with the addition that follows into one fused operation."""
    return _fma64(a.astype(jnp.float64), n.astype(jnp.float64), jnp.zeros((), jnp.float64)).astype(a.dtype)


def _round_half(x, out):
    """float64 `x` rounded to the nearest `out` value (float16 or bfloat16, ties to
    even), kept in float64. Written with frexp, round and ldexp rather than as a
    conversion: XLA's code generator narrows a product of small integers that is
    converted to float16 into float16 arithmetic, and on CPUs with native float16
    arithmetic (AVX512-FP16) contracts it with the sum that follows into one fused
    multiply-add, rounded once where PyTorch rounds twice."""
    info = jnp.finfo(out)
    _, exponent = jnp.frexp(x)
    quantum = jnp.maximum(exponent - 1, info.minexp) - info.nmant
    rounded = jnp.ldexp(jnp.round(jnp.ldexp(x, -quantum)), quantum)
    rounded = jnp.where(jnp.abs(rounded) > float(info.max), jnp.copysign(jnp.inf, x), rounded)
    return jnp.where(jnp.isfinite(x), rounded, x)


def _linspace(start, end, steps, dtype):
    out = _dtype(dtype)
    if steps == 0:
        return jnp.zeros((0,), out)
    s, e = scalar_to(start, out), scalar_to(end, out)
    if steps == 1:
        return s.reshape(1)
    idx = jnp.arange(steps)
    first = idx < steps // 2
    back = (steps - 1 - idx).astype(jnp.float64)
    fwd = idx.astype(jnp.float64)
    if jnp.issubdtype(out, jnp.complexfloating):
        real = out.type(0).real.dtype
        step = (e - s) / _exact_divisor(steps - 1, real)
        parts = []
        for part in (jnp.real, jnp.imag):
            ps, pe, pstep = (part(v).astype(jnp.float64) for v in (s, e, step))
            parts.append(jnp.where(first, _fma64(pstep, fwd, ps), _fma64(-pstep, back, pe)).astype(real))
        return lax.complex(parts[0], parts[1]).astype(out)
    if out in (jnp.dtype(jnp.float16), jnp.dtype(jnp.bfloat16)):
        # Half arithmetic rounds to the half type after every operation, and the index
        # is converted to the half type first.
        step = ((e - s) / _exact_divisor(steps - 1, out)).astype(jnp.float64)
        lo = s.astype(jnp.float64) + _round_half(step * _round_half(fwd, out), out)
        hi = e.astype(jnp.float64) - _round_half(step * _round_half(back, out), out)
        return _round_half(jnp.where(first, lo, hi), out).astype(out)
    if jnp.issubdtype(out, jnp.floating):
        step = (e - s) / _exact_divisor(steps - 1, out)
    else:
        step = (e.astype(jnp.float64) - s.astype(jnp.float64)) / _exact_divisor(steps - 1, jnp.float64)
    step = step.astype(jnp.float64)
    lo = _fma64(step, fwd, s.astype(jnp.float64))
    hi = _fma64(-step, back, e.astype(jnp.float64))
    value = jnp.where(first, lo, hi)
    return value.astype(out) if jnp.issubdtype(out, jnp.floating) else _float_to_int(value, out)


def lower_linspace(start, end, steps, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _linspace(start, end, steps, dtype)


def lower_linspace_Tensor_Tensor(start, end, steps, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _linspace(start, end, steps, dtype)


def lower_linspace_Tensor_Scalar(start, end, steps, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _linspace(start, end, steps, dtype)


def lower_linspace_Scalar_Tensor(start, end, steps, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _linspace(start, end, steps, dtype)


# PyTorch's CPU logspace (not FMA-compiled) computes base ** (start + step*i) in double
# for floating results, and in float (powf) for integer results, which then truncate.


def _logspace(start, end, steps, base, dtype):
    out = _dtype(dtype)
    if steps == 0:
        return jnp.zeros((0,), out)
    complex_out = jnp.issubdtype(out, jnp.complexfloating)
    if steps == 1:
        first = jnp.asarray(start)
        first = first.astype(jnp.complex128) if complex_out else scalar_to(first, jnp.float64)
        return jnp.power(jnp.asarray(base, first.dtype), first).astype(out).reshape(1)
    idx = jnp.arange(steps)
    first = idx < steps // 2
    back = steps - 1 - idx
    s, e = scalar_to(start, out), scalar_to(end, out)
    if jnp.issubdtype(out, jnp.integer):
        f32 = jnp.float32
        # Integer subtraction promotes narrow types to int first, as in C++.
        step = (e.astype(jnp.int64) - s.astype(jnp.int64)).astype(f32) / _exact_divisor(steps - 1, f32)
        lo = s.astype(f32) + _rounded_product(step, idx.astype(f32))
        hi = e.astype(f32) - _rounded_product(step, back.astype(f32))
        exponent = jnp.where(first, lo, hi)
        # powf, correctly rounded: computed in double, rounded to float once.
        value = jnp.power(jnp.float64(jnp.float32(base)), exponent.astype(jnp.float64)).astype(f32)
        return _float_to_int(value, out)
    if complex_out:
        step = (e - s) / _exact_divisor(steps - 1, out)
        exponent = jnp.where(first, s + step * idx.astype(out), e - step * back.astype(out))
        return jnp.power(jnp.asarray(base, out), exponent)
    wide = jnp.float64
    step = (e - s).astype(wide) / _exact_divisor(steps - 1, jnp.float64)
    lo = s.astype(wide) + _rounded_product(step, idx.astype(wide))
    hi = e.astype(wide) - _rounded_product(step, back.astype(wide))
    return jnp.power(jnp.asarray(base, wide), jnp.where(first, lo, hi)).astype(out)


def lower_logspace(start, end, steps, base=10.0, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _logspace(start, end, steps, base, dtype)


def lower_logspace_Tensor_Tensor(
    start, end, steps, base=10.0, *, dtype=None, layout=None, device=None, pin_memory=None
):
    return _logspace(start, end, steps, base, dtype)


def lower_logspace_Tensor_Scalar(
    start, end, steps, base=10.0, *, dtype=None, layout=None, device=None, pin_memory=None
):
    return _logspace(start, end, steps, base, dtype)


def lower_logspace_Scalar_Tensor(
    start, end, steps, base=10.0, *, dtype=None, layout=None, device=None, pin_memory=None
):
    return _logspace(start, end, steps, base, dtype)


def lower_empty_permuted(size, physical_layout, *, dtype=None, layout=None, device=None, pin_memory=None):
    # Uninitialized memory in PyTorch; zeros here, laid out by runtime/exec/layouts.py.
    return jnp.zeros(tuple(size), _dtype(dtype))


def lower_integer_range(start, step, length, dtype):
    """start + step * [0, length) in int64, cast to an integer dtype: what PyTorch's arange
    computes for integer start and step (its accumulator type for integers is int64)."""
    iota = jnp.arange(length, dtype=jnp.int64)
    return (jnp.int64(start) + jnp.int64(step) * iota).astype(to_numpy_dtype(dtype))


# kaiser_window: PyTorch CPU fills arange(n) in the window's dtype, then computes
# i0(beta * sqrt(|1 - ((i - alpha) / alpha)^2|)) / i0(beta), alpha = (n - 1) / 2, in the
# dtype's "opmath" type (float32 for float16/bfloat16), rounding once at the end. A
# periodic window is the symmetric window one longer, without its last value.


def _kaiser_window(window_length, periodic, beta, dtype):
    out = _dtype(dtype)
    if window_length == 0:
        return jnp.zeros((0,), out)
    if window_length == 1:
        return jnp.ones((1,), out)
    n = window_length + 1 if periodic else window_length
    compute = jnp.float64 if out == jnp.float64 else jnp.float32
    position = jnp.arange(n).astype(out).astype(compute)
    alpha = jnp.asarray((n - 1) / 2.0, compute)
    b = jnp.asarray(beta, compute)
    window = jss.i0(b * jnp.sqrt(jnp.abs(1 - jnp.square((position - alpha) / alpha)))) / jss.i0(b)
    return window[:window_length].astype(out)


def lower_kaiser_window(window_length, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _kaiser_window(window_length, True, 12.0, dtype)


def lower_kaiser_window_periodic(window_length, periodic, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _kaiser_window(window_length, periodic, 12.0, dtype)


def lower_kaiser_window_beta(window_length, periodic, beta, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _kaiser_window(window_length, periodic, beta, dtype)
