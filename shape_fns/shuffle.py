"""Output metadata of the ops in lowerings/shuffle.py."""

from __future__ import annotations

import math

from .common import TensorMeta, normalize_dim, promote_dtypes


def rot90_output_shape(self, k=1, dims=(0, 1)):
    if len(dims) != 2:
        raise RuntimeError(f"expected total rotation dims == 2, but got dims = {len(dims)}")
    if self.ndim < 2:
        raise RuntimeError(f"expected total dims >= 2, but got total dims = {self.ndim}")
    if dims[0] == dims[1] or abs(dims[0] - dims[1]) == self.ndim:
        raise RuntimeError(f"expected rotation dims to be different, but got dim0 = {dims[0]} and dim1 = {dims[1]}")
    d0, d1 = normalize_dim(dims[0], self.ndim), normalize_dim(dims[1], self.ndim)
    shape = list(self.shape)
    if k % 2:
        shape[d0], shape[d1] = shape[d1], shape[d0]
    return TensorMeta(tuple(shape), self.dtype)


def block_diag_output_shape(tensors):
    rows = cols = 0
    for i, t in enumerate(tensors):
        if t.ndim > 2:
            raise RuntimeError(
                f"torch.block_diag: Input tensors must have 2 or fewer dimensions. Input {i} has {t.ndim} dimensions"
            )
        r, c = (1, 1) if t.ndim == 0 else (1, t.shape[0]) if t.ndim == 1 else t.shape
        rows, cols = rows + r, cols + c
    if not tensors:
        import torch

        return TensorMeta((0, 0), torch.get_default_dtype())
    return TensorMeta((rows, cols), promote_dtypes(*tensors))


def _chunk_cat_output_shape(tensors, dim, num_chunks):
    if len(tensors) == 0:
        raise RuntimeError("_chunk_cat expects a non-empty input tensor list")
    if num_chunks < 1:
        raise RuntimeError("_chunk_cat expects positive num_chunks")
    first = tensors[0]
    for t in tensors:
        if t.dtype != first.dtype:
            raise RuntimeError("_chunk_cat expects all input tensors with the same dtype")
    d = normalize_dim(dim, first.ndim)
    for t in tensors:
        if t.numel() == 0:
            raise RuntimeError("_chunk_cat expects non-empty tensor")
        if t.ndim <= d:
            raise RuntimeError("_chunk_cat expects tensors with more dimensions than dim")
        if t.shape[:d] != first.shape[:d]:
            raise RuntimeError("_chunk_cat expects same sizes of 0,...,dim-1 dimensions for all tensors")
    total = 0
    for t in tensors:
        size = math.ceil(t.shape[d] / num_chunks)
        total += size * math.prod(t.shape[d + 1 :])
    return TensorMeta(first.shape[:d] + (num_chunks, total), first.dtype)


def pixel_shuffle_output_shape(self, upscale_factor):
    if self.ndim < 3:
        raise RuntimeError(
            f"pixel_shuffle expects input to have at least 3 dimensions, but got input with {self.ndim} dimension(s)"
        )
    if upscale_factor <= 0:
        raise RuntimeError(f"pixel_shuffle expects a positive upscale_factor, but got {upscale_factor}")
    *lead, c, h, w = self.shape
    r2 = upscale_factor * upscale_factor
    if c % r2:
        raise RuntimeError(
            "pixel_shuffle expects its input's 'channel' dimension to be divisible by the square of "
            f"upscale_factor, but input.size(-3)={c} is not divisible by {r2}"
        )
    return TensorMeta(tuple(lead) + (c // r2, h * upscale_factor, w * upscale_factor), self.dtype)


def pixel_unshuffle_output_shape(self, downscale_factor):
    if self.ndim < 3:
        raise RuntimeError(
            f"pixel_unshuffle expects input to have at least 3 dimensions, but got input with {self.ndim} dimension(s)"
        )
    r = downscale_factor
    if r <= 0:
        raise RuntimeError(f"pixel_unshuffle expects a positive downscale_factor, but got {r}")
    *lead, c, h, w = self.shape
    if h % r:
        raise RuntimeError(
            f"pixel_unshuffle expects height to be divisible by downscale_factor, but input.size(-2)={h} is not "
            f"divisible by {r}"
        )
    if w % r:
        raise RuntimeError(
            f"pixel_unshuffle expects width to be divisible by downscale_factor, but input.size(-1)={w} is not "
            f"divisible by {r}"
        )
    return TensorMeta(tuple(lead) + (c * r * r, h // r, w // r), self.dtype)


def _channel_shuffle_meta(self, groups):
    if self.ndim <= 2:
        raise RuntimeError(
            f"channel_shuffle expects input to have at least 3 dimensions, but got input with {self.ndim} dimension(s)"
        )
    if groups <= 0:
        raise RuntimeError(f"Number of groups to divide channels in must be positive. Value of groups:{groups}")
    if self.shape[1] % groups:
        raise RuntimeError(
            f"Number of channels must be divisible by groups. Got {self.shape[1]} channels and {groups} groups."
        )
    return TensorMeta(self.shape, self.dtype)


def channel_shuffle_output_shape(self, groups):
    return _channel_shuffle_meta(self, groups)
