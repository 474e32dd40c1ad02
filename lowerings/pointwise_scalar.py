"""Binary arithmetic with a Scalar second operand (`mul.Scalar`, ...): the Tensor
overloads' semantics, the Scalar being a runtime operand."""

from __future__ import annotations

from .pointwise import lower_add_Tensor, lower_div_Tensor, lower_mul_Tensor, lower_sub_Tensor
from .common import promote_operands


def lower_mul_Scalar(self, other):
    (x, y), out = promote_operands("mul_Scalar", self, other)
    return lower_mul_Tensor(x, y).astype(out)


def lower_div_Scalar(self, other):
    (x, y), out = promote_operands("div_Scalar", self, other)
    return lower_div_Tensor(x, y).astype(out)


def lower_sub_Scalar(self, other, alpha=1):
    (x, y), out = promote_operands("sub_Scalar", self, other)
    return lower_sub_Tensor(x, y, alpha=alpha).astype(out)


def lower_add_Scalar(self, other, alpha=1):
    (x, y), out = promote_operands("add_Scalar", self, other)
    return lower_add_Tensor(x, y, alpha=alpha).astype(out)
