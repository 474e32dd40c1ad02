"""Shape functions of the scaled dot-product attention kernels, with the CPU kernel's
argument checks."""

from __future__ import annotations

import torch

from .common import TensorMeta

_KERNEL = "scaled_dot_product_attention_flash_attention"


def _check_flash_attention(query, key, value, dropout_p, attn_mask) -> None:
    if dropout_p > 0.0:
        raise RuntimeError(f"{_KERNEL}: Currently do not support dropout > 0")
    if not (query.ndim == key.ndim == value.ndim == 4):
        raise RuntimeError(f"{_KERNEL}: Accept only 4 dims inputs shape of {{B, H, T, K}}")
    if not (query.dtype == key.dtype == value.dtype) or not query.dtype.is_floating_point:
        raise RuntimeError(f"{_KERNEL}: Q/K/V should have the same data type of float, double, bfloat16 or half")
    if not (query.shape[3] == key.shape[3] == value.shape[3]):
        raise RuntimeError(f"{_KERNEL}: Q/K/V should have the same head size")
    if key.shape[1] != value.shape[1] or query.shape[1] % key.shape[1]:
        raise RuntimeError(f"{_KERNEL}: the number of query heads must be a multiple of the key/value heads")
    if attn_mask is not None and attn_mask.dtype != query.dtype:
        raise RuntimeError(f"{_KERNEL}: Attention mask is the same data type as query")


def _stats_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _scaled_dot_product_flash_attention_for_cpu_output_shape(
    query, key, value, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None
):
    _check_flash_attention(query, key, value, dropout_p, attn_mask)
    out = TensorMeta(query.shape, query.dtype)
    return out, TensorMeta(query.shape[:3], _stats_dtype(query.dtype))


def _scaled_dot_product_flash_attention_for_cpu_backward_output_shape(
    grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, *, attn_mask=None, scale=None
):
    _check_flash_attention(query, key, value, dropout_p, attn_mask)
    return TensorMeta(query.shape, query.dtype), TensorMeta(key.shape, key.dtype), TensorMeta(value.shape, value.dtype)
