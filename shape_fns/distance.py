"""Shape functions of pairwise distances and sorted search (lowerings/distance.py)."""

from __future__ import annotations

import torch

from .common import TensorMeta, broadcast_shapes, require_kernel_dtype
from .common import scalar_type_name


def _check_cdist(x1, x2, p):
    if x1.ndim < 2:
        raise RuntimeError(f"cdist only supports at least 2D tensors, X1 got: {x1.ndim}D")
    if x2.ndim < 2:
        raise RuntimeError(f"cdist only supports at least 2D tensors, X2 got: {x2.ndim}D")
    if x1.shape[-1] != x2.shape[-1]:
        raise RuntimeError(
            f"X1 and X2 must have the same number of columns. X1: {x1.shape[-1]} X2: {x2.shape[-1]}"
        )
    for name, t in (("X1", x1), ("X2", x2)):
        if not t.dtype.is_floating_point:
            raise RuntimeError(f"cdist only supports floating-point dtypes, {name} got: {scalar_type_name(t.dtype)}")
    if p < 0:
        raise RuntimeError("cdist only supports non-negative p values")


def _cdist_forward_output_shape(x1, x2, p, compute_mode):
    _check_cdist(x1, x2, p)
    if compute_mode is not None and compute_mode not in (0, 1, 2):
        raise RuntimeError(f"{compute_mode} is not a valid value for compute_mode")
    batch = broadcast_shapes(x1.shape[:-2], x2.shape[:-2])
    return TensorMeta(batch + (x1.shape[-2], x2.shape[-2]), x1.dtype)


def _cdist_backward_output_shape(grad, x1, x2, p, cdist):
    _check_cdist(x1, x2, p)
    if 0 in x1.shape or 0 in x2.shape:  # PyTorch returns zeros like x1
        return TensorMeta(x1.shape, x1.dtype)
    return TensorMeta(broadcast_shapes(x1.shape[:-2], x2.shape[:-2]) + tuple(x1.shape[-2:]), x1.dtype)


def _check_pdist(self, p):
    if self.ndim != 2:
        raise RuntimeError(f"pdist only supports 2D tensors, got: {self.ndim}D")
    if not self.dtype.is_floating_point:
        raise RuntimeError("pdist only supports floating-point dtypes")
    if p < 0:
        raise RuntimeError("pdist only supports non-negative p values")


def _pdist_forward_output_shape(self, p=2.0):
    _check_pdist(self, p)
    n = self.shape[0]
    return TensorMeta((n * (n - 1) // 2,), self.dtype)


def _pdist_backward_output_shape(grad, self, p, pdist):
    _check_pdist(self, p)
    return TensorMeta(self.shape, self.dtype)


def bucketize_Tensor_output_shape(self, boundaries, *, out_int32=False, right=False):
    if boundaries.ndim != 1:
        raise RuntimeError(f"boundaries tensor must be 1 dimension, but got dim({boundaries.ndim})")
    require_kernel_dtype("searchsorted_out_cpu", self.dtype, "int float")
    return TensorMeta(self.shape, torch.int32 if out_int32 else torch.int64)


def searchsorted_Tensor_output_shape(sorted_sequence, self, *, out_int32=False, right=False, side=None, sorter=None):
    if side is not None and side not in ("left", "right"):
        raise RuntimeError(f"torch.searchsorted(): side can only be 'left' or 'right' but got {side}")
    if side == "left" and right:
        raise RuntimeError(
            "torch.searchsorted(): side and right can't be set to opposites, got side of left while right was True"
        )
    if sorter is not None:
        if sorter.dtype is not torch.int64:
            raise TypeError(f"torch.searchsorted(): sorter must be a tensor of long dtype but got dtype {sorter.dtype}")
        if tuple(sorter.shape) != tuple(sorted_sequence.shape):
            raise RuntimeError(
                "torch.searchsorted(): boundary and sorter must have the same size, but got boundary tensor "
                f"{list(sorted_sequence.shape)}and got sorter tensor {list(sorter.shape)}"
            )
    if sorted_sequence.ndim > 1 and tuple(sorted_sequence.shape[:-1]) != tuple(self.shape[:-1]):
        raise RuntimeError(
            "torch.searchsorted(): boundaries tensor should be 1 dimension or the first N-1 dimensions of boundaries "
            f"tensor and input value tensor must match, but we got boundaries tensor {list(sorted_sequence.shape)} "
            f"and input value tensor {list(self.shape)}"
        )
    require_kernel_dtype("searchsorted_out_cpu", self.dtype, "int float")
    return TensorMeta(self.shape, torch.int32 if out_int32 else torch.int64)
