"""Lowerings of embedding_bag (modes 0 sum, 1 mean, 2 max) and its backward ops.

Bags are segments of `indices` that start at each offset; a row equal to padding_idx
(-1: none) takes no part in its bag. Besides the output the forward returns PyTorch
CPU's auxiliary tensors, in CPU's shapes: offset2bag (the bag of each index; empty in
sum mode without padding, as on CPU), bag_size (rows per bag; zeros in sum mode, as on CPU) and max_indices (the
weight row chosen per bag and feature in max mode, else bag_size again). The backward
ops recompute bag membership from the offsets where they have them, so they do not
depend on the auxiliary values. Out-of-range rows read as NaN (Note [Out-of-bounds
indices] in lowerings/indexing.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..shape_fns.embedding_bag import bag_counts
from .common import opmath
from .indexing import bounded, take_rows

SUM, MEAN, MAX = 0, 1, 2


def _bags(indices, offsets, num_bags, mode):
    """The bag of every index: bag b starts at offsets[b]. An index before the first
    offset belongs to no bag (num_bags). Indices past a trailing include_last_offset
    entry (malformed input) are inconsistent on CPU: its plain sum kernel stops the last
    bag there, its other kernels run it to the end of `indices`. We follow the sum
    kernel in sum mode and run to the end otherwise.

    The bag is the number of offsets at or before the index, less one: a running sum of
    how many bags start at each position. (A binary search per index is a loop in
    XLA, 2.5x slower for 100,000 indices in 10,000 bags.)"""
    n = indices.shape[0]
    pos = jnp.arange(n, dtype=offsets.dtype)
    starts = jnp.zeros((n + 1,), jnp.int64).at[jnp.clip(offsets[:num_bags], 0, n)].add(1)
    bag = jnp.cumsum(starts[:n]) - 1
    outside = bag < 0
    if mode == SUM and offsets.shape[0] > num_bags:
        outside = outside | (pos >= offsets[num_bags])
    return jnp.where(outside, num_bags, bag)


def _forward(weight, indices, offsets, mode, per_sample_weights, include_last_offset, padding_idx, forward_only):
    n, d = weight.shape
    num_bags, bag_size_len = bag_counts(offsets.shape[0], mode, include_last_offset, forward_only)
    bag = _bags(indices, offsets, num_bags, mode)
    keep = (indices != padding_idx) & (bag < num_bags)
    w = opmath(weight)
    rows = take_rows(w, bounded(indices, n, wrap=False))
    counts = jax.ops.segment_sum(keep.astype(jnp.int64), bag, num_segments=num_bags)
    zero = jnp.zeros((), w.dtype)
    if mode == MAX:
        masked = jnp.where(keep[:, None], rows, -jnp.inf)
        best = jax.ops.segment_max(masked, bag, num_segments=num_bags)
        out = jnp.where(counts[:, None] > 0, best, zero)
        # The first row reaching each bag's maximum, per feature (ties cannot differ in value).
        pos = jnp.arange(indices.shape[0])[:, None]
        hit = keep[:, None] & (rows == jnp.take(best, jnp.minimum(bag, num_bags - 1), axis=0))
        first = jax.ops.segment_min(jnp.where(hit, pos, indices.shape[0]), bag, num_segments=num_bags)
        # jnp.take rejects an empty source even when every position is filled.
        chosen = jnp.take(indices.astype(jnp.int64), first, mode="fill", fill_value=0) if indices.shape[0] else 0
        max_indices = jnp.where(counts[:, None] > 0, chosen, 0)
        max_indices = jnp.broadcast_to(max_indices, (num_bags, d))
    else:
        contrib = jnp.where(keep[:, None], rows, zero)
        if per_sample_weights is not None:
            contrib = contrib * opmath(per_sample_weights)[:, None]
        out = jax.ops.segment_sum(contrib, bag, num_segments=num_bags)
        if mode == MEAN:
            out = out / jnp.maximum(counts, 1).astype(out.dtype)[:, None]
    bag_size = jnp.concatenate([counts, jnp.zeros((bag_size_len - num_bags,), jnp.int64)])
    if mode == SUM:
        bag_size = jnp.zeros_like(bag_size)  # CPU leaves it unset (zeros) in sum mode
    if mode != MAX:
        max_indices = bag_size
    offset2bag = bag if (mode != SUM or padding_idx >= 0) else jnp.zeros((0,), jnp.int64)
    it = indices.dtype
    return out.astype(weight.dtype), offset2bag.astype(it), bag_size.astype(it), max_indices.astype(it)


def lower__embedding_bag(
    weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
    per_sample_weights=None, include_last_offset=False, padding_idx=-1,
):
    return _forward(weight, indices, offsets, mode, per_sample_weights, include_last_offset, padding_idx, False)


def lower__embedding_bag_forward_only(
    weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
    per_sample_weights=None, include_last_offset=False, padding_idx=-1,
):
    return _forward(weight, indices, offsets, mode, per_sample_weights, include_last_offset, padding_idx, True)


def _dense_backward(
    grad, indices, bag, num_weights, scale_grad_by_freq, mode, per_sample_weights, padding_idx, max_indices
):
    g = opmath(grad)
    num_bags, d = g.shape
    idx = bounded(indices, num_weights, wrap=False)
    keep = (indices != padding_idx) & (bag < num_bags)
    freq = jnp.zeros((num_weights,), g.dtype).at[idx].add(1, mode="drop")
    zero = jnp.zeros((), g.dtype)
    if mode == MAX:
        counts = jax.ops.segment_sum(keep.astype(jnp.int64), bag, num_segments=num_bags)
        rows = bounded(max_indices, num_weights, wrap=False)
        contrib = jnp.where((counts > 0)[:, None], g, zero)
        if scale_grad_by_freq:
            contrib = contrib / jnp.take(freq, rows, mode="fill", fill_value=1)
        cols = jnp.broadcast_to(jnp.arange(d), rows.shape)
        out = jnp.zeros((num_weights, d), g.dtype).at[rows, cols].add(contrib, mode="drop")
        return out.astype(grad.dtype)
    per_row = jnp.take(g, bag, axis=0, mode="fill", fill_value=0)
    if mode == MEAN:
        counts = jax.ops.segment_sum(keep.astype(jnp.int64), bag, num_segments=num_bags)
        per_row = per_row / jnp.maximum(jnp.take(counts, bag, mode="fill", fill_value=1), 1).astype(g.dtype)[:, None]
    if per_sample_weights is not None:
        per_row = per_row * opmath(per_sample_weights)[:, None]
    if scale_grad_by_freq:
        per_row = per_row / jnp.take(freq, idx, mode="fill", fill_value=1)[:, None]
    per_row = jnp.where(keep[:, None], per_row, zero)
    return jnp.zeros((num_weights, d), g.dtype).at[idx].add(per_row, mode="drop").astype(grad.dtype)


def lower__embedding_bag_backward(
    grad, indices, offsets, offset2bag, bag_size, maximum_indices, num_weights, scale_grad_by_freq,
    mode, sparse, per_sample_weights, padding_idx=-1,
):
    bag = _bags(indices, offsets, grad.shape[0], mode)
    return _dense_backward(
        grad, indices, bag, num_weights, scale_grad_by_freq, mode, per_sample_weights, padding_idx, maximum_indices
    )


def lower__embedding_bag_dense_backward(
    grad, indices, offset2bag, bag_size, maximum_indices, num_weights, scale_grad_by_freq, mode,
    per_sample_weights, padding_idx=-1,
):
    bag = bounded(offset2bag, grad.shape[0], wrap=False)
    return _dense_backward(
        grad, indices, bag, num_weights, scale_grad_by_freq, mode, per_sample_weights, padding_idx, maximum_indices
    )


def lower__embedding_bag_per_sample_weights_backward(grad, weight, indices, offsets, offset2bag, mode, padding_idx=-1):
    g = opmath(grad)
    bag = _bags(indices, offsets, g.shape[0], mode)
    rows = take_rows(opmath(weight), bounded(indices, weight.shape[0], wrap=False))
    per_bag = jnp.take(g, bag, axis=0, mode="fill", fill_value=0)
    out = jnp.sum(per_bag * rows, axis=1)
    keep = (indices != padding_idx) & (bag < g.shape[0])
    return jnp.where(keep, out, jnp.zeros((), out.dtype)).astype(grad.dtype)
