"""Shape functions of gathering and index-driven writes (lowerings/indexing.py), and the
shape rules of index.Tensor / index_put shared with runtime/supported/indexing.py."""

from __future__ import annotations

import torch

from .common import TensorMeta, broadcast_shapes, cpp_type_name, normalize_dim, scalar_type_name

_INDEX_DTYPES = (torch.int64, torch.int32)


def _shape1(t):
    return t.shape if t.shape else (1,)


def index_select_output_shape(self, dim, index):
    d = normalize_dim(dim, self.ndim)
    if index.ndim > 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    if index.dtype not in _INDEX_DTYPES:
        raise RuntimeError("index_select(): Expected dtype int32 or int64 for index")
    if not self.shape:
        if index.numel() != 1:
            raise RuntimeError(f"index_select(): Index to scalar can have only 1 value, got {index.numel()} value(s)")
        return TensorMeta((), self.dtype)
    shape = list(self.shape)
    shape[d] = index.numel()
    return TensorMeta(tuple(shape), self.dtype)


def check_gather_scatter(op, self, dim, index, src=None):
    """ATen's gather_shape_check / scatter_shape_check."""
    d = normalize_dim(dim, self.ndim)
    if index.numel() == 0:
        return d
    if index.dtype not in _INDEX_DTYPES:
        raise RuntimeError(f"{op}(): Expected dtype int32/int64 for index")
    if max(index.ndim, 1) != max(self.ndim, 1):
        raise RuntimeError("Index tensor must have the same number of dimensions as input tensor")
    if src is not None and src.ndim and max(index.ndim, 1) != max(src.ndim, 1):
        raise RuntimeError("Index tensor must have the same number of dimensions as src tensor")
    ishape, sshape = _shape1(index), _shape1(self)
    for i, n in enumerate(ishape):
        if op == "gather":
            if i != d and n > sshape[i]:
                raise RuntimeError(
                    f"Size does not match at dimension {i} expected index {list(index.shape)} to be no larger "
                    f"than self {list(self.shape)} apart from dimension {d}"
                )
        elif (i != d and n > sshape[i]) or (src is not None and src.ndim and n > _shape1(src)[i]):
            if src is not None and src.ndim:
                raise RuntimeError(
                    f"Expected index {list(index.shape)} to be no larger than self {list(self.shape)} apart from "
                    f"dimension {d} and to be no larger size than src {list(src.shape)}"
                )
            raise RuntimeError(
                f"Expected index {list(index.shape)} to be no larger than self {list(self.shape)} apart from dimension "
                f"{d}"
            )
    return d


def gather_output_shape(self, dim, index, *, sparse_grad=False):
    check_gather_scatter("gather", self, dim, index)
    return TensorMeta(index.shape, self.dtype)


def take_output_shape(self, index):
    if index.dtype is not torch.int64:
        raise RuntimeError(f"take(): Expected a long tensor for index, but got {scalar_type_name(index.dtype)}")
    return TensorMeta(index.shape, self.dtype)


def put_output_shape(self, index, source, accumulate=False):
    if index.dtype is not torch.int64:
        raise RuntimeError(f"put_(): Expected a long tensor for index, but got {scalar_type_name(index.dtype)}")
    if source.dtype != self.dtype:
        raise RuntimeError(
            "put_(): self and source expected to have the same dtype, but got "
            f"self.dtype = {scalar_type_name(self.dtype)} and source.dtype = {scalar_type_name(source.dtype)}"
        )
    if source.numel() != index.numel():
        raise IndexError(
            "put_(): Expected source and index to have the same number of elements, but got "
            f"source.numel() = {source.numel()}, index.numel() = {index.numel()}"
        )
    return TensorMeta(self.shape, self.dtype)


