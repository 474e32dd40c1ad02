"""Shape functions of histograms (lowerings/histogram.py) and the other ops there:
grouped reductions (segment_reduce, index_reduce, scatter with a reduce, masked index)
and searchsorted with a scalar, isin, nonzero_static, hash_tensor."""

from __future__ import annotations

import math

import numpy as np
import torch

from .common import TensorMeta, cpp_type_name, normalize_dim, require_kernel_dtype, scalar_type_name
from .scatter import scatter_src_output_shape, scatter_value_output_shape



def _check_bin_ct(bins):
    for dim, b in enumerate(bins):
        if b <= 0:
            raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {b} for dimension {dim}")


def _check_range(edges, n):
    """A given range must have two finite, ordered edges per dimension."""
    if edges is None:
        return
    if len(edges) != 2 * n:
        raise RuntimeError(
            f"torch.histogramdd: for a {n}-dimensional histogram range should have {2 * n} elements, but got "
            f"{len(edges)}"
        )
    for dim in range(n):
        lo, hi = float(edges[2 * dim]), float(edges[2 * dim + 1])
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise RuntimeError(f"torch.histogramdd: dimension {dim}'s range [{_num(lo)}, {_num(hi)}] is not finite")
        if lo > hi:
            raise RuntimeError(
                f"torch.histogramdd: min should not exceed max, but got min {_num(lo)} max {_num(hi)} for dimension "
                f"{dim}"
            )


def _num(x):
    return int(x) if float(x).is_integer() else x


def _require_float(self, kernel, range_from_data):
    # Edges taken from the data go through a kernel without float16/bfloat16.
    require_kernel_dtype(kernel, self.dtype, "float", reduced=not range_from_data)


def _check_weight(self, weight, expected_shape):
    if weight is None:
        return
    if weight.dtype != self.dtype:
        raise RuntimeError(
            "torch.histogramdd: if weight tensor is provided, input tensor and weight tensor should have the same "
            f"dtype, but got input({self.dtype}), and weight({weight.dtype})"
        )
    got = tuple(weight.shape) or (1,)
    if got != tuple(expected_shape):
        raise RuntimeError(
            "torch.histogramdd: if weight tensor is provided it should have the same shape as the input tensor "
            f"excluding its innermost dimension, but got input with shape {list(self.shape)} and weight with shape "
            f"{list(weight.shape)}"
        )


def _check_bin_tensors(self, bins):
    for dim, b in enumerate(bins):
        if b.dtype != self.dtype:
            raise RuntimeError(
                "torch.histogramdd: input tensor and bins tensors should have the same dtype, but got input with "
                f"dtype {cpp_type_name(self.dtype)} and bins for dimension {dim} with dtype {cpp_type_name(b.dtype)}"
            )
        if len(b.shape) != 1:
            raise RuntimeError(
                "torch.histogramdd: bins tensor should have one dimension, but got "
                f"{len(b.shape)} dimensions in the bins tensor for dimension {dim}"
            )
        if b.shape[0] == 0:
            raise RuntimeError(
                "torch.histogramdd: bins tensor should have at least 1 element, but got 0 elements in the bins "
                f"tensor for dimension {dim}"
            )


def _numel(shape):
    return math.prod(shape)


def histc_output_shape(self, bins=100, min=0, max=0):
    require_kernel_dtype("histogram_cpu", self.dtype, "float int")  # Note [Integer histc]
    _check_bin_ct([bins])
    # min/max are runtime values (Note [Argument kinds]): PyTorch's checks on them
    # (finite, min < max) cannot run here; see lower_histc.
    return TensorMeta((bins,), self.dtype)


def histogram_bin_ct_output_shape(self, bins=100, *, range=None, weight=None, density=False):
    _check_bin_ct([bins])
    _require_float(self, "histogramdd", range is None and _numel(self.shape) > 0)
    _check_range(range, 1)
    _check_flat_weight(self, weight)
    return TensorMeta((bins,), self.dtype), TensorMeta((bins + 1,), self.dtype)


def _check_flat_weight(self, weight):
    # histogram checks input and weight flattened to (numel, 1) and (numel,).
    if weight is not None:
        n = _numel(self.shape)
        _check_weight(TensorMeta((n, 1), self.dtype), TensorMeta((_numel(weight.shape),), weight.dtype), (n,))


