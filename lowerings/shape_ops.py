"""Lowerings of shape ops. Value semantics: views return new arrays (aliasing is
handled by the runtime). Sizes and dims are static Python values."""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from ..shape_fns.common import expand_shape, normalize_dim
from .common import promote_operands


def lower_view(self, size):
    return jnp.reshape(self, size)


def lower__unsafe_view(self, size):
    return jnp.reshape(self, size)


def lower_permute(self, dims):
    return jnp.transpose(self, tuple(normalize_dim(d, self.ndim) for d in dims))


def lower_expand(self, size, *, implicit=False):
    return jnp.broadcast_to(self, expand_shape(self.shape, size))


def lower_cat(tensors, dim=0):
    arrays, out = promote_operands("cat", *tensors)
    # PyTorch skips legacy empty tensors of shape (0,) whatever the other inputs' shapes
    # (they still take part in type promotion).
    arrays = [a for a in arrays if a.shape != (0,)]
    if not arrays:
        return jnp.zeros((0,), out)
    return jnp.concatenate(arrays, axis=normalize_dim(dim, arrays[0].ndim)).astype(out)


def lower_t(self):
    return jnp.transpose(self)  # t() only accepts <= 2 dims, where this is a transpose


def lower_transpose_int(self, dim0, dim1):
    if self.ndim < 2:
        return self
    return jnp.swapaxes(self, normalize_dim(dim0, self.ndim), normalize_dim(dim1, self.ndim))


def lower_unsqueeze(self, dim):
    return jnp.expand_dims(self, normalize_dim(dim, self.ndim + 1))


def lower_squeeze_dim(self, dim):
    d = normalize_dim(dim, self.ndim)
    # Squeezing a dim whose size is not 1 is a no-op in PyTorch, not an error.
    if self.ndim == 0 or self.shape[d] != 1:
        return self
    return jnp.squeeze(self, d)


def lower_slice_Tensor(self, dim=0, start=None, end=None, step=1):
    d = normalize_dim(dim, self.ndim)
    # Python's slice.indices wraps negative bounds and clamps to the size as PyTorch does;
    # PyTorch also turns end < start into an empty slice.
    start, end, step = slice(start, end, step).indices(self.shape[d])
    return lax.slice_in_dim(self, start, max(start, end), step, axis=d)


def lower_select_int(self, dim, index):
    d = normalize_dim(dim, self.ndim)
    index = index + self.shape[d] if index < 0 else index
    return lax.index_in_dim(self, index, axis=d, keepdims=False)


def lower_clone(self, *, memory_format=None):
    return jnp.copy(self)
