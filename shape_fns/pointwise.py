"""Shape functions of pointwise aten ops: broadcast shape, dtype by the op's declared
type promotion kind (TYPE_PROMOTION), plus the dtype checks PyTorch CPU makes."""

from __future__ import annotations

import torch

from .common import TensorMeta, broadcast_shapes, checked_meta, elementwise_meta, promote_dtypes, scalar_type_name


def _require_floating(kernel: str, meta: TensorMeta) -> None:
    # CPU kernels that exist only for floating types fail at dispatch.
    if not meta.dtype.is_floating_point:
        raise NotImplementedError(f'"{kernel}" not implemented for {meta.dtype}')


def abs_output_shape(self):
    if self.dtype is torch.bool:
        raise NotImplementedError('"abs_cpu" not implemented for \'Bool\'')
    return elementwise_meta("abs", self)


def neg_output_shape(self):
    if self.dtype is torch.bool:
        raise RuntimeError(
            "Negation, the `-` operator, on a bool tensor is not supported. "
            "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead."
        )
    return elementwise_meta("neg", self)


def exp_output_shape(self):
    return elementwise_meta("exp", self)


def log_output_shape(self):
    return elementwise_meta("log", self)


def sqrt_output_shape(self):
    return elementwise_meta("sqrt", self)


def rsqrt_output_shape(self):
    return elementwise_meta("rsqrt", self)


def tanh_output_shape(self):
    return elementwise_meta("tanh", self)


def sigmoid_output_shape(self):
    return elementwise_meta("sigmoid", self)


def sin_output_shape(self):
    return elementwise_meta("sin", self)


def cos_output_shape(self):
    return elementwise_meta("cos", self)


def relu_output_shape(self):
    if self.dtype is torch.bool:
        raise RuntimeError("Boolean inputs not supported for relu")
    no_complex_clamp(self)  # (relu is clamp_min on PyTorch CPU)
    return elementwise_meta("relu", self)


def _check_approximate(approximate: str) -> None:
    if approximate not in ("none", "tanh"):
        raise RuntimeError("approximate argument must be either none or tanh.")


def gelu_output_shape(self, *, approximate="none"):
    _check_approximate(approximate)
    _require_floating("GeluKernelImpl", self)
    return elementwise_meta("gelu", self)


def _check_alpha(result: TensorMeta, alpha) -> None:
    alpha_dtype = promote_dtypes(alpha)
    if result.dtype is not torch.bool and alpha_dtype is torch.bool:
        raise RuntimeError("Boolean alpha only supported for Boolean results.")
    if not (result.dtype.is_floating_point or result.dtype.is_complex) and (
        alpha_dtype.is_floating_point or alpha_dtype.is_complex
    ):
        raise RuntimeError("For integral input tensors, argument alpha must not be a floating point number.")


def add_Tensor_output_shape(self, other, *, alpha=1):
    result = elementwise_meta("add_Tensor", self, other)
    _check_alpha(result, alpha)
    return result


def sub_Tensor_output_shape(self, other, *, alpha=1):
    result = elementwise_meta("sub_Tensor", self, other)
    bools = [promote_dtypes(x) is torch.bool for x in (self, other)]
    if all(bools):
        raise RuntimeError(
            "Subtraction, the `-` operator, with two bool tensors is not supported. "
            "Use the `^` or `logical_xor()` operator instead."
        )
    if any(bools):
        raise RuntimeError(
            "Subtraction, the `-` operator, with a bool tensor is not supported. "
            "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead."
        )
    _check_alpha(result, alpha)
    return result


def mul_Tensor_output_shape(self, other):
    return elementwise_meta("mul_Tensor", self, other)


def div_Tensor_output_shape(self, other):
    return elementwise_meta("div_Tensor", self, other)


def div_Tensor_mode_output_shape(self, other, *, rounding_mode):
    if rounding_mode is None:
        return elementwise_meta("div_Tensor", self, other)
    if rounding_mode not in ("trunc", "floor"):
        raise RuntimeError(
            "div expected rounding_mode to be one of None, 'trunc', or 'floor' "
            f"but found '{rounding_mode}'"
        )
    result = elementwise_meta("div_Tensor_mode", self, other)
    if result.dtype is torch.bool:
        raise NotImplementedError(f'"div_{rounding_mode}_cpu" not implemented for torch.bool')
    return result


def pow_Tensor_Scalar_output_shape(self, exponent):
    return elementwise_meta("pow_Tensor_Scalar", self, exponent)


def pow_Tensor_Tensor_output_shape(self, exponent):
    return elementwise_meta("pow_Tensor_Tensor", self, exponent)


def maximum_output_shape(self, other):
    no_complex_ordering("maximum", self, other)
    return elementwise_meta("maximum", self, other)


def minimum_output_shape(self, other):
    no_complex_ordering("minimum", self, other)
    return elementwise_meta("minimum", self, other)


def no_complex_ordering(op, *operands):
    """PyTorch's error for maximum-like ops of complex operands, which have no order."""
    if any(isinstance(x, TensorMeta) and x.dtype.is_complex for x in operands):
        raise RuntimeError(f"{op} not implemented for complex tensors.")



def eq_Tensor_output_shape(self, other):
    return elementwise_meta("eq_Tensor", self, other)


def eq_Scalar_output_shape(self, other):
    return elementwise_meta("eq_Scalar", self, other)


def ne_Scalar_output_shape(self, other):
    return elementwise_meta("ne_Scalar", self, other)


def lt_Tensor_output_shape(self, other):
    return checked_meta("lt_Tensor", self, other, kernel="lt_cpu", categories="bool int float")  # complex: no order


def gt_Scalar_output_shape(self, other):
    return checked_meta("gt_Scalar", self, other, kernel="gt_cpu", categories="bool int float")  # complex: no order


def ge_Scalar_output_shape(self, other):
    return checked_meta("ge_Scalar", self, other, kernel="ge_cpu", categories="bool int float")  # complex: no order


def where_self_output_shape(condition, self, other):
    # PyTorch CPU still accepts uint8 conditions (with a deprecation warning).
    cond_dtype = promote_dtypes(condition)
    if cond_dtype not in (torch.bool, torch.uint8):
        raise RuntimeError(
            "where expected condition to be a boolean tensor, but got a tensor with dtype "
            f"{scalar_type_name(cond_dtype)}"
        )
    values = elementwise_meta("where_self", self, other)
    cond_shape = condition.shape if isinstance(condition, TensorMeta) else ()
    return TensorMeta(broadcast_shapes(cond_shape, values.shape), values.dtype)


def clamp_output_shape(self, min=None, max=None):
    if min is None and max is None:
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
    no_complex_clamp(self)
    result = elementwise_meta("clamp", self, min, max)
    if result.dtype is torch.bool:
        kernel = (
            "clamp_scalar_cpu"
            if min is not None and max is not None
            else "clamp_min_scalar_cpu"
            if min is not None
            else "clamp_max_scalar_cpu"
        )
        raise NotImplementedError(f"\"{kernel}\" not implemented for 'Bool'")
    return result


def threshold_backward_output_shape(grad_output, self, threshold):
    # CPU promotes grad_output with self (the meta kernel keeps grad_output's dtype).
    return elementwise_meta("threshold_backward", grad_output, self)


def gelu_backward_output_shape(grad_output, self, *, approximate="none"):
    _check_approximate(approximate)
    result = elementwise_meta("gelu_backward", grad_output, self)
    _require_floating("GeluBackwardKernelImpl", result)
    return result


def no_complex_clamp(self):
    if self.dtype.is_complex:
        raise NotImplementedError("clamp is not supported for complex types")