def histogram_bins_tensor_output_shape(self, bins, *, weight=None, density=False):
    require_kernel_dtype("histogram_cpu", self.dtype, "float")
    _check_bin_tensors(self, [bins])
    _check_flat_weight(self, weight)
    return TensorMeta((bins.shape[0] - 1,), self.dtype), TensorMeta(tuple(bins.shape), bins.dtype)


def _check_dd_input(self):
    if len(self.shape) < 2:
        raise RuntimeError(
            f"torch.histogramdd: input tensor should have at least 2 dimensions, but got {len(self.shape)}"
        )


def _check_dd_bins(self, n_bins):
    n = self.shape[-1]
    if n_bins != n:
        raise RuntimeError(
            f"torch.histogramdd: expected {n} sequences of bin edges for a {n}-dimensional histogram but got {n_bins}"
        )


def _histogramdd_bin_edges_output_shape(self, bins, *, range=None, weight=None, density=False):
    if len(self.shape) < 2:
        raise RuntimeError("torch.histogramdd: input tensor should have at least 2 dimensions")
    _check_dd_bins(self, len(bins))
    _require_float(self, "histogramdd", range is None and _numel(self.shape) > 0)
    _check_range(range, self.shape[-1])
    for b in bins:
        if b + 1 < 0:
            raise RuntimeError("number of steps must be non-negative")
    return [TensorMeta((b + 1,), self.dtype) for b in bins]


def _histogramdd_from_bin_cts_output_shape(self, bins, *, range=None, weight=None, density=False):
    edges = _histogramdd_bin_edges_output_shape(self, bins, range=range, weight=weight, density=density)
    _check_dd_input(self)
    _check_weight(self, weight, tuple(self.shape[:-1]))
    _check_bin_ct(bins)
    require_kernel_dtype("histogram_cpu", self.dtype, "float")
    return TensorMeta(tuple(e.shape[0] - 1 for e in edges), self.dtype)


def _histogramdd_from_bin_tensors_output_shape(self, bins, *, weight=None, density=False):
    _check_dd_input(self)
    _check_dd_bins(self, len(bins))
    _check_bin_tensors(self, bins)
    _check_weight(self, weight, tuple(self.shape[:-1]))
    require_kernel_dtype("histogram_cpu", self.dtype, "float")
    return TensorMeta(tuple(b.shape[0] - 1 for b in bins), self.dtype)


def searchsorted_Scalar_output_shape(sorted_sequence, self, *, out_int32=False, right=False, side=None, sorter=None):
    from .distance import searchsorted_Tensor_output_shape

    searchsorted_Tensor_output_shape(
        sorted_sequence,
        TensorMeta(tuple(sorted_sequence.shape), sorted_sequence.dtype),
        out_int32=out_int32,
        right=right,
        side=side,
        sorter=sorter,
    )
    if len(sorted_sequence.shape) != 1:
        raise RuntimeError(
            "torch.searchsorted(): input value can be a scalar only when boundaries tensor dimension is 1, but we got "
            f"boundaries tensor dim({len(sorted_sequence.shape)}) and input value's dim(0) numel(1)"
        )
    if sorted_sequence.dtype is torch.bool:
        require_kernel_dtype("searchsorted_out_cpu", sorted_sequence.dtype, "int float")
    return TensorMeta((), torch.int32 if out_int32 else torch.int64)


def isin_Tensor_Tensor_output_shape(elements, test_elements, *, assume_unique=False, invert=False):
    from .common import promote_dtypes

    for t in (elements, test_elements):
        if t.dtype is torch.bool or t.dtype.is_complex:
            raise RuntimeError(f"Unsupported input type encountered for isin(): {scalar_type_name(t.dtype)}")
    promote_dtypes(elements, test_elements)
    return TensorMeta(tuple(elements.shape), torch.bool)


def nonzero_static_output_shape(self, *, size, fill_value=-1):
    if size < 0:
        raise RuntimeError("nonzero_static: 'size' must be an non-negative integer")
    return TensorMeta((size, len(self.shape)), torch.int64)


