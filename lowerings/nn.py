"""Lowerings of neural-network ops: softmax, log_softmax, layer norm, embedding and
their backward ops. Reduced-precision inputs compute in float32, as PyTorch CPU does."""

from __future__ import annotations

import math

import jax.numpy as jnp
from jax import lax

from ..shape_fns.common import layer_norm_stats_dtype, reduction_dims, to_numpy_dtype, to_torch_dtype
from .common import opmath


def _softmax_axes(dim, ndim):
    return reduction_dims(dim, ndim)  # () for a 0-d tensor, which PyTorch allows


def _max(x, axes):
    # -inf as the identity, so a softmax over a zero-size dim gives an empty result.
    return jnp.max(x, axis=axes, keepdims=True, initial=-jnp.inf)


def lower__softmax(self, dim, half_to_float):
    out = jnp.float32 if half_to_float else self.dtype
    axes = _softmax_axes(dim, self.ndim)
    x = opmath(self)
    e = jnp.exp(x - _max(x, axes))
    return (e / jnp.sum(e, axis=axes, keepdims=True)).astype(out)


def lower__safe_softmax(self, dim, dtype=None):
    # softmax, except that a slice that is entirely -inf gives zeros instead of NaN.
    out = to_numpy_dtype(dtype) if dtype is not None else self.dtype
    axes = _softmax_axes(dim, self.ndim)
    x = opmath(self)
    e = jnp.exp(x - _max(x, axes))
    y = e / jnp.sum(e, axis=axes, keepdims=True)
    all_masked = jnp.all(x == -jnp.inf, axis=axes, keepdims=True)
    return jnp.where(all_masked, 0, y).astype(out)


def lower__log_softmax(self, dim, half_to_float):
    out = jnp.float32 if half_to_float else self.dtype
    axes = _softmax_axes(dim, self.ndim)
    x = opmath(self)
    shifted = x - _max(x, axes)
    return (shifted - jnp.log(jnp.sum(jnp.exp(shifted), axis=axes, keepdims=True))).astype(out)


def lower__softmax_backward_data(grad_output, output, dim, input_dtype):
    # PyTorch CPU returns grad_output's dtype (input_dtype only matters on CUDA).
    axes = _softmax_axes(dim, grad_output.ndim)
    g, y = opmath(grad_output), opmath(output)
    return (y * (g - jnp.sum(g * y, axis=axes, keepdims=True))).astype(grad_output.dtype)


def lower__log_softmax_backward_data(grad_output, output, dim, input_dtype):
    axes = _softmax_axes(dim, grad_output.ndim)
    g, y = opmath(grad_output), opmath(output)
    return (g - jnp.exp(y) * jnp.sum(g, axis=axes, keepdims=True)).astype(grad_output.dtype)


def _norm_axes(input, normalized_shape):
    return tuple(range(input.ndim - len(normalized_shape), input.ndim))


def lower_native_layer_norm(input, normalized_shape, weight, bias, eps):
    axes = _norm_axes(input, normalized_shape)
    x = opmath(input)
    # keepdims: mean and rstd have the leading dims followed by 1s, as on PyTorch CPU.
    mean = jnp.mean(x, axis=axes, keepdims=True)
    rstd = lax.rsqrt(jnp.mean(jnp.square(x - mean), axis=axes, keepdims=True) + eps)
    out = (x - mean) * rstd
    if weight is not None:
        out = out * opmath(weight)
    if bias is not None:
        out = out + opmath(bias)
    params = weight if weight is not None else bias
    stats = layer_norm_stats_dtype(
        to_torch_dtype(input.dtype), None if params is None else to_torch_dtype(params.dtype)
    )
    stats = to_numpy_dtype(stats)
    return out.astype(input.dtype), mean.astype(stats), rstd.astype(stats)


def lower_native_layer_norm_backward(
    grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask
):
    axes = _norm_axes(input, normalized_shape)
    batch_axes = tuple(range(input.ndim - len(normalized_shape)))
    g, rstd = opmath(grad_out), opmath(rstd)
    x_hat = (opmath(input) - opmath(mean)) * rstd
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        n = math.prod(normalized_shape)
        g_hat = g if weight is None else g * opmath(weight)
        grad_input = (rstd / n) * (
            n * g_hat
            - jnp.sum(g_hat, axis=axes, keepdims=True)
            - x_hat * jnp.sum(g_hat * x_hat, axis=axes, keepdims=True)
        )
        grad_input = grad_input.astype(input.dtype)
    # Without weight (or bias) there is nothing to differentiate: None, as PyTorch's meta kernel.
    if output_mask[1] and weight is not None:
        grad_weight = jnp.sum(g * x_hat, axis=batch_axes).astype(weight.dtype)
    if output_mask[2] and bias is not None:
        grad_bias = jnp.sum(g, axis=batch_axes).astype(bias.dtype)
    return grad_input, grad_weight, grad_bias


def lower_embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    # PyTorch raises IndexError for an index outside [0, num_weights); a traced gather
    # cannot raise, so such rows read as fill values (NaN for floats) instead of
    # silently clamping. Negative indices wrap as in NumPy.
    return jnp.take(weight, indices, axis=0, mode="fill")


def lower_embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq):
    idx = indices.reshape(-1)
    grad = opmath(grad_output).reshape(idx.shape[0], grad_output.shape[-1])
    # Rows looked up at padding_idx get no gradient; -1 means no padding and matches nothing.
    grad = jnp.where((idx != padding_idx)[:, None], grad, jnp.zeros((), grad.dtype))
    if scale_grad_by_freq:
        counts = jnp.zeros((num_weights,), grad.dtype).at[idx].add(1)
        grad = grad / counts[idx][:, None]
    summed = jnp.zeros((num_weights, grad.shape[1]), grad.dtype).at[idx].add(grad)
    return summed.astype(grad_output.dtype)
