"""Shape functions of least squares and the LDL^T factorization and solve
(lowerings/linalg_solve.py), with the checks and error types of PyTorch's CPU kernels."""

from __future__ import annotations

import torch

from .common import TensorMeta, broadcast_shapes, scalar_type_name
from .linalg_decomp import _check_dtype, _check_square, _real

LSTSQ_DRIVERS = ("gels", "gelsy", "gelsd", "gelss")


def _lstsq_is_vector_rhs(a_shape, b_shape):
    return len(b_shape) == 1 or (len(b_shape) == len(a_shape) - 1 and tuple(b_shape) == tuple(a_shape[:-1]))


def lstsq_check(A, B, driver):
    """PyTorch's argument checks of linalg.lstsq; returns whether B is a (batch of)
    vector(s)."""
    api = "torch.linalg.lstsq"
    if A.ndim < 2:
        raise RuntimeError(f"{api}: input must have at least 2 dimensions.")
    if B.ndim < 1:
        raise RuntimeError(f"{api}: other must have at least 1 dimension.")
    if A.dtype != B.dtype:
        raise RuntimeError(
            f"{api}: Expected input and other to have the same dtype, but got input's dtype "
            f"{scalar_type_name(A.dtype)} and other's dtype {scalar_type_name(B.dtype)}"
        )
    diff = A.ndim - B.ndim
    if not 0 <= diff <= 1:
        raise RuntimeError(
            f"{api}: input.dim() must be greater or equal to other.dim() and (input.dim() - other.dim()) <= 1"
        )
    vector = _lstsq_is_vector_rhs(A.shape, B.shape)
    b_rows = B.shape[-1] if vector else B.shape[-2]
    if A.shape[-2] != b_rows:
        raise RuntimeError(f"{api}: input.size(-2) should match other.size({-1 if vector else -2})")
    if diff == 1 and not vector:
        # PyTorch reinterprets such a right-hand side's dimensions in a way its docs do
        # not describe (and mostly fails on); refuse it rather than guess.
        raise RuntimeError(
            f"{api}: other must be a batch of vectors (shape input.shape[:-1]) or of matrices with input's number of "
            "dimensions"
        )
    if driver not in LSTSQ_DRIVERS:
        raise RuntimeError(f"{api}: parameter `driver` should be one of (gels, gelsy, gelsd, gelss)")
    _check_dtype(A, api)
    return vector


def linalg_lstsq_values_output_shape(self, b, rcond, driver, residuals):
    A, B = self, b
    vector = lstsq_check(A, B, driver)
    b = B.shape + (1,) if vector else B.shape
    m, n = A.shape[-2:]
    k = b[-1]
    batch = broadcast_shapes(A.shape[:-2], b[:-2])
    real = _real(A.dtype)
    solution = TensorMeta(batch + ((n,) if vector else (n, k)), A.dtype)
    res = TensorMeta(batch + (k,) if residuals else (0,), real)
    rank = TensorMeta((0,) if driver == "gels" else A.shape[:-2], torch.int64)
    sv = TensorMeta(A.shape[:-2] + (min(m, n),) if driver in ("gelsd", "gelss") else (0,), real)
    return solution, res, rank, sv


def linalg_ldl_factor_ex_output_shape(self, *, hermitian=False, check_errors=False):
    api = "torch.linalg.ldl_factor_ex"
    _check_square(self, api)
    _check_dtype(self, api)
    return (
        TensorMeta(self.shape, self.dtype),
        TensorMeta(self.shape[:-1], torch.int32),
        TensorMeta(self.shape[:-2], torch.int32),
    )


def linalg_ldl_solve_output_shape(LD, pivots, B, *, hermitian=False):
    api = "torch.linalg.ldl_solve"
    _check_square(LD, api, "LD")
    if B.ndim < 2:
        # PyTorch reads B.size(-2) before any check.
        raise IndexError(
            f"Dimension out of range (expected to be in range of [{-max(B.ndim, 1)}, {max(B.ndim, 1) - 1}], but got -2)"
        )
    if LD.shape[:-1] != pivots.shape:
        raise RuntimeError(
            f"{api}: Expected LD.shape[:-1] and pivots.shape to be the same, but got pivots with shape {pivots.shape} "
            "instead"
        )
    if pivots.dtype.is_floating_point or pivots.dtype.is_complex or pivots.dtype == torch.bool:
        raise RuntimeError(f"{api}: Expected pivots to be integers. Got {scalar_type_name(pivots.dtype)}")
    if LD.dtype != B.dtype:
        raise RuntimeError(f"{api}: LD dtype {LD.dtype} does not match b dtype {B.dtype}")
    _check_dtype(LD, api)
    if LD.shape[-1] != B.shape[-2]:
        raise RuntimeError(
            f"{api}: Incompatible shapes of A and B for the equation AX = B ({LD.shape[-2]}x{LD.shape[-1]} and "
            f"{B.shape[-2]}x{B.shape[-1]})"
        )
    batch = broadcast_shapes(LD.shape[:-2], B.shape[:-2])
    return TensorMeta(batch + B.shape[-2:], B.dtype)
