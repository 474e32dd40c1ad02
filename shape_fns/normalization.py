"""Shape functions of batch norm and group norm and their backward ops."""

from __future__ import annotations

from .common import TensorMeta, layer_norm_stats_dtype


def _check_channels(input, **params):
    if input.ndim < 2:
        raise RuntimeError(f"running_mean should contain 1 elements not 0 (input of size {list(input.shape)})")
    c = input.shape[1]
    for name, p in params.items():
        if p is not None and p.numel() != c:
            raise RuntimeError(f"{name} should contain {c} elements not {p.numel()}")
    return c


def batch_norm_with_update_output_shape(input, weight, bias, running_mean, running_var, training, momentum, eps):
    """Metadata of lowerings.normalization.batch_norm_with_update (CPU's: empty saved
    statistics in evaluation mode)."""
    c = _check_channels(input, weight=weight, bias=bias, running_mean=running_mean, running_var=running_var)
    if not training and (running_mean is None or running_var is None):
        raise RuntimeError("running_mean and running_var must be defined in evaluation mode")
    if training and input.numel() // max(c, 1) <= 1 and input.numel():
        raise ValueError(f"Expected more than 1 value per channel when training, got input size {list(input.shape)}")
    params = weight if weight is not None else bias
    stats = layer_norm_stats_dtype(input.dtype, None if params is None else params.dtype)
    saved = TensorMeta((c if training else 0,), stats)
    new_mean = TensorMeta(running_mean.shape, running_mean.dtype) if training and running_mean is not None else None
    new_var = TensorMeta(running_var.shape, running_var.dtype) if training and running_var is not None else None
    return TensorMeta(input.shape, input.dtype), saved, saved, new_mean, new_var


def _native_batch_norm_legit_functional_output_shape(
    input, weight, bias, running_mean, running_var, training, momentum, eps
):
    out, mean, invstd, _, _ = batch_norm_with_update_output_shape(
        input, weight, bias, running_mean, running_var, training, momentum, eps
    )
    return (
        out, mean, invstd,
        TensorMeta(running_mean.shape, running_mean.dtype),
        TensorMeta(running_var.shape, running_var.dtype),
    )


def _native_batch_norm_legit_no_training_output_shape(input, weight, bias, running_mean, running_var, momentum, eps):
    return batch_norm_with_update_output_shape(input, weight, bias, running_mean, running_var, False, momentum, eps)[:3]


def _native_batch_norm_legit_no_stats_output_shape(input, weight, bias, training, momentum, eps):
    return batch_norm_with_update_output_shape(input, weight, bias, None, None, True, momentum, eps)[:3]


def native_batch_norm_backward_output_shape(
    grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train, eps, output_mask
):
    c = _check_channels(input, weight=weight)
    if tuple(grad_out.shape) != tuple(input.shape):
        raise RuntimeError(f"Expected grad_out of size {list(input.shape)}, but got {list(grad_out.shape)}")
    param_dtype = weight.dtype if weight is not None else input.dtype
    return (
        TensorMeta(input.shape, input.dtype) if output_mask[0] else None,
        TensorMeta((c,), param_dtype) if output_mask[1] else None,
        TensorMeta((c,), param_dtype) if output_mask[2] else None,
    )


def _check_group_norm(input, weight, bias, N, C, HxW, group):
    if group <= 0 or C % group:
        raise RuntimeError(
            "Expected number of channels in input to be divisible by num_groups, but got input of shape "
            f"{list(input.shape)} and num_groups={group}"
        )
    if input.numel() != N * C * HxW:
        raise RuntimeError(f"Expected input to have {N * C * HxW} elements, got {input.numel()}")
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None and (p.ndim != 1 or p.shape[0] != C):
            raise RuntimeError(
                f"Expected {name} to be a vector of size equal to the number of channels in input, but got {name} of "
                f"shape {list(p.shape)} and input of shape {list(input.shape)}"
            )


def native_group_norm_output_shape(input, weight, bias, N, C, HxW, group, eps):
    _check_group_norm(input, weight, bias, N, C, HxW, group)
    params = weight if weight is not None else bias
    stats = TensorMeta((N, group), layer_norm_stats_dtype(input.dtype, None if params is None else params.dtype))
    return TensorMeta(input.shape, input.dtype), stats, stats


def native_group_norm_backward_output_shape(grad_out, input, mean, rstd, weight, N, C, HxW, group, output_mask):
    _check_group_norm(input, weight, None, N, C, HxW, group)
    param_dtype = weight.dtype if weight is not None else input.dtype
    return (
        TensorMeta(input.shape, input.dtype) if output_mask[0] else None,
        TensorMeta((C,), param_dtype) if output_mask[1] else None,
        TensorMeta((C,), param_dtype) if output_mask[2] else None,
    )


def batch_norm_backward_output_shape(
    grad_out, input, weight, running_mean, running_var, save_mean, save_var, update, eps, output_mask, reserve
):
    return native_batch_norm_backward_output_shape(
        grad_out, input, weight, running_mean, running_var, save_mean, save_var, update, eps, output_mask
    )
