"""Shape functions of the ops in lowerings/cumulative.py."""

from __future__ import annotations

import torch

from .common import TensorMeta, normalize_dim, sum_dtype


def cumsum_output_shape(self, dim, *, dtype=None):
    normalize_dim(dim, self.ndim)
    return TensorMeta(self.shape, sum_dtype(self.dtype, dtype))


def cumprod_output_shape(self, dim, *, dtype=None):
    normalize_dim(dim, self.ndim)
    return TensorMeta(self.shape, sum_dtype(self.dtype, dtype))


def _extremum(self, dim):
    normalize_dim(dim, self.ndim)
    return TensorMeta(self.shape, self.dtype), TensorMeta(self.shape, torch.int64)


def cummax_output_shape(self, dim):
    return _extremum(self, dim)


def cummin_output_shape(self, dim):
    return _extremum(self, dim)


def logcumsumexp_output_shape(self, dim):
    normalize_dim(dim, self.ndim)
    if not (self.dtype.is_floating_point or self.dtype.is_complex):
        raise NotImplementedError(f'"logcumsumexp_out_cpu" not implemented for \'{_name(self.dtype)}\'')
    return TensorMeta(self.shape, self.dtype)


def _name(dtype):
    return {torch.int64: "Long", torch.int32: "Int", torch.bool: "Bool", torch.uint8: "Byte"}.get(dtype, str(dtype))
