"""Binary arithmetic with a Scalar second operand (`mul.Scalar`, ...): the Tensor
overloads' semantics, the Scalar being a runtime operand."""

from __future__ import annotations

import jax.numpy as jnp

from . import complex_ops
from . import pointwise_binary as binary
from .common import opmath, promote_operands, promote_scalar_other
from .pointwise import int_pow, lower_add_Tensor, lower_sub_Tensor, quotient, rounded_quotient


def lower_mul_Scalar(self, other):
    (x, y), out = promote_scalar_other("mul_Scalar", self, other)
    return (opmath(x) * opmath(y)).astype(out)


def lower_div_Scalar(self, other):
    (x, y), out = promote_scalar_other("div_Scalar", self, other)
    return quotient(x, y).astype(out)


def lower_sub_Scalar(self, other, alpha=1):
    (x, y), out = promote_operands("sub_Scalar", self, other)
    return lower_sub_Tensor(x, y, alpha=alpha).astype(out)


def lower_add_Scalar(self, other, alpha=1):
    (x, y), out = promote_operands("add_Scalar", self, other)
    return lower_add_Tensor(x, y, alpha=alpha).astype(out)


# Scalar overloads of the ops in pointwise_binary.py. A Scalar `self` (pow.Scalar,
# remainder.Scalar_Tensor, ...) promotes as a Python number would.


def _scalar_binary(op, fn, self, other, use_opmath=True):
    (x, y), out = promote_operands(op, self, other)
    if use_opmath:
        x, y = opmath(x), opmath(y)
    return fn(x, y).astype(out)


def lower_lt_Scalar(self, other):
    return _scalar_binary("lt_Scalar", jnp.less, self, other, False)


def lower_le_Scalar(self, other):
    return _scalar_binary("le_Scalar", jnp.less_equal, self, other, False)


def lower_bitwise_and_Scalar(self, other):
    return _scalar_binary("bitwise_and_Scalar", jnp.bitwise_and, self, other, False)


def lower_bitwise_or_Scalar(self, other):
    return _scalar_binary("bitwise_or_Scalar", jnp.bitwise_or, self, other, False)


def lower_bitwise_xor_Scalar(self, other):
    return _scalar_binary("bitwise_xor_Scalar", jnp.bitwise_xor, self, other, False)


def lower_bitwise_left_shift_Tensor_Scalar(self, other):
    return _scalar_binary("bitwise_left_shift_Tensor_Scalar", binary.shift_left, self, other, False)


def lower_bitwise_left_shift_Scalar_Tensor(self, other):
    return _scalar_binary("bitwise_left_shift_Scalar_Tensor", binary.shift_left, self, other, False)


# Python's shift operators (x << 2, x >> t) are PyTorch's bitwise shifts, same kernels.
def lower___lshift___Scalar(self, other):
    return lower_bitwise_left_shift_Tensor_Scalar(self, other)


def lower___lshift___Tensor(self, other):
    return binary.lower_bitwise_left_shift_Tensor(self, other)


def lower___rshift___Scalar(self, other):
    return lower_bitwise_right_shift_Tensor_Scalar(self, other)


def lower___rshift___Tensor(self, other):
    return binary.lower_bitwise_right_shift_Tensor(self, other)


def lower_bitwise_and_Scalar_Tensor(self, other):
    return _scalar_binary("bitwise_and_Scalar_Tensor", jnp.bitwise_and, self, other, False)


def lower_bitwise_or_Scalar_Tensor(self, other):
    return _scalar_binary("bitwise_or_Scalar_Tensor", jnp.bitwise_or, self, other, False)


def lower_bitwise_xor_Scalar_Tensor(self, other):
    return _scalar_binary("bitwise_xor_Scalar_Tensor", jnp.bitwise_xor, self, other, False)


def lower_bitwise_right_shift_Tensor_Scalar(self, other):
    return _scalar_binary("bitwise_right_shift_Tensor_Scalar", binary.shift_right, self, other, False)


def lower_bitwise_right_shift_Scalar_Tensor(self, other):
    return _scalar_binary("bitwise_right_shift_Scalar_Tensor", binary.shift_right, self, other, False)


def lower_fmod_Scalar(self, other):
    return _scalar_binary("fmod_Scalar", binary.fmod, self, other)


def lower_remainder_Scalar(self, other):
    return _scalar_binary("remainder_Scalar", binary.remainder, self, other)


def lower_remainder_Scalar_Tensor(self, other):
    return _scalar_binary("remainder_Scalar_Tensor", binary.remainder, self, other)


def lower_floor_divide_Scalar(self, other):
    return rounded_quotient("floor_divide_Scalar", self, other, "floor")


def lower_div_Scalar_mode(self, other, *, rounding_mode):
    if rounding_mode is None:
        return lower_div_Scalar(self, other)
    return rounded_quotient("div_Scalar_mode", self, other, rounding_mode)


def lower_pow_Scalar(self, exponent):
    (x, e), out = promote_operands("pow_Scalar", self, exponent)
    if jnp.issubdtype(x.dtype, jnp.integer):
        return int_pow(x, e).astype(out)
    if jnp.iscomplexobj(x):
        return complex_ops.power(x, e).astype(out)
    return jnp.power(opmath(x), opmath(e)).astype(out)


def lower_copysign_Scalar(self, other):
    return _scalar_binary("copysign_Scalar", jnp.copysign, self, other)


def lower_xlogy_Scalar_Self(self, other):
    return _scalar_binary("xlogy_Scalar_Self", binary.xlogy, self, other)


def lower_xlogy_Scalar_Other(self, other):
    return _scalar_binary("xlogy_Scalar_Other", binary.xlogy, self, other)


def lower_clamp_min(self, min):
    return _scalar_binary("clamp_min", jnp.maximum, self, min, False)


def lower_clamp_max(self, max):
    return _scalar_binary("clamp_max", jnp.minimum, self, max, False)


def lower_rsub_Scalar(self, other, alpha=1):
    (x, y), out = promote_operands("rsub_Scalar", self, other)
    return lower_sub_Tensor(y, x, alpha=alpha).astype(out)
