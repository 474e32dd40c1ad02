"""Lowerings of upsampling ops (nearest; linear, bilinear, trilinear) and their backward
ops. Source indices and weights are static, computed in NumPy the way PyTorch CPU
computes them (nearest in float32; linear weights in the op's compute type); linear
interpolation is one interpolation matrix per spatial dim. Backward ops are the
adjoints of the forward maps (jax.vjp)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .common import opmath


def _scale(in_size, out_size, scale, dtype):
    if scale is not None and scale > 0:
        return dtype.type(1.0 / scale)
    return dtype.type(in_size) / dtype.type(out_size)


def nearest_indices(in_size, out_size, scale):
    s = _scale(in_size, out_size, scale, np.dtype(np.float32))
    src = np.floor(np.arange(out_size, dtype=np.float32) * s).astype(np.int64)
    return np.minimum(src, in_size - 1)


def _nearest(x, output_size, scales):
    nd = len(output_size)
    for i in range(nd):
        axis = x.ndim - nd + i
        idx = nearest_indices(x.shape[axis], output_size[i], scales[i])
        x = jnp.take(x, jnp.asarray(idx), axis=axis)
    return x


def linear_matrix(in_size, out_size, align_corners, scale, dtype):
    dtype = np.dtype(dtype)
    if align_corners:
        s = dtype.type(in_size - 1) / dtype.type(out_size - 1) if out_size > 1 else dtype.type(0)
        src = s * np.arange(out_size, dtype=dtype)
    else:
        s = _scale(in_size, out_size, scale, dtype)
        src = np.maximum(s * (np.arange(out_size, dtype=dtype) + dtype.type(0.5)) - dtype.type(0.5), dtype.type(0))
    i0 = np.minimum(np.floor(src).astype(np.int64), in_size - 1)
    lam = np.clip(src - i0.astype(dtype), 0, 1).astype(dtype)
    i1 = i0 + (i0 < in_size - 1)
    m = np.zeros((out_size, in_size), dtype)
    rows = np.arange(out_size)
    np.add.at(m, (rows, i0), 1 - lam)
    np.add.at(m, (rows, i1), lam)
    return m


def _linear(x, output_size, align_corners, scales):
    nd = len(output_size)
    dtype = np.float64 if x.dtype == jnp.float64 else np.float32
    x = opmath(x)
    for i in range(nd):
        axis = x.ndim - nd + i
        m = jnp.asarray(linear_matrix(x.shape[axis], output_size[i], align_corners, scales[i], dtype), x.dtype)
        x = jnp.moveaxis(jnp.tensordot(x, m, axes=([axis], [1]), precision=lax.Precision.HIGHEST), -1, axis)
    return x


def _backward(forward, grad_output, input_size):
    g = opmath(grad_output)
    _, vjp = jax.vjp(forward, jnp.zeros(tuple(input_size), g.dtype))
    return vjp(g)[0].astype(grad_output.dtype)


def lower_upsample_nearest1d(self, output_size, scales=None):
    return _nearest(self, tuple(output_size), (scales,))


def lower_upsample_nearest2d(self, output_size, scales_h=None, scales_w=None):
    return _nearest(self, tuple(output_size), (scales_h, scales_w))


def lower_upsample_nearest3d(self, output_size, scales_d=None, scales_h=None, scales_w=None):
    return _nearest(self, tuple(output_size), (scales_d, scales_h, scales_w))


def lower_upsample_nearest1d_backward(grad_output, output_size, input_size, scales=None):
    return _backward(lambda x: _nearest(x, tuple(output_size), (scales,)), grad_output, input_size)


def lower_upsample_nearest2d_backward(grad_output, output_size, input_size, scales_h=None, scales_w=None):
    return _backward(lambda x: _nearest(x, tuple(output_size), (scales_h, scales_w)), grad_output, input_size)


def lower_upsample_nearest3d_backward(
    grad_output, output_size, input_size, scales_d=None, scales_h=None, scales_w=None
):
    return _backward(
        lambda x: _nearest(x, tuple(output_size), (scales_d, scales_h, scales_w)), grad_output, input_size
    )


def lower_upsample_linear1d(self, output_size, align_corners, scales=None):
    return _linear(self, tuple(output_size), align_corners, (scales,)).astype(self.dtype)


def lower_upsample_bilinear2d(self, output_size, align_corners, scales_h=None, scales_w=None):
    return _linear(self, tuple(output_size), align_corners, (scales_h, scales_w)).astype(self.dtype)


def lower_upsample_trilinear3d(self, output_size, align_corners, scales_d=None, scales_h=None, scales_w=None):
    return _linear(self, tuple(output_size), align_corners, (scales_d, scales_h, scales_w)).astype(self.dtype)


def lower_upsample_linear1d_backward(grad_output, output_size, input_size, align_corners, scales=None):
    return _backward(lambda x: _linear(x, tuple(output_size), align_corners, (scales,)), grad_output, input_size)


def lower_upsample_bilinear2d_backward(
    grad_output, output_size, input_size, align_corners, scales_h=None, scales_w=None
):
    return _backward(
        lambda x: _linear(x, tuple(output_size), align_corners, (scales_h, scales_w)), grad_output, input_size
    )


def lower_upsample_trilinear3d_backward(
    grad_output, output_size, input_size, align_corners, scales_d=None, scales_h=None, scales_w=None
):
    return _backward(
        lambda x: _linear(x, tuple(output_size), align_corners, (scales_d, scales_h, scales_w)),
        grad_output,
        input_size,
    )
