"""Lowerings of scans: cumsum, cumprod, cummax, cummin, logcumsumexp."""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from ..shape_fns.common import normalize_dim, sum_dtype, to_numpy_dtype, to_torch_dtype
from .common import opmath
from .pointwise_binary import complex_logaddexp


def _axis(dim, ndim):
    return normalize_dim(dim, ndim)


def lower_cumsum(self, dim, *, dtype=None):
    out = to_numpy_dtype(sum_dtype(to_torch_dtype(self.dtype), dtype))
    _axis(dim, self.ndim)
    if self.ndim == 0:
        return self.astype(out)
    return jnp.cumsum(opmath(self.astype(out)), axis=_axis(dim, self.ndim)).astype(out)


def lower_cumprod(self, dim, *, dtype=None):
    out = to_numpy_dtype(sum_dtype(to_torch_dtype(self.dtype), dtype))
    if self.ndim == 0:
        return self.astype(out)
    return jnp.cumprod(opmath(self.astype(out)), axis=_axis(dim, self.ndim)).astype(out)


def _cum_extremum(self, dim, better):
    if self.ndim == 0 or self.size == 0:
        return self, jnp.zeros(self.shape, jnp.int64)
    axis = _axis(dim, self.ndim)
    shape = [1] * self.ndim
    shape[axis] = self.shape[axis]
    index = jnp.broadcast_to(jnp.arange(self.shape[axis], dtype=jnp.int64).reshape(shape), self.shape)
    inexact = jnp.issubdtype(self.dtype, jnp.inexact)

    def combine(a, b):
        # b comes later: it wins on ties (PyTorch reports the last extremum) and when it
        # is NaN; a NaN already seen is never replaced by a number.
        av, ai = a
        bv, bi = b
        take_b = better(bv, av) | (bv == av)
        if inexact:
            take_b = (take_b & ~jnp.isnan(av)) | jnp.isnan(bv)
        return jnp.where(take_b, bv, av), jnp.where(take_b, bi, ai)

    values, idx = lax.associative_scan(combine, (self, index), axis=axis)
    return values, idx


def lower_cummax(self, dim):
    return _cum_extremum(self, dim, lambda b, a: b > a)


def lower_cummin(self, dim):
    return _cum_extremum(self, dim, lambda b, a: b < a)


def lower_logcumsumexp(self, dim):
    if self.ndim == 0 or self.size == 0:
        return self
    if jnp.iscomplexobj(self):
        return _complex_logcumsumexp(self, _axis(dim, self.ndim))
    x = opmath(self)
    return lax.associative_scan(jnp.logaddexp, x, axis=_axis(dim, self.ndim)).astype(self.dtype)


def _complex_logcumsumexp(x, axis):
    """A sequential scan in complex128 (PyTorch CPU's accumulation type): a parallel one
    combines in another order, and its imaginary parts can differ from PyTorch's by
    multiples of 2*pi."""
    moved = jnp.moveaxis(x.astype(jnp.complex128), axis, 0)

    def step(acc, value):
        acc = complex_logaddexp(value, acc)
        return acc, acc

    start = jnp.full(moved.shape[1:], complex(-jnp.inf, 0), jnp.complex128)
    _, out = lax.scan(step, start, moved)
    return jnp.moveaxis(out, 0, axis).astype(x.dtype)
