"""Lowerings of sorting and order statistics: sort, topk, kthvalue, median, nanmedian,
mode. PyTorch orders NaN above every number; jnp's sorts do too."""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from ..shape_fns.common import normalize_dim


def _argsort(x, axis, descending):
    # Stable, so equal values keep their order (PyTorch's stable sort; its default sort
    # on CPU gives the same order).
    return jnp.argsort(x, axis=axis, stable=True, descending=descending)


def lower_sort(self, dim=-1, descending=False):
    if self.ndim == 0:
        return self, jnp.zeros((), jnp.int64)
    axis = normalize_dim(dim, self.ndim)
    idx = _argsort(self, axis, descending)
    return jnp.take_along_axis(self, idx, axis=axis), idx.astype(jnp.int64)


def lower_sort_stable(self, *, stable, dim=-1, descending=False):
    return lower_sort(self, dim, descending)


def lower_topk(self, k, dim=-1, largest=True, sorted=True):
    if self.ndim == 0:
        return self, jnp.zeros((), jnp.int64)
    axis = normalize_dim(dim, self.ndim)
    idx = lax.slice_in_dim(_argsort(self, axis, largest), 0, k, axis=axis)
    return jnp.take_along_axis(self, idx, axis=axis), idx.astype(jnp.int64)


def _kth(self, k, axis, keepdim):
    """The k-th smallest (0-based) along axis and its index."""
    idx = lax.index_in_dim(_argsort(self, axis, False), k, axis=axis, keepdims=True)
    values = jnp.take_along_axis(self, idx, axis=axis)
    if not keepdim:
        values, idx = jnp.squeeze(values, axis), jnp.squeeze(idx, axis)
    return values, idx.astype(jnp.int64)


def lower_kthvalue(self, k, dim=-1, keepdim=False):
    if self.ndim == 0:
        return self, jnp.zeros((), jnp.int64)
    return _kth(self, k - 1, normalize_dim(dim, self.ndim), keepdim)


def _is_nan(x):
    return jnp.isnan(x) if jnp.issubdtype(x.dtype, jnp.inexact) else jnp.zeros(x.shape, bool)


def lower_median(self):
    flat = self.reshape(-1)
    n = flat.shape[0]
    if n == 0:
        return jnp.full((), jnp.nan, self.dtype)
    # The lower median; sorting puts NaN last, and any NaN makes the median NaN.
    value = jnp.sort(flat)[(n - 1) // 2]
    if jnp.issubdtype(self.dtype, jnp.inexact):
        value = jnp.where(jnp.any(jnp.isnan(flat)), jnp.full((), jnp.nan, self.dtype), value)
    return value


def _median_dim(self, dim, keepdim, ignore_nan):
    if self.ndim == 0:
        return self, jnp.zeros((), jnp.int64)
    axis = normalize_dim(dim, self.ndim)
    n = self.shape[axis]
    order = _argsort(self, axis, False)
    nan = _is_nan(self)
    nan_count = jnp.sum(nan, axis=axis, keepdims=True)
    if ignore_nan:
        # The lower median of the non-NaN values (they sort first); all-NaN rows give
        # the first NaN, which is what position 0 holds then.
        pos = jnp.maximum((n - nan_count - 1) // 2, 0)
    else:
        # A NaN anywhere makes the median NaN, reported at the first NaN's index:
        # stable sorting puts the NaNs last, in their original order.
        pos = jnp.where(nan_count > 0, n - nan_count, (n - 1) // 2)
    idx = jnp.take_along_axis(order, pos.astype(order.dtype), axis=axis)
    values = jnp.take_along_axis(self, idx, axis=axis)
    if not keepdim:
        values, idx = jnp.squeeze(values, axis), jnp.squeeze(idx, axis)
    return values, idx.astype(jnp.int64)


def lower_median_dim(self, dim, keepdim=False):
    return _median_dim(self, dim, keepdim, ignore_nan=False)


def lower_nanmedian_dim(self, dim, keepdim=False):
    return _median_dim(self, dim, keepdim, ignore_nan=True)


def lower_nanmedian(self):
    flat = self.reshape(-1)
    n = flat.shape[0]
    if n == 0:
        return jnp.full((), jnp.nan, self.dtype)
    values, _ = _median_dim(flat, 0, False, ignore_nan=True)
    return values


def lower_mode(self, dim=-1, keepdim=False):
    if self.ndim == 0:
        return self, jnp.zeros((), jnp.int64)
    axis = normalize_dim(dim, self.ndim)
    x = jnp.moveaxis(self, axis, -1)
    n = x.shape[-1]
    if n == 0:
        shape = x.shape[:-1] + ((1,) if keepdim else ())
        values = jnp.zeros(shape, self.dtype)
        idx = jnp.zeros(shape, jnp.int64)
        return (jnp.moveaxis(values, -1, axis), jnp.moveaxis(idx, -1, axis)) if keepdim else (values, idx)
    order = _argsort(x, -1, False)
    s = jnp.take_along_axis(x, order, axis=-1)
    # Runs of equal values in sorted order (NaNs compare equal to each other here).
    same = (s[..., 1:] == s[..., :-1]) | (_is_nan(s[..., 1:]) & _is_nan(s[..., :-1]))
    starts = jnp.concatenate([jnp.ones(s.shape[:-1] + (1,), bool), ~same], axis=-1)
    run_id = jnp.cumsum(starts, axis=-1) - 1
    pos = jnp.arange(n)
    run_start = lax.cummax(jnp.where(starts, pos, 0), axis=s.ndim - 1)
    count = pos - run_start + 1  # length of the run so far; its last element holds the total
    ends = jnp.concatenate([~same, jnp.ones(s.shape[:-1] + (1,), bool)], axis=-1)
    # The most frequent value, the smallest among equally frequent ones: the first run
    # end with the maximal count. Its index: the largest original index in that run,
    # as PyTorch reports.
    best = jnp.argmax(jnp.where(ends, count, -1), axis=-1, keepdims=True)
    values = jnp.take_along_axis(s, best, axis=-1)
    best_run = jnp.take_along_axis(run_id, best, axis=-1)
    idx = jnp.max(jnp.where(run_id == best_run, order, -1), axis=-1, keepdims=True)
    if keepdim:
        return jnp.moveaxis(values, -1, axis), jnp.moveaxis(idx, -1, axis).astype(jnp.int64)
    return values[..., 0], idx[..., 0].astype(jnp.int64)
