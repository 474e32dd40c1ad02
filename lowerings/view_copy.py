"""The *_copy forms of view ops: the view's values in a fresh tensor. Lowerings are
value-only, so each one is its view's lowering."""

from __future__ import annotations

import jax.numpy as jnp

from . import rearrange, shape_ops, split


def lower_alias_copy(self):
    return jnp.copy(self)


def lower_diagonal_copy(self, offset=0, dim1=0, dim2=1):
    return rearrange.lower_diagonal(self, offset, dim1, dim2)


def lower_permute_copy(self, dims):
    return shape_ops.lower_permute(self, dims)


def lower_split_copy_Tensor(self, split_size, dim=0):
    return split.lower_split_Tensor(self, split_size, dim)


def lower_split_with_sizes_copy(self, split_sizes, dim=0):
    return split.lower_split_with_sizes(self, split_sizes, dim)


def lower_squeeze_copy(self):
    return rearrange.lower_squeeze(self)


def lower_squeeze_copy_dim(self, dim):
    return shape_ops.lower_squeeze_dim(self, dim)


def lower_squeeze_copy_dims(self, dim):
    return rearrange.lower_squeeze_dims(self, dim)


def lower_t_copy(self):
    return shape_ops.lower_t(self)


def lower_transpose_copy_int(self, dim0, dim1):
    return shape_ops.lower_transpose_int(self, dim0, dim1)


def lower_unbind_copy_int(self, dim=0):
    return split.lower_unbind_int(self, dim)


def lower_unfold_copy(self, dimension, size, step):
    return rearrange.lower_unfold(self, dimension, size, step)


def lower_unsqueeze_copy(self, dim):
    return shape_ops.lower_unsqueeze(self, dim)


def lower_view_copy(self, size):
    return shape_ops.lower_view(self, size)
