"""Shape functions of matrix products: mm, addmm, bmm."""

from __future__ import annotations

import torch

from .common import TensorMeta, expand_shape


def _check_dtypes(a: TensorMeta, b: TensorMeta, what: str) -> None:
    # PyTorch does not promote matmul operands.
    if a.dtype != b.dtype:
        raise RuntimeError(f"{what} must have the same dtype, but got {a.dtype} and {b.dtype}")
    if a.dtype is torch.bool:
        raise NotImplementedError('"addmm_impl_cpu_" not implemented for torch.bool')


def _mm_shape(mat1: TensorMeta, mat2: TensorMeta, names=("self", "mat2")) -> tuple[int, int]:
    for name, m in zip(names, (mat1, mat2)):
        if m.ndim != 2:
            raise RuntimeError(f"{name} must be a matrix")
    (n, k), (k2, m) = mat1.shape, mat2.shape
    if k != k2:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({n}x{k} and {k2}x{m})")
    _check_dtypes(mat1, mat2, "mat1 and mat2")
    return n, m


def mm_output_shape(self, mat2):
    return TensorMeta(_mm_shape(self, mat2), self.dtype)


def addmm_output_shape(self, mat1, mat2, *, beta=1, alpha=1):
    shape = _mm_shape(mat1, mat2, names=("mat1", "mat2"))
    _check_dtypes(self, mat1, "self and mat1")
    expand_shape(self.shape, shape)  # self must broadcast to the product's shape
    return TensorMeta(shape, mat1.dtype)


def bmm_output_shape(self, mat2):
    for name, m in (("batch1", self), ("batch2", mat2)):
        if m.ndim != 3:
            raise RuntimeError(f"{name} must be a 3D tensor")
    b, n, k = self.shape
    if mat2.shape[:2] != (b, k):
        raise RuntimeError(
            "Expected size for first two dimensions of batch2 tensor to be: "
            f"[{b}, {k}] but got: [{mat2.shape[0]}, {mat2.shape[1]}]."
        )
    _check_dtypes(self, mat2, "batch1 and batch2")
    return TensorMeta((b, n, mat2.shape[2]), self.dtype)
