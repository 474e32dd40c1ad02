"""Nested tensors from a padding mask: what nn.TransformerEncoder's padding-mask fast
path makes of its input (torch/nn/modules/transformer.py).

Note [Padded nested tensors]
In eval mode without grad, a TransformerEncoder given `src_key_padding_mask` asks
`_nested_tensor_from_mask_left_aligned` whether the mask keeps every sequence's tokens
first; if so it turns the batch into a nested tensor with
`_nested_tensor_from_mask(src, ~mask)` (sequence b keeps its first `lengths[b]`
tokens), runs every layer's `_transformer_encoder_layer_fwd` on it without a mask, and
pads the result back with `to_padded_tensor(0.0, src.size())`. So PyTorch's output is 0
at every padded position, where the dense path (enable_nested_tensor=False, or a mask
that is not left-aligned) computes values there.

PyTorch's nested tensors are a C++ tensor kind of their own, which a backend written in
Python cannot produce. So our device has a `PaddedNestedTensor`: the batch padded to
(B, T, D), zero beyond each sequence, with the lengths. It is nested to Python
(`is_nested`, `size()`, `numel()` and `.cpu()` answer as a nested tensor would) and
supports exactly the ops of that fast path:
  - `_transformer_encoder_layer_fwd` runs the dense layer with the key padding mask the
    lengths give (a token attends only to the kept tokens of its sequence, as in the
    nested kernel; layer norm and the feed-forward network act per token) and zeroes the
    padded positions again, so nothing computed there reaches the next layer;
  - `to_padded_tensor(padding, output_size)`;
  - `_to_copy` to the CPU, which gives PyTorch's own nested tensor.
Any other op raises NotImplementedError naming it, rather than computing on the padding;
so does autograd through it (the encoder takes this path only without grad).

Asking whether the mask is left-aligned reads a value on the host, as PyTorch does:
inside compile() the step becomes two graphs, and under JAX's own tracing
(`jax_function` under `jax.jit`) it cannot run; a TransformerEncoder built with
`mask_check=False` skips that question.
"""

from __future__ import annotations

import torch

from ...shape_fns.common import scalar_type_name
from ..core.tensor import DEVICE_NAME, XlaTensor

_NOT_LEFT_ALIGNED = "Mask must be left-aligned without gaps"


def _check_mask_args(t, mask) -> None:
    """The checks PyTorch CPU's kernels of both ops make, in their order."""
    if not isinstance(t, XlaTensor) or not isinstance(mask, XlaTensor):
        raise RuntimeError(
            "Expected all tensors to be on the same device, but got the input on "
            f"{t.device} and the mask on {mask.device}"
        )
    if mask.dtype is not torch.bool:
        raise RuntimeError(f"Expected mask to be of ScalarType Bool, but got {scalar_type_name(mask.dtype)} instead.")
    if mask.dim() != 2:
        raise RuntimeError("Padding mask should be 2D")
    if t.dim() != 3:
        raise RuntimeError("Input should be a 3D tensor, N * L * D")
    if t.shape[0] != mask.shape[0] or t.shape[1] != mask.shape[1]:
        raise RuntimeError("Mask size should match input size")
    if mask.shape[1] == 0:  # the CPU kernel reads the count at position L - 1
        raise IndexError(
            f"select(): index -1 out of range for tensor of size {list(mask.shape)} at dimension 1"
        )


def _lengths_and_valid(mask):
    """Each sequence's length (its count of True) and the (B, T) positions inside it: the
    first `length` tokens, wherever the mask's True entries are, as PyTorch's kernel
    takes them when it does not check the mask."""
    lengths = mask.sum(1)
    positions = torch.arange(mask.shape[1], device=mask.device)
    return lengths, positions < lengths[:, None]


def impl__nested_tensor_from_mask_left_aligned(t, mask):
    _check_mask_args(t, mask)
    _, valid = _lengths_and_valid(mask)
    return torch.equal(valid, mask)


def impl__nested_tensor_from_mask(t, mask, mask_check=True):
    _check_mask_args(t, mask)
    if t.shape[0] == 0:  # PyTorch stacks the (no) sequences' sizes
        raise RuntimeError("stack expects a non-empty TensorList")
    lengths, valid = _lengths_and_valid(mask)
    if mask_check and not torch.equal(valid, mask):
        raise RuntimeError(_NOT_LEFT_ALIGNED)
    return _padded_nested(torch.where(valid[:, :, None], t, 0), lengths, valid)