def hash_tensor_output_shape(self, dim=(), *, keepdim=False, mode=0):
    from .common import reduction_dims

    if mode != 0:
        raise RuntimeError(f"Unknown hash_tensor mode: {mode}")
    if self.dtype.is_complex:
        require_kernel_dtype("xor_sum_cpu", self.dtype, "int float bool")
    ndim = len(self.shape)
    dims = reduction_dims(dim, ndim)
    if _numel(self.shape) == 0:
        if not dim:
            raise RuntimeError(
                "hash_tensor: Expected reduction dim to be specified for input.numel() == 0. Specify the reduction "
                "dim with the 'dim' argument."
            )
        for d in dims:
            if self.shape[d] == 0:
                raise IndexError(f"hash_tensor: Expected reduction dim {d} to have non-zero size.")
    if keepdim:
        shape = tuple(1 if k in dims else s for k, s in enumerate(self.shape))
    else:
        shape = tuple(s for k, s in enumerate(self.shape) if k not in dims)
    return TensorMeta(shape, torch.uint64)


_SEGMENT_REDUCTIONS = ("max", "mean", "min", "sum", "prod")


def _segment_checks(data, reduce, lengths, offsets, axis, kernel_dtypes=True):
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
        raise NotImplementedError(f"\"{kernel}\" not implemented for '{scalar_type_name(segs.dtype)}'")
    require_kernel_dtype("_segment_reduce_cpu", data.dtype, "float")
    count = segs.shape[-1] - (1 if offsets is not None else 0)
    return axis, count


def segment_reduce_output_shape(
    data, reduce, *, lengths=None, indices=None, offsets=None, axis=0, unsafe=False, initial=None
):
    if indices is not None:
        raise RuntimeError("segment_reduce(): indices based reduction is not supported yet.")
    axis, count = _segment_checks(data, reduce, lengths, offsets, axis)
    shape = list(data.shape)
    shape[axis] = count
    return TensorMeta(tuple(shape), data.dtype)


def _segment_reduce_backward_output_shape(
    grad, output, data, reduce, *, lengths=None, offsets=None, axis=0, initial=None
):
    _segment_checks(data, reduce, lengths, offsets, axis)
    return TensorMeta(tuple(data.shape), data.dtype)


def index_reduce_output_shape(self, dim, index, source, reduce, *, include_self=True):
    if reduce not in ("prod", "mean", "amax", "amin"):
        raise RuntimeError(f"index_reduce(): Expected reduce to be one of prod, mean, amax or amin but got {reduce}.")
    d = normalize_dim(dim, len(self.shape))
    if len(index.shape) > 1:
        raise IndexError(
            f"index_reduce_(): Index is supposed to be a vector, but got dim: {len(index.shape)} with type: "
            f"{scalar_type_name(index.dtype)} and size: {list(index.shape)}"
        )
    if index.dtype not in (torch.int32, torch.int64):
        raise RuntimeError(
            f"index_reduce_(): Expected dtype int32/int64 for index but got: {scalar_type_name(index.dtype)}"
        )
    if source.dtype != self.dtype:
        raise RuntimeError(
            f"index_reduce_(): self ({scalar_type_name(self.dtype)}) and source ({scalar_type_name(source.dtype)}) "
            "must have the same scalar type"
        )
    numel = int(np.prod(index.shape, dtype=np.int64))
    n = source.shape[d] if source.shape else 1
    if numel != n:
        raise RuntimeError(
            f"index_reduce_(): Number of indices ({numel}) should be equal to source.size(dim): ({n}), for dim: {d}"
        )
    self_shape, src_shape = tuple(self.shape), tuple(source.shape)
    if (
        len(self_shape) != len(src_shape)
        or any(a != b for k, (a, b) in enumerate(zip(self_shape, src_shape)) if k != d)
        if self_shape and src_shape
        else self_shape != src_shape
    ):  # with a scalar on either side, whole shapes
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
    for ix in indices:
        if ix is not None and ix.dtype not in (torch.int64, torch.int32):
            raise RuntimeError("_unsafe_masked_index found unexpected index type " + scalar_type_name(ix.dtype))


def _unsafe_masked_index_output_shape(self, mask, indices, fill):
    from .indexing import index_meta

    _check_masked_index_indices(indices)
    return index_meta(self, indices)


def _unsafe_masked_index_put_accumulate_output_shape(self, mask, indices, values):
    from .indexing import index_put_meta

    _check_masked_index_indices(indices)
    index_put_meta(self, indices, values, True)
    return TensorMeta(self.shape, self.dtype)
