"""Shape functions of the runtime's storage nodes (lowerings/storage.py)."""

from __future__ import annotations

import math

import torch

from .common import TensorMeta, broadcast_shapes


def strided_read_output_shape(base, size, stride, offset):
    return TensorMeta(tuple(size), base.dtype)


def strided_write_output_shape(base, src, size, stride, offset):
    return TensorMeta(tuple(base.shape), base.dtype)


def cast_to_output_shape(self, dtype):
    return TensorMeta(tuple(self.shape), dtype)


def copy_to_output_shape(src, shape, dtype):
    if broadcast_shapes(tuple(src.shape), tuple(shape)) != tuple(shape):
        raise RuntimeError(f"The size of tensor a ({shape}) must match the size of tensor b ({src.shape})")
    return TensorMeta(tuple(shape), dtype)


def complex_as_pairs_output_shape(self):
    if not self.dtype.is_complex:
        raise RuntimeError("view_as_real is only supported for complex tensors")
    return TensorMeta(tuple(self.shape) + (2,), self.dtype.to_real())


def pairs_as_complex_output_shape(self):
    if self.dtype not in (torch.float32, torch.float64):
        raise RuntimeError(
            "view_as_complex is only supported for float and double tensors, but got a tensor of scalar type: "
            f"{self.dtype}"
        )
    if not self.shape or self.shape[-1] != 2:
        raise RuntimeError("Tensor must have a last dimension of size 2")
    return TensorMeta(tuple(self.shape[:-1]), self.dtype.to_complex())


def memory_as_output_shape(base, dtype):
    nbytes = math.prod(base.shape) * base.dtype.itemsize
    return TensorMeta((nbytes // dtype.itemsize,), dtype)


def memory_write_output_shape(base, src, dtype, size, stride, offset):
    return TensorMeta(tuple(base.shape), base.dtype)
