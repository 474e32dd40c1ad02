"""Lowerings of pairwise distances (cdist, pdist and their backward ops) and of sorted
search (bucketize, searchsorted). Distances are computed directly from differences,
not through the matrix-product expansion PyTorch may use for p=2 on large inputs,
which only trades accuracy for speed."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from .common import opmath


def _norm(diff, p):
    a = jnp.abs(diff)
    if p == 0:
        return jnp.sum((a != 0).astype(diff.dtype), axis=-1)
    if p == 1:
        return jnp.sum(a, axis=-1)
    if p == 2:
        return jnp.sqrt(jnp.sum(a * a, axis=-1))
    if math.isinf(p):
        return jnp.max(a, axis=-1, initial=0.0)
    return jnp.sum(a**p, axis=-1) ** (1.0 / p)


def _norm_grad(diff, dist, p):
    """d dist / d diff, with PyTorch's conventions where dist is 0 (gradient 0)."""
    zero = jnp.zeros((), diff.dtype)
    if p == 0:
        return jnp.zeros_like(diff)
    if p == 1:
        return jnp.sign(diff)
    d = dist[..., None]
    safe = jnp.where(d == 0, 1, d)
    if p == 2:
        return jnp.where(d == 0, zero, diff / safe)
    if math.isinf(p):
        return jnp.sign(diff) * (jnp.abs(diff) == d)
    if p < 2:
        a = jnp.abs(diff)
        g = jnp.sign(diff) * jnp.where(a == 0, zero, a ** (p - 1)) / safe ** (p - 1)
        return jnp.where(d == 0, zero, g)
    return jnp.where(d == 0, zero, diff * jnp.abs(diff) ** (p - 2) / safe ** (p - 1))


def _batch(x1, x2):
    batch = jnp.broadcast_shapes(x1.shape[:-2], x2.shape[:-2])
    return (
        jnp.broadcast_to(x1, batch + x1.shape[-2:]),
        jnp.broadcast_to(x2, batch + x2.shape[-2:]),
    )


def lower__cdist_forward(x1, x2, p, compute_mode):
    a, b = _batch(opmath(x1), opmath(x2))
    diff = a[..., :, None, :] - b[..., None, :, :]
    return _norm(diff, p).astype(x1.dtype)


def lower__cdist_backward(grad, x1, x2, p, cdist):
    if 0 in x1.shape or 0 in x2.shape:
        return jnp.zeros_like(x1)
    a, b = _batch(opmath(x1), opmath(x2))
    diff = a[..., :, None, :] - b[..., None, :, :]
    g = opmath(grad)[..., None] * _norm_grad(diff, opmath(cdist), p)
    # Like PyTorch CPU, the result has the broadcast batch shape (autograd reduces it).
    return jnp.sum(g, axis=-2).astype(x1.dtype)


def _pairs(n):
    return np.triu_indices(n, 1)


def lower__pdist_forward(self, p=2.0):
    x = opmath(self)
    i, j = _pairs(x.shape[0])
    return _norm(x[i] - x[j], p).astype(self.dtype)


def lower__pdist_backward(grad, self, p, pdist):
    x = opmath(self)
    i, j = _pairs(x.shape[0])
    c = opmath(grad)[:, None] * _norm_grad(x[i] - x[j], opmath(pdist), p)
    out = jnp.zeros(x.shape, x.dtype).at[i].add(c).at[j].add(-c)
    return out.astype(self.dtype)


def _out_dtype(out_int32):
    return jnp.int32 if out_int32 else jnp.int64


def lower_bucketize_Tensor(self, boundaries, *, out_int32=False, right=False):
    side = "right" if right else "left"
    return jnp.searchsorted(boundaries, self, side=side).astype(_out_dtype(out_int32))


def lower_searchsorted_Tensor(sorted_sequence, self, *, out_int32=False, right=False, side=None, sorter=None):
    side = side or ("right" if right else "left")
    seq = sorted_sequence
    if sorter is not None:
        seq = jnp.take_along_axis(seq, sorter, axis=-1)
    if seq.ndim == 1:
        out = jnp.searchsorted(seq, self, side=side)
    else:
        search = lambda s, v: jnp.searchsorted(s, v, side=side)
        rows = math.prod(seq.shape[:-1])
        flat_seq = seq.reshape(rows, seq.shape[-1])
        flat_val = self.reshape(rows, self.shape[-1])
        out = jax.vmap(search)(flat_seq, flat_val).reshape(self.shape)
    return out.astype(_out_dtype(out_int32))
