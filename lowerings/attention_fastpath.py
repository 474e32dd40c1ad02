"""Lowerings of PyTorch's fused inference kernels for nn.MultiheadAttention and
nn.TransformerEncoderLayer, the "fast path" these modules take in eval mode without
grad: _native_multi_head_attention, _transformer_encoder_layer_fwd, and the two kernels
they are built from, _transform_bias_rescale_qkv and _masked_softmax.

Each follows PyTorch CPU's kernel step by step (aten/src/ATen/native/transformers/
attention.cpp and transformer.cpp), computing float16/bfloat16 in float32 and rounding
to the input's dtype wherever the CPU kernel stores an intermediate tensor. What the
CPU kernels do that a reader may not expect, and that these lowerings keep:
  - a mask of any dtype is made boolean first (`mask != 0`: a float mask's -inf and
    any other nonzero value mean "masked", 0 means "attend"), and True means masked;
  - a query row with every key masked gives NaN weights and a NaN output row (plain
    softmax over no entries), not zeros as scaled_dot_product_attention gives;
  - `mask_type` says how a 2-D mask is laid against the (B, heads, L, L) scores: 0, an
    (L, L) attention mask; 1, a (B, L) key padding mask; 2 (any mask that is not 2-D),
    the scores' own shape, with no broadcasting;
  - the query is scaled by 1/sqrt(head_dim) (rounded to the compute dtype) before
    q @ k^T, not the scores after;
  - the averaged attention weights are the sum over heads divided by the number of heads;
  - the encoder layer's feed-forward activation is relu or exact (erf) gelu: a module
    built with nn.GELU(approximate="tanh") takes the fast path and gets exact gelu.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from ..shape_fns.attention_fastpath import masked_softmax_mask_type
from ..shape_fns.common import normalize_dim
from .common import opmath
from .nn import lower_native_layer_norm

_HIGHEST = lax.Precision.HIGHEST


def _mm(a, b):
    return jnp.matmul(opmath(a), opmath(b), precision=_HIGHEST)


def _linear(x, weight, bias):
    """x @ weight^T + bias rounded once, as addmm(bias, x, weight.t()) gives it."""
    return (_mm(x, weight.T) + opmath(bias)).astype(x.dtype)


def _softmax(x, axis):
    xm = opmath(x)
    e = jnp.exp(xm - jnp.max(xm, axis=axis, keepdims=True))
    return (e / jnp.sum(e, axis=axis, keepdims=True)).astype(x.dtype)


def masked_softmax(x, masked, axis):
    """Softmax over `axis` of the entries where `masked` (broadcast to x) is False, as
    PyTorch CPU's masked softmax: masked entries are 0, and a row with every entry
    masked sums to 0, which the CPU kernel turns into NaN for the whole row."""
    xm = opmath(x)
    masked = jnp.broadcast_to(masked, x.shape)
    row_max = jnp.max(jnp.where(masked, -jnp.inf, xm), axis=axis, keepdims=True)
    e = jnp.where(masked, jnp.zeros((), xm.dtype), jnp.exp(xm - row_max))
    total = jnp.sum(e, axis=axis, keepdims=True)
    return (e / jnp.where(total == 0, jnp.nan, total)).astype(x.dtype)


def _mask_as_read(mask, mask_type):
    """A boolean mask shaped to broadcast against 4-D scores (masked_softmax_mask_type)."""
    if mask.dtype != jnp.bool_:
        mask = mask != 0
    if mask_type == 1:
        return mask[:, None, None, :]
    if mask_type == 0:
        return mask[None, None, :, :]
    return mask


def lower__masked_softmax(self, mask, dim=None, mask_type=None):
    mask_type = masked_softmax_mask_type(self.shape, mask.shape, dim, mask_type)
    if self.ndim == 0:
        return masked_softmax(self.reshape(1), mask.reshape(1), 0).reshape(())
    axis = normalize_dim(self.ndim - 1 if dim is None else dim, self.ndim)
    return masked_softmax(self, _mask_as_read(mask, mask_type), axis)


def _query_scale(compute_dtype, head_dim):
    """1.0 / sqrt(head_dim), the square root taken in the compute dtype, as on CPU."""
    compute = np.dtype(compute_dtype)
    return compute.type(1.0 / np.float64(np.sqrt(compute.type(head_dim))))


def _split_heads(qkv, qkv_bias, num_heads):
    """q, k, v of shape (B, heads, T, head_dim) from the (B, T, 3 * D) projection: bias
    added, q scaled by 1/sqrt(head_dim), each rounded once to the input's dtype."""
    B, T, three_d = qkv.shape
    head_dim = three_d // 3 // num_heads
    x = opmath(qkv) + opmath(qkv_bias).reshape(-1)
    x = x.reshape(B, T, 3, num_heads, head_dim).transpose(2, 0, 3, 1, 4)
    scale = _query_scale(x.dtype, head_dim)
    return (x[0] * scale).astype(qkv.dtype), x[1].astype(qkv.dtype), x[2].astype(qkv.dtype)


