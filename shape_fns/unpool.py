"""Shape functions of max unpooling (the inverse of max pooling: values scattered into a
zero plane at their recorded flat indices), with ATen CPU's checks in its order."""

from __future__ import annotations

import math

import torch

from .common import TensorMeta, require_kernel_dtype, scalar_type_name


def _common_checks(self, indices, output_size, nd):
    shape = tuple(self.shape)
    if tuple(indices.shape) != shape:
        raise RuntimeError(
            f"Expected shape of indices to be same as that of the input tensor ({list(shape)}) "
            f"but got indices tensor with shape: {list(indices.shape)}"
        )
    for i in range(1, len(shape)):
        if shape[i] <= 0:
            raise RuntimeError(
                f"max_unpooling{nd}d_forward_out_cpu(): Expected input to have non-zero size for non-batch "
                f"dimensions, but got {list(shape)} with dimension {i} being empty."
            )
    return shape[:-nd] + tuple(output_size)


def _dtype_check(name, self, out_shape):
    # ATen dispatches on the dtype only when there is something to write.
    if math.prod(out_shape) != 0:
        require_kernel_dtype(name, self.dtype, "float")
    return TensorMeta(out_shape, self.dtype)


def max_unpool2d_output_shape(self, indices, output_size):
    output_size = tuple(output_size)
    if indices.dtype is not torch.int64:
        raise RuntimeError(f"elements in indices should be type int64 but got: {scalar_type_name(indices.dtype)}")
    if len(output_size) != 2:
        raise RuntimeError(
            "There should be exactly two elements (height, width) in output_size, "
            f"but got {len(output_size)} elements."
        )
    if self.ndim not in (3, 4):
        raise RuntimeError(
            f"Input to max_unpooling2d should be a 3d or 4d Tensor, but got a tensor with {self.ndim} dimensions."
        )
    return _dtype_check("max_unpool2d", self, _common_checks(self, indices, output_size, 2))


def max_unpool3d_output_shape(self, indices, output_size, stride, padding):
    output_size, stride, padding = tuple(output_size), tuple(stride), tuple(padding)
    if indices.dtype is not torch.int64:
        raise RuntimeError("elements in indices should be type int64")
    for what, v in (("output_size", output_size), ("stride", stride), ("padding", padding)):
        if len(v) != 3:
            sep = "" if what == "output_size" else ":"
            raise RuntimeError(
                f"There should be exactly three elements (depth, height, width) in {what}, but got{sep} {len(v)} "
                "elements."
            )
    if self.ndim not in (4, 5):
        raise RuntimeError(
            f"Input to max_unpooling3d should be a 4d or 5d Tensor, but got a tensor with {self.ndim} dimensions."
        )
    shape = _common_checks(self, indices, output_size, 3)
    if any(s <= 0 for s in stride):
        raise RuntimeError(f"strides should be greater than zero, but got stride: {list(stride)}")
    return _dtype_check("max_unpool3d", self, shape)
