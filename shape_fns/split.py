"""Output metadata of the ops in lowerings/split.py."""

from __future__ import annotations

from .common import TensorMeta, normalize_dim


def split_Tensor_output_shape(self, split_size, dim=0):
    dim = normalize_dim(dim, self.ndim)
    if split_size < 0:
        raise RuntimeError(f"split expects split_size be non-negative, but got split_size={split_size}")
    n = self.shape[dim]
    if split_size == 0 and n != 0:
        raise RuntimeError(f"split_size can only be 0 if dimension size is 0, but got dimension size of {n}")
    starts = range(0, n, split_size) if split_size else [0]
    return tuple(
        TensorMeta(self.shape[:dim] + (min(s + split_size, n) - s if split_size else n,) + self.shape[dim + 1 :], self.dtype)
        for s in starts
    )
