"""Shape functions of embedding_bag and its backward ops. The auxiliary outputs follow
PyTorch CPU's shapes, which differ from its meta kernel's (see lowerings/embedding_bag.py)."""

from __future__ import annotations

import torch

from .common import TensorMeta
from .common import scalar_type_name

_MODES = {0: "sum", 1: "mean", 2: "max"}


def bag_counts(num_offsets, mode, include_last_offset, forward_only):
    """(number of bags, length of bag_size) on CPU: with include_last_offset the last
    offset only closes the last bag, yet CPU's forward-only sum keeps one bag_size
    entry per offset."""
    num_bags = num_offsets - 1 if include_last_offset else num_offsets
    num_bags = max(num_bags, 0)
    size_len = num_offsets if (forward_only and mode == 0 and include_last_offset) else num_bags
    return num_bags, size_len


def _check_forward(weight, indices, offsets, mode, sparse, per_sample_weights, include_last_offset):
    if weight.ndim != 2:
        raise RuntimeError(f"weight has to be a 2D Tensor, but got Tensor of dimension {weight.ndim}")
    if indices.ndim != 1:
        raise RuntimeError(f"input has to be a 1D or 2D Tensor, but got Tensor of dimension {indices.ndim}")
    if offsets.ndim != 1:
        raise RuntimeError(f"offsets has to be a 1D Tensor, but got Tensor of dimension {offsets.ndim}")
    for name, t in (("indices", indices), ("offsets", offsets)):
        if t.dtype not in (torch.int64, torch.int32):
            raise RuntimeError(
                f"embedding_bag: Expected tensor for argument #1 '{name}' to have one of the following scalar types: "
                f"Long, Int; but got {scalar_type_name(t.dtype)} instead"
            )
    if mode not in _MODES:
        raise RuntimeError(f"embedding_bag: mode must be 0 (sum), 1 (mean) or 2 (max), got {mode}")
    if include_last_offset and offsets.shape[0] < 1:
        raise RuntimeError("include_last_offset: number of offsets should be at least 1")
    if sparse and mode == 2:
        raise RuntimeError("embedding_bag: sparse gradients are not supported in max mode")
    if per_sample_weights is not None:
        if mode != 0:
            raise NotImplementedError(
                "embedding_bag: per_sample_weights was not None. per_sample_weights is only supported for "
                f"mode='sum' (got mode='{_MODES[mode]}'). Please open a feature request on GitHub."
            )
        if per_sample_weights.dtype != weight.dtype:
            raise RuntimeError(
                f"expected scalar type {scalar_type_name(weight.dtype)} but found "
                f"{scalar_type_name(per_sample_weights.dtype)}"
            )
        if per_sample_weights.ndim != 1 or per_sample_weights.shape[0] != indices.shape[0]:
            raise RuntimeError(
                "embedding_bag: per_sample_weights must have the same shape as indices, got "
                f"{list(per_sample_weights.shape)} and {list(indices.shape)}"
            )


def _forward_meta(
    weight, indices, offsets, mode, sparse, per_sample_weights, include_last_offset, padding_idx, forward_only
):
    _check_forward(weight, indices, offsets, mode, sparse, per_sample_weights, include_last_offset)
    num_bags, size_len = bag_counts(offsets.shape[0], mode, include_last_offset, forward_only)
    long = indices.dtype  # the auxiliary outputs take the indices' integer type
    offset2bag = (indices.shape[0],) if (mode != 0 or padding_idx >= 0) else (0,)
    max_indices = (num_bags, weight.shape[1]) if mode == 2 else (size_len,)
    return (
        TensorMeta((num_bags, weight.shape[1]), weight.dtype),
        TensorMeta(offset2bag, long),
        TensorMeta((size_len,), long),
        TensorMeta(max_indices, long),
    )


def _embedding_bag_output_shape(
    weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
    per_sample_weights=None, include_last_offset=False, padding_idx=-1,
):
    return _forward_meta(
        weight, indices, offsets, mode, sparse, per_sample_weights, include_last_offset, padding_idx, False
    )


def _embedding_bag_forward_only_output_shape(
    weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
    per_sample_weights=None, include_last_offset=False, padding_idx=-1,
):
    return _forward_meta(
        weight, indices, offsets, mode, sparse, per_sample_weights, include_last_offset, padding_idx, True
    )


def _embedding_bag_backward_output_shape(
    grad, indices, offsets, offset2bag, bag_size, maximum_indices, num_weights, scale_grad_by_freq,
    mode, sparse, per_sample_weights, padding_idx=-1,
):
    if sparse:
        raise NotImplementedError("embedding_bag with sparse=True has no JAX lowering: its gradient is a sparse tensor")
    return TensorMeta((num_weights, grad.shape[1]), grad.dtype)


def _embedding_bag_dense_backward_output_shape(
    grad, indices, offset2bag, bag_size, maximum_indices, num_weights, scale_grad_by_freq, mode,
    per_sample_weights, padding_idx=-1,
):
    if mode != 2 and offset2bag.numel() != indices.numel():
        raise RuntimeError(
            "_embedding_bag_dense_backward: offset2bag must have one entry per index "
            f"(got {offset2bag.numel()} for {indices.numel()} indices)"
        )
    return TensorMeta((num_weights, grad.shape[1]), grad.dtype)


def _embedding_bag_per_sample_weights_backward_output_shape(
    grad, weight, indices, offsets, offset2bag, mode, padding_idx=-1
):
    if mode != 0:
        raise RuntimeError("embedding_bag_backward: per_sample_weights only supported for mode='sum'")
    return TensorMeta((indices.shape[0],), grad.dtype)
