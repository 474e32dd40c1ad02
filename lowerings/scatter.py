"""Lowerings of scatter ops: scatter (src/value), scatter_add, scatter_reduce, and the
slice-shaped scatters (select, slice, diagonal, as_strided). Index tensors that are
data follow Note [Out-of-bounds indices] in lowerings/indexing.py: such updates are
dropped; PyTorch's gather/scatter do not wrap negative indices, so neither do these."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from .common import opmath
from ..shape_fns.scatter import diagonal_positions, slice_bounds
from .indexing import bounded


def _scatter_key(self_shape, dim, index):
    """Full coordinates of every element of `index`, with `dim`'s replaced by the index."""
    coords = list(jnp.indices(index.shape, sparse=True))
    coords[dim] = bounded(index, self_shape[dim], wrap=False)
    return tuple(coords)


def _prep(self, dim, index):
    if self.ndim == 0 or index.ndim == 0:
        x = self.reshape(-1)
        idx = index.reshape(-1)
        idx = idx.reshape(idx.shape + (1,) * (x.ndim - 1))
        return x, 0, idx
    return self, dim % self.ndim, index


def _src_for(src, index):
    """src cut to the index's extent (scatter uses only that corner of src)."""
    if src.ndim == 0:
        return jnp.broadcast_to(src, index.shape)
    src = src.reshape(src.shape + (1,) * (index.ndim - src.ndim)) if src.ndim < index.ndim else src
    return src[tuple(slice(0, s) for s in index.shape)]


def lower_scatter_src(self, dim, index, src):
    if index.size == 0:  # nothing to write; the index's shape need not fit
        return self
    x, d, idx = _prep(self, dim, index)
    return x.at[_scatter_key(x.shape, d, idx)].set(_src_for(src, idx).astype(x.dtype), mode="drop").reshape(self.shape)


def lower_scatter_value(self, dim, index, value):
    if index.size == 0:  # nothing to write; the index's shape need not fit
        return self
    x, d, idx = _prep(self, dim, index)
    return x.at[_scatter_key(x.shape, d, idx)].set(jnp.asarray(value).astype(x.dtype), mode="drop").reshape(self.shape)


def lower_scatter_add(self, dim, index, src):
    if index.size == 0:  # nothing to write; the index's shape need not fit
        return self
    x, d, idx = _prep(self, dim, index)
    src = _src_for(src, idx).astype(x.dtype)
    ref = x.at[_scatter_key(x.shape, d, idx)]
    out = ref.max(src, mode="drop") if x.dtype == jnp.bool_ else ref.add(src, mode="drop")
    return out.reshape(self.shape)


def _identity(reduce, dtype):
    if reduce in ("sum", "mean"):
        return jnp.zeros((), dtype)
    if reduce == "prod":
        return jnp.ones((), dtype)
    if jnp.issubdtype(dtype, jnp.floating):
        return jnp.asarray(-jnp.inf if reduce == "amax" else jnp.inf, dtype)
    if dtype == jnp.bool_:
        return jnp.asarray(reduce == "amin")
    info = jnp.iinfo(dtype)
    return jnp.asarray(info.min if reduce == "amax" else info.max, dtype)