def _padded_nested(data: XlaTensor, lengths: XlaTensor, valid: XlaTensor) -> "PaddedNestedTensor":
    if not data._whole:
        data = data.clone()
    nt = PaddedNestedTensor(data._store, tuple(data.shape), data.dtype)
    nt._padded, nt._lengths, nt._valid = data, lengths, valid
    return nt


class PaddedNestedTensor(XlaTensor):
    """A nested tensor of B sequences of D features on our device, kept padded to
    (B, T, D) with zeros beyond each sequence's length (Note [Padded nested tensors])."""

    _padded: XlaTensor
    _lengths: XlaTensor
    _valid: XlaTensor

    @property
    def is_nested(self) -> bool:
        return True

    def size(self, dim=None):
        if dim is None:
            raise RuntimeError("Internal error: NestedTensorImpl doesn't support sizes. Please file an issue.")
        dim = dim + 3 if dim < 0 else dim
        if dim == 1:  # regular only when every sequence has the same length
            shortest, longest = int(self._lengths.min()), int(self._lengths.max())
            if shortest != longest:
                raise RuntimeError("Given dimension 1 is irregular and does not have a size.")
            return longest
        return self._padded.size(dim)

    @property
    def shape(self):
        return self.size()

    def numel(self) -> int:
        return int(self._lengths.sum()) * self._padded.shape[2]

    def __repr__(self, *, tensor_contents=None) -> str:
        text = repr(self.cpu())
        return f"{text[:-1]}, device='{self.device}')"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        handler = _NESTED_OPS.get(func)
        if handler is None:
            raise NotImplementedError(
                f"{func} is not supported on nested tensors on the {DEVICE_NAME} device: they exist for "
                "nn.TransformerEncoder's padding-mask fast path (_transformer_encoder_layer_fwd, to_padded_tensor, "
                "and .cpu()); call .to_padded_tensor(0.0) to get a dense tensor"
            )
        return handler(*args, **(kwargs or {}))


def _encoder_layer(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, use_gelu, norm_first, eps,
                   norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2, ffn_weight_1, ffn_bias_1, ffn_weight_2,
                   ffn_bias_2, mask=None, mask_type=None):
    if mask is not None:
        raise RuntimeError("NestedTensor with mask is not supported yet")
    out = torch.ops.aten._transformer_encoder_layer_fwd(
        src._padded, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, use_gelu, norm_first, eps,
        norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2, ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2,
        src._valid.logical_not(), 1,
    )
    return _padded_nested(torch.where(src._valid[:, :, None], out, 0), src._lengths, src._valid)


def _to_padded_tensor(self, padding, output_size=None):
    data = self._padded
    B, T, D = data.shape
    padded = torch.where(self._valid[:, :, None], data, padding)
    longest = None
    if output_size is None:
        longest = int(self._lengths.max())
        return padded[:, :longest].clone()
    output_size = list(output_size)
    if len(output_size) != 3:
        raise RuntimeError("Length of output_size does not match NestedTensor dims. Broadcasting is not supported.")
    if output_size[1] < T:
        longest = int(self._lengths.max())
    if output_size[0] < B or output_size[2] < D or (longest is not None and output_size[1] < longest):
        raise RuntimeError("Value in output_size is less than NestedTensor padded size. Truncation is not supported.")
    kept = min(T, output_size[1])
    grow = (0, output_size[2] - D, 0, output_size[1] - kept, 0, output_size[0] - B)
    if not any(grow):
        return padded[:, :kept].clone() if kept < T else padded
    return torch.nn.functional.pad(padded[:, :kept], grow, value=padding)


def _to_copy(self, *, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False, memory_format=None):
    target = torch.device(device) if device is not None else self.device
    if target.type != "cpu" or (dtype is not None and dtype != self.dtype) or layout not in (None, torch.strided):
        raise NotImplementedError(
            f"nested tensors on the {DEVICE_NAME} device only copy to the CPU as they are (asked for device "
            f"{target}, dtype {dtype}, layout {layout})"
        )
    # PyTorch's own kernel makes the CPU nested tensor from the padded batch and its mask.
    return torch._nested_tensor_from_mask(self._padded.cpu(), self._valid.cpu(), mask_check=False)


_NESTED_OPS = {
    torch.ops.aten._transformer_encoder_layer_fwd.default: _encoder_layer,
    torch.ops.aten.to_padded_tensor.default: _to_padded_tensor,
    torch.ops.aten._to_copy.default: _to_copy,
}
