"""Lowerings of pooling ops and their backward ops.

Windows are static. Max pooling reads each kernel tap as one strided slice of the
padded input and keeps a running maximum and index, which XLA fuses into one loop;
windows of more than MAX_UNROLLED_TAPS taps, and adaptive pooling's uneven windows, are
gathered with index tables built in NumPy at trace time (for every output position,
the flat in-plane index of every tap and whether it falls inside the input). Max
pooling returns PyTorch's indices (flat per plane, the first maximum on ties, the last
NaN if any), and its backward op scatters the gradient through them (or places it, for
windows that tile the input: Note [Max pooling backward over tiled windows]). Average
pooling divides by PyTorch's divisor table; adaptive average pooling is a product of
averaging matrices.
"""

from __future__ import annotations

import functools
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..shape_fns.pooling import pool_output_size, pool_params
from .common import opmath


def _taps(size, k, s, p, d, out):
    """(out, k) input coordinates of each tap, and whether each is inside the input."""
    coords = np.arange(out)[:, None] * s - p + np.arange(k)[None, :] * d
    return coords, (coords >= 0) & (coords < size)


def _combine(spatial, per_dim):
    """Flat plane indices (O, K) and validity from per-dim (o_i, k_i) coordinate tables."""
    nd = len(spatial)
    idx = np.zeros((1,) * (2 * nd), np.int64)
    valid = np.ones((1,) * (2 * nd), bool)
    stride = 1
    for i in reversed(range(nd)):
        coords, ok = per_dim[i]
        shape = [1] * (2 * nd)
        shape[i], shape[nd + i] = coords.shape
        idx = idx + np.clip(coords, 0, spatial[i] - 1).reshape(shape) * stride
        valid = valid & ok.reshape(shape)
        stride *= spatial[i]
    outs = tuple(c.shape[0] for c, _ in per_dim)
    ks = tuple(c.shape[1] for c, _ in per_dim)
    full = outs + ks
    idx = np.broadcast_to(idx, full).reshape(math.prod(outs), math.prod(ks))
    valid = np.broadcast_to(valid, full).reshape(math.prod(outs), math.prod(ks))
    return idx, valid, outs


def _lowest(dtype):
    if jnp.issubdtype(dtype, jnp.floating):
        return -jnp.inf
    return jnp.iinfo(dtype).min


def _max_windows(x, nd, idx, valid, outs):
    spatial = x.shape[-nd:]
    planes = x.reshape((-1, math.prod(spatial)))
    vals = planes[:, idx]  # (B, O, K)
    vals = jnp.where(valid, vals, jnp.asarray(_lowest(x.dtype), x.dtype))
    arg = jnp.argmax(vals, axis=2)
    if jnp.issubdtype(x.dtype, jnp.floating):
        # PyTorch keeps the last NaN of a window (a NaN always replaces the running max).
        nan = jnp.isnan(vals) & valid
        last_nan = nan.shape[2] - 1 - jnp.argmax(jnp.flip(nan, axis=2), axis=2)
        arg = jnp.where(jnp.any(nan, axis=2), last_nan, arg)
    out = jnp.take_along_axis(vals, arg[:, :, None], axis=2)[:, :, 0]
    indices = jnp.asarray(idx)[jnp.arange(idx.shape[0])[None, :], arg]
    shape = x.shape[:-nd] + outs
    return out.reshape(shape), indices.reshape(shape).astype(jnp.int64)


# Above this many taps per window, one gather beats unrolling a slice per tap.
MAX_UNROLLED_TAPS = 64


def _window_taps(k, d):
    """Every tap of a window, in PyTorch's visiting order (row-major), as per-dim offsets."""
    return list(itertools.product(*[[i * dd for i in range(kk)] for kk, dd in zip(k, d)]))


