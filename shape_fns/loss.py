"""Shape functions of losses and their backward ops (lowerings/loss.py)."""

from __future__ import annotations

import torch

from .common import TensorMeta, broadcast_shapes
from .common import scalar_type_name


def _reduced(shape, reduction):
    return tuple(shape) if reduction == 0 else ()


def _float_kernel(kernel, dtype):
    if not dtype.is_floating_point:
        raise NotImplementedError(f'"{kernel}" not implemented for \'{scalar_type_name(dtype)}\'')


def _check_nll(self, target, weight, spatial):
    if target.dtype not in (torch.int64, torch.uint8):
        raise RuntimeError(f"expected target dtype to be Long or Byte, but got {scalar_type_name(target.dtype)}")
    if spatial:
        if self.ndim != 4:
            raise RuntimeError(
                f"only batches of spatial inputs supported (4D tensors), but got input of size: {list(self.shape)}"
            )
        if target.ndim != 3:
            raise RuntimeError(
                f"only batches of spatial targets supported (3D tensors) but got targets of dimension: {target.ndim}"
            )
        if (self.shape[0],) + self.shape[2:] != target.shape:
            raise RuntimeError(
                f"size mismatch (got input: {list(self.shape)} , target: {list(target.shape)}"
            )
    else:
        if not 1 <= self.ndim <= 2:
            raise RuntimeError("input tensor should be 1D or 2D")
        if target.ndim > 1:
            raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
        batch = self.shape[0] if self.ndim == 2 else 1
        tbatch = target.shape[0] if target.ndim else 1
        if (self.ndim == 1 and target.ndim != 0) or batch != tbatch:
            raise RuntimeError(f"size mismatch (got input: {list(self.shape)}, target: {list(target.shape)})")
    classes = self.shape[1] if self.ndim > 1 else self.shape[0]
    if weight is not None and weight.numel() != classes:
        raise RuntimeError(
            f"weight tensor should be defined either for all {classes} classes or no classes but got "
            f"weight tensor of shape: {list(weight.shape)}"
        )


def nll_loss_forward_output_shape(self, target, weight, reduction, ignore_index):
    _check_nll(self, target, weight, spatial=False)
    # PyTorch: one loss per sample unless the target is 0-d (a 1-d input is one sample).
    out = target.shape if reduction == 0 and target.ndim else ()
    return TensorMeta(out, self.dtype), TensorMeta((), self.dtype)


def nll_loss_backward_output_shape(grad_output, self, target, weight, reduction, ignore_index, total_weight):
    _check_nll(self, target, weight, spatial=False)
    return TensorMeta(self.shape, self.dtype)


def nll_loss2d_forward_output_shape(self, target, weight, reduction, ignore_index):
    _check_nll(self, target, weight, spatial=True)
    return TensorMeta(_reduced(target.shape, reduction), self.dtype), TensorMeta((), self.dtype)


def nll_loss2d_backward_output_shape(grad_output, self, target, weight, reduction, ignore_index, total_weight):
    _check_nll(self, target, weight, spatial=True)
    return TensorMeta(self.shape, self.dtype)


def _pointwise_loss(kernel, self, target, reduction):
    _float_kernel(kernel, self.dtype)
    return TensorMeta(_reduced(broadcast_shapes(self.shape, target.shape), reduction), self.dtype)


def _pointwise_backward(kernel, grad_output, self, target):
    _float_kernel(kernel, self.dtype)
    return TensorMeta(broadcast_shapes(grad_output.shape, self.shape, target.shape), self.dtype)


def mse_loss_output_shape(self, target, reduction=1):
    return _pointwise_loss("mse_cpu", self, target, reduction)


def mse_loss_backward_output_shape(grad_output, self, target, reduction):
    return _pointwise_backward("mse_backward_cpu_out", grad_output, self, target)


def smooth_l1_loss_output_shape(self, target, reduction=1, beta=1.0):
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    return _pointwise_loss("smooth_l1_cpu", self, target, reduction)


def smooth_l1_loss_backward_output_shape(grad_output, self, target, reduction, beta):
    return _pointwise_backward("smooth_l1_backward_cpu_out", grad_output, self, target)


