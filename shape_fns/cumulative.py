"""Shape functions of the ops in lowerings/cumulative.py."""

from __future__ import annotations

import torch

from .common import TensorMeta, normalize_dim, require_kernel_dtype, scalar_type_name, sum_dtype


def cumsum_output_shape(self, dim, *, dtype=None):
    normalize_dim(dim, self.ndim)
    return TensorMeta(self.shape, sum_dtype(self.dtype, dtype))


def cumprod_output_shape(self, dim, *, dtype=None):
    normalize_dim(dim, self.ndim)
    return TensorMeta(self.shape, sum_dtype(self.dtype, dtype))


def _extremum(kernel, self, dim):
    normalize_dim(dim, self.ndim)
    require_kernel_dtype(kernel, self.dtype, "bool int float")
    return TensorMeta(self.shape, self.dtype), TensorMeta(self.shape, torch.int64)


def cummax_output_shape(self, dim):
    return _extremum("cummax_cpu", self, dim)


def cummin_output_shape(self, dim):
    return _extremum("cummin_cpu", self, dim)


def logcumsumexp_output_shape(self, dim):
    normalize_dim(dim, self.ndim)
    if not (self.dtype.is_floating_point or self.dtype.is_complex):
        raise NotImplementedError(f'"logcumsumexp_out_cpu" not implemented for \'{scalar_type_name(self.dtype)}\'')
    return TensorMeta(self.shape, self.dtype)


