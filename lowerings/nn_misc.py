"""Lowerings of assorted nn ops: _trilinear (nn.functional.bilinear), _euclidean_dist
(cdist's matrix-product path), embedding_renorm (embedding with max_norm) and the fused
weight norm (_weight_norm_interface, which torch._weight_norm and weight_norm
parametrizations call for the first or last dim) with its backward."""

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


def _other_dims(x, dim):
    return tuple(d for d in range(x.ndim) if d != dim)


def lower__weight_norm_interface(v, g, dim=0):
    # w = v * (g / |v|), the norm over every dim but `dim`, in float32 for
    # float16/bfloat16 as PyTorch CPU computes it; the norms keep g's shape.
    x = opmath(v)
    norms = jnp.sqrt(jnp.sum(x * x, axis=_other_dims(x, dim), keepdims=True))
    w = x * (opmath(g).reshape(norms.shape) / norms)
    return w.astype(v.dtype), norms.reshape(g.shape)


def lower__weight_norm_interface_backward(grad_w, saved_v, saved_g, saved_norms, dim):
    # With s = sum(grad_w * v) over every dim but `dim`: grad_g = s / |v| and
    # grad_v = (g / |v|) * grad_w - (g / |v|) * s / |v|^2 * v.
    gw, v = opmath(grad_w), opmath(saved_v)
    norms = saved_norms.reshape(tuple(-1 if d == dim else 1 for d in range(v.ndim)))
    g = opmath(saved_g).reshape(norms.shape)
    s = jnp.sum(gw * v, axis=_other_dims(v, dim), keepdims=True)
    a = g / norms
    grad_v = a * gw - (a * s / (norms * norms)) * v
    grad_g = s / norms
    return grad_v.astype(saved_v.dtype), grad_g.reshape(saved_g.shape).astype(saved_g.dtype)
