"""Lowerings of pointwise aten ops: unary math, binary arithmetic, comparisons, where,
clamp and activations (with their backward ops).

Each op casts its operands with promote_operands (Note [Type promotion]), computes,
and casts to the result dtype. Scalar arguments are traced values, never branched on in
Python (Note [Branching on a Scalar] in common.py).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
from jax import lax

from . import complex_ops
from .common import opmath, promote_operands, promote_scalar_other, switch_on_scalar


def _unary(op, fn, self):
    (x,), out = promote_operands(op, self)
    return fn(opmath(x)).astype(out)


def lower_abs(self):
    return _unary("abs", complex_ops.abs_value, self)


def lower_neg(self):
    return _unary("neg", jnp.negative, self)


def lower_exp(self):
    return _unary("exp", complex_ops.exp, self)


def lower_log(self):
    return _unary("log", jnp.log, self)


def lower_sqrt(self):
    return _unary("sqrt", complex_ops.sqrt, self)


def lower_rsqrt(self):
    return _unary("rsqrt", lax.rsqrt, self)


def lower_tanh(self):
    return _unary("tanh", jnp.tanh, self)


def lower_sigmoid(self):
    return _unary("sigmoid", lax.logistic, self)


def lower_sin(self):
    return _unary("sin", jnp.sin, self)


def lower_cos(self):
    return _unary("cos", jnp.cos, self)


def lower_relu(self):
    # jnp.maximum propagates NaN, as PyTorch's relu does.
    return _unary("relu", lambda x: jnp.maximum(x, jnp.zeros((), x.dtype)), self)


_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)
_GELU_KAPPA = 0.044715


def lower_gelu(self, *, approximate="none"):
    (x,), out = promote_operands("gelu", self)
    x = opmath(x)
    if approximate == "tanh":
        y = 0.5 * x * (1 + jnp.tanh(_SQRT_2_OVER_PI * (x + _GELU_KAPPA * x**3)))
    else:
        y = 0.5 * x * (1 + lax.erf(x * math.sqrt(0.5)))
    return y.astype(out)


def lower_add_Tensor(self, other, *, alpha=1):
    (x, y), out = promote_operands("add_Tensor", self, other)
    x, y = opmath(x), opmath(y)
    return (x + jnp.asarray(alpha, y.dtype) * y).astype(out)


def lower_sub_Tensor(self, other, *, alpha=1):
    (x, y), out = promote_operands("sub_Tensor", self, other)
    x, y = opmath(x), opmath(y)
    return (x - jnp.asarray(alpha, y.dtype) * y).astype(out)


def lower_mul_Tensor(self, other):
    (x, y), out = promote_scalar_other("mul_Tensor", self, other)
    return (opmath(x) * opmath(y)).astype(out)


def quotient(x, y):
    """x / y of operands promote_scalar_other made, in float32 for float16/bfloat16 (to be
    rounded once by the caller)."""
    if x.dtype != y.dtype:
        # A float16/bfloat16 `x` by the float32 value of a one-value `other`: PyTorch
        # divides in float32, correctly rounded, where XLA CPU multiplies by the divisor's
        # float32 reciprocal (float16 `x / 0.3` then rounds differently for 1% of x).
        # The float64 quotient, even as x times a float64 reciprocal, is within 2**-52 of
        # the exact one, which lies at least 2**-49 from any midpoint of two float32
        # values (x has at most 11 significant bits, the divisor 24), so it rounds to
        # PyTorch's float32 quotient.
        return (x.astype(jnp.float64) / y.astype(jnp.float64)).astype(jnp.float32)
    return opmath(x) / opmath(y)


def lower_div_Tensor(self, other):
    (x, y), out = promote_scalar_other("div_Tensor", self, other)
    return quotient(x, y).astype(out)


def rounded_quotient(op, self, other, rounding_mode):
    """div with rounding_mode "trunc" or "floor" (and floor_divide), under op's type promotion."""
    (x, y), out = promote_scalar_other(op, self, other)
    if jnp.issubdtype(x.dtype, jnp.integer):
        # Integers stay integers: XLA's division truncates (C semantics), floor_divide floors.
        return lax.div(*jnp.broadcast_arrays(x, y)) if rounding_mode == "trunc" else jnp.floor_divide(x, y)
    # A float16/bfloat16 `x` by the float32 value of a one-value `other`
    # (promote_scalar_other): PyTorch rounds the float32 quotient to an integer. Otherwise
    # no opmath: its vectorized CPU kernel rounds the quotient to float16/bfloat16 before
    # rounding it to an integer (its scalar tail loop does not).
    one_value = x.dtype != y.dtype
    if rounding_mode == "trunc":
        return jnp.trunc(quotient(x, y) if one_value else x / y).astype(out)
    x = opmath(x) if one_value else x
    # PyTorch floors floats like Python's // (exact, via fmod, rather than floor(x / y)),
    # except that a zero divisor gives x / y (inf or nan) where Python would raise, and a
    # zero quotient takes the sign of x / y (c10::div_floor_floating): -0.0 // 3 is -0.0,
    # -0.3 // -3 is +0.0.
    quotient_sign = x / y
    floored = jnp.floor_divide(x, y)
    floored = jnp.where(floored == 0, jnp.copysign(jnp.zeros_like(floored), quotient_sign), floored)
    return jnp.where(y == 0, quotient_sign, floored).astype(out)