def lower_scatter_reduce_two(self, dim, index, src, reduce, *, include_self=True):
    if index.size == 0:  # nothing to write; the index's shape need not fit
        return self
    x, d, idx = _prep(self, dim, index)
    key = _scatter_key(x.shape, d, idx)
    out_dtype = x.dtype
    xs, s = opmath(x), opmath(_src_for(src, idx).astype(x.dtype))
    if x.dtype == jnp.bool_:
        # Reduce bools as integers; the cast back maps nonzero to True (any / all).
        xs, s = xs.astype(jnp.int64), s.astype(jnp.int64)
    hit = jnp.zeros(x.shape, jnp.bool_).at[key].set(True, mode="drop")
    base = xs if include_self else jnp.where(hit, _identity(reduce, xs.dtype), xs)
    ref = base.at[key]
    if reduce in ("sum", "mean"):
        out = ref.add(s, mode="drop")
    elif reduce == "prod":
        out = ref.multiply(s, mode="drop")
    elif reduce == "amax":
        out = ref.max(s, mode="drop")
        # max/min propagate NaN as PyTorch's do.
        nan = jnp.zeros(x.shape, jnp.bool_).at[key].max(jnp.isnan(s), mode="drop") if jnp.issubdtype(s.dtype, jnp.floating) else None
    else:
        out = ref.min(s, mode="drop")
        nan = jnp.zeros(x.shape, jnp.bool_).at[key].max(jnp.isnan(s), mode="drop") if jnp.issubdtype(s.dtype, jnp.floating) else None
    if reduce in ("amax", "amin") and nan is not None:
        out = jnp.where(nan, jnp.nan, out)
    if reduce == "mean":
        count = jnp.zeros(x.shape, jnp.int64).at[key].add(1, mode="drop")
        if include_self:
            count = count + 1
        count = jnp.maximum(count, 1)
        if jnp.issubdtype(out.dtype, jnp.integer):
            out = jnp.floor_divide(out, count.astype(out.dtype))
        else:
            out = out / count.astype(out.dtype)
    return out.astype(out_dtype).reshape(self.shape)


def _wrap_index(index, size):
    return index + size if index < 0 else index


def lower_select_scatter(self, src, dim, index):
    d = dim % self.ndim
    i = _wrap_index(index, self.shape[d])
    return self.at[(slice(None),) * d + (i,)].set(src.astype(self.dtype))


def lower_slice_scatter(self, src, dim=0, start=None, end=None, step=1):
    d = dim % self.ndim
    return self.at[(slice(None),) * d + (slice(*slice_bounds(self.shape[d], start, end, step)),)].set(src.astype(self.dtype))






def lower_diagonal_scatter(self, src, offset=0, dim1=0, dim2=1):
    d1, d2 = dim1 % self.ndim, dim2 % self.ndim
    rows, cols = diagonal_positions(self.shape, offset, d1, d2)
    moved = jnp.moveaxis(self, (d1, d2), (-2, -1))
    moved = moved.at[..., rows, cols].set(src.astype(self.dtype))
    return jnp.moveaxis(moved, (-2, -1), (d1, d2))


def as_strided_positions(size, stride, storage_offset):
    """Flat positions (in a contiguous tensor) of an as_strided view's elements."""
    pos = np.full(tuple(size), storage_offset or 0, dtype=np.int64)
    for d, (n, st) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[d] = n
        pos = pos + (np.arange(n, dtype=np.int64) * st).reshape(shape)
    return pos


def lower_as_strided_scatter(self, src, size, stride, storage_offset=None):
    pos = as_strided_positions(size, stride, storage_offset)
    flat = self.reshape(-1).at[pos.reshape(-1)].set(src.reshape(-1).astype(self.dtype))
    return flat.reshape(self.shape)


def _segment_ids(offsets, length):
    """For rows of segment offsets (B, S + 1), each position along an axis of `length`
    mapped to its segment, or to S (dropped) outside [offsets[0], offsets[S])."""
    import jax

    segs = offsets.shape[-1] - 1
    pos = jnp.arange(length)
    ids = jax.vmap(lambda o: jnp.searchsorted(o[1:], pos, side="right"))(offsets)
    outside = (pos[None, :] < offsets[:, :1]) | (ids >= segs)
    return jnp.where(outside, segs, ids)


def _segment_layout(data, lengths, offsets, axis):
    """data as (B, L, R) around `axis`, and the segments' offsets as (B, S + 1)."""
    axis = axis % data.ndim
    lead = int(np.prod(data.shape[:axis], dtype=np.int64))
    x = data.reshape(lead, data.shape[axis], -1)
    if offsets is None:
        lens = lengths.reshape(-1, lengths.shape[-1]).astype(jnp.int64)
        offsets = jnp.concatenate([jnp.zeros((lens.shape[0], 1), jnp.int64), jnp.cumsum(lens, axis=1)], axis=1)
    else:
        offsets = offsets.reshape(-1, offsets.shape[-1]).astype(jnp.int64)
    offsets = jnp.broadcast_to(offsets, (lead, offsets.shape[-1]))
    return x, offsets, axis