def _check_index_along(op, self, dim, index, index_dtypes=_INDEX_DTYPES):
    d = normalize_dim(dim, self.ndim)
    if index.ndim > 1:
        raise IndexError(f"{op}(): Index is supposed to be a vector")
    if index.dtype not in index_dtypes:
        want = "int64" if index_dtypes == (torch.int64,) else "int32 or int64"
        raise IndexError(f"{op}(): Expected dtype {want} for index.")
    return d


def index_add_output_shape(self, dim, index, source, *, alpha=1):
    d = _check_index_along("index_add_", self, dim, index)
    if source.dtype != self.dtype:
        raise RuntimeError(
            f"index_add_(): self ({scalar_type_name(self.dtype)}) and source ({scalar_type_name(source.dtype)}) must "
            "have the same scalar type"
        )
    # with a scalar on either side the whole shapes must match
    if (source.ndim != self.ndim or any(source.shape[i] != self.shape[i] for i in range(self.ndim) if i != d)) if (
        source.ndim and self.ndim
    ) else tuple(source.shape) != tuple(self.shape):
        raise RuntimeError(
            "source tensor shape must match self tensor shape, excluding the specified dimension. "
            f"Got self.shape = {list(self.shape)} source.shape = {list(source.shape)}"
        )
    n = _shape1(source)[d] if source.ndim else 1
    if index.numel() != n:
        raise RuntimeError(
            f"index_add_(): Number of indices ({index.numel()}) should be equal to source.size(dim): ({n}), for dim: "
            f"{d}"
        )
    return TensorMeta(self.shape, self.dtype)


def index_copy_output_shape(self, dim, index, source):
    if index.ndim <= 1 and index.dtype != torch.int64:
        raise RuntimeError(f"index_copy_(): Expected a long tensor for index, but got {scalar_type_name(index.dtype)}")
    d = _check_index_along("index_copy_", self, dim, index, (torch.int64,))
    if source.dtype != self.dtype:
        raise RuntimeError(
            f"index_copy_(): self and source expected to have the same dtype, but got (self) "
            f"{scalar_type_name(self.dtype)} and (source) {scalar_type_name(source.dtype)}"
        )
    n = _shape1(source)[d] if source.ndim else 1
    if index.numel() != n:
        raise IndexError(
            f"index_copy_(): Number of indices ({index.numel()}) should be equal to source.size(dim) ({n})"
        )
    return TensorMeta(self.shape, self.dtype)


def index_fill_int_Scalar_output_shape(self, dim, index, value):
    _check_index_along("index_fill_", self, dim, index, (torch.int64,))
    return TensorMeta(self.shape, self.dtype)


def index_fill_int_Tensor_output_shape(self, dim, index, value):
    if value.ndim:
        raise RuntimeError(
            f"index_fill_ only supports a 0-dimensional value tensor, but got tensor with {value.ndim} dimension(s)."
        )
    return index_fill_int_Scalar_output_shape(self, dim, index, 0)


def _check_mask(op, mask):
    if mask.dtype is not torch.bool:
        raise RuntimeError(f"{op} only supports boolean masks, but got mask with dtype {cpp_type_name(mask.dtype)}")


def _check_fill_value(self, value_dtype_is_complex):
    if value_dtype_is_complex and not self.dtype.is_complex:
        raise RuntimeError(f"value cannot be converted to type {scalar_type_name(self.dtype).lower()} without overflow")


def masked_fill_Scalar_output_shape(self, mask, value):
    # A traced Scalar still has its dtype here: a complex fill of a real tensor is an error.
    _check_fill_value(self, isinstance(value, complex) or getattr(getattr(value, "dtype", None), "kind", "") == "c")
    _check_mask("masked_fill_", mask)
    return TensorMeta(broadcast_shapes(self.shape, mask.shape), self.dtype)


def masked_fill_Tensor_output_shape(self, mask, value):
    if value.ndim:
        raise RuntimeError(
            f"masked_fill_ only supports a 0-dimensional value tensor, but got tensor with {value.ndim} dimension(s)."
        )
    _check_fill_value(self, value.dtype.is_complex)
    return masked_fill_Scalar_output_shape(self, mask, 0)