def _tap_slices(x, nd, k, s, p, d, outs, fill):
    """For every tap, the (..., *outs) input values it sees, as a strided slice of the
    input padded with `fill`: elementwise work XLA fuses, where gathers are slow."""
    lead = x.ndim - nd
    hi = [
        max(0, (o - 1) * ss + (kk - 1) * dd + 1 - (n + pp))
        for o, ss, kk, dd, n, pp in zip(outs, s, k, d, x.shape[-nd:], p)
    ]
    padded = lax.pad(x, jnp.asarray(fill, x.dtype), [(0, 0, 0)] * lead + [(pp, h, 0) for pp, h in zip(p, hi)])
    for offsets in _window_taps(k, d):
        start = (0,) * lead + offsets
        limit = x.shape[:lead] + tuple(off + (o - 1) * ss + 1 for off, o, ss in zip(offsets, outs, s))
        yield lax.slice(padded, start, limit, (1,) * lead + tuple(s))


def _max_pool(self, nd, kernel_size, stride, padding, dilation, ceil_mode):
    k, s, p, d = pool_params(nd, kernel_size, stride, padding, dilation)
    spatial = self.shape[-nd:]
    per_dim = [
        _taps(spatial[i], k[i], s[i], p[i], d[i], pool_output_size(spatial[i], k[i], s[i], p[i], d[i], ceil_mode))
        for i in range(nd)
    ]
    idx, valid, outs = _combine(spatial, per_dim)
    if math.prod(k) > MAX_UNROLLED_TAPS:
        return _max_windows(self, nd, idx, valid, outs)
    # PyTorch's loop: start from the first tap inside the input with -inf, and take a
    # tap when it is greater or NaN (so ties keep the first maximum, NaNs the last).
    # Padding taps read the lowest value and are never taken.
    lowest = _lowest(self.dtype)
    best = jnp.full(self.shape[:-nd] + outs, lowest, self.dtype)
    index = jnp.asarray(idx[np.arange(len(idx)), valid.argmax(axis=1)].reshape(outs))
    for t, value in enumerate(_tap_slices(self, nd, k, s, p, d, outs, lowest)):
        take = value > best
        if jnp.issubdtype(self.dtype, jnp.floating):
            take = take | jnp.isnan(value)
        best = jnp.where(take, value, best)
        index = jnp.where(take, jnp.asarray(idx[:, t].reshape(outs)), index)
    return best, index.astype(jnp.int64)


def lower_max_pool2d_with_indices(self, kernel_size, stride=(), padding=(0, 0), dilation=(1, 1), ceil_mode=False):
    return _max_pool(self, 2, kernel_size, stride, padding, dilation, ceil_mode)


def lower_max_pool3d_with_indices(self, kernel_size, stride=(), padding=(0, 0, 0), dilation=(1, 1, 1), ceil_mode=False):
    return _max_pool(self, 3, kernel_size, stride, padding, dilation, ceil_mode)


def _scatter_back(grad_output, self, indices, nd):
    # Indices are data: one outside the plane is dropped (PyTorch raises).
    plane = math.prod(self.shape[-nd:])
    g = opmath(grad_output).reshape((-1, math.prod(grad_output.shape[-nd:])))
    idx = indices.reshape(g.shape)
    rows = jnp.arange(g.shape[0])[:, None]
    out = jnp.zeros((g.shape[0], plane), g.dtype).at[rows, idx].add(g, mode="drop")
    return out.reshape(self.shape).astype(grad_output.dtype)


# Note [Max pooling backward over tiled windows]
# XLA CPU runs a scatter one update at a time. When the windows tile the input (kernel
# equal to stride, no padding, no dilation: MaxPool2d(2)), each input element lies in at
# most one window, and the gradient is the output gradient placed at each window's
# argmax tap: one select per tap, the taps interleaved with the windows by a transpose
# and reshape, no scatter. Indices are data: a conditional takes that form when every
# index is a tap of its own window inside the input (always so for indices from the
# forward), the scatter otherwise. 2x2 windows over (16, 32, 32, 32): 293 against 480
# us; over (8, 64, 112, 112): 2.3 against 3.4 ms (pure JAX; computing the select form
# before the conditional instead of in its branch took 1.7x as long). Overlapping
# windows (3x3, stride 2) keep the scatter: placing their taps took 1.6x its time.


def _tiling_kernel(self, nd, kernel_size, stride, padding, dilation):
    """The kernel size when the windows tile the input (kernel equal to stride, no
    padding, no dilation), else None."""
    k, s, p, d = pool_params(nd, kernel_size, stride, padding, dilation)
    tiles = k == s and not any(p) and all(x == 1 for x in d) and math.prod(self.shape[-nd:]) < 2**31
    return k if tiles else None


