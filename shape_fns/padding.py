"""Shape functions of padding ops, with ATen's checks."""

from __future__ import annotations

from .common import TensorMeta


def constant_pad_nd_output_shape(self, pad, value=0):
    pad = tuple(pad)
    if len(pad) % 2:
        raise RuntimeError(f"Length of pad must be even but instead it equals {len(pad)}")
    if len(pad) // 2 > self.ndim:
        raise RuntimeError(
            "Length of pad should be no more than twice the number of dimensions of the input. "
            f"Pad length is {len(pad)} while the input has {self.ndim} dimensions."
        )
    shape = list(self.shape)
    for i in range(len(pad) // 2):
        d = self.ndim - 1 - i
        new = shape[d] + pad[2 * i] + pad[2 * i + 1]
        if new < 0:
            raise RuntimeError(
                f"The input size {shape[d]}, plus negative padding {pad[2 * i]} and {pad[2 * i + 1]} resulted in a "
                f"negative output size, which is invalid. Check dimension {d} of your input."
            )
        shape[d] = new
    return TensorMeta(tuple(shape), self.dtype)


def _pad_shape(name, self, padding, nd, reflect):
    padding = tuple(padding)
    if len(padding) != 2 * nd:
        raise RuntimeError(f"padding size is expected to be {2 * nd}, but got: {len(padding)}")
    batch = self.ndim - nd - 1
    if batch not in (0, 1) or any(s == 0 for s in self.shape[batch:]):
        raise RuntimeError(
            f"Expected {nd + 1}D or {nd + 2}D (batch mode) tensor with possibly 0 batch size and other "
            f"non-zero dimensions for input, but got: {list(self.shape)}"
        )
    shape = list(self.shape)
    for i in range(nd):
        d = self.ndim - 1 - i
        lo, hi = padding[2 * i], padding[2 * i + 1]
        if reflect and (lo >= shape[d] or hi >= shape[d]):
            raise RuntimeError(
                f"Argument #4: Padding size should be less than the corresponding input dimension, but got: "
                f"padding ({lo}, {hi}) at dimension {d} of input {list(self.shape)}"
            )
        new = shape[d] + lo + hi
        if new < 1:
            raise RuntimeError(
                f"input ({'x'.join(map(str, self.shape[-nd:]))}) is too small. Calculated output "
                f"size is invalid at dimension {d}"
            )
        shape[d] = new
    return tuple(shape)


def _pad_meta(name, self, padding, nd, reflect):
    return TensorMeta(_pad_shape(name, self, padding, nd, reflect), self.dtype)


def _pad_backward_meta(name, grad_output, self, padding, nd, reflect):
    shape = _pad_shape(name, self, padding, nd, reflect)
    if tuple(grad_output.shape) != shape:
        raise RuntimeError(f"grad_output must have shape {list(shape)}, but got {list(grad_output.shape)}")
    return TensorMeta(self.shape, self.dtype)


def reflection_pad1d_output_shape(self, padding):
    return _pad_meta("reflection_pad1d", self, padding, 1, True)


def reflection_pad2d_output_shape(self, padding):
    return _pad_meta("reflection_pad2d", self, padding, 2, True)


def reflection_pad3d_output_shape(self, padding):
    return _pad_meta("reflection_pad3d", self, padding, 3, True)


def replication_pad1d_output_shape(self, padding):
    return _pad_meta("replication_pad1d", self, padding, 1, False)


def replication_pad2d_output_shape(self, padding):
    return _pad_meta("replication_pad2d", self, padding, 2, False)


def replication_pad3d_output_shape(self, padding):
    return _pad_meta("replication_pad3d", self, padding, 3, False)


def reflection_pad1d_backward_output_shape(grad_output, self, padding):
    return _pad_backward_meta("reflection_pad1d", grad_output, self, padding, 1, True)


def reflection_pad2d_backward_output_shape(grad_output, self, padding):
    return _pad_backward_meta("reflection_pad2d", grad_output, self, padding, 2, True)


def reflection_pad3d_backward_output_shape(grad_output, self, padding):
    return _pad_backward_meta("reflection_pad3d", grad_output, self, padding, 3, True)


def replication_pad1d_backward_output_shape(grad_output, self, padding):
    return _pad_backward_meta("replication_pad1d", grad_output, self, padding, 1, False)


def replication_pad2d_backward_output_shape(grad_output, self, padding):
    return _pad_backward_meta("replication_pad2d", grad_output, self, padding, 2, False)


def replication_pad3d_backward_output_shape(grad_output, self, padding):
    return _pad_backward_meta("replication_pad3d", grad_output, self, padding, 3, False)
