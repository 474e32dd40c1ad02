"""Output metadata of the Scalar-operand arithmetic in lowerings/pointwise_scalar.py."""

from __future__ import annotations

from .common import checked_meta, elementwise_meta
from .pointwise import div_Tensor_mode_output_shape, no_complex_clamp, sub_Tensor_output_shape
from .pointwise_binary import bitwise_left_shift_Tensor_output_shape, bitwise_right_shift_Tensor_output_shape


def mul_Scalar_output_shape(self, other):
    return elementwise_meta("mul_Scalar", self, other)


def div_Scalar_output_shape(self, other):
    return elementwise_meta("div_Scalar", self, other)


def sub_Scalar_output_shape(self, other, alpha=1):
    sub_Tensor_output_shape(self, other, alpha=alpha)
    return elementwise_meta("sub_Scalar", self, other)


def add_Scalar_output_shape(self, other, alpha=1):
    return elementwise_meta("add_Scalar", self, other)


# Scalar overloads of the ops in pointwise_binary.py.


def lt_Scalar_output_shape(self, other):
    return checked_meta("lt_Scalar", self, other, kernel="lt_cpu", categories="bool int float")


def le_Scalar_output_shape(self, other):
    return checked_meta("le_Scalar", self, other, kernel="le_cpu", categories="bool int float")


def bitwise_and_Scalar_output_shape(self, other):
    return checked_meta("bitwise_and_Scalar", self, other, kernel="bitwise_and_cpu", categories="bool int")


def bitwise_or_Scalar_output_shape(self, other):
    return checked_meta("bitwise_or_Scalar", self, other, kernel="bitwise_or_cpu", categories="bool int")


def bitwise_xor_Scalar_output_shape(self, other):
    return checked_meta("bitwise_xor_Scalar", self, other, kernel="bitwise_xor_cpu", categories="bool int")


def __lshift___Scalar_output_shape(self, other):
    return bitwise_left_shift_Tensor_Scalar_output_shape(self, other)


def __lshift___Tensor_output_shape(self, other):
    return bitwise_left_shift_Tensor_output_shape(self, other)


def __rshift___Scalar_output_shape(self, other):
    return bitwise_right_shift_Tensor_Scalar_output_shape(self, other)


def __rshift___Tensor_output_shape(self, other):
    return bitwise_right_shift_Tensor_output_shape(self, other)


def bitwise_left_shift_Tensor_Scalar_output_shape(self, other):
    return checked_meta("bitwise_left_shift_Tensor_Scalar", self, other, kernel="lshift_cpu", categories="int")


def bitwise_and_Scalar_Tensor_output_shape(self, other):
    return checked_meta("bitwise_and_Scalar_Tensor", self, other, kernel="bitwise_and_cpu", categories="bool int")


def bitwise_or_Scalar_Tensor_output_shape(self, other):
    return checked_meta("bitwise_or_Scalar_Tensor", self, other, kernel="bitwise_or_cpu", categories="bool int")


def bitwise_xor_Scalar_Tensor_output_shape(self, other):
    return checked_meta("bitwise_xor_Scalar_Tensor", self, other, kernel="bitwise_xor_cpu", categories="bool int")


def bitwise_left_shift_Scalar_Tensor_output_shape(self, other):
    return checked_meta("bitwise_left_shift_Scalar_Tensor", self, other, kernel="lshift_cpu", categories="int")


def bitwise_right_shift_Tensor_Scalar_output_shape(self, other):
    return checked_meta("bitwise_right_shift_Tensor_Scalar", self, other, kernel="rshift_cpu", categories="int")


def bitwise_right_shift_Scalar_Tensor_output_shape(self, other):
    return checked_meta("bitwise_right_shift_Scalar_Tensor", self, other, kernel="rshift_cpu", categories="int")


def fmod_Scalar_output_shape(self, other):
    return checked_meta("fmod_Scalar", self, other, kernel="fmod_cpu", categories="int float")


def remainder_Scalar_output_shape(self, other):
    return checked_meta("remainder_Scalar", self, other, kernel="remainder_cpu", categories="int float")


def remainder_Scalar_Tensor_output_shape(self, other):
    return checked_meta("remainder_Scalar_Tensor", self, other, kernel="remainder_cpu", categories="int float")


def floor_divide_Scalar_output_shape(self, other):
    return checked_meta("floor_divide_Scalar", self, other, kernel="div_floor_cpu", categories="int float")


def div_Scalar_mode_output_shape(self, other, *, rounding_mode):
    if rounding_mode is None:
        return elementwise_meta("div_Scalar", self, other)
    return div_Tensor_mode_output_shape(self, other, rounding_mode=rounding_mode)


def pow_Scalar_output_shape(self, exponent):
    return checked_meta("pow_Scalar", self, exponent, kernel="pow", categories="int float complex")


def copysign_Scalar_output_shape(self, other):
    return checked_meta("copysign_Scalar", self, other, kernel="copysign_cpu", categories="float")


def xlogy_Scalar_Self_output_shape(self, other):
    return checked_meta("xlogy_Scalar_Self", self, other, kernel="xlogy_cpu", categories="float")


def xlogy_Scalar_Other_output_shape(self, other):
    return checked_meta("xlogy_Scalar_Other", self, other, kernel="xlogy_cpu", categories="float")


def clamp_min_output_shape(self, min):
    no_complex_clamp(self)
    return checked_meta("clamp_min", self, min, kernel="clamp_min_scalar_cpu", categories="int float")


def clamp_max_output_shape(self, max):
    no_complex_clamp(self)
    return checked_meta("clamp_max", self, max, kernel="clamp_max_scalar_cpu", categories="int float")


def rsub_Scalar_output_shape(self, other, alpha=1):
    return sub_Tensor_output_shape(other, self, alpha=alpha)
