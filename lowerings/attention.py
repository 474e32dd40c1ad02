"""Scaled dot-product attention kernels: PyTorch CPU's flash-attention forward (output
and logsumexp) and its backward, which AOTAutograd graphs of
`F.scaled_dot_product_attention` call on CPU models."""

from __future__ import annotations

import math

import jax.numpy as jnp

from .common import opmath


def _scale(query, scale):
    return 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale


def _scores(query, key, is_causal, attn_mask, scale):
    """Scaled q @ k^T plus the mask, in float32 or wider."""
    q, k = opmath(query), _repeat_heads(opmath(key), query.shape[-3])
    s = jnp.einsum("...le,...se->...ls", q, k) * _scale(query, scale)
    if is_causal:
        L, S = s.shape[-2:]
        s = jnp.where(jnp.tril(jnp.ones((L, S), bool)), s, -jnp.inf)
    if attn_mask is not None:
        s = s + opmath(attn_mask)
    return s


def _repeat_heads(x, heads):
    """Grouped key/value heads repeated to the query's: head h reads head h // (Hq / Hk)."""
    return x if x.shape[-3] == heads else jnp.repeat(x, heads // x.shape[-3], axis=-3)


def _sum_heads(g, heads):
    """The gradient of _repeat_heads: sums each group of repeated heads."""
    if g.shape[-3] == heads:
        return g
    return g.reshape(*g.shape[:-3], heads, g.shape[-3] // heads, *g.shape[-2:]).sum(axis=-3)


def lower__scaled_dot_product_flash_attention_for_cpu(
    query, key, value, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None
):
    s = _scores(query, key, is_causal, attn_mask, scale)
    row_max = jnp.max(s, axis=-1, keepdims=True)
    # A row with every key masked: output 0 and logsumexp 0, as the CPU kernel gives.
    masked_row = row_max == -jnp.inf
    e = jnp.exp(s - jnp.where(masked_row, 0.0, row_max))
    total = jnp.sum(e, axis=-1, keepdims=True)
    p = e / jnp.where(masked_row, 1.0, total)
    v = _repeat_heads(opmath(value), query.shape[-3])
    out = jnp.einsum("...ls,...se->...le", p, v)
    lse = jnp.where(masked_row, 0.0, row_max + jnp.log(total))[..., 0]
    return out.astype(query.dtype), lse.astype(s.dtype)


def lower__scaled_dot_product_flash_attention_for_cpu_backward(
    grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, *, attn_mask=None, scale=None
):
    heads = query.shape[-3]
    s = _scores(query, key, is_causal, attn_mask, scale)
    p = jnp.exp(s - logsumexp[..., None].astype(s.dtype))
    g, q, k = opmath(grad_out), opmath(query), _repeat_heads(opmath(key), heads)
    v = _repeat_heads(opmath(value), heads)
    grad_v = jnp.einsum("...ls,...le->...se", p, g)
    grad_p = jnp.einsum("...le,...se->...ls", g, v)
    row_dot = jnp.sum(g * opmath(out), axis=-1, keepdims=True)
    grad_s = p * (grad_p - row_dot) * _scale(query, scale)
    grad_q = jnp.einsum("...ls,...se->...le", grad_s, k)
    grad_k = jnp.einsum("...ls,...le->...se", grad_s, q)
    return (
        grad_q.astype(query.dtype),
        _sum_heads(grad_k, key.shape[-3]).astype(key.dtype),
        _sum_heads(grad_v, value.shape[-3]).astype(value.dtype),
    )
