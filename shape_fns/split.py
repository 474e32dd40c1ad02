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
        TensorMeta(
            self.shape[:dim] + (min(s + split_size, n) - s if split_size else n,) + self.shape[dim + 1 :], self.dtype
        )
        for s in starts
    )


def split_with_sizes_output_shape(self, split_sizes, dim=0):
    if self.ndim == 0:
        raise RuntimeError("split expects at least a 1-dimensional tensor")
    dim = normalize_dim(dim, self.ndim)
    n = self.shape[dim]
    for i, s in enumerate(split_sizes):
        if s < 0:
            raise RuntimeError(
                "split_with_sizes expects split_sizes have only non-negative entries, but got "
                f"split_sizes={list(split_sizes)}"
            )
    if sum(split_sizes) != n:
        raise RuntimeError(
            f"split_with_sizes expects split_sizes to sum exactly to {n} (input tensor's size at dimension {dim}), "
            f"but got split_sizes={list(split_sizes)}"
        )
    return tuple(TensorMeta(self.shape[:dim] + (s,) + self.shape[dim + 1 :], self.dtype) for s in split_sizes)


def unsafe_split_Tensor_output_shape(self, split_size, dim=0):
    return split_Tensor_output_shape(self, split_size, dim)


def unbind_int_output_shape(self, dim=0):
    if self.ndim == 0:
        raise IndexError("Dimension specified as 0 but tensor has no dimensions")
    dim = normalize_dim(dim, self.ndim)
    return tuple(TensorMeta(self.shape[:dim] + self.shape[dim + 1 :], self.dtype) for _ in range(self.shape[dim]))