def _segment_start(reduce, dtype, initial):
    if initial is not None:
        return jnp.asarray(initial).astype(dtype)
    return {
        "max": jnp.asarray(-jnp.inf, dtype),
        "min": jnp.asarray(jnp.inf, dtype),
        "prod": jnp.ones((), dtype),
    }.get(reduce, jnp.zeros((), dtype))


def lower_segment_reduce(data, reduce, *, lengths=None, indices=None, offsets=None, axis=0, unsafe=False, initial=None):
    # PyTorch checks (unless `unsafe`) that lengths are non-negative and add up to
    # the axis' size; the lengths are data here, so invalid ones are not detected:
    # elements past the last segment are ignored, a negative length empties its segment.
    x, offs, axis = _segment_layout(data, lengths, offsets, axis)
    b, n, r = x.shape
    segs = offs.shape[1] - 1
    # PyTorch's kernel reduces float16/bfloat16 in their own type, rounding each step.
    xs = x
    ids = _segment_ids(offs, n)
    key = (jnp.arange(b)[:, None, None], ids[:, :, None], jnp.arange(r)[None, None, :])
    base = jnp.broadcast_to(_segment_start(reduce, xs.dtype, initial), (b, segs, r))
    ref = base.at[key]
    if reduce in ("sum", "mean"):
        out = ref.add(xs, mode="drop")
    elif reduce == "prod":
        out = ref.multiply(xs, mode="drop")
    else:
        out = ref.max(xs, mode="drop") if reduce == "max" else ref.min(xs, mode="drop")
        # A NaN element makes its segment NaN, as PyTorch's kernel does.
        nan = jnp.zeros((b, segs, r), jnp.bool_).at[key].max(jnp.isnan(xs), mode="drop")
        out = jnp.where(nan, jnp.nan, out)
    if reduce == "mean":
        count = jnp.maximum(offs[:, 1:] - offs[:, :-1], 0)[:, :, None]
        # An empty segment's mean is its initial value, or NaN without one.
        empty = jnp.full_like(out, jnp.nan) if initial is None else out
        out = jnp.where(count > 0, out / jnp.maximum(count, 1).astype(out.dtype), empty)
    shape = data.shape[:axis] + (segs,) + data.shape[axis + 1:]
    return out.astype(data.dtype).reshape(shape)


def lower__segment_reduce_backward(grad, output, data, reduce, *, lengths=None, offsets=None, axis=0, initial=None):
    x, offs, axis = _segment_layout(data, lengths, offsets, axis)
    b, n, r = x.shape
    segs = offs.shape[1] - 1
    xs = opmath(x)
    ids = _segment_ids(offs, n)
    inside = (ids < segs)[:, :, None]
    g = opmath(grad).reshape(b, segs, r)
    o = opmath(output).reshape(b, segs, r)
    take = lambda t: jnp.take_along_axis(t, jnp.minimum(ids, max(segs - 1, 0))[:, :, None], axis=1)
    key = (jnp.arange(b)[:, None, None], ids[:, :, None], jnp.arange(r)[None, None, :])
    if segs == 0:
        return jnp.zeros(data.shape, data.dtype)
    g_at, o_at = take(g), take(o)
    if reduce in ("max", "min"):
        hit = jnp.isnan(xs) | (xs == o_at)
        counter = jnp.zeros((b, segs, r), jnp.int64).at[key].add(hit.astype(jnp.int64), mode="drop")
        gi = jnp.where(hit, g_at, 0)
        # PyTorch shares a tied gradient among the tied elements only where it is positive.
        c = take(counter).astype(gi.dtype)
        gi = jnp.where((c >= 2) & (gi > 0), gi / jnp.maximum(c, 1), gi)
    elif reduce == "mean":
        count = (offs[:, 1:] - offs[:, :-1])[:, :, None]
        gi = g_at / take(jnp.broadcast_to(count, (b, segs, r))).astype(g_at.dtype)
    elif reduce == "sum":
        gi = g_at
    else:
        special = jnp.isnan(xs) | (xs == 0)
        nan_ct = jnp.zeros((b, segs, r), jnp.int64).at[key].add(jnp.isnan(xs).astype(jnp.int64), mode="drop")
        zero_ct = jnp.zeros((b, segs, r), jnp.int64).at[key].add((xs == 0).astype(jnp.int64), mode="drop")
        start = _segment_start("prod", xs.dtype, initial)
        rest = jnp.full((b, segs, r), start, xs.dtype).at[key].multiply(jnp.where(special, 1, xs), mode="drop")
        # The product of the segment without this (zero or NaN) element.
        others_nan = take(nan_ct) - jnp.isnan(xs)
        others_zero = take(zero_ct) - (xs == 0)
        exclusive = jnp.where(others_nan > 0, jnp.nan, take(rest) * jnp.where(others_zero > 0, 0, 1).astype(xs.dtype))
        gi = jnp.where(special, g_at * exclusive, g_at * o_at / jnp.where(special, 1, xs))
    gi = jnp.where(inside, gi, 0)
    return gi.astype(data.dtype).reshape(data.shape)