def masked_scatter_output_shape(self, mask, source):
    _check_mask("masked_scatter_", mask)
    if source.dtype != self.dtype:
        raise RuntimeError(
            "masked_scatter: expected self and source to have same dtypes but got"
            f"{scalar_type_name(self.dtype)} and {scalar_type_name(source.dtype)}"
        )
    return TensorMeta(broadcast_shapes(self.shape, mask.shape), self.dtype)


def masked_scatter_backward_output_shape(grad_output, mask, sizes):
    return TensorMeta(tuple(sizes), grad_output.dtype)


def masked_select_meta(self, mask, count):
    _check_mask("masked_select:", mask)
    return TensorMeta((count,), self.dtype)


# ---------------------------------------------------------------- index.Tensor, index_put


def check_indices(self, indices):
    """PyTorch's checks on `Tensor?[] indices` (after bool masks became integer ones
    where the runtime could): dtypes and count."""
    count = 0
    for ix in indices:
        if ix is None:
            count += 1
            continue
        if ix.dtype not in (torch.int64, torch.int32, torch.uint8, torch.bool):
            raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
        count += ix.ndim if ix.dtype in (torch.bool, torch.uint8) else 1
    if count > self.ndim:
        raise IndexError(f"too many indices for tensor of dimension {self.ndim}")


def index_result_shape(shape, indices):
    """The shape of self[indices] for integer index tensors (NumPy's rule)."""
    positions = [i for i, ix in enumerate(indices) if ix is not None]
    if not positions:
        return tuple(shape)
    try:
        bshape = broadcast_shapes(*[indices[i].shape for i in positions])
    except RuntimeError:
        shapes = ", ".join(str(list(indices[i].shape)) for i in positions)
        raise IndexError(
            f"shape mismatch: indexing tensors could not be broadcast together with shapes {shapes}"
        ) from None
    adjacent = positions == list(range(positions[0], positions[-1] + 1))
    rest = [s for i, s in enumerate(shape) if i >= len(indices) or indices[i] is None]
    if adjacent:
        before = list(shape[: positions[0]])
        after = [s for i, s in enumerate(shape) if i > positions[-1]]
        return tuple(before + list(bshape) + after)
    return tuple(list(bshape) + rest)


def index_meta(self, indices):
    check_indices(self, indices)
    for ix in indices:
        if ix is not None and ix.dtype in (torch.bool, torch.uint8):
            raise RuntimeError("index with a bool mask has a data-dependent shape: the runtime resolves it first")
    return TensorMeta(index_result_shape(self.shape, list(indices)), self.dtype)


def index_put_meta(self, indices, values, accumulate):
    check_indices(self, indices)
    if values.dtype != self.dtype:
        raise RuntimeError(
            "Index put requires the source and destination dtypes match, got "
            f"{scalar_type_name(self.dtype)} for the destination and {scalar_type_name(values.dtype)} for the source."
        )
    masks = [i for i, ix in enumerate(indices) if ix is not None and ix.dtype in (torch.bool, torch.uint8)]
    if not masks:
        result = index_result_shape(self.shape, list(indices))
        if broadcast_shapes_or_none(values.shape, result) != tuple(result):
            raise RuntimeError(
                f"shape mismatch: value tensor of shape {list(values.shape)} cannot be broadcast to indexing "
                f"result of shape {list(result)}"
            )
    return TensorMeta(self.shape, self.dtype)


def broadcast_shapes_or_none(*shapes):
    try:
        return broadcast_shapes(*shapes)
    except RuntimeError:
        return None


def index_gather_output_shape(self, indices):
    return index_meta(self, indices)


def index_put_values_output_shape(self, indices, values, accumulate):
    return index_put_meta(self, indices, values, accumulate)


def masked_select_positions_output_shape(self, mask, positions):
    return masked_select_meta(self, mask, positions.shape[0])