def lower_div_Tensor_mode(self, other, *, rounding_mode):
    if rounding_mode is None:
        return lower_div_Tensor(self, other)
    return rounded_quotient("div_Tensor_mode", self, other, rounding_mode)


def _square_and_multiply(base, e):
    # Over every bit of the exponent: jnp.power's integer path wraps differently from
    # PyTorch's on overflow (55**127 in int64), and exact modular arithmetic agrees
    # with PyTorch whatever the order of the products.
    base, e = jnp.broadcast_arrays(base, e)

    def step(_, state):
        result, b, e = state
        result = jnp.where((e & 1) == 1, result * b, result)
        return result, b * b, e >> 1

    bits = jnp.iinfo(e.dtype).bits if jnp.issubdtype(e.dtype, jnp.integer) else 1
    result, _, _ = lax.fori_loop(0, bits, step, (jnp.ones_like(base), base, e))
    return result


def int_pow(base, exponent):
    """Integer power with PyTorch's rule for negative exponents: 1 and -1 keep their
    magnitude, every other base gives 0 (jnp.power gives garbage there)."""
    e = jnp.where(exponent < 0, 0, exponent).astype(base.dtype)
    positive = _square_and_multiply(base, e)
    one = jnp.ones((), base.dtype)
    negative = jnp.where(
        base == 1,
        one,
        jnp.where(base == -1, jnp.where(exponent % 2 == 0, one, -one), jnp.zeros((), base.dtype)),
    )
    return jnp.where(exponent < 0, negative, positive)


def _pow(x, e, out):
    if jnp.issubdtype(x.dtype, jnp.integer):
        return int_pow(x, e).astype(out)
    if jnp.iscomplexobj(x):
        return complex_ops.power(x, e).astype(out)
    return jnp.power(opmath(x), opmath(e)).astype(out)


# The exponents PyTorch's CPU kernel computes without pow(), chosen at run time (Note
# [Branching on a Scalar]). Its results bitwise, except where its own sqrt is not
# correctly rounded; bfloat16 rounds after each operation, as PyTorch's does.
_POW_BY_ARITHMETIC = {
    0.0: jnp.ones_like,
    1.0: lambda x: x,
    2.0: lambda x: x * x,
    3.0: lambda x: x * x * x,
    0.5: complex_ops.sqrt,
    -1.0: lambda x: 1 / x,
    -2.0: lambda x: 1 / (x * x),
}
# and for complex bases (whose -0.5 is PyTorch's rsqrt kernel too)
_COMPLEX_POW_BY_ARITHMETIC = {**_POW_BY_ARITHMETIC, -0.5: lax.rsqrt}


