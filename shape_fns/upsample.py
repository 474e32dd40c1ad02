"""Shape functions of upsampling ops and their backward ops, with ATen's checks."""

from __future__ import annotations

import torch

from .common import TensorMeta, require_kernel_dtype


def _check(nd, input_size, output_size):
    output_size, input_size = tuple(output_size), tuple(input_size)
    if len(output_size) != nd:
        raise RuntimeError(f"It is expected output_size equals to {nd}, but got size {len(output_size)}")
    if len(input_size) != nd + 2:
        raise RuntimeError(f"It is expected input_size equals to {nd + 2}, but got size {len(input_size)}")
    names = "DHW"[3 - nd :]
    if any(s <= 0 for s in input_size[2:]) or any(s <= 0 for s in output_size):
        ins = ", ".join(f"{n}: {s}" for n, s in zip(names, input_size[2:]))
        outs = ", ".join(f"{n}: {s}" for n, s in zip(names, output_size))
        raise RuntimeError(
            f"Input and output sizes should be greater than 0, but got input ({ins}) output ({outs})"
        )
    return input_size[:2] + output_size


def _forward(self, nd, output_size):
    if self.ndim != nd + 2:
        raise RuntimeError(
            f"Expected {nd + 2}D input (got {self.ndim}D input of size {list(self.shape)})"
            if self.ndim < 2
            else f"It is expected input_size equals to {nd + 2}, but got size {self.ndim}"
        )
    return TensorMeta(_check(nd, self.shape, output_size), self.dtype)


def _backward(grad_output, nd, output_size, input_size):
    shape = _check(nd, input_size, output_size)
    if tuple(grad_output.shape) != shape:
        raise RuntimeError(
            f"Expected grad_output to have the same shape as output; output.size({nd + 1}) = ... "
            f"(grad_output {list(grad_output.shape)}, output {list(shape)})"
        )
    return TensorMeta(tuple(input_size), grad_output.dtype)


def upsample_nearest1d_output_shape(self, output_size, scales=None):
    return _forward(self, 1, output_size)


def upsample_nearest2d_output_shape(self, output_size, scales_h=None, scales_w=None):
    return _forward(self, 2, output_size)


def upsample_nearest3d_output_shape(self, output_size, scales_d=None, scales_h=None, scales_w=None):
    return _forward(self, 3, output_size)


def upsample_nearest1d_backward_output_shape(grad_output, output_size, input_size, scales=None):
    return _backward(grad_output, 1, output_size, input_size)


def upsample_nearest2d_backward_output_shape(grad_output, output_size, input_size, scales_h=None, scales_w=None):
    return _backward(grad_output, 2, output_size, input_size)


def upsample_nearest3d_backward_output_shape(
    grad_output, output_size, input_size, scales_d=None, scales_h=None, scales_w=None
):
    return _backward(grad_output, 3, output_size, input_size)


def upsample_linear1d_output_shape(self, output_size, align_corners, scales=None):
    return _forward(self, 1, output_size)


def upsample_bilinear2d_output_shape(self, output_size, align_corners, scales_h=None, scales_w=None):
    return _forward(self, 2, output_size)


def upsample_trilinear3d_output_shape(self, output_size, align_corners, scales_d=None, scales_h=None, scales_w=None):
    return _forward(self, 3, output_size)


def upsample_linear1d_backward_output_shape(grad_output, output_size, input_size, align_corners, scales=None):
    return _backward(grad_output, 1, output_size, input_size)


def upsample_bilinear2d_backward_output_shape(
    grad_output, output_size, input_size, align_corners, scales_h=None, scales_w=None
):
    return _backward(grad_output, 2, output_size, input_size)


def upsample_trilinear3d_backward_output_shape(
    grad_output, output_size, input_size, align_corners, scales_d=None, scales_h=None, scales_w=None
):
    return _backward(grad_output, 3, output_size, input_size)


def _require(kernel, dtype):
    # These kernels exist for floating types and uint8 only.
    if dtype is not torch.uint8:
        require_kernel_dtype(kernel, dtype, "float")


def _upsample_nearest_exact1d_output_shape(self, output_size, scales=None):
    meta = _forward(self, 1, output_size)
    _require("compute_indices_weights_nearest", self.dtype)
    return meta


def _upsample_nearest_exact2d_output_shape(self, output_size, scales_h=None, scales_w=None):
    meta = _forward(self, 2, output_size)
    _require("upsample_nearest2d_channels_last", self.dtype)
    return meta


def _upsample_nearest_exact3d_output_shape(self, output_size, scales_d=None, scales_h=None, scales_w=None):
    meta = _forward(self, 3, output_size)
    _require("compute_indices_weights_nearest", self.dtype)
    return meta


def _upsample_nearest_exact1d_backward_output_shape(grad_output, output_size, input_size, scales=None):
    return _backward(grad_output, 1, output_size, input_size)


def _upsample_nearest_exact2d_backward_output_shape(
    grad_output, output_size, input_size, scales_h=None, scales_w=None
):
    return _backward(grad_output, 2, output_size, input_size)


def _upsample_nearest_exact3d_backward_output_shape(
    grad_output, output_size, input_size, scales_d=None, scales_h=None, scales_w=None
):
    return _backward(grad_output, 3, output_size, input_size)


def upsample_bicubic2d_output_shape(self, output_size, align_corners, scales_h=None, scales_w=None):
    meta = _forward(self, 2, output_size)
    _require("compute_indices_weights_cubic", self.dtype)
    return meta


def upsample_bicubic2d_backward_output_shape(
    grad_output, output_size, input_size, align_corners, scales_h=None, scales_w=None
):
    return _backward(grad_output, 2, output_size, input_size)


def _upsample_bilinear2d_aa_output_shape(self, output_size, align_corners, scales_h=None, scales_w=None):
    meta = _forward(self, 2, output_size)
    if self.dtype is not torch.uint8:
        require_kernel_dtype("compute_index_ranges_weights", self.dtype, "float", reduced=False)
    return meta


def _upsample_bilinear2d_aa_backward_output_shape(
    grad_output, output_size, input_size, align_corners, scales_h=None, scales_w=None
):
    return _backward(grad_output, 2, output_size, input_size)


def _upsample_bicubic2d_aa_output_shape(self, output_size, align_corners, scales_h=None, scales_w=None):
    meta = _forward(self, 2, output_size)
    if self.dtype is not torch.uint8:
        require_kernel_dtype("compute_index_ranges_weights", self.dtype, "float", reduced=False)
    return meta


def _upsample_bicubic2d_aa_backward_output_shape(
    grad_output, output_size, input_size, align_corners, scales_h=None, scales_w=None
):
    return _backward(grad_output, 2, output_size, input_size)
