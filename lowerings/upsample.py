"""Lowerings of upsampling ops (nearest, nearest-exact; linear, bilinear, trilinear,
bicubic, antialiased bilinear) and their backward ops. Source indices and weights are
static, computed in NumPy the way PyTorch CPU computes them (nearest in float32; other
weights in the op's compute type); every interpolating mode is one interpolation matrix
per spatial dim. Backward ops are the adjoints of the forward maps (jax.vjp)."""

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


def nearest_exact_indices(in_size, out_size, scale):
    s = _scale(in_size, out_size, scale, np.dtype(np.float32))
    src = np.floor((np.arange(out_size, dtype=np.float32) + np.float32(0.5)) * s).astype(np.int64)
    return np.minimum(src, in_size - 1)


def _nearest_exact(x, output_size, scales):
    nd = len(output_size)
    for i in range(nd):
        axis = x.ndim - nd + i
        idx = nearest_exact_indices(x.shape[axis], output_size[i], scales[i])
        x = jnp.take(x, jnp.asarray(idx), axis=axis)
    return x


def lower__upsample_nearest_exact1d(self, output_size, scales=None):
    return _nearest_exact(self, tuple(output_size), (scales,))


def lower__upsample_nearest_exact2d(self, output_size, scales_h=None, scales_w=None):
    return _nearest_exact(self, tuple(output_size), (scales_h, scales_w))


def lower__upsample_nearest_exact3d(self, output_size, scales_d=None, scales_h=None, scales_w=None):
    return _nearest_exact(self, tuple(output_size), (scales_d, scales_h, scales_w))


def lower__upsample_nearest_exact1d_backward(grad_output, output_size, input_size, scales=None):
    return _backward(lambda x: _nearest_exact(x, tuple(output_size), (scales,)), grad_output, input_size)


def lower__upsample_nearest_exact2d_backward(grad_output, output_size, input_size, scales_h=None, scales_w=None):
    return _backward(lambda x: _nearest_exact(x, tuple(output_size), (scales_h, scales_w)), grad_output, input_size)


def lower__upsample_nearest_exact3d_backward(
    grad_output, output_size, input_size, scales_d=None, scales_h=None, scales_w=None
):
    return _backward(
        lambda x: _nearest_exact(x, tuple(output_size), (scales_d, scales_h, scales_w)), grad_output, input_size
    )


_CUBIC_A = -0.75


def _cubic_coefficients(t):
    """PyTorch's cubic convolution weights of the taps at -1, 0, 1, 2 for offset t."""
    a = t.dtype.type(_CUBIC_A)

    def near(x):
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    one = t.dtype.type(1)
    rest = one - t
    return np.stack([far(t + one), near(t), near(rest), far(rest + one)], axis=1)


def bicubic_matrix(in_size, out_size, align_corners, scale, dtype):
    dtype = np.dtype(dtype)
    dst = np.arange(out_size, dtype=dtype)
    if align_corners:
        s = dtype.type(in_size - 1) / dtype.type(out_size - 1) if out_size > 1 else dtype.type(0)
        src = s * dst
    else:
        src = _scale(in_size, out_size, scale, dtype) * (dst + dtype.type(0.5)) - dtype.type(0.5)
    i0 = np.minimum(np.floor(src).astype(np.int64), in_size - 1)
    t = np.clip(src - i0.astype(dtype), 0, 1).astype(dtype)
    coeffs = _cubic_coefficients(t)
    m = np.zeros((out_size, in_size), dtype)
    rows = np.arange(out_size)
    for k in range(4):
        np.add.at(m, (rows, np.clip(i0 - 1 + k, 0, in_size - 1)), coeffs[:, k])
    return m


def _triangle(x):
    return np.maximum(1 - np.abs(x), 0)


def _keys_cubic(x):
    # The antialiasing cubic filter uses a = -0.5 (as PIL does), not upsampling's -0.75.
    a = x.dtype.type(-0.5)
    x = np.abs(x)
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return np.where(x < 1, near, np.where(x < 2, far, 0)).astype(x.dtype)