def _window_hits(indices, spatial, outs, k):
    """Per tap of the tiled windows (in row-major tap order): whether each output's
    index is that tap of its own window, inside the input (a window past the input's
    end, in ceil_mode, has taps outside it)."""
    plane_strides = [math.prod(spatial[i + 1:]) for i in range(len(k))]
    firsts = np.meshgrid(*(np.arange(o) * ki for o, ki in zip(outs, k)), indexing="ij")  # each window's first tap
    delta = indices.astype(jnp.int32) - jnp.asarray(sum(f * st for f, st in zip(firsts, plane_strides)), jnp.int32)
    hits = []
    for tap in itertools.product(*(range(ki) for ki in k)):
        inside = np.logical_and.reduce([f + t < size for f, t, size in zip(firsts, tap, spatial)])
        hits.append((delta == sum(t * st for t, st in zip(tap, plane_strides))) & inside)
    return hits


def _tiled_windows_back(grad_output, self, indices, nd, k):
    spatial, outs = self.shape[-nd:], grad_output.shape[-nd:]
    lead = grad_output.shape[:-nd]
    g = opmath(grad_output)
    picked = [jnp.where(hit, g, jnp.zeros((), g.dtype)) for hit in _window_hits(indices, spatial, outs, k)]
    taps = jnp.stack(picked, axis=-1).reshape(lead + outs + tuple(k))
    n = len(lead)
    order = list(range(n)) + [j for i in range(nd) for j in (n + i, n + nd + i)]
    placed = taps.transpose(order).reshape(lead + tuple(o * ki for o, ki in zip(outs, k)))
    placed = placed[(Ellipsis,) + tuple(slice(0, size) for size in spatial)]  # ceil_mode's last windows
    placed = jnp.pad(placed, [(0, 0)] * n + [(0, size - got) for size, got in zip(spatial, placed.shape[n:])])
    return placed.astype(grad_output.dtype)


def _max_pool_backward(grad_output, self, indices, nd, kernel_size, stride, padding, dilation):
    k = _tiling_kernel(self, nd, kernel_size, stride, padding, dilation)
    if k is None or 0 in grad_output.shape:
        return _scatter_back(grad_output, self, indices, nd)
    hits = _window_hits(indices, self.shape[-nd:], grad_output.shape[-nd:], k)
    every_index_found = jnp.all(functools.reduce(jnp.logical_or, hits))
    return lax.cond(every_index_found, lambda: _tiled_windows_back(grad_output, self, indices, nd, k),
                    lambda: _scatter_back(grad_output, self, indices, nd))


def lower_max_pool2d_with_indices_backward(
    grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices
):
    return _max_pool_backward(grad_output, self, indices, 2, kernel_size, stride, padding, dilation)


def lower_max_pool3d_with_indices_backward(
    grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices
):
    return _max_pool_backward(grad_output, self, indices, 3, kernel_size, stride, padding, dilation)


