"""Shape functions of PyTorch's fused inference kernels for nn.MultiheadAttention and
nn.TransformerEncoderLayer (the "fast path" modules take in eval mode without grad):
_native_multi_head_attention, _transformer_encoder_layer_fwd and the two kernels they
are built from, _transform_bias_rescale_qkv and _masked_softmax. They raise the CPU
kernels' errors, in the CPU kernels' order; where the CPU kernel reads memory out of
bounds or divides by zero instead of checking (a bias of another dtype or length, zero
heads), they raise a RuntimeError naming the problem."""

from __future__ import annotations

import torch

from .common import TensorMeta, cpp_type_name, normalize_dim, require_kernel_dtype, scalar_type_name
from .nn import _check_layer_norm

_MASK_TYPES = "Mask Type should be 0 (src_mask) or 1 (src_key_padding_mask), or 2 (default_mask)"


def masked_softmax_mask_type(input_shape, mask_shape, dim, mask_type) -> int:
    """How _masked_softmax reads its boolean mask against an input of `input_shape`: 2,
    the mask has the input's shape; 1, a (B, L) padding mask read as (B, 1, 1, L); 0, an
    (L, L) attention mask read as (1, 1, L, L). A mask that is not 2-D, or an input that
    is not 4-D, is always read as type 2, as on CPU. Raises the CPU kernel's errors."""
    input_shape, mask_shape = tuple(input_shape), tuple(mask_shape)
    if len(mask_shape) != 2 or len(input_shape) != 4:
        mask_type = 2
    if mask_type == 2:
        if input_shape != mask_shape:
            raise RuntimeError("For mask_type == 2 mask shape should match input shape")
    elif mask_type == 1:
        if input_shape[0] != mask_shape[0] or input_shape[2] != mask_shape[1]:
            raise RuntimeError("For mask_type == 1 mask shape should be (B, L)")
        _check_square(input_shape, (mask_shape[0], 1, 1, mask_shape[1]))
    elif mask_type == 0:
        if input_shape[2] != mask_shape[0] or input_shape[2] != mask_shape[1]:
            raise RuntimeError("For mask_type == 0 mask shape should be (L, L)")
        _check_square(input_shape, (1, 1) + mask_shape)
    normalize_dim(max(len(input_shape) - 1, 0) if dim is None else dim, len(input_shape))
    return mask_type


def _check_square(input_shape, mask_view) -> None:
    # The CPU kernel checks the mask against the query length (dim 2) only; against scores
    # with a different key length (dim 3) it reads past the mask's end along the last
    # dimension, and fails to expand it along any other. Both raise the expand error here.
    if input_shape[3] != mask_view[3]:
        raise RuntimeError(
            f"The expanded size of the tensor ({input_shape[3]}) must match the existing size ({mask_view[3]}) "
            f"at non-singleton dimension 3.  Target sizes: {list(input_shape)}.  Tensor sizes: {list(mask_view)}"
        )


def _check_mask_type_defined(mask_type) -> None:
    if mask_type is None:
        raise RuntimeError("Mask Type should be defined")
    if mask_type not in (0, 1, 2):
        raise RuntimeError(_MASK_TYPES)


def _masked_softmax_output_shape(self, mask, dim=None, mask_type=None):
    if mask.dtype is not torch.bool:
        raise RuntimeError("Mask should be a boolean tensor")
    mask_type = masked_softmax_mask_type(self.shape, mask.shape, dim, mask_type)
    require_kernel_dtype("masked_softmax", self.dtype, "float")
    _check_mask_type_defined(mask_type)
    return TensorMeta(self.shape, self.dtype)


