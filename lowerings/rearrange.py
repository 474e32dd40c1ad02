"""Lowerings of ops that move elements around without arithmetic: flip, repeat, roll,
tril/triu, narrow_copy, diag_embed, stack, expand_copy, and the views
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
        (
            jnp.arange(n).reshape([n if j == i else 1 for j in range(len(size))]) * s
            for i, (n, s) in enumerate(zip(size, stride))
        ),
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


# Backward of view ops: the gradient written into zeros of the input's shape.


def lower_select_backward(grad_output, input_sizes, dim, index):
    d = normalize_dim(dim, len(input_sizes))
    index = index + input_sizes[d] if index < 0 else index
    out = jnp.zeros(tuple(input_sizes), grad_output.dtype)
    return out.at[(slice(None),) * d + (index,)].set(grad_output)


def lower_slice_backward(grad_output, input_sizes, dim, start, end, step):
    d = normalize_dim(dim, len(input_sizes))
    start, end, step = slice(start, end, step).indices(input_sizes[d])
    out = jnp.zeros(tuple(input_sizes), grad_output.dtype)
    return out.at[(slice(None),) * d + (slice(start, max(start, end), step),)].set(grad_output)


def lower_diagonal_backward(grad_output, input_sizes, offset, dim1, dim2):
    ndim = len(input_sizes)
    d1, d2 = normalize_dim(dim1, ndim), normalize_dim(dim2, ndim)
    n = grad_output.shape[-1]
    rows = jnp.arange(n) + max(-offset, 0)
    cols = jnp.arange(n) + max(offset, 0)
    moved = jnp.zeros(tuple(input_sizes), grad_output.dtype)
    moved = jnp.moveaxis(moved, (d1, d2), (-2, -1)).at[..., rows, cols].set(grad_output)
    return jnp.moveaxis(moved, (-2, -1), (d1, d2))


def lower_unfold_backward(grad_in, input_sizes, dim, size, step):
    if len(input_sizes) == 0:
        return grad_in.reshape(())
    d = normalize_dim(dim, len(input_sizes))
    count = grad_in.shape[d]
    index = (jnp.arange(count)[:, None] * step + jnp.arange(size)[None, :]).reshape(-1)
    g = jnp.moveaxis(grad_in, -1, d + 1)
    g = g.reshape(g.shape[:d] + (count * size,) + g.shape[d + 2 :])
    out = jnp.zeros(tuple(input_sizes), grad_in.dtype)
    return out.at[(slice(None),) * d + (index,)].add(g)
