"""Ops that rearrange elements by a fixed rule: rot90, block_diag, _chunk_cat,
pixel_(un)shuffle, channel_shuffle."""

from __future__ import annotations

import math

import jax.numpy as jnp

from ..shape_fns.common import normalize_dim, promote_dtypes, to_numpy_dtype, TensorMeta
from ..shape_fns.common import to_torch_dtype


def lower_rot90(self, k=1, dims=(0, 1)):
    d0, d1 = normalize_dim(dims[0], self.ndim), normalize_dim(dims[1], self.ndim)
    return jnp.rot90(self, k % 4, axes=(d0, d1))


def lower_block_diag(tensors):
    out = (
        to_numpy_dtype(promote_dtypes(*[TensorMeta(t.shape, to_torch_dtype(t.dtype)) for t in tensors]))
        if tensors
        else None
    )
    mats = [t.reshape(1, 1) if t.ndim == 0 else t.reshape(1, -1) if t.ndim == 1 else t for t in tensors]
    rows = sum(m.shape[0] for m in mats)
    cols = sum(m.shape[1] for m in mats)
    result = jnp.zeros((rows, cols), out)
    r = c = 0
    for m in mats:
        result = result.at[r : r + m.shape[0], c : c + m.shape[1]].set(m.astype(out))
        r, c = r + m.shape[0], c + m.shape[1]
    return result


def lower__chunk_cat(tensors, dim, num_chunks):
    d = normalize_dim(dim, tensors[0].ndim)
    pieces = []
    for t in tensors:
        size = math.ceil(t.shape[d] / num_chunks)
        pad = [(0, 0)] * t.ndim
        pad[d] = (0, size * num_chunks - t.shape[d])
        padded = jnp.pad(t, pad)
        pieces.append(padded.reshape(t.shape[:d] + (num_chunks, -1) if padded.size else t.shape[:d] + (num_chunks, 0)))
    return jnp.concatenate(pieces, axis=d + 1)


def lower_pixel_shuffle(self, upscale_factor):
    r = upscale_factor
    *lead, c, h, w = self.shape
    x = self.reshape(tuple(lead) + (c // (r * r), r, r, h, w))
    n = len(lead)
    x = jnp.transpose(x, tuple(range(n)) + (n, n + 3, n + 1, n + 4, n + 2))
    return x.reshape(tuple(lead) + (c // (r * r), h * r, w * r))


def lower_pixel_unshuffle(self, downscale_factor):
    r = downscale_factor
    *lead, c, h, w = self.shape
    x = self.reshape(tuple(lead) + (c, h // r, r, w // r, r))
    n = len(lead)
    x = jnp.transpose(x, tuple(range(n)) + (n, n + 2, n + 4, n + 1, n + 3))
    return x.reshape(tuple(lead) + (c * r * r, h // r, w // r))


def _channel_shuffle(self, groups):
    n, c, *rest = self.shape
    x = self.reshape((n, groups, c // groups) + tuple(rest))
    return jnp.swapaxes(x, 1, 2).reshape(self.shape)


def lower_channel_shuffle(self, groups):
    return _channel_shuffle(self, groups)