def _transform_bias_rescale_qkv_output_shape(qkv, qkv_bias, num_heads):
    if qkv.ndim < 3:
        normalize_dim(2, qkv.ndim)
    B, T, three_d = qkv.shape[:3]
    D = three_d // 3
    if num_heads <= 0:  # the CPU kernel divides by it
        raise RuntimeError(f"_transform_bias_rescale_qkv: num_heads must be positive, but got {num_heads}")
    if D % num_heads:
        raise RuntimeError("Expected D % num_head == 0 to be true, but got false.")
    if three_d % 3:
        raise RuntimeError("Expected _3D % 3 == 0 to be true, but got false.")
    if qkv.ndim != 3:
        raise RuntimeError(
            f"_transform_bias_rescale_qkv: expected a 3-D qkv of shape (B, T, 3 * D), got {list(qkv.shape)}"
        )
    require_kernel_dtype("transform_bias_rescale_qkv", qkv.dtype, "float")
    _check_qkv_bias(qkv_bias, three_d, qkv.dtype)
    out = TensorMeta((B, num_heads, T, D // num_heads), qkv.dtype)
    return out, out, out


def _check_qkv_bias(qkv_bias, three_d, dtype) -> None:
    # The CPU kernel reads the bias as a flat array of the input's dtype, whatever its
    # shape and dtype are.
    if qkv_bias.numel() != three_d:
        raise RuntimeError(
            f"expected `qkv_bias` to have {three_d} elements (3 * embed_dim), got shape {list(qkv_bias.shape)}"
        )
    if qkv_bias.dtype != dtype:
        raise RuntimeError(
            f"expected `qkv_bias` to have the dtype of the input, {scalar_type_name(dtype)}, "
            f"but got {scalar_type_name(qkv_bias.dtype)}"
        )


def _check_same_dtype_mm(a, b) -> None:
    if a.dtype != b.dtype:
        raise RuntimeError(
            f"expected m1 and m2 to have the same dtype, but got: {cpp_type_name(a.dtype)} != {cpp_type_name(b.dtype)}"
        )


def _check_linear(rows, features, weight, bias, dtype) -> int:
    """A linear layer on a (rows, features) matrix, as addmm(bias, x, weight.t())
    checks it; returns the number of output features."""
    if weight.ndim != 2 or weight.shape[1] != features:
        shape = "x".join(map(str, reversed(weight.shape))) if weight.ndim == 2 else list(weight.shape)
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({rows}x{features} and {shape})")
    if weight.dtype != dtype:
        raise RuntimeError(
            f"self and mat2 must have the same dtype, but got {scalar_type_name(dtype)} and "
            f"{scalar_type_name(weight.dtype)}"
        )
    out = weight.shape[0]
    target = (rows, out)
    shape = tuple(bias.shape)
    if len(shape) > 2 or any(s != 1 and s != t for s, t in zip(reversed(shape), reversed(target))):
        dim = len(target) - 1
        existing = shape[-1] if shape else 1
        raise RuntimeError(
            f"The expanded size of the tensor ({target[-1]}) must match the existing size ({existing}) at "
            f"non-singleton dimension {dim}.  Target sizes: {list(target)}.  Tensor sizes: {list(shape)}"
        )
    if bias.dtype != dtype:
        raise RuntimeError(
            f"self and mat2 must have the same dtype, but got {scalar_type_name(bias.dtype)} and "
            f"{scalar_type_name(dtype)}"
        )
    return out


def multi_head_attention_meta(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight, proj_bias,
                              mask, need_weights, average_attn_weights, mask_type):
    """The metas of _native_multi_head_attention's (output, weights), after the CPU
    kernel's checks. `weights` is None when not asked for, and for empty inputs."""
    D = embed_dim
    if query.ndim != 3:
        raise RuntimeError(f"expected 3-D `query`, got {query.ndim}-D tensor")
    if query.shape[2] != embed_dim:
        raise RuntimeError(f"passed-in embed_dim {embed_dim} didn't match last dim of query {query.shape[2]}")
    if key.ndim != 3:
        raise RuntimeError(f"expected 3-D `key`, got {key.ndim}-D tensor")
    if value.ndim != 3:
        raise RuntimeError(f"expected 3-D `value`, got {value.ndim}-D tensor")
    if not (query.shape == key.shape == value.shape):
        raise RuntimeError("expected `query`/`key`/`value` shapes to match")
    if qkv_weight.ndim != 2:
        raise RuntimeError(f"expected 2-D `qkv_weight`, got {qkv_weight.ndim}-D tensor")
    if D * 3 != qkv_weight.shape[0]:
        raise RuntimeError("expected `qkv_weight` first dim to be 3x embed_dim")
    if D != qkv_weight.shape[1]:
        raise RuntimeError("expected `qkv_weight` second dim to be embed_Dim")
    if qkv_bias.ndim != 1:
        raise RuntimeError(f"expected 1-D `qkv_bias`, got {qkv_bias.ndim}-D tensor")
    if qkv_bias.shape[0] != 3 * D:
        raise RuntimeError("expected `qkv_bias` first dim and first dim of query to be equal")
    if num_head <= 0:  # the CPU kernel takes D % num_head first (a crash at 0)
        raise RuntimeError(f"num_heads must be positive, but got {num_head}")
    if D % num_head:
        raise RuntimeError("`embed_dim` must divide evenly by `num_heads`")
    for x in (query, key, value):
        _check_same_dtype_mm(x, qkv_weight)
    B, T = query.shape[:2]
    if B * T * 3 * D == 0:
        return TensorMeta(query.shape, query.dtype), None
    require_kernel_dtype("transform_bias_rescale_qkv", query.dtype, "float")
    _check_qkv_bias(qkv_bias, 3 * D, query.dtype)
    if mask is not None:
        mask_type = masked_softmax_mask_type((B, num_head, T, T), mask.shape, 3, mask_type)
        _check_mask_type_defined(mask_type)
    out_features = _check_linear(B * T, D, proj_weight, proj_bias, query.dtype)
    out = TensorMeta((B, T, out_features), query.dtype)
    if not need_weights:
        return out, None
    weights = (B, T, T) if average_attn_weights else (B, num_head, T, T)
    return out, TensorMeta(weights, query.dtype)


def _native_multi_head_attention_output_shape(
    query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight, proj_bias,
    mask=None, need_weights=True, average_attn_weights=True, mask_type=None,
):
    return multi_head_attention_meta(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight,
                                     proj_bias, mask, need_weights, average_attn_weights, mask_type)


def _transformer_encoder_layer_fwd_output_shape(
    src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, use_gelu, norm_first, eps,
    norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2, ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2,
    mask=None, mask_type=None,
):
    out = TensorMeta(src.shape, src.dtype)
    if src.numel() == 0:  # the CPU kernel returns a copy of an empty input unchecked
        return out
    norm = (embed_dim,)
    if norm_first:
        _check_layer_norm(src, norm, norm_weight_1, norm_bias_1)
    attn, _ = multi_head_attention_meta(src, src, src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight,
                                        proj_bias, mask, False, True, mask_type)
    _check_residual(attn, src)
    if not norm_first:
        _check_layer_norm(attn, norm, norm_weight_1, norm_bias_1)
    for name, p in (("norm_weight_1", norm_weight_1), ("norm_bias_1", norm_bias_1),
                    ("norm_weight_2", norm_weight_2), ("norm_bias_2", norm_bias_2)):
        if p.dtype != src.dtype:
            raise RuntimeError(
                f"expected {name} to have the dtype of src, {scalar_type_name(src.dtype)}, "
                f"but got {scalar_type_name(p.dtype)}"
            )
    if norm_first:
        _check_layer_norm(src, norm, norm_weight_2, norm_bias_2)
    if ffn_weight_1.ndim != 2 or ffn_weight_2.ndim != 2:
        raise RuntimeError("2d weights expected")
    B, T, D = src.shape
    hidden = _check_linear(B * T, D, ffn_weight_1, ffn_bias_1, src.dtype)
    ffn = _check_linear(B * T, hidden, ffn_weight_2, ffn_bias_2, src.dtype)
    _check_residual(TensorMeta((B, T, ffn), src.dtype), src)
    if not norm_first:
        _check_layer_norm(src, norm, norm_weight_2, norm_bias_2)
    return out


def _check_residual(x, residual) -> None:
    # x.add_(residual): the residual has to broadcast to x's shape.
    if x.shape != residual.shape:
        raise RuntimeError(
            f"output with shape {list(x.shape)} doesn't match the broadcast shape {list(residual.shape)}"
        )
