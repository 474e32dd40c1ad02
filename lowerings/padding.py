"""Lowerings of padding ops: constant, reflection and replication (negative pads crop),
and the backward ops of the latter two (the adjoint of the padding, through jax.vjp)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .common import opmath


def _pairs(pad, ndim):
    """PyTorch's pad list (last dim first, (low, high) each) as per-dim (low, high)."""
    pairs = [(0, 0)] * ndim
    for i in range(len(pad) // 2):
        pairs[ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    return pairs


def lower_constant_pad_nd(self, pad, value=0):
    fill = jnp.asarray(value).astype(self.dtype)
    return lax.pad(self, fill, [(lo, hi, 0) for lo, hi in _pairs(pad, self.ndim)])


def _source_indices(size, lo, hi, mode):
    # PyTorch's index maps; negative pads crop, which jnp.pad cannot express.
    j = np.arange(size + lo + hi) - lo
    if mode == "edge":
        return np.clip(j, 0, size - 1)
    j = np.abs(j)
    return np.where(j >= size, 2 * (size - 1) - j, j)


def _pad(self, padding, mode):
    x = self
    for axis, (lo, hi) in enumerate(_pairs(padding, self.ndim)):
        if lo or hi:
            x = jnp.take(x, jnp.asarray(_source_indices(x.shape[axis], lo, hi, mode)), axis=axis)
    return x


def _pad_backward(grad_output, self, padding, mode):
    x = opmath(self)
    _, vjp = jax.vjp(lambda x: _pad(x, padding, mode), x)
    return vjp(opmath(grad_output).astype(x.dtype))[0].astype(self.dtype)


def lower_reflection_pad1d(self, padding):
    return _pad(self, padding, "reflect")


def lower_reflection_pad2d(self, padding):
    return _pad(self, padding, "reflect")


def lower_reflection_pad3d(self, padding):
    return _pad(self, padding, "reflect")


def lower_replication_pad1d(self, padding):
    return _pad(self, padding, "edge")


def lower_replication_pad2d(self, padding):
    return _pad(self, padding, "edge")


def lower_replication_pad3d(self, padding):
    return _pad(self, padding, "edge")


def lower_reflection_pad1d_backward(grad_output, self, padding):
    return _pad_backward(grad_output, self, padding, "reflect")


def lower_reflection_pad2d_backward(grad_output, self, padding):
    return _pad_backward(grad_output, self, padding, "reflect")


def lower_reflection_pad3d_backward(grad_output, self, padding):
    return _pad_backward(grad_output, self, padding, "reflect")


def lower_replication_pad1d_backward(grad_output, self, padding):
    return _pad_backward(grad_output, self, padding, "edge")


def lower_replication_pad2d_backward(grad_output, self, padding):
    return _pad_backward(grad_output, self, padding, "edge")


def lower_replication_pad3d_backward(grad_output, self, padding):
    return _pad_backward(grad_output, self, padding, "edge")
