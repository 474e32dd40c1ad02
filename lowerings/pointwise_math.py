"""Lowerings of unary pointwise aten ops: trigonometric and hyperbolic functions,
logarithms and exponentials, rounding, sign, predicates (isnan, signbit, ...),
nan_to_num and the unary bitwise/logical negations.

Each op casts its operand with promote_operands (Note [Type promotion]), computes in
the opmath type (float32 for float16/bfloat16, as PyTorch CPU does) and casts to the
result dtype. Dtypes a CPU kernel rejects are rejected by the shape function.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
from jax import lax

from . import complex_ops
from .common import opmath, promote_operands


def _unary(op, fn, self):
    (x,), out = promote_operands(op, self)
    return fn(opmath(x)).astype(out)


def _float32_in_float64(fn):
    # XLA's float32 exp2, sinh and cosh are several ulps off for large arguments
    # (exp2(55) is not 2**55), where PyTorch CPU's are correctly rounded: float32
    # computes in float64 and rounds once.
    def wrapped(x):
        return fn(x.astype(jnp.float64)).astype(x.dtype) if x.dtype == jnp.float32 else fn(x)

    return wrapped


def _is_int(x):
    return jnp.issubdtype(x.dtype, jnp.integer) or x.dtype == jnp.bool_


def lower_acos(self):
    return _unary("acos", complex_ops.acos, self)


def lower_acosh(self):
    return _unary("acosh", complex_ops.acosh, self)


def lower_asin(self):
    return _unary("asin", complex_ops.asin, self)


def lower_asinh(self):
    return _unary("asinh", complex_ops.asinh, self)


def lower_atan(self):
    return _unary("atan", complex_ops.atan, self)


def lower_atanh(self):
    return _unary("atanh", complex_ops.atanh, self)


def lower_cosh(self):
    return _unary("cosh", _float32_in_float64(jnp.cosh), self)


def lower_sinh(self):
    return _unary("sinh", _float32_in_float64(jnp.sinh), self)


def lower_tan(self):
    return _unary("tan", jnp.tan, self)


def lower_erf(self):
    return _unary("erf", lax.erf, self)


def lower_expm1(self):
    return _unary("expm1", jnp.expm1, self)


def lower_exp2(self):
    return _unary("exp2", complex_ops.exp2 if jnp.iscomplexobj(self) else _float32_in_float64(jnp.exp2), self)


def lower_log10(self):
    return _unary("log10", jnp.log10, self)


def lower_log1p(self):
    return _unary("log1p", jnp.log1p, self)


def lower_log2(self):
    return _unary("log2", jnp.log2, self)


def lower_reciprocal(self):
    return _unary("reciprocal", lambda x: 1 / x, self)


def lower_deg2rad(self):
    return _unary("deg2rad", lambda x: x * jnp.asarray(math.pi / 180, x.dtype), self)


def lower_rad2deg(self):
    return _unary("rad2deg", lambda x: x * jnp.asarray(180 / math.pi, x.dtype), self)


def _rounding(op, fn, self):
    # Integers are already integral: PyTorch returns them unchanged.
    (x,), out = promote_operands(op, self)
    if _is_int(x):
        return x.astype(out)
    return fn(opmath(x)).astype(out)


def lower_ceil(self):
    return _rounding("ceil", jnp.ceil, self)


def lower_floor(self):
    return _rounding("floor", jnp.floor, self)


def lower_trunc(self):
    return _rounding("trunc", jnp.trunc, self)


def lower_round(self):
    # Half to even, like std::nearbyint in the default rounding mode.
    return _rounding("round", jnp.round, self)


def lower_round_decimals(self, *, decimals):
    (x,), out = promote_operands("round_decimals", self)
    x = opmath(x)
    # The power of ten is formed in the compute type, as PyTorch's kernel does; a
    # negative `decimals` divides first so that 10**-d is never an inexact fraction.
    if decimals >= 0:
        p = jnp.asarray(10.0**decimals, x.dtype)
        y = jnp.round(x * p) / p
    else:
        p = jnp.asarray(10.0 ** (-decimals), x.dtype)
        y = jnp.round(x / p) * p
    return y.astype(out)


def lower_frac(self):
    return _unary("frac", lambda x: x - jnp.trunc(x), self)


def _sign(x):
    # (0 < x) - (x < 0): NaN has sign 0 in PyTorch (jnp.sign keeps NaN).
    if x.dtype == jnp.bool_:
        return x
    return (x > 0).astype(x.dtype) - (x < 0).astype(x.dtype)


def lower_sign(self):
    return _unary("sign", _sign, self)


def lower_sgn(self):
    (x,), out = promote_operands("sgn", self)
    x = opmath(x)
    if jnp.issubdtype(x.dtype, jnp.complexfloating):
        mag = jnp.abs(x)
        y = jnp.where(mag == 0, jnp.zeros((), x.dtype), x / jnp.where(mag == 0, 1, mag).astype(x.dtype))
    else:
        y = _sign(x)
    return y.astype(out)


def lower_signbit(self):
    (x,), out = promote_operands("signbit", self)
    if x.dtype == jnp.bool_:
        return jnp.zeros(x.shape, out)
    if jnp.issubdtype(x.dtype, jnp.integer):
        return (x < 0).astype(out)
    return jnp.signbit(x).astype(out)


def _float_predicate(op, fn, self):
    (x,), out = promote_operands(op, self)
    if _is_int(x):
        return jnp.zeros(x.shape, out)
    return fn(x).astype(out)


def lower_isnan(self):
    return _float_predicate("isnan", jnp.isnan, self)


def lower_isinf(self):
    return _float_predicate("isinf", jnp.isinf, self)


def lower_isposinf(self):
    return _float_predicate("isposinf", jnp.isposinf, self)


def lower_isneginf(self):
    return _float_predicate("isneginf", jnp.isneginf, self)


def lower_nan_to_num(self, nan=None, posinf=None, neginf=None):
    (x,), out = promote_operands("nan_to_num", self)
    if _is_int(x) or jnp.issubdtype(x.dtype, jnp.complexfloating):
        if _is_int(x):
            return x.astype(out)
        re = lower_nan_to_num(jnp.real(x), nan, posinf, neginf)
        im = lower_nan_to_num(jnp.imag(x), nan, posinf, neginf)
        return lax.complex(re, im).astype(out)
    info = jnp.finfo(x.dtype)
    # The replacements are cast to the tensor's own dtype, as PyTorch does (a posinf
    # too large for float16 becomes inf again).
    nan_v = jnp.asarray(0.0 if nan is None else nan).astype(x.dtype)
    pos_v = jnp.asarray(info.max if posinf is None else posinf).astype(x.dtype)
    neg_v = jnp.asarray(info.min if neginf is None else neginf).astype(x.dtype)
    y = jnp.where(jnp.isnan(x), nan_v, x)
    y = jnp.where(jnp.isposinf(x), pos_v, y)
    y = jnp.where(jnp.isneginf(x), neg_v, y)
    return y.astype(out)


def lower_bitwise_not(self):
    (x,), out = promote_operands("bitwise_not", self)
    return jnp.invert(x).astype(out)


def lower_logical_not(self):
    (x,), out = promote_operands("logical_not", self)
    return jnp.logical_not(x).astype(out)
