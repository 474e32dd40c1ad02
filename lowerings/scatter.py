"""Lowerings of scatter ops: scatter (src/value), scatter_add, scatter_reduce, and the
slice-shaped scatters (select, slice, diagonal, as_strided). Index tensors that are
data follow Note [Out-of-bounds indices] in lowerings/indexing.py: such updates are
dropped; PyTorch's gather/scatter do not wrap negative indices, so neither do these."""

from __future__ import annotations

import jax.numpy as jnp

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
        nan = (
            jnp.zeros(x.shape, jnp.bool_).at[key].max(jnp.isnan(s), mode="drop")
            if jnp.issubdtype(s.dtype, jnp.floating)
            else None
        )
    else:
        out = ref.min(s, mode="drop")
        nan = (
            jnp.zeros(x.shape, jnp.bool_).at[key].max(jnp.isnan(s), mode="drop")
            if jnp.issubdtype(s.dtype, jnp.floating)
            else None
        )
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
    return self.at[(slice(None),) * d + (slice(*slice_bounds(self.shape[d], start, end, step)),)].set(
        src.astype(self.dtype)
    )


def lower_diagonal_scatter(self, src, offset=0, dim1=0, dim2=1):
    d1, d2 = dim1 % self.ndim, dim2 % self.ndim
    rows, cols = diagonal_positions(self.shape, offset, d1, d2)
    moved = jnp.moveaxis(self, (d1, d2), (-2, -1))
    moved = moved.at[..., rows, cols].set(src.astype(self.dtype))
    return jnp.moveaxis(moved, (-2, -1), (d1, d2))
