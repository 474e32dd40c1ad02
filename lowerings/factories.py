"""Tensors made from a shape or from another tensor's shape: zeros, ones, *_like, new_*, fill."""

from __future__ import annotations

import jax.numpy as jnp
import torch

from ..shape_fns.common import to_numpy_dtype


def _dtype(dtype, like=None):
    if dtype is not None:
        return to_numpy_dtype(dtype)
    return like.dtype if like is not None else to_numpy_dtype(torch.get_default_dtype())


def lower_zeros(size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return jnp.zeros(size, _dtype(dtype))


def lower_ones(size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return jnp.ones(size, _dtype(dtype))


def lower_zeros_like(self, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return jnp.zeros(self.shape, _dtype(dtype, self))


def lower_ones_like(self, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return jnp.ones(self.shape, _dtype(dtype, self))


def lower_empty_like(self, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    # Uninitialized memory in PyTorch; zeros here (any value is a valid result).
    return jnp.zeros(self.shape, _dtype(dtype, self))


def lower_full_like(self, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return jnp.full(self.shape, fill_value, _dtype(dtype, self))


def lower_new_zeros(self, size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return jnp.zeros(size, _dtype(dtype, self))


def lower_new_ones(self, size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return jnp.ones(size, _dtype(dtype, self))


def lower_new_empty(self, size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return jnp.zeros(size, _dtype(dtype, self))


def lower_new_full(self, size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None):
    return jnp.full(size, fill_value, _dtype(dtype, self))


def lower_fill_Scalar(self, value):
    return jnp.full(self.shape, value, self.dtype)


def lower_zero(self):
    return jnp.zeros_like(self)


def lower_new_empty_strided(self, size, stride, *, dtype=None, layout=None, device=None, pin_memory=None):
    return jnp.zeros(size, _dtype(dtype, self))


def lower_eye(n, *, dtype=None, layout=None, device=None, pin_memory=None):
    return jnp.eye(n, dtype=_dtype(dtype))


def lower_eye_m(n, m, *, dtype=None, layout=None, device=None, pin_memory=None):
    return jnp.eye(n, m, dtype=_dtype(dtype))