def _projected_heads(x, weight, bias, num_heads, dtype, scaled=False):
    """One of q, k, v as _split_heads gives it, projected from its own input: (B, heads,
    T, head_dim), bias added (and scaled by 1/sqrt(head_dim), the query), rounded to
    `dtype` where the CPU kernel stores it."""
    B, T, D = x.shape[0], x.shape[1], weight.shape[0]
    projected = opmath(_mm(x, weight.T).astype(dtype)) + opmath(bias)
    if scaled:
        projected = projected * _query_scale(projected.dtype, D // num_heads)
    return projected.reshape(B, T, num_heads, -1).transpose(0, 2, 1, 3).astype(dtype)


def lower__transform_bias_rescale_qkv(qkv, qkv_bias, num_heads):
    return _split_heads(qkv, qkv_bias, num_heads)


def multi_head_attention(query, key, value, num_head, qkv_weight, qkv_bias, proj_weight, proj_bias,
                         mask, need_weights, average_attn_weights, mask_type, self_attention=False):
    """_native_multi_head_attention's (output, weights). Query, key and value known to
    be one tensor (`self_attention`, or one array of a traced program, as PyTorch's
    kernel checks) take one projection by the whole qkv weight, as on CPU; otherwise
    each is projected by its third of it (no concatenation to split again)."""
    B, T, D = query.shape
    dtype = query.dtype
    if B * T * D == 0:
        return jnp.zeros(query.shape, dtype), None
    if self_attention or (query is key and key is value):
        q, k, v = _split_heads(_mm(query, qkv_weight.T).astype(dtype), qkv_bias, num_head)
    else:
        q, k, v = (_projected_heads(x, qkv_weight[i * D:(i + 1) * D], qkv_bias[i * D:(i + 1) * D], num_head, dtype,
                                    scaled=i == 0)
                   for i, x in enumerate((query, key, value)))
    scores = jnp.einsum("bhtd,bhsd->bhts", opmath(q), opmath(k), precision=_HIGHEST).astype(dtype)
    if mask is None:
        p = _softmax(scores, -1)
    else:
        mask_type = masked_softmax_mask_type(scores.shape, mask.shape, 3, mask_type)
        p = masked_softmax(scores, _mask_as_read(mask, mask_type), -1)
    context = jnp.einsum("bhts,bhsd->bhtd", opmath(p), opmath(v), precision=_HIGHEST).astype(dtype)
    out = _linear(context.transpose(0, 2, 1, 3).reshape(B, T, D), proj_weight, proj_bias)
    if not need_weights:
        return out, None
    if average_attn_weights:
        summed = jnp.sum(opmath(p), axis=1).astype(dtype)
        p = (opmath(summed) / num_head).astype(dtype)
    return out, p


def lower__native_multi_head_attention(
    query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight, proj_bias,
    mask=None, need_weights=True, average_attn_weights=True, mask_type=None,
):
    return multi_head_attention(query, key, value, num_head, qkv_weight, qkv_bias, proj_weight, proj_bias,
                                mask, need_weights, average_attn_weights, mask_type)


def _residual(x, residual):
    return (opmath(x) + opmath(residual)).astype(x.dtype)


def _gelu(x):
    xm = opmath(x)
    return (0.5 * xm * (1 + lax.erf(xm * np.sqrt(0.5).astype(xm.dtype)))).astype(x.dtype)


def lower__transformer_encoder_layer_fwd(
    src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, use_gelu, norm_first, eps,
    norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2, ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2,
    mask=None, mask_type=None,
):
    if src.size == 0:
        return jnp.copy(src)

    def norm(x, weight, bias):
        return lower_native_layer_norm(x, (embed_dim,), weight, bias, eps)[0]

    x = norm(src, norm_weight_1, norm_bias_1) if norm_first else src
    x, _ = multi_head_attention(x, x, x, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, mask,
                                False, True, mask_type, self_attention=True)
    x = _residual(x, src)
    if not norm_first:
        x = norm(x, norm_weight_1, norm_bias_1)
    before_ffn = x
    if norm_first:
        x = norm(x, norm_weight_2, norm_bias_2)
    hidden = _linear(x, ffn_weight_1, ffn_bias_1)
    hidden = _gelu(hidden) if use_gelu else jnp.maximum(hidden, jnp.zeros((), hidden.dtype))
    x = _residual(_linear(hidden, ffn_weight_2, ffn_bias_2), before_ffn)
    if not norm_first:
        x = norm(x, norm_weight_2, norm_bias_2)
    return x
