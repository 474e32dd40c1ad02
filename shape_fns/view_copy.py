"""Output metadata of the ops in lowerings/view_copy.py: their views' metadata."""

from __future__ import annotations

from . import rearrange, shape_ops, split
from .common import TensorMeta


def alias_copy_output_shape(self):
    return TensorMeta(self.shape, self.dtype)


def diagonal_copy_output_shape(self, offset=0, dim1=0, dim2=1):
    return rearrange.diagonal_output_shape(self, offset, dim1, dim2)


def permute_copy_output_shape(self, dims):
    return shape_ops.permute_output_shape(self, dims)


def split_copy_Tensor_output_shape(self, split_size, dim=0):
    return split.split_Tensor_output_shape(self, split_size, dim)


def split_with_sizes_copy_output_shape(self, split_sizes, dim=0):
    return split.split_with_sizes_output_shape(self, split_sizes, dim)


def squeeze_copy_output_shape(self):
    return rearrange.squeeze_output_shape(self)


def squeeze_copy_dim_output_shape(self, dim):
    return shape_ops.squeeze_dim_output_shape(self, dim)


def squeeze_copy_dims_output_shape(self, dim):
    return rearrange.squeeze_dims_output_shape(self, dim)


def t_copy_output_shape(self):
    return shape_ops.t_output_shape(self)


def transpose_copy_int_output_shape(self, dim0, dim1):
    return shape_ops.transpose_int_output_shape(self, dim0, dim1)


def unbind_copy_int_output_shape(self, dim=0):
    return split.unbind_int_output_shape(self, dim)


def unfold_copy_output_shape(self, dimension, size, step):
    return rearrange.unfold_output_shape(self, dimension, size, step)


def unsqueeze_copy_output_shape(self, dim):
    return shape_ops.unsqueeze_output_shape(self, dim)


def view_copy_output_shape(self, size):
    return shape_ops.view_output_shape(self, size)