def aa_matrix(in_size, out_size, align_corners, scale, dtype, half_width, filt):
    """Antialiased interpolation weights (the filter widened by the downscaling factor),
    normalized per output, as ATen's separable antialiasing kernel builds them."""
    dtype = np.dtype(dtype)
    if align_corners:
        s = dtype.type(in_size - 1) / dtype.type(out_size - 1) if out_size > 1 else dtype.type(0)
    else:
        s = _scale(in_size, out_size, scale, dtype)
    support = dtype.type(half_width) * s if s >= 1 else dtype.type(half_width)
    invscale = dtype.type(1) / s if s >= 1 else dtype.type(1)
    max_taps = int(np.ceil(support)) * 2 + 1
    m = np.zeros((out_size, in_size), dtype)
    for i in range(out_size):
        center = s * dtype.type(i + 0.5)
        lo = max(int(center - support + dtype.type(0.5)), 0)
        hi = lo + min(max(min(int(center + support + dtype.type(0.5)), in_size) - lo, 0), max_taps)
        j = np.arange(lo, hi)
        w = filt(((j.astype(dtype) - center + dtype.type(0.5)) * invscale).astype(dtype)).astype(dtype)
        total = w.sum(dtype=dtype)
        if total != 0:
            w = w / total
        m[i, lo:hi] = w
    return m


def _separable(x, output_size, make):
    nd = len(output_size)
    dtype = np.float64 if x.dtype == jnp.float64 else np.float32
    x = x.astype(dtype) if not jnp.issubdtype(x.dtype, jnp.floating) else opmath(x)
    for i in reversed(range(nd)):  # the last dim is ATen's innermost sum
        axis = x.ndim - nd + i
        m = jnp.asarray(make(x.shape[axis], output_size[i], i, dtype), x.dtype)
        x = jnp.moveaxis(jnp.tensordot(x, m, axes=([axis], [1]), precision=lax.Precision.HIGHEST), -1, axis)
    return x


def _to_input_dtype(y, dtype):
    if jnp.issubdtype(dtype, jnp.integer):
        info = jnp.iinfo(dtype)
        return jnp.clip(jnp.round(y), info.min, info.max).astype(dtype)
    return y.astype(dtype)


def _bicubic(x, output_size, align_corners, scales):
    return _separable(x, output_size, lambda n, o, i, dt: bicubic_matrix(n, o, align_corners, scales[i], dt))


def _antialiased(x, output_size, align_corners, scales, half_width, filt):
    nd = len(output_size)
    dtype = np.float64 if x.dtype == jnp.float64 else np.float32
    x = x.astype(dtype) if not jnp.issubdtype(x.dtype, jnp.floating) else opmath(x)
    # ATen's separable kernel runs the last dim first and skips a dim whose size stays.
    for i in reversed(range(nd)):
        axis = x.ndim - nd + i
        if x.shape[axis] == output_size[i]:
            continue
        m = aa_matrix(x.shape[axis], output_size[i], align_corners, scales[i], dtype, half_width, filt)
        x = jnp.moveaxis(
            jnp.tensordot(x, jnp.asarray(m, x.dtype), axes=([axis], [1]), precision=lax.Precision.HIGHEST), -1, axis
        )
    return x


def _bilinear_aa(x, output_size, align_corners, scales):
    return _antialiased(x, output_size, align_corners, scales, 1, _triangle)


def _bicubic_aa(x, output_size, align_corners, scales):
    return _antialiased(x, output_size, align_corners, scales, 2, _keys_cubic)


def lower_upsample_bicubic2d(self, output_size, align_corners, scales_h=None, scales_w=None):
    return _to_input_dtype(_bicubic(self, tuple(output_size), align_corners, (scales_h, scales_w)), self.dtype)


def lower_upsample_bicubic2d_backward(
    grad_output, output_size, input_size, align_corners, scales_h=None, scales_w=None
):
    return _backward(
        lambda x: _bicubic(x, tuple(output_size), align_corners, (scales_h, scales_w)), grad_output, input_size
    )


def lower__upsample_bilinear2d_aa(self, output_size, align_corners, scales_h=None, scales_w=None):
    return _to_input_dtype(_bilinear_aa(self, tuple(output_size), align_corners, (scales_h, scales_w)), self.dtype)


def lower__upsample_bilinear2d_aa_backward(
    grad_output, output_size, input_size, align_corners, scales_h=None, scales_w=None
):
    return _backward(
        lambda x: _bilinear_aa(x, tuple(output_size), align_corners, (scales_h, scales_w)), grad_output, input_size
    )


def lower__upsample_bicubic2d_aa(self, output_size, align_corners, scales_h=None, scales_w=None):
    return _to_input_dtype(_bicubic_aa(self, tuple(output_size), align_corners, (scales_h, scales_w)), self.dtype)


def lower__upsample_bicubic2d_aa_backward(
    grad_output, output_size, input_size, align_corners, scales_h=None, scales_w=None
):
    return _backward(
        lambda x: _bicubic_aa(x, tuple(output_size), align_corners, (scales_h, scales_w)), grad_output, input_size
    )
