"""Shape functions of reductions: sum, mean, amax, argmax, max.dim and var."""

from __future__ import annotations

import torch

from .common import (
    TensorMeta,
    elementwise_dtypes,
    mean_dtype,
    reduction_dims,
    require_kernel_dtype,
    sum_dtype,
)


def _reduced_shape(shape, dims, keepdim):
    if keepdim:
        return tuple(1 if i in dims else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in dims)


def _check_dim_given(op, self, dim):
    if not dim and self.numel() == 0:
        raise RuntimeError(
            f"{op}(): Expected reduction dim to be specified for input.numel() == 0. "
            "Specify the reduction dim with the 'dim' argument."
        )


def _check_nonempty(op, shape, dims):
    # Reductions without an identity (max, argmax) cannot reduce a zero-size dim.
    for d in dims:
        if shape[d] == 0:
            raise IndexError(f"{op}(): Expected reduction dim {d} to have non-zero size.")


def sum_output_shape(self, *, dtype=None):
    return TensorMeta((), sum_dtype(self.dtype, dtype))


def sum_dim_IntList_output_shape(self, dim, keepdim=False, *, dtype=None):
    dims = reduction_dims(dim, self.ndim)
    return TensorMeta(_reduced_shape(self.shape, dims, keepdim), sum_dtype(self.dtype, dtype))


def mean_dim_output_shape(self, dim, keepdim=False, *, dtype=None):
    result_dtype = mean_dtype(self.dtype, dtype)
    dims = reduction_dims(dim, self.ndim)
    return TensorMeta(_reduced_shape(self.shape, dims, keepdim), result_dtype)


def mean_output_shape(self, *, dtype=None):
    return mean_dim_output_shape(self, None, False, dtype=dtype)


def amax_output_shape(self, dim=(), keepdim=False):
    _check_dim_given("amax", self, dim)
    dims = reduction_dims(dim, self.ndim)
    _check_nonempty("amax", self.shape, dims)
    require_kernel_dtype("max_values_cpu", self.dtype, "bool int float")
    return TensorMeta(_reduced_shape(self.shape, dims, keepdim), self.dtype)


def argmax_output_shape(self, dim=None, keepdim=False):
    if self.dtype is torch.bool or self.dtype.is_complex:
        raise RuntimeError(f"argmax(): does not support {'complex' if self.dtype.is_complex else 'bool'} input")
    if dim is None:
        if self.numel() == 0:
            raise IndexError("argmax(): Expected reduction dim to be specified for input.numel() == 0.")
        # Flattened argmax: a 0-d index, or all dims kept as 1 with keepdim.
        return TensorMeta((1,) * self.ndim if keepdim else (), torch.int64)
    dims = reduction_dims(dim, self.ndim)
    _check_nonempty("argmax", self.shape, dims)
    return TensorMeta(_reduced_shape(self.shape, dims, keepdim), torch.int64)


def max_dim_output_shape(self, dim, keepdim=False):
    if self.dtype.is_complex:
        raise RuntimeError("max(): does not support complex input")
    dims = reduction_dims(dim, self.ndim)
    _check_nonempty("max", self.shape, dims)
    shape = _reduced_shape(self.shape, dims, keepdim)
    return TensorMeta(shape, self.dtype), TensorMeta(shape, torch.int64)


def var_correction_output_shape(self, dim=None, *, correction=None, keepdim=False):
    if not (self.dtype.is_floating_point or self.dtype.is_complex):
        raise RuntimeError("std and var only support floating point and complex dtypes")
    dims = reduction_dims(dim, self.ndim)
    _, result_dtype = elementwise_dtypes("var_correction", self)
    return TensorMeta(_reduced_shape(self.shape, dims, keepdim), result_dtype)