def _avg_pool(self, nd, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    k, s, p, _ = pool_params(nd, kernel_size, stride, padding)
    spatial = self.shape[-nd:]
    per_dim, divisor = [], np.ones((), np.int64)
    for i in range(nd):
        out = pool_output_size(spatial[i], k[i], s[i], p[i], 1, ceil_mode)
        per_dim.append(_taps(spatial[i], k[i], s[i], p[i], 1, out))
        start = np.arange(out) * s[i] - p[i]
        end = np.minimum(start + k[i], spatial[i] + p[i])
        size = end - start if count_include_pad else np.minimum(end, spatial[i]) - np.maximum(start, 0)
        divisor = np.multiply.outer(divisor, size)
    idx, valid, outs = _combine(spatial, per_dim)
    if divisor_override is not None:
        divisor = np.full(outs, divisor_override, np.int64)
    x = opmath(self)
    planes = x.reshape((-1, math.prod(spatial)))
    total = jnp.sum(jnp.where(valid, planes[:, idx], jnp.zeros((), x.dtype)), axis=2)
    divisor = divisor.reshape(1, -1)
    if jnp.issubdtype(x.dtype, jnp.integer):
        out = lax.div(total, jnp.asarray(divisor, x.dtype))  # C++ integer division truncates
    else:
        out = total / jnp.asarray(divisor, x.dtype)
    return out.reshape(self.shape[:-nd] + outs).astype(self.dtype)


def _avg_pool_backward(grad_output, self, nd, *params):
    x = opmath(self)
    _, vjp = jax.vjp(lambda x: _avg_pool(x, nd, *params), x)
    return vjp(opmath(grad_output).astype(x.dtype))[0].astype(self.dtype)


def lower_avg_pool2d(
    self, kernel_size, stride=(), padding=(0, 0), ceil_mode=False, count_include_pad=True, divisor_override=None
):
    return _avg_pool(self, 2, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


def lower_avg_pool3d(
    self, kernel_size, stride=(), padding=(0, 0, 0), ceil_mode=False, count_include_pad=True, divisor_override=None
):
    return _avg_pool(self, 3, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


def lower_avg_pool2d_backward(
    grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override
):
    return _avg_pool_backward(
        grad_output, self, 2, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override
    )


def lower_avg_pool3d_backward(
    grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override
):
    return _avg_pool_backward(
        grad_output, self, 3, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override
    )


def _adaptive_bounds(size, out):
    o = np.arange(out)
    return (o * size) // out, -((-(o + 1) * size) // out)  # floor and ceil


def _averaging_matrix(size, out):
    start, end = _adaptive_bounds(size, out)
    cols = np.arange(size)[None, :]
    inside = (cols >= start[:, None]) & (cols < end[:, None])
    return inside / (end - start)[:, None]


def _adaptive_avg_pool(self, nd, output_size):
    output_size = tuple(output_size) * (nd if len(output_size) == 1 else 1)
    x = opmath(self)
    for i in range(nd):
        axis = x.ndim - nd + i
        m = jnp.asarray(_averaging_matrix(self.shape[axis], output_size[i]), x.dtype)
        x = jnp.moveaxis(jnp.tensordot(x, m, axes=([axis], [1]), precision=lax.Precision.HIGHEST), -1, axis)
    return x.astype(self.dtype)


def lower__adaptive_avg_pool2d(self, output_size):
    return _adaptive_avg_pool(self, 2, output_size)


def lower__adaptive_avg_pool3d(self, output_size):
    return _adaptive_avg_pool(self, 3, output_size)


def _adaptive_avg_pool_backward(grad_output, self, nd):
    x = opmath(self)
    _, vjp = jax.vjp(lambda x: _adaptive_avg_pool(x, nd, grad_output.shape[-nd:]), x)
    return vjp(opmath(grad_output).astype(x.dtype))[0].astype(self.dtype)


def lower__adaptive_avg_pool2d_backward(grad_output, self):
    return _adaptive_avg_pool_backward(grad_output, self, 2)


def lower__adaptive_avg_pool3d_backward(grad_output, self):
    return _adaptive_avg_pool_backward(grad_output, self, 3)


def lower_adaptive_max_pool2d(self, output_size):
    return _adaptive_max_pool(self, 2, output_size)


def lower_adaptive_max_pool2d_backward(grad_output, self, indices):
    return _scatter_back(grad_output, self, indices, 2)


def _adaptive_max_pool(self, nd, output_size):
    output_size = tuple(output_size) * (nd if len(output_size) == 1 else 1)
    spatial = self.shape[-nd:]
    per_dim = []
    for size, out in zip(spatial, output_size):
        start, end = _adaptive_bounds(size, out)
        k = int((end - start).max()) if out else 1
        coords = start[:, None] + np.arange(k)[None, :]
        per_dim.append((coords, coords < end[:, None]))
    idx, valid, outs = _combine(spatial, per_dim)
    return _max_windows(self, nd, idx, valid, outs)


def lower_adaptive_max_pool3d(self, output_size):
    return _adaptive_max_pool(self, 3, output_size)


def lower_adaptive_max_pool3d_backward(grad_output, self, indices):
    return _scatter_back(grad_output, self, indices, 3)


def _fractional_starts(sample, size, k, out, dtype):
    """Window starts (..., out) from per-plane samples (...), as CPU computes them: every
    step in the input's dtype (float16/bfloat16 round after each operation), truncated
    toward zero, and the last window flush with the input's end."""
    if out <= 0:
        return jnp.zeros(sample.shape + (max(out, 0),), jnp.int64)
    last = jnp.full(sample.shape + (1,), size - k, jnp.int64)
    if out == 1:
        return last
    wide = jnp.float64 if dtype == jnp.float64 else jnp.float32

    def rnd(v):
        return v.astype(dtype).astype(wide)

    alpha = (np.asarray(size - k, dtype) / np.asarray(out - 1, dtype)).astype(wide)
    s = sample.astype(wide)[..., None]
    i = jnp.arange(out - 1, dtype=wide)
    starts = rnd(rnd(i + s) * alpha).astype(jnp.int64) - rnd(s * alpha).astype(jnp.int64)
    return jnp.concatenate([starts, jnp.broadcast_to(last, starts.shape[:-1] + (1,))], axis=-1)


def _fractional_max_pool(self, nd, kernel_size, output_size, random_samples):
    batched = self.ndim == nd + 2
    x = self if batched else self[None]
    n, c = x.shape[:2]
    spatial = x.shape[2:]
    plane = math.prod(spatial)
    samples = random_samples[:n]
    # CPU pairs samples with dims as (w, h) in 2-d and (t, h, w) in 3-d.
    order = (1, 0) if nd == 2 else (0, 1, 2)
    outs = tuple(output_size)
    ks = tuple(max(k, 0) for k in kernel_size)
    o, kk = math.prod(outs), math.prod(ks)
    flat = jnp.zeros((n, c) + (1,) * (2 * nd), jnp.int64)
    stride = 1
    for d in reversed(range(nd)):
        starts = _fractional_starts(samples[:, :, order[d]], spatial[d], kernel_size[d], outs[d], self.dtype)
        # An empty window (kernel 0) still reports its start, as CPU does.
        coords = starts[..., None] + jnp.arange(max(ks[d], 1), dtype=jnp.int64)
        # Samples are data: outside [0, 1) CPU reads outside the plane; clip to stay inside.
        coords = jnp.clip(coords, 0, spatial[d] - 1)
        shape = [n, c] + [1] * (2 * nd)
        shape[2 + d], shape[2 + nd + d] = coords.shape[2:]
        flat = flat + coords.reshape(shape) * stride
        stride *= spatial[d]
    taps = tuple(max(k, 1) for k in ks)
    flat = jnp.broadcast_to(flat, (n, c) + outs + taps).reshape(n, c, o, math.prod(taps))
    if kk == 0:
        out = jnp.full((n, c) + outs, -jnp.inf, self.dtype)
        idx = flat[..., 0].reshape((n, c) + outs)
    else:
        planes = x.reshape(n, c, 1, plane)
        vals = jnp.take_along_axis(planes, flat.reshape(n, c, 1, o * kk), axis=3).reshape(n, c, o, kk)
        arg = jnp.argmax(vals, axis=3)
        # A NaN always replaces the running maximum, so the last NaN of a window wins.
        nan = jnp.isnan(vals)
        last_nan = kk - 1 - jnp.argmax(jnp.flip(nan, axis=3), axis=3)
        arg = jnp.where(jnp.any(nan, axis=3), last_nan, arg)
        out = jnp.take_along_axis(vals, arg[..., None], axis=3)[..., 0].reshape((n, c) + outs)
        idx = jnp.take_along_axis(flat, arg[..., None], axis=3)[..., 0].reshape((n, c) + outs)
    if not batched:
        out, idx = out[0], idx[0]
    return out, idx


def lower_fractional_max_pool2d(self, kernel_size, output_size, random_samples):
    return _fractional_max_pool(self, 2, kernel_size, output_size, random_samples)


def lower_fractional_max_pool3d(self, kernel_size, output_size, random_samples):
    return _fractional_max_pool(self, 3, kernel_size, output_size, random_samples)


def lower_fractional_max_pool2d_backward(grad_output, self, kernel_size, output_size, indices):
    return _scatter_back(grad_output, self, indices, 2)


def lower_fractional_max_pool3d_backward(grad_output, self, kernel_size, output_size, indices):
    return _scatter_back(grad_output, self, indices, 3)
