"""Shape functions of scatter ops (lowerings/scatter.py)."""

from __future__ import annotations

import numpy as np

from .common import TensorMeta, normalize_dim
from .indexing import check_gather_scatter, type_name

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
    if self.ndim == 0:
        raise IndexError("select() cannot be applied to a 0-dim tensor.")
    d = normalize_dim(dim, self.ndim)
    size = self.shape[d]
    if not -size <= index < size:
        raise IndexError(
            f"select(): index {index} out of range for tensor of size {list(self.shape)} at dimension {d}"
        )
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


def as_strided_scatter_output_shape(self, src, size, stride, storage_offset=None):
    _slice_mismatch(src, tuple(size))
    if len(size) != len(stride):
        raise RuntimeError(f"mismatch in length of strides and shape")
    offset = storage_offset or 0
    if size and all(s > 0 for s in size):
        last = offset + sum((n - 1) * st for n, st in zip(size, stride))
        if last >= self.numel() or offset < 0:
            raise RuntimeError(
                f"setStorage: sizes {list(size)}, strides {list(stride)}, storage offset {offset}, "
                f"requiring a storage size beyond the tensor's {self.numel()} elements"
            )
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


_SEGMENT_REDUCTIONS = ("max", "mean", "min", "sum", "prod")


def _segment_checks(data, reduce, lengths, offsets, axis, kernel_dtypes=True):
    import torch

    from .common import require_kernel_dtype

    axis = normalize_dim(axis, len(data.shape))
    if reduce not in _SEGMENT_REDUCTIONS:
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got {reduce}")
    if offsets is not None:
        segs, what, kernel = offsets, "offsets", "_segment_reduce_offsets_cpu_kernel1"
    elif lengths is not None:
        segs, what, kernel = lengths, "lengths", "_segment_reduce_lengths_cpu_kernel1"
    else:
        raise RuntimeError("segment_reduce(): Either lengths or offsets must be defined.")
    if len(data.shape) < len(segs.shape):
        raise RuntimeError(f"segment_reduce(): Expected data to have at least as many dimensions as {what}")
    if axis != len(segs.shape) - 1:
        raise RuntimeError(f"segment_reduce(): Expected axis to be the last dimension of {what} but got {axis}.")
    if segs.dtype not in (torch.int32, torch.int64):
        raise NotImplementedError(f"\"{kernel}\" not implemented for '{type_name(segs.dtype)}'")
    require_kernel_dtype("_segment_reduce_cpu", data.dtype, "float")
    count = segs.shape[-1] - (1 if offsets is not None else 0)
    return axis, count


def segment_reduce_output_shape(data, reduce, *, lengths=None, indices=None, offsets=None, axis=0, unsafe=False, initial=None):
    if indices is not None:
        raise RuntimeError("segment_reduce(): indices based reduction is not supported yet.")
    axis, count = _segment_checks(data, reduce, lengths, offsets, axis)
    shape = list(data.shape)
    shape[axis] = count
    return TensorMeta(tuple(shape), data.dtype)


def _segment_reduce_backward_output_shape(grad, output, data, reduce, *, lengths=None, offsets=None, axis=0, initial=None):
    _segment_checks(data, reduce, lengths, offsets, axis)
    return TensorMeta(tuple(data.shape), data.dtype)


def index_reduce_output_shape(self, dim, index, source, reduce, *, include_self=True):
    import torch

    if reduce not in ("prod", "mean", "amax", "amin"):
        raise RuntimeError(f"index_reduce(): Expected reduce to be one of prod, mean, amax or amin but got {reduce}.")
    d = normalize_dim(dim, len(self.shape))
    if len(index.shape) > 1:
        raise IndexError(
            f"index_reduce_(): Index is supposed to be a vector, but got dim: {len(index.shape)} with type: "
            f"{type_name(index.dtype)} and size: {list(index.shape)}"
        )
    if index.dtype not in (torch.int32, torch.int64):
        raise RuntimeError(f"index_reduce_(): Expected dtype int32/int64 for index but got: {type_name(index.dtype)}")
    if source.dtype != self.dtype:
        raise RuntimeError(
            f"index_reduce_(): self ({type_name(self.dtype)}) and source ({type_name(source.dtype)}) must have the same scalar type"
        )
    numel = int(np.prod(index.shape, dtype=np.int64))
    n = source.shape[d] if source.shape else 1
    if numel != n:
        raise RuntimeError(
            f"index_reduce_(): Number of indices ({numel}) should be equal to source.size(dim): ({n}), for dim: {d}"
        )
    self_shape, src_shape = tuple(self.shape) or (1,), tuple(source.shape) or (1,)
    if len(self_shape) != len(src_shape) or any(a != b for k, (a, b) in enumerate(zip(self_shape, src_shape)) if k != d):
        raise RuntimeError(
            "source tensor shape must match self tensor shape, excluding the specified dimension. "
            f"Got self.shape = {list(self.shape)} source.shape = {list(source.shape)}"
        )
    return TensorMeta(self.shape, self.dtype)


def _check_scatter_reduce_arg(reduce):
    if reduce not in ("add", "multiply"):
        raise RuntimeError("reduce argument must be either add or multiply.")


def scatter_reduce_output_shape(self, dim, index, src, *, reduce):
    _check_scatter_reduce_arg(reduce)
    return scatter_src_output_shape(self, dim, index, src)


def scatter_value_reduce_output_shape(self, dim, index, value, *, reduce):
    _check_scatter_reduce_arg(reduce)
    return scatter_value_output_shape(self, dim, index, value)


def _check_masked_index_indices(indices):
    import torch

    for ix in indices:
        if ix is not None and ix.dtype not in (torch.int64, torch.int32):
            raise RuntimeError("_unsafe_masked_index found unexpected index type " + type_name(ix.dtype))


def _unsafe_masked_index_output_shape(self, mask, indices, fill):
    from .indexing import index_meta

    _check_masked_index_indices(indices)
    return index_meta(self, indices)


def _unsafe_masked_index_put_accumulate_output_shape(self, mask, indices, values):
    from .indexing import index_put_meta

    _check_masked_index_indices(indices)
    index_put_meta(self, indices, values, True)
    return TensorMeta(self.shape, self.dtype)
