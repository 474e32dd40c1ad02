"""Lowerings of max unpooling: each (N, C) plane of the output is zeros with the input's
values written at their flat in-plane indices.

Where two inputs name the same position, PyTorch CPU's sequential loop keeps the last
one; XLA's scatter leaves the order of duplicate writes unspecified, so the winner is
chosen explicitly (a scatter-max of input positions, then a gather).

Indices are data, so they cannot be checked while tracing: PyTorch CPU raises for an
index outside the output plane, here such an input is dropped (its value is not
written anywhere) and the rest of the plane is still filled.
"""

from __future__ import annotations

import math

import jax.numpy as jnp


def _unpool(self, indices, output_size, nd):
    batch = self.shape[:-nd]
    plane = math.prod(output_size)
    out_shape = batch + tuple(output_size)
    if math.prod(out_shape) == 0:
        return jnp.zeros(out_shape, self.dtype)
    k = math.prod(self.shape[-nd:])
    vals = self.reshape((-1, k))
    idx = indices.reshape((-1, k))
    idx = jnp.where(idx < 0, plane, idx)  # not wrapped around like a Python index: dropped
    rows = jnp.arange(vals.shape[0])[:, None]
    pos = jnp.broadcast_to(jnp.arange(k, dtype=jnp.int32), idx.shape)
    winner = jnp.full((vals.shape[0], plane), -1, jnp.int32).at[rows, idx].max(pos, mode="drop")
    out = jnp.take_along_axis(vals, jnp.maximum(winner, 0), axis=1)
    out = jnp.where(winner >= 0, out, jnp.zeros((), self.dtype))
    return out.reshape(out_shape)


def lower_max_unpool2d(self, indices, output_size):
    return _unpool(self, indices, tuple(output_size), 2)


def lower_max_unpool3d(self, indices, output_size, stride, padding):
    return _unpool(self, indices, tuple(output_size), 3)
