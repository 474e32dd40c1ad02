"""Lowerings of batch norm and group norm and their backward ops. Statistics are
computed in float32 for reduced-precision inputs, as PyTorch CPU does; they keep the
input's dtype unless the parameters are float32 ("mixed type"), like layer norm."""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from ..shape_fns.common import layer_norm_stats_dtype, to_numpy_dtype, to_torch_dtype
from .common import opmath


def _stats_dtype(input, params):
    params = to_torch_dtype(params.dtype) if params is not None else None
    return to_numpy_dtype(layer_norm_stats_dtype(to_torch_dtype(input.dtype), params))


def _per_channel(v, ndim):
    return v.reshape((1, -1) + (1,) * (ndim - 2))


def lower_batch_norm_with_update(input, weight, bias, running_mean, running_var, training, momentum, eps):
    """(out, save_mean, save_invstd, new_running_mean, new_running_var): the running
    statistics after a training step (None where not given); in evaluation mode the
    saved statistics are empty, as on PyTorch CPU."""
    x = opmath(input)
    axes = (0,) + tuple(range(2, input.ndim))
    stats = _stats_dtype(input, weight if weight is not None else bias)
    new_mean = new_var = None
    if training:
        mean = jnp.mean(x, axis=axes)
        var = jnp.mean(jnp.square(x - _per_channel(mean, x.ndim)), axis=axes)
        invstd = lax.rsqrt(var + eps)
        n = x.size // x.shape[1] if x.shape[1] else 0
        if running_mean is not None:
            rm = opmath(running_mean)
            new_mean = (momentum * mean + (1 - momentum) * rm).astype(running_mean.dtype)
        if running_var is not None:
            unbiased = var * (n / (n - 1)) if n > 1 else var * jnp.nan
            rv = opmath(running_var)
            new_var = (momentum * unbiased + (1 - momentum) * rv).astype(running_var.dtype)
        save_mean, save_invstd = mean.astype(stats), invstd.astype(stats)
    else:
        mean = opmath(running_mean)
        invstd = lax.rsqrt(opmath(running_var) + eps)
        save_mean = save_invstd = jnp.zeros((0,), stats)
    out = (x - _per_channel(mean, x.ndim)) * _per_channel(invstd, x.ndim)
    if weight is not None:
        out = out * _per_channel(opmath(weight), x.ndim)
    if bias is not None:
        out = out + _per_channel(opmath(bias), x.ndim)
    return out.astype(input.dtype), save_mean, save_invstd, new_mean, new_var


def lower__native_batch_norm_legit_functional(input, weight, bias, running_mean, running_var, training, momentum, eps):
    out, mean, invstd, new_mean, new_var = lower_batch_norm_with_update(
        input, weight, bias, running_mean, running_var, training, momentum, eps
    )
    if not training:
        # The functional form always returns the running statistics, unchanged in eval.
        new_mean, new_var = running_mean, running_var
    return out, mean, invstd, new_mean, new_var


def lower__native_batch_norm_legit_no_training(input, weight, bias, running_mean, running_var, momentum, eps):
    return lower_batch_norm_with_update(input, weight, bias, running_mean, running_var, False, momentum, eps)[:3]


def lower__native_batch_norm_legit_no_stats(input, weight, bias, training, momentum, eps):
    return lower_batch_norm_with_update(input, weight, bias, None, None, True, momentum, eps)[:3]


def lower_native_batch_norm_backward(
    grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train, eps, output_mask
):
    x, g = opmath(input), opmath(grad_out)
    nd = x.ndim
    axes = (0,) + tuple(range(2, nd))
    if train:
        mean, invstd = opmath(save_mean), opmath(save_invstd)
    else:
        mean, invstd = opmath(running_mean), lax.rsqrt(opmath(running_var) + eps)
    x_hat = (x - _per_channel(mean, nd)) * _per_channel(invstd, nd)
    w = opmath(weight) if weight is not None else jnp.ones((x.shape[1],), x.dtype)
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        scale = _per_channel(w * invstd, nd)
        if train:
            gm = jnp.mean(g, axis=axes, keepdims=True)
            gxm = jnp.mean(g * x_hat, axis=axes, keepdims=True)
            grad_input = scale * (g - gm - x_hat * gxm)
        else:
            grad_input = scale * g
        grad_input = grad_input.astype(input.dtype)
    param_dtype = weight.dtype if weight is not None else input.dtype
    if output_mask[1]:
        grad_weight = jnp.sum(g * x_hat, axis=axes).astype(param_dtype)
    if output_mask[2]:
        grad_bias = jnp.sum(g, axis=axes).astype(param_dtype)
    return grad_input, grad_weight, grad_bias


def _group_norm(x, weight, bias, N, C, HxW, group, eps):
    xg = x.reshape(N, group, (C // group) * HxW)
    mean = jnp.mean(xg, axis=2)
    rstd = lax.rsqrt(jnp.mean(jnp.square(xg - mean[:, :, None]), axis=2) + eps)
    out = ((xg - mean[:, :, None]) * rstd[:, :, None]).reshape(N, C, HxW)
    if weight is not None:
        out = out * weight.reshape(1, C, 1)
    if bias is not None:
        out = out + bias.reshape(1, C, 1)
    return out.reshape(x.shape), mean, rstd


def lower_native_group_norm(input, weight, bias, N, C, HxW, group, eps):
    out, mean, rstd = _group_norm(opmath(input), opmath(weight), opmath(bias), N, C, HxW, group, eps)
    stats = _stats_dtype(input, weight if weight is not None else bias)
    return out.astype(input.dtype), mean.astype(stats), rstd.astype(stats)


def lower_native_group_norm_backward(grad_out, input, mean, rstd, weight, N, C, HxW, group, output_mask):
    x, g = opmath(input), opmath(grad_out)
    m, r = opmath(mean)[:, :, None], opmath(rstd)[:, :, None]
    x_hat = ((x.reshape(N, group, (C // group) * HxW) - m) * r).reshape(N, C, HxW)
    g3 = g.reshape(N, C, HxW)
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        dx_hat = g3 if weight is None else g3 * opmath(weight).reshape(1, C, 1)
        dx_hat, xh = dx_hat.reshape(N, group, (C // group) * HxW), x_hat.reshape(N, group, (C // group) * HxW)
        gx = r * (dx_hat - jnp.mean(dx_hat, axis=2, keepdims=True) - xh * jnp.mean(dx_hat * xh, axis=2, keepdims=True))
        grad_input = gx.reshape(input.shape).astype(input.dtype)
    param_dtype = weight.dtype if weight is not None else input.dtype
    if output_mask[1]:
        grad_weight = jnp.sum(g3 * x_hat, axis=(0, 2)).astype(param_dtype)
    if output_mask[2]:
        grad_bias = jnp.sum(g3, axis=(0, 2)).astype(param_dtype)
    return grad_input, grad_weight, grad_bias


def lower_batch_norm_backward(
    grad_out, input, weight, running_mean, running_var, save_mean, save_var, update, eps, output_mask, reserve
):
    # The backward of _batch_norm_with_update (update=True) and _batch_norm_no_update;
    # `reserve` is cuDNN's workspace, empty elsewhere.
    return lower_native_batch_norm_backward(
        grad_out, input, weight, running_mean, running_var, save_mean, save_var, update, eps, output_mask
    )
