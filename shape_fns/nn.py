"""Shape functions of neural-network ops: softmax, log_softmax, layer norm, embedding
and their backward ops."""

from __future__ import annotations

import torch

from .common import TensorMeta, layer_norm_stats_dtype, normalize_dim, require_kernel_dtype, scalar_type_name


def _softmax_kernel(op, self, dim):
    """PyTorch CPU's kernel of a softmax: its last-dim form where it reduces the last dim."""
    d = normalize_dim(dim, self.ndim)
    return f"{op}_lastdim_kernel_impl" if self.ndim == 0 or d == self.ndim - 1 else f"{op}_kernel_impl"


def _softmax_meta(op, self, dim, half_to_float):
    kernel = _softmax_kernel(op, self, dim)
    if not self.dtype.is_floating_point:
        raise NotImplementedError(f'"{kernel}" not implemented for \'{scalar_type_name(self.dtype)}\'')
    if half_to_float:
        # Only CUDA implements the float16 -> float32 variant (the lowering does too).
        raise RuntimeError("softmax with half to float conversion is not supported on CPU")
    return TensorMeta(self.shape, self.dtype)


def _softmax_output_shape(self, dim, half_to_float):
    return _softmax_meta("softmax", self, dim, half_to_float)


def _safe_softmax_output_shape(self, dim, dtype=None):
    kernel = _softmax_kernel("softmax", self, dim)
    out = dtype if dtype is not None else self.dtype
    if not out.is_floating_point:
        raise NotImplementedError(f'"{kernel}" not implemented for \'{scalar_type_name(out)}\'')
    return TensorMeta(self.shape, out)


def _log_softmax_output_shape(self, dim, half_to_float):
    return _softmax_meta("log_softmax", self, dim, half_to_float)


def _softmax_backward_meta(grad_output, output, dim, input_dtype):
    normalize_dim(dim, grad_output.ndim)
    # CPU keeps grad_output's dtype and lacks the float32-grad-for-float16-input variant.
    if grad_output.dtype is torch.float32 and input_dtype is torch.float16:
        raise RuntimeError("expected scalar type Float but found Half")
    return TensorMeta(grad_output.shape, grad_output.dtype)


def _softmax_backward_data_output_shape(grad_output, output, dim, input_dtype):
    return _softmax_backward_meta(grad_output, output, dim, input_dtype)


def _log_softmax_backward_data_output_shape(grad_output, output, dim, input_dtype):
    return _softmax_backward_meta(grad_output, output, dim, input_dtype)


def _check_layer_norm(input, normalized_shape, weight, bias):
    normalized_shape = tuple(normalized_shape)
    if not normalized_shape:
        raise RuntimeError(
            "Expected normalized_shape to be at least 1-dimensional, i.e., containing at "
            f"least one element, but got normalized_shape = {list(normalized_shape)}"
        )
    for name, param in (("weight", weight), ("bias", bias)):
        if param is not None and param.shape != normalized_shape:
            raise RuntimeError(
                f"Expected {name} to be of same shape as normalized_shape, but got {name} of "
                f"shape {list(param.shape)} and normalized_shape = {list(normalized_shape)}"
            )
    k = len(normalized_shape)
    if input.ndim < k or input.shape[input.ndim - k :] != normalized_shape:
        raise RuntimeError(
            f"Given normalized_shape={list(normalized_shape)}, expected input with shape "
            f"[*, {', '.join(map(str, normalized_shape))}], but got input of size{list(input.shape)}"
        )
    return input.shape[: input.ndim - k] + (1,) * k


def native_layer_norm_output_shape(input, normalized_shape, weight, bias, eps):
    stats_shape = _check_layer_norm(input, normalized_shape, weight, bias)
    require_kernel_dtype("LayerNormKernelImpl", input.dtype, "float")
    params = weight if weight is not None else bias
    stats = TensorMeta(
        stats_shape, layer_norm_stats_dtype(input.dtype, None if params is None else params.dtype)
    )
    return TensorMeta(input.shape, input.dtype), stats, stats


def native_layer_norm_backward_output_shape(
    grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask
):
    _check_layer_norm(input, normalized_shape, weight, bias)
    grad_input = TensorMeta(input.shape, input.dtype) if output_mask[0] else None
    # Without weight (bias) there is no grad_weight (grad_bias): None, as the meta kernel.
    grad_weight = TensorMeta(weight.shape, weight.dtype) if output_mask[1] and weight is not None else None
    grad_bias = TensorMeta(bias.shape, bias.dtype) if output_mask[2] and bias is not None else None
    return grad_input, grad_weight, grad_bias


def _check_indices(indices, position):
    if indices.dtype not in (torch.int64, torch.int32):
        raise RuntimeError(
            f"Expected tensor for argument #{position} 'indices' to have one of the following "
            f"scalar types: Long, Int; but got {indices.dtype} instead"
        )


def embedding_output_shape(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    if weight.ndim != 2:
        raise RuntimeError("'weight' must be 2-D")
    _check_indices(indices, 1)
    return TensorMeta(indices.shape + weight.shape[1:], weight.dtype)


def embedding_dense_backward_output_shape(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq):
    _check_indices(indices, 2)
    return TensorMeta((num_weights, grad_output.shape[-1]), grad_output.dtype)