def lower_index_reduce(self, dim, index, source, reduce, *, include_self=True):
    # Out-of-range indices are data: their updates are dropped (Note [Out-of-bounds
    # indices] in lowerings/indexing.py) where PyTorch raises IndexError.
    from .indexing import _along, _source_along

    x, key, d = _along(self, dim, index, wrap=False)
    src = _source_along(source, x, d)
    # Mean accumulates in the tensor's own type (PyTorch's index_add, then a division).
    xs, s = (x, src) if reduce == "mean" else (opmath(x), opmath(src))
    hit = jnp.zeros(x.shape, jnp.bool_).at[key].set(True, mode="drop")
    base = xs if include_self else jnp.where(hit, _identity(reduce, xs.dtype), xs)
    ref = base.at[key]
    if reduce == "prod":
        out = ref.multiply(s, mode="drop")
    elif reduce == "mean":
        out = ref.add(s, mode="drop")
        count = jnp.zeros(x.shape, jnp.int64).at[key].add(1, mode="drop") + (1 if include_self else 0)
        count = jnp.maximum(count, 1).astype(out.dtype)
        out = jnp.floor_divide(out, count) if jnp.issubdtype(out.dtype, jnp.integer) else out / count
    else:
        out = ref.max(s, mode="drop") if reduce == "amax" else ref.min(s, mode="drop")
        if jnp.issubdtype(s.dtype, jnp.floating):
            # A NaN source propagates, as PyTorch's max/min do.
            nan = jnp.zeros(x.shape, jnp.bool_).at[key].max(jnp.isnan(s), mode="drop")
            out = jnp.where(nan, jnp.nan, out)
    return out.astype(x.dtype).reshape(self.shape)


_SCATTER_REDUCE = {"add": "sum", "multiply": "prod"}


def lower_scatter_reduce(self, dim, index, src, *, reduce):
    return lower_scatter_reduce_two(self, dim, index, src, _SCATTER_REDUCE[reduce])


def lower_scatter_value_reduce(self, dim, index, value, *, reduce):
    # The value takes self's dtype before it is combined (2.7 adds 2 to an int64).
    src = jnp.asarray(value).astype(self.dtype)
    return lower_scatter_reduce_two(self, dim, index, src, _SCATTER_REDUCE[reduce])


def _clamped_indices(self, indices):
    """Indices clamped into range, as the masked-index ops promise valid reads where
    the mask is set and let masked-out positions point anywhere."""
    out = []
    for i, ix in enumerate(indices):
        if ix is None:
            out.append(None)
        else:
            size = self.shape[i]
            out.append(jnp.clip(ix.astype(jnp.int64), -size, max(size - 1, 0)))
    return out


def lower__unsafe_masked_index(self, mask, indices, fill):
    from .indexing import index_tensor

    gathered = index_tensor(self, _clamped_indices(self, indices))
    keep = jnp.broadcast_to(mask, gathered.shape)
    return jnp.where(keep, gathered, jnp.asarray(fill).astype(self.dtype))


def lower__unsafe_masked_index_put_accumulate(self, mask, indices, values):
    from .indexing import index_put_values

    masked = jnp.where(jnp.broadcast_to(mask, values.shape), values, jnp.zeros((), values.dtype))
    return index_put_values(self, _clamped_indices(self, indices), masked, True)
