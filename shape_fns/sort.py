"""Shape functions of the ops in lowerings/sort.py."""

from __future__ import annotations

import torch

from .common import TensorMeta, normalize_dim, require_kernel_dtype


def _pair(shape, dtype):
    return TensorMeta(tuple(shape), dtype), TensorMeta(tuple(shape), torch.int64)


def _reduce_one(self, dim, keepdim):
    if self.ndim == 0:
        return ()
    d = normalize_dim(dim, self.ndim)
    if keepdim:
        return self.shape[:d] + (1,) + self.shape[d + 1 :]
    return self.shape[:d] + self.shape[d + 1 :]


def sort_output_shape(self, dim=-1, descending=False):
    normalize_dim(dim, self.ndim)
    if self.dtype.is_complex:
        raise RuntimeError("Sort does not support complex dtypes on CPU")
    return _pair(self.shape, self.dtype)


def sort_stable_output_shape(self, *, stable, dim=-1, descending=False):
    return sort_output_shape(self, dim, descending)


def topk_output_shape(self, k, dim=-1, largest=True, sorted=True):
    if self.dtype.is_complex or self.dtype is torch.bool:
        raise RuntimeError(f"topk does not support {'complex' if self.dtype.is_complex else 'bool'} dtypes on CPU")
    d = normalize_dim(dim, self.ndim)
    size = self.shape[d] if self.ndim else 1
    if not 0 <= k <= size:
        raise RuntimeError("selected index k out of range")
    if self.ndim == 0:
        return _pair((), self.dtype)
    return _pair(self.shape[:d] + (k,) + self.shape[d + 1 :], self.dtype)


def kthvalue_output_shape(self, k, dim=-1, keepdim=False):
    d = normalize_dim(dim, self.ndim)
    size = self.shape[d] if self.ndim else 1
    if not 1 <= k <= size:
        raise RuntimeError(f"kthvalue(): selected number k out of range for dimension {d}")
    require_kernel_dtype("kthvalue_cpu", self.dtype, "int float")
    return _pair(_reduce_one(self, dim, keepdim), self.dtype)


def median_output_shape(self):
    require_kernel_dtype("median_cpu", self.dtype, "int float")
    return TensorMeta((), self.dtype)


def nanmedian_output_shape(self):
    return median_output_shape(self)


def _median_dim(op, self, dim, keepdim):
    d = normalize_dim(dim, self.ndim)
    if self.ndim and self.shape[d] == 0:
        raise IndexError(f"{op}(): Expected reduction dim {d} to have non-zero size.")
    require_kernel_dtype("median_out", self.dtype, "int float")
    return _pair(_reduce_one(self, dim, keepdim), self.dtype)


def median_dim_output_shape(self, dim, keepdim=False):
    return _median_dim("median", self, dim, keepdim)


def nanmedian_dim_output_shape(self, dim, keepdim=False):
    return _median_dim("nanmedian", self, dim, keepdim)


def mode_output_shape(self, dim=-1, keepdim=False):
    normalize_dim(dim, self.ndim)
    require_kernel_dtype("mode_cpu", self.dtype, "bool int float")
    return _pair(_reduce_one(self, dim, keepdim), self.dtype)
