"""Lowerings of ops that move elements around without arithmetic: flip, repeat, roll,
tril/triu, narrow_copy, diag_embed, stack, the *_copy forms of views, and the views
squeeze, as_strided, diagonal, unfold (values only: the runtime keeps views aliased)."""

from __future__ import annotations

import math

import jax.numpy as jnp
from jax import lax

from ..shape_fns.common import expand_shape, normalize_dim
from ..shape_fns.rearrange import squeeze_kept_dims, unfold_count
from .common import promote_operands


def lower_flip(self, dims):
    if self.ndim == 0:
        return self
    return jnp.flip(self, tuple(normalize_dim(d, self.ndim) for d in dims))


def lower_repeat(self, repeats):
    lead = len(repeats) - self.ndim
    x = self.reshape((1,) * lead + self.shape)
    return jnp.tile(x, tuple(repeats))


def lower_roll(self, shifts, dims=()):
    if len(dims) == 0:
        return jnp.roll(self.reshape(-1), shifts[0]).reshape(self.shape) if self.size else self
    if self.ndim == 0:
        return self
    return jnp.roll(self, tuple(shifts), tuple(normalize_dim(d, self.ndim) for d in dims))


def lower_tril(self, diagonal=0):
    return jnp.tril(self, diagonal)


def lower_triu(self, diagonal=0):
    return jnp.triu(self, diagonal)


def lower_narrow_copy(self, dim, start, length):
    d = normalize_dim(dim, self.ndim)
    start = start + self.shape[d] if start < 0 else start
    return lax.slice_in_dim(self, start, start + length, axis=d)


def lower_diag_embed(self, offset=0, dim1=-2, dim2=-1):
    ndim = self.ndim + 1
    d1, d2 = normalize_dim(dim1, ndim), normalize_dim(dim2, ndim)
    n = self.shape[-1] if self.ndim else 1
    x = self.reshape(self.shape[:-1] + (n,)) if self.ndim else self.reshape(1)
    m = n + abs(offset)
    rows = jnp.arange(n) + max(-offset, 0)
    cols = jnp.arange(n) + max(offset, 0)
    out = jnp.zeros(x.shape[:-1] + (m, m), self.dtype).at[..., rows, cols].set(x)
    return jnp.moveaxis(out, (-2, -1), (d1, d2))


def lower_expand_copy(self, size, *, implicit=False):
    return jnp.broadcast_to(self, expand_shape(self.shape, size))


def lower_permute_copy(self, dims):
    return jnp.transpose(self, tuple(normalize_dim(d, self.ndim) for d in dims))


def lower_stack(tensors, dim=0):
    arrays, out = promote_operands("cat", *tensors)
    d = normalize_dim(dim, arrays[0].ndim + 1)
    return jnp.stack(arrays, axis=d).astype(out)


def lower_squeeze(self):
    return self.reshape(tuple(s for s in self.shape if s != 1))


def lower_squeeze_dims(self, dim):
    kept = squeeze_kept_dims(self.shape, dim)
    return self.reshape(tuple(self.shape[i] for i in kept))


def lower_as_strided(self, size, stride, storage_offset=None):
    # Relative to `self` read as a flat contiguous buffer; the runtime applies as_strided
    # to the storage itself and never calls this for an eager view.
    flat = self.reshape(-1)
    if math.prod(size) == 0:
        return jnp.zeros(tuple(size), self.dtype)
    index = (storage_offset or 0) + sum(
        (jnp.arange(n).reshape([n if j == i else 1 for j in range(len(size))]) * s for i, (n, s) in enumerate(zip(size, stride))),
        start=jnp.zeros((), jnp.int64),
    )
    return flat[index]


def lower_diagonal(self, offset=0, dim1=0, dim2=1):
    return jnp.diagonal(self, offset, normalize_dim(dim1, self.ndim), normalize_dim(dim2, self.ndim))


def lower_unfold(self, dimension, size, step):
    if self.ndim == 0:
        return self.reshape(1)
    d = normalize_dim(dimension, self.ndim)
    count = unfold_count(self.shape[d], size, step)
    index = jnp.arange(count)[:, None] * step + jnp.arange(size)[None, :]
    picked = jnp.take(self, index.reshape(-1), axis=d)
    picked = picked.reshape(self.shape[:d] + (count, size) + self.shape[d + 1 :])
    return jnp.moveaxis(picked, d + 1, -1)
