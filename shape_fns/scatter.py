"""Shape functions of scatter ops (lowerings/scatter.py)."""

from __future__ import annotations

import numpy as np

from .common import TensorMeta, normalize_dim
from .indexing import check_gather_scatter
from .shape_ops import select_dim

_REDUCTIONS = ("sum", "prod", "mean", "amax", "amin")


def _check_src_dtype(self, src):
    if src.dtype != self.dtype:
        raise RuntimeError("scatter(): Expected self.dtype to be equal to src.dtype")


def scatter_src_output_shape(self, dim, index, src):
    _check_src_dtype(self, src)
    check_gather_scatter("scatter", self, dim, index, src)
    return TensorMeta(self.shape, self.dtype)


def scatter_value_output_shape(self, dim, index, value):
    check_gather_scatter("scatter", self, dim, index)
    return TensorMeta(self.shape, self.dtype)


def scatter_add_output_shape(self, dim, index, src):
    _check_src_dtype(self, src)
    check_gather_scatter("scatter", self, dim, index, src)
    return TensorMeta(self.shape, self.dtype)


def scatter_reduce_two_output_shape(self, dim, index, src, reduce, *, include_self=True):
    if reduce not in _REDUCTIONS:
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got {reduce}")
    _check_src_dtype(self, src)
    check_gather_scatter("scatter", self, dim, index, src)
    return TensorMeta(self.shape, self.dtype)


def _slice_mismatch(src, expected):
    if tuple(src.shape) != tuple(expected):
        raise RuntimeError(
            f"expected src to have a size equal to the slice of self. src size = {list(src.shape)}, "
            f"slice size = {list(expected)}"
        )


def select_scatter_output_shape(self, src, dim, index):
    d = select_dim(self, dim, index)
    _slice_mismatch(src, self.shape[:d] + self.shape[d + 1 :])
    return TensorMeta(self.shape, self.dtype)


def slice_scatter_output_shape(self, src, dim=0, start=None, end=None, step=1):
    d = normalize_dim(dim, self.ndim)
    if step <= 0:
        raise RuntimeError("slice step must be positive")
    lo, hi, _ = slice_bounds(self.shape[d], start, end, step)
    n = (hi - lo + step - 1) // step
    _slice_mismatch(src, self.shape[:d] + (n,) + self.shape[d + 1 :])
    return TensorMeta(self.shape, self.dtype)


def diagonal_scatter_output_shape(self, src, offset=0, dim1=0, dim2=1):
    d1, d2 = normalize_dim(dim1, self.ndim), normalize_dim(dim2, self.ndim)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    rows, _ = diagonal_positions(self.shape, offset, d1, d2)
    rest = tuple(s for i, s in enumerate(self.shape) if i not in (d1, d2))
    _slice_mismatch(src, rest + (len(rows),))
    return TensorMeta(self.shape, self.dtype)

def slice_bounds(size, start, end, step):
    """(start, stop, step) of aten's slice: bounds wrap once and then clamp to [0, size]."""
    start = 0 if start is None else start
    end = size if end is None else end
    if start < 0:
        start += size
    if end < 0:
        end += size
    start = min(max(start, 0), size)
    end = min(max(end, start), size)
    return start, end, step

def diagonal_positions(shape, offset, dim1, dim2):
    """Row and column indices of the diagonal `offset` of the (dim1, dim2) plane."""
    n1, n2 = shape[dim1], shape[dim2]
    if offset >= 0:
        length = max(min(n1, n2 - offset), 0)
        rows = np.arange(length)
        cols = rows + offset
    else:
        length = max(min(n1 + offset, n2), 0)
        rows = np.arange(length) - offset
        cols = np.arange(length)
    return rows, cols
