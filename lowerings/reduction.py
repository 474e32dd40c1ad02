"""Lowerings of reductions: sum, mean, amax, argmax, max.dim and var."""

from __future__ import annotations

import math

import jax.numpy as jnp

from ..shape_fns.common import (
    mean_dtype,
    reduction_dims,
    sum_dtype,
    to_numpy_dtype,
    to_torch_dtype,
)
from .common import arg_reduction_axis, opmath, promote_operands


def lower_sum(self, *, dtype=None):
    return lower_sum_dim_IntList(self, None, dtype=dtype)


def lower_sum_dim_IntList(self, dim, keepdim=False, *, dtype=None):
    out = to_numpy_dtype(sum_dtype(to_torch_dtype(self.dtype), dtype))
    axes = reduction_dims(dim, self.ndim)
    return jnp.sum(opmath(self.astype(out)), axis=axes, keepdims=keepdim).astype(out)


def lower_mean_dim(self, dim, keepdim=False, *, dtype=None):
    out = to_numpy_dtype(mean_dtype(to_torch_dtype(self.dtype), dtype))
    axes = reduction_dims(dim, self.ndim)
    return jnp.mean(opmath(self.astype(out)), axis=axes, keepdims=keepdim).astype(out)


def lower_mean(self, *, dtype=None):
    return lower_mean_dim(self, None, False, dtype=dtype)


def lower_amax(self, dim=(), keepdim=False):
    # jnp.max propagates NaN, as amax does.
    return jnp.max(self, axis=reduction_dims(dim, self.ndim), keepdims=keepdim)


def lower_argmax(self, dim=None, keepdim=False):
    # Like PyTorch, jnp.argmax returns the first maximum and treats NaN as the maximum;
    # with dim=None and keepdim it keeps every dim as size 1.
    axis = arg_reduction_axis(dim, self.ndim)
    return jnp.argmax(self, axis=axis, keepdims=keepdim).astype(jnp.int64)


def lower_max_dim(self, dim, keepdim=False):
    axis = arg_reduction_axis(dim, self.ndim)
    values = jnp.max(self, axis=axis, keepdims=keepdim)
    indices = jnp.argmax(self, axis=axis, keepdims=keepdim).astype(jnp.int64)
    return values, indices


def lower_var_correction(self, dim=None, *, correction=None, keepdim=False):
    (x,), out = promote_operands("var_correction", self)
    x = opmath(x)
    axes = reduction_dims(dim, self.ndim)
    n = math.prod(self.shape[a] for a in axes)
    centered = x - jnp.mean(x, axis=axes, keepdims=True)
    # abs() makes this |x - mean|^2, real also for complex inputs.
    squares = jnp.sum(jnp.abs(centered) ** 2, axis=axes, keepdims=keepdim)
    # correction is a runtime value: divide by max(n - correction, 0) arithmetically.
    correction = 1 if correction is None else correction
    return (squares / jnp.maximum(n - correction, 0)).astype(out)
