"""Shape functions of convolution and its backward op, with ATen's input checks."""

from __future__ import annotations

import torch

from .common import TensorMeta, scalar_type_name


def _expand(values, n):
    values = tuple(values)
    return values * n if len(values) == 1 else values


def _check_conv(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    k = weight.ndim
    if k < 3:
        raise RuntimeError(f"weight should have at least three dimensions, got {k}")
    if input.ndim != k:
        raise RuntimeError(
            f"Expected {k}-dimensional input for {k}-dimensional weight {list(weight.shape)}, but got "
            f"{input.ndim}-dimensional input of size {list(input.shape)} instead"
        )
    nspatial = k - 2
    stride, padding, dilation = (_expand(v, nspatial) for v in (stride, padding, dilation))
    if len(stride) != nspatial or len(padding) != nspatial or len(dilation) != nspatial:
        raise RuntimeError(f"expected stride, padding and dilation to have {nspatial} elements")
    if groups <= 0:
        raise RuntimeError("non-positive groups is not supported")
    if any(s <= 0 for s in stride):
        raise RuntimeError("non-positive stride is not supported")
    if any(p < 0 for p in padding):
        raise RuntimeError("negative padding is not supported")
    if any(d <= 0 for d in dilation):
        raise RuntimeError("dilation should be greater than zero")
    if input.dtype != weight.dtype or (bias is not None and bias.dtype != input.dtype):
        raise RuntimeError(
            f"Input type ({input.dtype}) and weight type ({weight.dtype}) should be the same"
        )
    kernel = weight.shape[2:]
    if transposed:
        output_padding = _expand(output_padding, nspatial)
        if any(op >= max(s, d) for op, s, d in zip(output_padding, stride, dilation)):
            raise RuntimeError("output padding must be smaller than either stride or dilation")
        if input.shape[1] != weight.shape[0]:
            raise RuntimeError(
                f"Given transposed=1, weight of size {list(weight.shape)}, expected input{list(input.shape)} "
                f"to have {weight.shape[0]} channels, but got {input.shape[1]} channels instead"
            )
        if weight.shape[0] % groups:
            raise RuntimeError("Given groups, expected weight to be divisible by groups")
        cout = weight.shape[1] * groups
        spatial = tuple(
            (i - 1) * s - 2 * p + d * (kk - 1) + op + 1
            for i, s, p, d, kk, op in zip(input.shape[2:], stride, padding, dilation, kernel, output_padding)
        )
    else:
        if weight.shape[0] % groups:
            raise RuntimeError(
                f"Given groups={groups}, expected weight to be divisible by {groups} at dimension 0, but got "
                f"weight of size {list(weight.shape)} instead"
            )
        if input.shape[1] != weight.shape[1] * groups:
            raise RuntimeError(
                f"Given groups={groups}, weight of size {list(weight.shape)}, expected input{list(input.shape)} "
                f"to have {weight.shape[1] * groups} channels, but got {input.shape[1]} channels instead"
            )
        padded = tuple(i + 2 * p for i, p in zip(input.shape[2:], padding))
        extent = tuple(d * (kk - 1) + 1 for d, kk in zip(dilation, kernel))
        if any(e > p for e, p in zip(extent, padded)):
            raise RuntimeError(
                f"Calculated padded input size per channel: ({' x '.join(map(str, padded))}). Kernel size: "
                f"({' x '.join(map(str, extent))}). Kernel size can't be greater than actual input size"
            )
        cout = weight.shape[0]
        spatial = tuple((p - e) // s + 1 for p, e, s in zip(padded, extent, stride))
    if bias is not None and (bias.ndim != 1 or bias.shape[0] != cout):
        raise RuntimeError(
            f"Given weight of size {list(weight.shape)}, expected bias to be 1-dimensional with {cout} "
            f"elements, but got bias of size {list(bias.shape)} instead"
        )
    return (input.shape[0], cout) + spatial


def convolution_output_shape(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    shape = _check_conv(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    return TensorMeta(shape, input.dtype)


def convolution_backward_output_shape(
    grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups, output_mask
):
    shape = _check_conv(input, weight, None, stride, padding, dilation, transposed, output_padding, groups)
    if tuple(grad_output.shape) != shape:
        raise RuntimeError(
            f"Expected grad_output of size {list(shape)}, but got {list(grad_output.shape)}"
        )
    grad_input = TensorMeta(input.shape, input.dtype) if output_mask[0] else None
    grad_weight = TensorMeta(weight.shape, weight.dtype) if output_mask[1] else None
    bias_shape = tuple(bias_sizes) if bias_sizes is not None else (grad_output.shape[1],)
    grad_bias = TensorMeta(bias_shape, grad_output.dtype) if output_mask[2] else None
    return grad_input, grad_weight, grad_bias


def _require_float(kernel, dtype, bool_ok=False):
    if not (dtype.is_floating_point or dtype.is_complex or (bool_ok and dtype == torch.bool)):
        raise NotImplementedError(f'"{kernel}" not implemented for \'{scalar_type_name(dtype)}\'')


def col2im_output_shape(self, output_size, kernel_size, dilation, padding, stride):
    _require_float("col2im_out_cpu", self.dtype, bool_ok=True)
    if self.ndim not in (2, 3):
        raise RuntimeError(
            "Expected 2D or 3D (batch mode) tensor for input with possibly 0 batch size and non-zero dimensions "
            f"for input, but got: {list(self.shape)}"
        )
    (h, w), (kh, kw), (dh, dw), (ph, pw), (sh, sw) = output_size, kernel_size, dilation, padding, stride
    if min(kh, kw) <= 0 or min(sh, sw) <= 0 or min(dh, dw) <= 0 or min(ph, pw) < 0:
        raise RuntimeError("col2im: kernel_size, stride and dilation must be positive and padding non-negative")
    ckk = self.shape[-2]
    if ckk % (kh * kw):
        raise RuntimeError(
            "Expected size of input's dimension 1 to be divisible by the product of kernel_size, but got "
            f"input.size(1)={ckk} and kernel_size=({kh}, {kw})"
        )
    blocks_h = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    blocks_w = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    if self.shape[-1] != blocks_h * blocks_w:
        raise RuntimeError(
            f"Given output_size=({h}, {w}), kernel_size=({kh}, {kw}), dilation=({dh}, {dw}), padding=({ph}, {pw}), "
            f"stride=({sh}, {sw}), expected size of input's dimension 2 to match the calculated number of sliding "
            f"blocks {blocks_h} * {blocks_w} = {blocks_h * blocks_w}, but got input.size(2)={self.shape[-1]}."
        )
    channels = ckk // (kh * kw)
    shape = (channels, h, w) if self.ndim == 2 else (self.shape[0], channels, h, w)
    return TensorMeta(shape, self.dtype)


def im2col_output_shape(self, kernel_size, dilation, padding, stride):
    _require_float("im2col_out_cpu", self.dtype, bool_ok=True)
    if self.ndim not in (3, 4) or any(d == 0 for d in self.shape[-3:]):
        raise RuntimeError(
            "Expected 3D or 4D (batch mode) tensor with possibly 0 batch size and other non-zero dimensions for "
            f"input, but got: {list(self.shape)}"
        )
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = kernel_size, dilation, padding, stride
    if min(kh, kw) <= 0 or min(sh, sw) <= 0 or min(dh, dw) <= 0 or min(ph, pw) < 0:
        raise RuntimeError("im2col: kernel_size, stride and dilation must be positive and padding non-negative")
    h, w = self.shape[-2:]
    blocks_h = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    blocks_w = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    if blocks_h < 1 or blocks_w < 1:
        raise RuntimeError(
            f"Given input with spatial size ({h}, {w}), kernel_size=({kh}, {kw}), dilation=({dh}, {dw}), "
            f"padding=({ph}, {pw}), calculated shape of the array of sliding blocks as ({blocks_h}, {blocks_w}), "
            "but its components must be at least one."
        )
    channels = self.shape[-3] * kh * kw
    shape = (channels, blocks_h * blocks_w) if self.ndim == 3 else (self.shape[0], channels, blocks_h * blocks_w)
    return TensorMeta(shape, self.dtype)
