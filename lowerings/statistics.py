"""Lowerings of reductions beyond sum/mean/amax/argmax/var: minimum family, logical
reductions, products, the standard deviation family, NaN-aware sums, logsumexp,
vector norms and counts."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

import torch

from ..shape_fns.common import (
    reduction_dims,
    sum_dtype,
    to_numpy_dtype,
    to_torch_dtype,
)
from ..shape_fns.statistics import float_result_dtype, logical_reduction_dtype, norm_result_dtype
from . import complex_ops
from .common import arg_reduction_axis, opmath, switch_on_scalar


def lower_amin(self, dim=(), keepdim=False):
    # jnp.min propagates NaN, as amin does.
    return jnp.min(self, axis=reduction_dims(dim, self.ndim), keepdims=keepdim)


def lower_argmin(self, dim=None, keepdim=False):
    # jnp.argmin returns the first minimum and, like PyTorch, the first NaN if any.
    return jnp.argmin(self, axis=arg_reduction_axis(dim, self.ndim), keepdims=keepdim).astype(jnp.int64)


def lower_min_dim(self, dim, keepdim=False):
    axis = arg_reduction_axis(dim, self.ndim)
    return (
        jnp.min(self, axis=axis, keepdims=keepdim),
        jnp.argmin(self, axis=axis, keepdims=keepdim).astype(jnp.int64),
    )


def lower_min(self):
    return jnp.min(self)


def lower_max(self):
    return jnp.max(self)


def lower_aminmax(self, *, dim=None, keepdim=False):
    axes = reduction_dims(dim, self.ndim)
    if dim is None and keepdim:
        # With dim=None, keepdim keeps every dim as size 1.
        return jnp.min(self, axis=axes, keepdims=True), jnp.max(self, axis=axes, keepdims=True)
    return jnp.min(self, axis=axes, keepdims=keepdim), jnp.max(self, axis=axes, keepdims=keepdim)


def _logical(reduce, self, axes, keepdim):
    out = to_numpy_dtype(logical_reduction_dtype(to_torch_dtype(self.dtype)))
    return reduce(self != 0, axis=axes, keepdims=keepdim).astype(out)


def lower_any(self):
    return _logical(jnp.any, self, None, False)


def lower_any_dim(self, dim, keepdim=False):
    return _logical(jnp.any, self, reduction_dims(dim, self.ndim), keepdim)


def lower_any_dims(self, dim=None, keepdim=False):
    # An empty list reduces nothing here (unlike sum, where it means every dim).
    axes = () if dim is not None and len(dim) == 0 else reduction_dims(dim, self.ndim)
    return _logical(jnp.any, self, axes, keepdim)


def lower__is_all_true(self):
    return jnp.all(self)


def lower__is_any_true(self):
    return jnp.any(self)


def lower_all(self):
    return _logical(jnp.all, self, None, False)


def lower_all_dim(self, dim, keepdim=False):
    return _logical(jnp.all, self, reduction_dims(dim, self.ndim), keepdim)


def lower_all_dims(self, dim=None, keepdim=False):
    axes = () if dim is not None and len(dim) == 0 else reduction_dims(dim, self.ndim)
    return _logical(jnp.all, self, axes, keepdim)


def lower_prod_dim_int(self, dim, keepdim=False, *, dtype=None):
    out = to_numpy_dtype(sum_dtype(to_torch_dtype(self.dtype), dtype))
    axes = reduction_dims(dim, self.ndim)
    return jnp.prod(opmath(self.astype(out)), axis=axes, keepdims=keepdim).astype(out)


def lower_prod(self, *, dtype=None):
    out = to_numpy_dtype(sum_dtype(to_torch_dtype(self.dtype), dtype))
    return jnp.prod(opmath(self.astype(out))).astype(out)


def lower_nansum(self, dim=None, keepdim=False, *, dtype=None):
    out = to_numpy_dtype(sum_dtype(to_torch_dtype(self.dtype), dtype))
    x = opmath(self.astype(out))
    if jnp.issubdtype(x.dtype, jnp.inexact):
        x = jnp.where(jnp.isnan(x), jnp.zeros((), x.dtype), x)
    return jnp.sum(x, axis=reduction_dims(dim, self.ndim), keepdims=keepdim).astype(out)


def _var(self, dim, correction, keepdim):
    """(variance, mean) in the compute type, over `dim`, like var.correction."""
    x = opmath(self)
    axes = reduction_dims(dim, self.ndim)
    n = math.prod(self.shape[a] for a in axes)
    mean = jnp.mean(x, axis=axes, keepdims=True)
    squares = jnp.sum(jnp.abs(x - mean) ** 2, axis=axes, keepdims=keepdim)
    correction = 1 if correction is None else correction
    var = squares / jnp.maximum(n - correction, 0)
    return var, mean if keepdim else jnp.squeeze(mean, axes)


def _real_dtype(dtype):
    return to_numpy_dtype(float_result_dtype(to_torch_dtype(dtype)))


def lower_std_correction(self, dim=None, *, correction=None, keepdim=False):
    var, _ = _var(self, dim, correction, keepdim)
    return jnp.sqrt(var).astype(_real_dtype(self.dtype))


def lower_var_mean_correction(self, dim=None, *, correction=None, keepdim=False):
    var, mean = _var(self, dim, correction, keepdim)
    return var.astype(_real_dtype(self.dtype)), mean.astype(self.dtype)


def lower_std_mean_correction(self, dim=None, *, correction=None, keepdim=False):
    var, mean = _var(self, dim, correction, keepdim)
    return jnp.sqrt(var).astype(_real_dtype(self.dtype)), mean.astype(self.dtype)


def lower_logsumexp(self, dim, keepdim=False):
    out = self.dtype if jnp.issubdtype(self.dtype, jnp.inexact) else to_numpy_dtype(_default_float())
    x = opmath(self.astype(out))
    axes = reduction_dims(dim, self.ndim)
    if jnp.iscomplexobj(x) and x.size == 0:
        return jnp.log(jnp.sum(jnp.exp(x), axis=axes, keepdims=keepdim)).astype(out)
    if jnp.iscomplexobj(x):
        # PyTorch's formula: the largest real part is taken out (0 if infinite), so the
        # imaginary part comes back from log() in (-pi, pi], not as the input's.
        shift = jnp.max(jnp.real(x), axis=axes, keepdims=True)
        shift = jnp.where(jnp.isinf(shift), jnp.zeros((), shift.dtype), shift)
        total = jnp.sum(complex_ops.exp(x - shift), axis=axes, keepdims=keepdim)
        return (jnp.log(total) + (shift if keepdim else jnp.squeeze(shift, axes))).astype(out)
    if not axes:
        return x.astype(out)
    # jax's logsumexp keeps +-inf maxima finite-safe, as PyTorch's does.
    return jax.scipy.special.logsumexp(x, axis=axes, keepdims=keepdim).astype(out)


def _default_float():
    return torch.get_default_dtype()


def _vector_norm(x, ord, axes, keepdim):
    a = jnp.abs(x)
    ordf = jnp.asarray(ord, a.dtype)

    def total(v):
        return jnp.sum(v, axis=axes, keepdims=keepdim)

    if x.size == 0:
        # Empty reductions: max/min have no identity (the shape function raises for
        # +-inf); the other orders reduce to 0.
        return jnp.zeros_like(total(a))

    def general(a):
        # Generic p, unscaled like PyTorch's kernel (it overflows where PyTorch does).
        return total(a**ordf) ** (1 / ordf)

    cases = {
        0.0: lambda a: total((a != 0).astype(a.dtype)),
        math.inf: lambda a: jnp.max(a, axis=axes, keepdims=keepdim),
        -math.inf: lambda a: jnp.min(a, axis=axes, keepdims=keepdim),
        1.0: total,
        2.0: lambda a: jnp.sqrt(total(a * a)),
    }
    return switch_on_scalar(ordf, cases, general, a)


def lower_linalg_vector_norm(self, ord=2, dim=None, keepdim=False, *, dtype=None):
    out = to_numpy_dtype(norm_result_dtype(to_torch_dtype(self.dtype), dtype))
    x = self.astype(dtype_for_norm(self.dtype, dtype))
    axes = reduction_dims(dim, self.ndim)
    if self.ndim == 0:
        return jnp.where(jnp.asarray(ord) == 0, (x != 0).astype(out), jnp.abs(opmath(x)).astype(out)).astype(out)
    return _vector_norm(opmath(x), ord, axes, keepdim).astype(out)


def dtype_for_norm(dtype, requested):
    if requested is not None:
        return to_numpy_dtype(requested)
    return dtype


def lower_norm_ScalarOpt_dim(self, p, dim, keepdim=False):
    return lower_linalg_vector_norm(self, 2 if p is None else p, dim, keepdim)


def lower_count_nonzero_dim_IntList(self, dim):
    return jnp.sum(self != 0, axis=reduction_dims(dim, self.ndim)).astype(jnp.int64)


def lower_count_nonzero(self, dim=None):
    axes = None if dim is None else reduction_dims(dim, self.ndim)
    return jnp.sum(self != 0, axis=axes).astype(jnp.int64)
