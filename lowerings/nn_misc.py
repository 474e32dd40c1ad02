"""Lowerings of assorted nn ops: _trilinear (nn.functional.bilinear), _euclidean_dist
(cdist's matrix-product path) and embedding_renorm (embedding with max_norm)."""

from __future__ import annotations

import math

import jax.numpy as jnp
from jax import lax

from .common import opmath


def lower__trilinear(i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim=1):
    total = i1.ndim + len(expand1)
    operands = []
    for x, expand in ((i1, expand1), (i2, expand2), (i3, expand3)):
        x = opmath(x)
        for d in sorted(e % total for e in expand):
            x = jnp.expand_dims(x, d)
        operands.append(x)
    product = operands[0] * operands[1] * operands[2]
    axes = tuple(sorted({d % total for d in sumdim}))
    return jnp.sum(product, axis=axes).astype(i1.dtype)


def lower__euclidean_dist(x1, x2):
    # ATen's formulation: one matrix product of augmented rows, [-2x, |x|^2, 1] . [y, 1, |y|^2].
    a, b = opmath(x1), opmath(x2)
    a_norm = jnp.sum(a * a, axis=-1, keepdims=True)
    b_norm = jnp.sum(b * b, axis=-1, keepdims=True)
    a_aug = jnp.concatenate([a * -2, a_norm, jnp.ones_like(a_norm)], axis=-1)
    b_aug = jnp.concatenate([b, jnp.ones_like(b_norm), b_norm], axis=-1)
    result = jnp.matmul(a_aug, jnp.swapaxes(b_aug, -1, -2), precision=lax.Precision.HIGHEST)
    return jnp.sqrt(jnp.maximum(result, 1e-30)).astype(x1.dtype)


def _row_norms(x, p):
    a = jnp.abs(x)
    if p == math.inf:
        return jnp.max(a, axis=1)
    if p == -math.inf:
        return jnp.min(a, axis=1)
    if p == 0:
        return jnp.sum(a != 0, axis=1).astype(x.dtype)
    if p == 1:
        return jnp.sum(a, axis=1)
    if p == 2:
        return jnp.sqrt(jnp.sum(a * a, axis=1))
    return jnp.sum(a**p, axis=1) ** (1.0 / p)


def lower_embedding_renorm(self, indices, max_norm, norm_type):
    # Rows named by `indices` whose norm exceeds max_norm are scaled down to it. Indices
    # are data: PyTorch CPU raises for one outside the table, here it names no row.
    x = opmath(self)
    idx = indices.reshape(-1)
    idx = jnp.where(idx < 0, self.shape[0], idx)
    named = jnp.zeros((self.shape[0],), bool).at[idx].set(True, mode="drop")
    norms = _row_norms(x, norm_type)
    scale = jnp.where(named & (norms > max_norm), max_norm / (norms + 1e-7), 1)
    return (x * scale[:, None].astype(x.dtype)).astype(self.dtype)
