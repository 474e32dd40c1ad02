"""Output metadata of the Scalar-operand arithmetic in lowerings/pointwise_scalar.py."""

from __future__ import annotations

from .common import elementwise_meta


def mul_Scalar_output_shape(self, other):
    return elementwise_meta("mul_Scalar", self, other)


def div_Scalar_output_shape(self, other):
    return elementwise_meta("div_Scalar", self, other)


def sub_Scalar_output_shape(self, other, alpha=1):
    return elementwise_meta("sub_Scalar", self, other)


def add_Scalar_output_shape(self, other, alpha=1):
    return elementwise_meta("add_Scalar", self, other)
