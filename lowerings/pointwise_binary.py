"""Lowerings of binary (and ternary) pointwise aten ops with tensor operands: the
remaining comparisons, bitwise and logical ops, shifts, fmod/remainder/floor_divide,
atan2 and the other two-argument math functions, gcd/lcm, addcmul/addcdiv, lerp and
clamp with tensor bounds. Their Scalar overloads are in pointwise_scalar.py.

Operands are promoted with promote_operands (Note [Type promotion]); float16 and
bfloat16 compute in float32 where PyTorch CPU does (opmath).

Integer division by zero (fmod, remainder, floor_divide with a zero integer divisor)
raises in PyTorch CPU. The divisor is data here, so that cannot be checked: XLA's
integer division and remainder by zero give implementation-defined values.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from . import complex_ops
from .common import opmath, promote_operands
from .pointwise import clamp_between, lower_sub_Tensor, rounded_quotient


def _is_int(x):
    return jnp.issubdtype(x.dtype, jnp.integer) or x.dtype == jnp.bool_


def _binary(op, fn, self, other, use_opmath=True):
    (x, y), out = promote_operands(op, self, other)
    if use_opmath:
        x, y = opmath(x), opmath(y)
    return fn(x, y).astype(out)


# ------------------------------------------------------------------- comparisons


def lower_ge_Tensor(self, other):
    return _binary("ge_Tensor", jnp.greater_equal, self, other, False)


def lower_gt_Tensor(self, other):
    return _binary("gt_Tensor", jnp.greater, self, other, False)


def lower_le_Tensor(self, other):
    return _binary("le_Tensor", jnp.less_equal, self, other, False)


def lower_ne_Tensor(self, other):
    return _binary("ne_Tensor", jnp.not_equal, self, other, False)


# ------------------------------------------------------------- logical, bitwise


def lower_logical_and(self, other):
    return _binary("logical_and", jnp.logical_and, self, other, False)


def lower_logical_or(self, other):
    return _binary("logical_or", jnp.logical_or, self, other, False)


def lower_logical_xor(self, other):
    return _binary("logical_xor", jnp.logical_xor, self, other, False)


def lower_bitwise_and_Tensor(self, other):
    return _binary("bitwise_and_Tensor", jnp.bitwise_and, self, other, False)


def lower_bitwise_or_Tensor(self, other):
    return _binary("bitwise_or_Tensor", jnp.bitwise_or, self, other, False)


def lower_bitwise_xor_Tensor(self, other):
    return _binary("bitwise_xor_Tensor", jnp.bitwise_xor, self, other, False)


def shift_left(x, s):
    # PyTorch shifts by a negative amount or by the bit width or more give 0.
    x, s = jnp.broadcast_arrays(x, s)
    bits = jnp.iinfo(x.dtype).bits
    out_of_range = (s < 0) | (s >= bits)
    return jnp.where(out_of_range, jnp.zeros((), x.dtype), lax.shift_left(x, jnp.where(out_of_range, 0, s)))


def shift_right(x, s):
    # Arithmetic for signed types; out-of-range amounts shift everything out (-1 or 0
    # for signed values, 0 for unsigned ones).
    x, s = jnp.broadcast_arrays(x, s)
    bits = jnp.iinfo(x.dtype).bits
    out_of_range = (s < 0) | (s >= bits)
    if jnp.issubdtype(x.dtype, jnp.signedinteger):
        return lax.shift_right_arithmetic(x, jnp.where(out_of_range, bits - 1, s).astype(x.dtype))
    return jnp.where(out_of_range, jnp.zeros((), x.dtype), lax.shift_right_logical(x, jnp.where(out_of_range, 0, s)))


def lower_bitwise_left_shift_Tensor(self, other):
    return _binary("bitwise_left_shift_Tensor", shift_left, self, other, False)


def lower_bitwise_right_shift_Tensor(self, other):
    return _binary("bitwise_right_shift_Tensor", shift_right, self, other, False)


# -------------------------------------------------------------------- division


def fmod(x, y):
    # C fmod (sign of the dividend) for floats; truncating remainder for integers.
    return lax.rem(*jnp.broadcast_arrays(x, y))


def remainder(x, y):
    # Python's modulo (sign of the divisor): fmod, plus the divisor when the signs differ.
    x, y = jnp.broadcast_arrays(x, y)
    r = lax.rem(x, y)
    fix = (r != 0) & ((r < 0) != (y < 0))
    return jnp.where(fix, r + y, r)


def lower_fmod_Tensor(self, other):
    return _binary("fmod_Tensor", fmod, self, other)


def lower_remainder_Tensor(self, other):
    return _binary("remainder_Tensor", remainder, self, other)


def lower_floor_divide(self, other):
    return rounded_quotient("floor_divide", self, other, "floor")


# ------------------------------------------------------------------------ math


def lower_atan2(self, other):
    return _binary("atan2", jnp.arctan2, self, other)


def lower_fmax(self, other):
    return _binary("fmax", jnp.fmax, self, other, False)


def lower_fmin(self, other):
    return _binary("fmin", jnp.fmin, self, other, False)


def lower_hypot(self, other):
    return _binary("hypot", jnp.hypot, self, other)


def lower_copysign_Tensor(self, other):
    return _binary("copysign_Tensor", jnp.copysign, self, other)


def lower_nextafter(self, other):
    # In the tensor's own type: the next representable float16 is not a float32's.
    return _binary("nextafter", jnp.nextafter, self, other, False)


def heaviside(x, v):
    # NaN is neither zero nor positive: 0, where jnp.heaviside would give NaN.
    return jnp.where(x == 0, v, (x > 0).astype(x.dtype))


def lower_heaviside(self, values):
    return _binary("heaviside", heaviside, self, values, False)


def logaddexp(x, y):
    # Equal infinities would give inf - inf = NaN in the stable formula.
    m = jnp.maximum(x, y)
    stable = m + jnp.log1p(jnp.exp(-jnp.abs(x - y)))
    return jnp.where(jnp.isinf(x) & (x == y), x, stable)


def complex_logaddexp(x, y):
    """log(exp(x) + exp(y)) for complex operands as PyTorch CPU computes it
    (`_log_add_exp_helper`): the operand with the smaller real part (`y` on a tie) goes
    into log1p(exp(lo - hi)) + hi, so the result keeps hi's imaginary part unwrapped;
    NaNs spread, two infinities of one sign are handled apart."""
    x_is_lo = jnp.real(x) < jnp.real(y)
    lo, hi = jnp.where(x_is_lo, x, y), jnp.where(x_is_lo, y, x)
    lo_re, hi_re = jnp.real(lo), jnp.real(hi)
    same_infinity = ~jnp.isfinite(lo_re) & (lo_re == hi_re)
    exp = complex_ops.exp  # std::exp's values at infinities (Note [Complex special values])
    out = jnp.where(same_infinity, jnp.where(lo_re < 0, lo, jnp.log(exp(lo) + exp(hi))), jnp.log1p(exp(lo - hi)) + hi)
    nan = jnp.isnan(x) | jnp.isnan(y)
    return jnp.where(nan, jnp.asarray(complex(jnp.nan, jnp.nan), out.dtype), out)


def logaddexp2(x, y):
    m = jnp.maximum(x, y)
    stable = m + jnp.log1p(jnp.exp2(-jnp.abs(x - y))) / jnp.asarray(jnp.log(2.0), x.dtype)
    return jnp.where(jnp.isinf(x) & (x == y), x, stable)


def lower_logaddexp(self, other):
    return _binary("logaddexp", lambda x, y: (complex_logaddexp if jnp.iscomplexobj(x) else logaddexp)(x, y),
                   self, other)


def lower_logaddexp2(self, other):
    return _binary("logaddexp2", logaddexp2, self, other)


def xlogy(x, y):
    # 0 * log(y) is 0 unless y is NaN.
    prod = x * jnp.log(y)
    return jnp.where(jnp.isnan(y), y, jnp.where(x == 0, jnp.zeros((), x.dtype), prod))


def lower_xlogy_Tensor(self, other):
    return _binary("xlogy_Tensor", xlogy, self, other)


def gcd(a, b):
    # ATen's Euclid on absolute values (abs of the most negative value stays negative,
    # as in C); jnp.gcd loops forever on it.
    a, b = jnp.broadcast_arrays(jnp.abs(a), jnp.abs(b))

    def body(state):
        a, b = state
        nonzero = a != 0
        safe = jnp.where(nonzero, a, 1)
        return jnp.where(nonzero, lax.rem(b, safe), a), jnp.where(nonzero, a, b)

    _, g = lax.while_loop(lambda s: jnp.any(s[0] != 0), body, (a, b))
    return g


def lcm(a, b):
    g = gcd(a, b)
    a, b = jnp.broadcast_arrays(a, b)
    return jnp.where(g == 0, jnp.zeros((), g.dtype), jnp.abs(lax.div(a, jnp.where(g == 0, 1, g)) * b))


def lower_gcd(self, other):
    return _binary("gcd", gcd, self, other, False)


def lower_lcm(self, other):
    return _binary("lcm", lcm, self, other, False)


# --------------------------------------------------------- ternary and clamping


def lower_addcmul(self, tensor1, tensor2, *, value=1):
    (x, a, b), out = promote_operands("addcmul", self, tensor1, tensor2)
    x, a, b = opmath(x), opmath(a), opmath(b)
    return (x + jnp.asarray(value).astype(a.dtype) * a * b).astype(out)


def lower_addcdiv(self, tensor1, tensor2, *, value=1):
    (x, a, b), out = promote_operands("addcdiv", self, tensor1, tensor2)
    x, a, b = opmath(x), opmath(a), opmath(b)
    return (x + jnp.asarray(value).astype(a.dtype) * a / b).astype(out)


def lerp(x, y, w):
    # PyTorch's two-sided form: exact at both ends.
    return jnp.where(jnp.abs(w) < 0.5, x + w * (y - x), y - (y - x) * (1 - w))


def lower_lerp_Scalar(self, end, weight):
    (x, y), out = promote_operands("lerp_Scalar", self, end)
    x, y = opmath(x), opmath(y)
    return lerp(x, y, jnp.asarray(weight).astype(x.dtype)).astype(out)


def lower_lerp_Tensor(self, end, weight):
    (x, y, w), out = promote_operands("lerp_Tensor", self, end, weight)
    return lerp(opmath(x), opmath(y), opmath(w)).astype(out)


def lower_clamp_Tensor(self, min=None, max=None):
    return clamp_between("clamp_Tensor", self, min, max)


def lower_clamp_min_Tensor(self, min):
    return _binary("clamp_min_Tensor", jnp.maximum, self, min, False)


def lower_clamp_max_Tensor(self, max):
    return _binary("clamp_max_Tensor", jnp.minimum, self, max, False)


def lower_rsub_Tensor(self, other, *, alpha=1):
    (x, y), out = promote_operands("rsub_Tensor", self, other)
    return lower_sub_Tensor(y, x, alpha=alpha).astype(out)