def huber_loss_output_shape(self, target, reduction=1, delta=1.0):
    if delta <= 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")
    return _pointwise_loss("huber_cpu", self, target, reduction)


def huber_loss_backward_output_shape(grad_output, self, target, reduction, delta):
    return _pointwise_backward("huber_backward_cpu_out", grad_output, self, target)


def binary_cross_entropy_output_shape(self, target, weight=None, reduction=1):
    _float_kernel("binary_cross_entropy", self.dtype)
    return TensorMeta(_reduced(broadcast_shapes(self.shape, target.shape), reduction), self.dtype)


def binary_cross_entropy_backward_output_shape(grad_output, self, target, weight=None, reduction=1):
    return _pointwise_backward("binary_cross_entropy_backward", grad_output, self, target)


def binary_cross_entropy_with_logits_output_shape(self, target, weight=None, pos_weight=None, reduction=1):
    _float_kernel("binary_cross_entropy_with_logits", self.dtype)
    shapes = [self.shape, target.shape] + [w.shape for w in (weight, pos_weight) if w is not None]
    return TensorMeta(_reduced(broadcast_shapes(*shapes), reduction), self.dtype)


def soft_margin_loss_output_shape(self, target, reduction=1):
    return _pointwise_loss("soft_margin_loss", self, target, reduction)


def soft_margin_loss_backward_output_shape(grad_output, self, target, reduction):
    return _pointwise_backward("soft_margin_loss_backward", grad_output, self, target)


def _check_margin(self, target, p=1, weight=None):
    # p is a runtime Scalar: its value is only known here when it is a Python number.
    if isinstance(p, (int, float)) and p not in (1, 2):
        raise RuntimeError("only p == 1 and p == 2 supported")
    if self.ndim > 2 or (self.ndim == 2 and self.shape[1] == 0):
        raise RuntimeError(
            f"Expected non-empty vector or matrix with optional 0-dim batch size, but got: {list(self.shape)}"
        )
    if target.dtype != torch.int64:
        raise RuntimeError(f"expected scalar type Long but found {scalar_type_name(target.dtype)}")
    batch = self.shape[0] if self.ndim == 2 else 1
    if target.ndim > 1 or (target.numel() != batch):
        raise RuntimeError(
            f"inconsistent target size, expected {batch} but got {list(target.shape)}"
        )
    classes = self.shape[-1] if self.ndim else 1
    if weight is not None and weight.numel() != classes:
        raise RuntimeError(f"inconsistent weight size, expected {classes} but got {list(weight.shape)}")


def multi_margin_loss_output_shape(self, target, p=1, margin=1, weight=None, reduction=1):
    _check_margin(self, target, p, weight)
    # PyTorch: one loss per sample unless the target is 0-d (a 1-d input is one sample).
    out = target.shape if reduction == 0 and target.ndim else ()
    return TensorMeta(out, self.dtype)


def multi_margin_loss_backward_output_shape(grad_output, self, target, p, margin, weight=None, reduction=1):
    _check_margin(self, target, p, weight)
    return TensorMeta(self.shape, self.dtype)


def _check_multilabel(self, target):
    if self.ndim > 2 or (self.ndim <= 1 and self.numel() == 0) or (self.ndim == 2 and self.shape[1] == 0):
        raise RuntimeError(
            f"Expected non-empty vector or matrix with optional 0-dim batch size, but got: {list(self.shape)}"
        )
    if tuple(target.shape) != tuple(self.shape):
        raise RuntimeError(
            f"inconsistent target size: {list(target.shape)} for input of size: {list(self.shape)}"
        )


def multilabel_margin_loss_forward_output_shape(self, target, reduction):
    _check_multilabel(self, target)
    out = (self.shape[0],) if reduction == 0 and self.ndim == 2 else ()
    return TensorMeta(out, self.dtype), TensorMeta(self.shape, self.dtype)


def multilabel_margin_loss_backward_output_shape(grad_output, self, target, reduction, is_target):
    _check_multilabel(self, target)
    return TensorMeta(self.shape, self.dtype)
