"""Shape functions of matrix products: mm, addmm, bmm, _grouped_mm, _scaled_mm."""

from __future__ import annotations

import math

import torch

from .common import TensorMeta, cpp_type_name, expand_shape, scalar_type_name
from .matmul import bmm_dims, no_bool


def _mm_shape(mat1: TensorMeta, mat2: TensorMeta, names=("self", "mat2")) -> tuple[int, int]:
    for name, m in zip(names, (mat1, mat2)):
        if m.ndim != 2:
            raise RuntimeError(f"{name} must be a matrix")
    (n, k), (k2, m) = mat1.shape, mat2.shape
    if k != k2:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({n}x{k} and {k2}x{m})")
    if mat1.dtype != mat2.dtype:  # PyTorch does not promote matmul operands
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: {cpp_type_name(mat1.dtype)} != "
                           f"{cpp_type_name(mat2.dtype)}")
    no_bool(mat1.dtype, "addmm_impl_cpu_")
    return n, m


def mm_output_shape(self, mat2):
    return TensorMeta(_mm_shape(self, mat2), self.dtype)


def addmm_output_shape(self, mat1, mat2, *, beta=1, alpha=1):
    if self.dtype != mat2.dtype:
        raise RuntimeError(f"self and mat2 must have the same dtype, but got {scalar_type_name(self.dtype)} and "
                           f"{scalar_type_name(mat2.dtype)}")
    shape = _mm_shape(mat1, mat2, names=("mat1", "mat2"))
    expand_shape(self.shape, shape)  # self must broadcast to the product's shape
    return TensorMeta(shape, mat1.dtype)


def bmm_output_shape(self, mat2):
    shape = bmm_dims(self, mat2)
    if self.dtype != mat2.dtype:
        raise RuntimeError(f"expected scalar type {scalar_type_name(self.dtype)} but found "
                           f"{scalar_type_name(mat2.dtype)}")
    no_bool(self.dtype, "bmm")
    return TensorMeta(shape, self.dtype)


_GROUPED_MM_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _grouped_mm_output_shape(self, mat2, offs=None, bias=None, out_dtype=None):
    """PyTorch CPU's checks, in its order, except its 16-byte stride rule, a limit of its
    kernels' memory access that our tensors do not share."""
    for name, m in (("mat_a", self), ("mat_b", mat2)):
        if m.dtype not in _GROUPED_MM_DTYPES:
            raise RuntimeError(
                f"Expected {name} to be Float32, BFloat16 or Float16 matrix, got {scalar_type_name(m.dtype)}"
            )
    for name, m in (("mat_a", self), ("mat_b", mat2)):
        if m.ndim not in (2, 3):
            raise RuntimeError(f"{name} has to be 2 or 3d")
    a_2d, b_2d = self.ndim == 2, mat2.ndim == 2
    if not (a_2d and b_2d) and self.shape[-1] != mat2.shape[-2]:
        raise RuntimeError("contraction dimension of mat_a and mat_b must match")
    if (offs is not None) != (a_2d or b_2d):
        raise RuntimeError("Have to provide offsets if there is a 2d matrix, or no offset if both matrices are 3d")
    if offs is not None:
        if offs.ndim != 1:
            raise RuntimeError("offs has to be 1D")
        if offs.dtype != torch.int32:
            raise RuntimeError("Offsets have to be int32")
    if bias is not None:
        raise RuntimeError("Bias not supported yet")
    if out_dtype is not None and out_dtype != self.dtype:
        raise RuntimeError("Grouped gemm output dtype must match `mat_a` dtype")
    if a_2d and b_2d:
        shape = (offs.shape[0], self.shape[0], mat2.shape[1])
    elif a_2d or b_2d:
        if offs.shape[0] != (mat2 if a_2d else self).shape[0]:
            raise RuntimeError("matrix batch sizes have to match")
        shape = (self.shape[0], mat2.shape[-1]) if a_2d else (self.shape[1], mat2.shape[1])
    else:
        if self.shape[0] != mat2.shape[0]:
            raise RuntimeError("batched dimension has to match")
        shape = (self.shape[0], self.shape[1], mat2.shape[2])
    if self.dtype != mat2.dtype:
        a, b = cpp_type_name(self.dtype), cpp_type_name(mat2.dtype)
        if a_2d or b_2d:
            raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: {a} != {b}")
        raise RuntimeError(f"Expected out tensor to have dtype {b}, but got {a} instead")
    return TensorMeta(shape, self.dtype)


SCALED_MM_FLOAT8 = (torch.float8_e4m3fn, torch.float8_e5m2)
_SCALED_MM_RESULTS = (torch.float32, torch.bfloat16, torch.float16, *SCALED_MM_FLOAT8)
_ONEDNN_DTYPE_ERROR = "itensor_view_from_dense expects float/bfloat16/half/int8/fp8 tensor input"


def scaled_mm_rowwise(self, mat2, scale_a, scale_b) -> bool:
    """Whether _scaled_mm's scales are per row of self and per column of mat2 (else one each)."""
    return tuple(scale_a.shape) == (self.shape[0], 1) and tuple(scale_b.shape) == (1, mat2.shape[1])


def _scaled_mm_output_shape(self, mat2, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None,
                            use_fast_accum=False):
    """PyTorch CPU's checks (its oneDNN kernel's), except that row-wise scales must be
    contiguous: float8 matrices, one scale each (any dtype) or float32 scales per row of
    self and per column of mat2."""
    for name, m in (("mat1", self), ("mat2", mat2)):
        if m.ndim != 2:
            raise RuntimeError(f"{name} must be a matrix")
    (n, k), (k2, m) = self.shape, mat2.shape
    tensorwise = math.prod(scale_a.shape) == 1 and math.prod(scale_b.shape) == 1
    rowwise = scaled_mm_rowwise(self, mat2, scale_a, scale_b) and scale_a.dtype == scale_b.dtype == torch.float32
    if not (self.dtype.is_floating_point and self.dtype.itemsize == 1 and mat2.dtype.is_floating_point
            and mat2.dtype.itemsize == 1 and (tensorwise or rowwise)):
        raise ValueError(
            "Invalid scaling configuration.\n- For TensorWise scaling, a and b should be float8, scales should be "
            "float and singletons.\n- For RowWise scaling, a and b should be float8, scales should be float, scale_a "
            f"should be ({n}, 1) and scale_b should be (1, {m}), and both should be contiguous.\nGot "
            f"mat_a.dtype()={scalar_type_name(self.dtype)}, scale_a.dtype()={scalar_type_name(scale_a.dtype)}, "
            f"scale_a.size()={list(scale_a.shape)}, mat_b.dtype()={scalar_type_name(mat2.dtype)}, "
            f"scale_b.dtype()={scalar_type_name(scale_b.dtype)}, scale_b.size()={list(scale_b.shape)}"
        )
    if k != k2:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({n}x{k} and {k2}x{m})")
    if scale_result is not None and math.prod(scale_result.shape) != 1:
        raise RuntimeError("scale_result must be a float scalar")
    out = self.dtype if out_dtype is None else out_dtype
    for t in (self, mat2, bias, TensorMeta((), out)):
        if t is not None and t.dtype not in _SCALED_MM_RESULTS:  # the float8 fnuz forms, integers, float64
            raise RuntimeError(f"{_ONEDNN_DTYPE_ERROR}{scalar_type_name(t.dtype)}")
    if bias is not None and math.prod(bias.shape) != m:
        raise RuntimeError(f"Bias must be size {m} but got {math.prod(bias.shape)}")
    return TensorMeta((n, m), out)