def lower_pow_Tensor_Scalar(self, exponent):
    # PyTorch raises for an integer tensor to a negative integer Scalar power; the
    # Scalar is a runtime value here, so such a call gets int_pow's values instead.
    (x, e), out = promote_operands("pow_Tensor_Scalar", self, exponent)
    if not jnp.issubdtype(x.dtype, jnp.inexact):
        return _pow(x, e, out)
    table = _COMPLEX_POW_BY_ARITHMETIC if jnp.iscomplexobj(x) else _POW_BY_ARITHMETIC
    cases = {v: (lambda x, f=f: f(x).astype(out)) for v, f in table.items()}
    base = x if x.dtype == jnp.bfloat16 else opmath(x)
    return switch_on_scalar(e, cases, lambda x: _pow(x, e, out), base)


def lower_pow_Tensor_Tensor(self, exponent):
    (x, e), out = promote_operands("pow_Tensor_Tensor", self, exponent)
    return _pow(x, e, out)


def lower_maximum(self, other):
    # Both jnp.maximum and torch.maximum propagate NaN.
    (x, y), out = promote_operands("maximum", self, other)
    return jnp.maximum(x, y).astype(out)


def lower_minimum(self, other):
    (x, y), out = promote_operands("minimum", self, other)
    return jnp.minimum(x, y).astype(out)


def lower_eq_Tensor(self, other):
    (x, y), out = promote_operands("eq_Tensor", self, other)
    return (x == y).astype(out)


def lower_eq_Scalar(self, other):
    (x, y), out = promote_operands("eq_Scalar", self, other)
    return (x == y).astype(out)


def lower_ne_Scalar(self, other):
    (x, y), out = promote_operands("ne_Scalar", self, other)
    return (x != y).astype(out)


def lower_lt_Tensor(self, other):
    (x, y), out = promote_operands("lt_Tensor", self, other)
    return (x < y).astype(out)


def lower_gt_Scalar(self, other):
    (x, y), out = promote_operands("gt_Scalar", self, other)
    return (x > y).astype(out)


def lower_ge_Scalar(self, other):
    (x, y), out = promote_operands("ge_Scalar", self, other)
    return (x >= y).astype(out)


def lower_where_self(condition, self, other):
    # Only self and other promote; PyTorch CPU also still accepts a uint8 condition.
    (x, y), out = promote_operands("where_self", self, other)
    return jnp.where(jnp.asarray(condition).astype(bool), x, y).astype(out)


def lower_clamp(self, min=None, max=None):
    return clamp_between("clamp", self, min, max)


def clamp_between(op, self, min, max):
    """clamp and clamp.Tensor. min and max take part in type promotion (an int tensor
    clamped to 0.5 is float); max(min(...)) order: when min > max every element becomes
    max, as in PyTorch."""
    (x, lo, hi), out = promote_operands(op, self, min, max)
    if lo is not None:
        x = jnp.maximum(x, lo)
    if hi is not None:
        x = jnp.minimum(x, hi)
    return x.astype(out)


def lower_threshold_backward(grad_output, self, threshold):
    (g, x), out = promote_operands("threshold_backward", grad_output, self)
    return jnp.where(x <= jnp.asarray(threshold, x.dtype), jnp.zeros((), g.dtype), g).astype(out)


def lower_gelu_backward(grad_output, self, *, approximate="none"):
    (g, x), out = promote_operands("gelu_backward", grad_output, self)
    g, x = opmath(g), opmath(x)
    if approximate == "tanh":
        inner = _SQRT_2_OVER_PI * (x + _GELU_KAPPA * x**3)
        t = jnp.tanh(inner)
        d_inner = _SQRT_2_OVER_PI * (1 + 3 * _GELU_KAPPA * x * x)
        grad = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * d_inner
    else:
        cdf = 0.5 * (1 + lax.erf(x * math.sqrt(0.5)))
        pdf = jnp.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
        grad = cdf + x * pdf
    return (g * grad).astype(out)
