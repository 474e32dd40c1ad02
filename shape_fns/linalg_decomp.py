"""Shape functions of torch.linalg's factorizations and solvers
(lowerings/linalg_decomp.py), with the checks and error types of PyTorch's CPU kernels."""

from __future__ import annotations

import torch

from .common import TensorMeta, broadcast_shapes, normalize_dim, scalar_type_name

_REAL = {torch.complex64: torch.float32, torch.complex128: torch.float64}


def _real(dtype):
    return _REAL.get(dtype, dtype)


def _check_dtype(x: TensorMeta, api: str) -> None:
    if x.dtype in (torch.float16, torch.bfloat16):
        raise RuntimeError(f"{api}: Low precision dtypes not supported. Got {scalar_type_name(x.dtype)}")
    if not (x.dtype.is_floating_point or x.dtype.is_complex):
        raise RuntimeError(
            f"{api}: Expected a floating point or complex tensor as input. Got {scalar_type_name(x.dtype)}"
        )


def _check_matrix(x: TensorMeta, api: str, name: str = "A") -> None:
    if x.ndim < 2:
        raise RuntimeError(f"{api}: The input tensor {name} must have at least 2 dimensions.")


def _check_square(x: TensorMeta, api: str, name: str = "A") -> None:
    _check_matrix(x, api, name)
    if x.shape[-1] != x.shape[-2]:
        raise RuntimeError(
            f"{api}: {name} must be batches of square matrices, but they are "
            f"{x.shape[-2]} by {x.shape[-1]} matrices"
        )


def _check_same_dtype(a: TensorMeta, b: TensorMeta, api: str) -> None:
    if a.dtype != b.dtype:
        raise RuntimeError(
            f"{api}: Expected all tensors to have the same dtype, but got {a.dtype} and {b.dtype}"
        )


def _square(x, api):
    _check_square(x, api)
    _check_dtype(x, api)


def _info(x):
    return TensorMeta(x.shape[:-2], torch.int32)


def linalg_cholesky_ex_output_shape(self, *, upper=False, check_errors=False):
    _square(self, "linalg.cholesky")
    return TensorMeta(self.shape, self.dtype), _info(self)


def _rhs_batch(A, B, api):
    if B.ndim < 2:
        raise RuntimeError(f"{api}: The input tensor B must have at least 2 dimensions.")
    if A.shape[-1] != B.shape[-2]:
        raise RuntimeError(
            f"Incompatible matrix sizes for {api}: each A matrix is {A.shape[-2]} by {A.shape[-1]} "
            f"but each b matrix is {B.shape[-2]} by {B.shape[-1]}"
        )
    return broadcast_shapes(A.shape[:-2], B.shape[:-2])


def cholesky_solve_output_shape(self, input2, upper=False):
    _square(input2, "cholesky_solve")
    _check_same_dtype(self, input2, "cholesky_solve")
    batch = _rhs_batch(input2, self, "cholesky_solve")
    return TensorMeta(batch + self.shape[-2:], self.dtype)


def cholesky_inverse_output_shape(self, upper=False):
    _square(self, "cholesky_inverse")
    return TensorMeta(self.shape, self.dtype)


def linalg_inv_ex_output_shape(A, *, check_errors=False):
    _square(A, "linalg.inv")
    return TensorMeta(A.shape, A.dtype), _info(A)


def _is_vector_rhs(A, B):
    return B.ndim == 1 or (B.ndim == A.ndim - 1 and B.shape == A.shape[:-1])


def _linalg_solve_ex_output_shape(A, B, *, left=True, check_errors=False):
    api = "linalg.solve"
    _square(A, api)
    _check_same_dtype(A, B, api)
    vector = _is_vector_rhs(A, B)
    b = B.shape + (1,) if vector else B.shape
    if len(b) < 2:
        raise RuntimeError(f"{api}: The input tensor B must have at least 1 dimensions.")
    n = A.shape[-1]
    if (b[-2] if left else b[-1]) != n:
        eq = "AX = B" if left else "XA = B"
        raise RuntimeError(f"{api}: Incompatible shapes of A and B for the equation {eq} ({n}x{n} and {b[-2]}x{b[-1]})")
    batch = broadcast_shapes(A.shape[:-2], b[:-2])
    result = batch + (b[-2:-1] if vector else b[-2:])
    return (
        TensorMeta(result, A.dtype),
        TensorMeta(A.shape, A.dtype),
        TensorMeta(A.shape[:-1], torch.int32),
        _info(A),
    )


def linalg_lu_factor_ex_output_shape(A, *, pivot=True, check_errors=False):
    api = "linalg.lu_factor"
    _check_matrix(A, api)
    _check_dtype(A, api)
    if not pivot:
        raise RuntimeError("linalg.lu_factor: LU without pivoting is not implemented on the CPU")
    m, n = A.shape[-2:]
    return TensorMeta(A.shape, A.dtype), TensorMeta(A.shape[:-2] + (min(m, n),), torch.int32), _info(A)


def _unpacked(shape, dtype):
    m, n = shape[-2:]
    k = min(m, n)
    batch = shape[:-2]
    return TensorMeta(batch + (m, m), dtype), TensorMeta(batch + (m, k), dtype), TensorMeta(batch + (k, n), dtype)


def linalg_lu_output_shape(A, *, pivot=True):
    api = "linalg.lu"
    _check_matrix(A, api)
    _check_dtype(A, api)
    if not pivot:
        raise RuntimeError("linalg.lu: LU without pivoting is not implemented on the CPU")
    return _unpacked(A.shape, A.dtype)


def lu_unpack_output_shape(LU_data, LU_pivots, unpack_data=True, unpack_pivots=True):
    if LU_data.ndim < 2:
        raise RuntimeError("torch.lu_unpack: Expected tensor with 2 or more dimensions.")
    if LU_pivots.dtype != torch.int32:
        raise RuntimeError(
            "torch.lu_unpack: LU_pivots is expected to be a contiguous tensor of torch.int32 dtype. "
            "Note: this function is intended to be used with the output produced by torch.linalg.lu_factor"
        )
    m, n = LU_data.shape[-2:]
    if LU_pivots.shape != LU_data.shape[:-2] + (min(m, n),):
        raise RuntimeError("torch.lu_unpack: LU_pivots must have shape LU_data.shape[:-2] + (min(m, n),)")
    p, lower, upper = _unpacked(LU_data.shape, LU_data.dtype)
    empty = TensorMeta((0,), LU_data.dtype)
    return (p if unpack_pivots else empty), (lower if unpack_data else empty), (upper if unpack_data else empty)


def linalg_lu_solve_output_shape(LU, pivots, B, *, left=True, adjoint=False):
    api = "linalg.lu_solve"
    _check_square(LU, api, "LU")
    _check_dtype(LU, api)
    _check_same_dtype(LU, B, api)
    if B.ndim < 2:
        raise RuntimeError(f"{api}: The input tensor B must have at least 2 dimensions.")
    if pivots.dtype != torch.int32:
        raise RuntimeError(f"{api}: Expected pivots to be integers. Got {pivots.dtype}")
    n = LU.shape[-1]
    if (B.shape[-2] if left else B.shape[-1]) != n:
        raise RuntimeError(
            f"{api}: Incompatible shapes of A and B for the equation ({n}x{n} and {B.shape[-2]}x{B.shape[-1]})"
        )
    if pivots.shape != LU.shape[:-1]:
        raise RuntimeError(f"{api}: Incompatible shapes of LU and pivots")
    batch = broadcast_shapes(LU.shape[:-2], B.shape[:-2])
    return TensorMeta(batch + B.shape[-2:], B.dtype)


def linalg_qr_output_shape(A, mode="reduced"):
    api = "linalg.qr"
    _check_matrix(A, api)
    _check_dtype(A, api)
    if mode not in ("reduced", "complete", "r"):
        raise RuntimeError(
            f"qr received unrecognized mode '{mode}' but expected one of 'reduced' (default), 'r', or 'complete'"
        )
    m, n = A.shape[-2:]
    k = min(m, n)
    batch = A.shape[:-2]
    if mode == "r":
        return TensorMeta((0,), A.dtype), TensorMeta(batch + (k, n), A.dtype)
    if mode == "complete":
        return TensorMeta(batch + (m, m), A.dtype), TensorMeta(batch + (m, n), A.dtype)
    return TensorMeta(batch + (m, k), A.dtype), TensorMeta(batch + (k, n), A.dtype)


def _linalg_eigh_output_shape(A, UPLO="L", compute_v=True):
    api = "linalg.eigh"
    _square(A, api)
    if UPLO not in ("L", "U", "l", "u"):
        raise RuntimeError(f"Expected UPLO argument to be 'L' or 'U', but got {UPLO}")
    values = TensorMeta(A.shape[:-1], _real(A.dtype))
    return values, TensorMeta(A.shape if compute_v else (0,), A.dtype)


def _linalg_svd_output_shape(A, full_matrices=False, compute_uv=True, *, driver=None):
    api = "linalg.svd"
    _check_matrix(A, api)
    _check_dtype(A, api)
    if driver is not None:
        raise RuntimeError(
            "torch.linalg.svd: keyword argument `driver=` is only supported on CUDA inputs with cuSOLVER backend."
        )
    m, n = A.shape[-2:]
    k = min(m, n)
    batch = A.shape[:-2]
    s = TensorMeta(batch + (k,), _real(A.dtype))
    if not compute_uv:
        empty = TensorMeta((0,), A.dtype)
        return empty, s, empty
    cols = m if full_matrices else k
    rows = n if full_matrices else k
    return TensorMeta(batch + (m, cols), A.dtype), s, TensorMeta(batch + (rows, n), A.dtype)


def _linalg_det_output_shape(A):
    _square(A, "linalg.det")
    return TensorMeta(A.shape[:-2], A.dtype), TensorMeta(A.shape, A.dtype), TensorMeta(A.shape[:-1], torch.int32)


def _linalg_slogdet_output_shape(A):
    _square(A, "linalg.slogdet")
    return (
        TensorMeta(A.shape[:-2], A.dtype),
        TensorMeta(A.shape[:-2], _real(A.dtype)),
        TensorMeta(A.shape, A.dtype),
        TensorMeta(A.shape[:-1], torch.int32),
    )


def linalg_householder_product_output_shape(input, tau):
    api = "torch.linalg.householder_product"
    if input.ndim < 2:
        raise RuntimeError(f"{api}: input must have at least 2 dimensions.")
    m, n = input.shape[-2:]
    if m < n:
        raise RuntimeError(f"{api}: input.shape[-2] must be greater than or equal to input.shape[-1]")
    if tau.ndim != input.ndim - 1 or tau.shape[-1] > n:
        raise RuntimeError(f"{api}: input.shape[-1] must be greater than or equal to tau.shape[-1]")
    if tau.shape[:-1] != input.shape[:-2]:
        raise RuntimeError(f"{api}: Expected batch dimensions of tau to be equal to input.shape[:-2]")
    _check_same_dtype(input, tau, api)
    _check_dtype(input, api)
    return TensorMeta(input.shape, input.dtype)


def triangular_solve_output_shape(self, A, upper=True, transpose=False, unitriangular=False):
    api = "triangular_solve"
    _check_square(A, api)
    _check_dtype(A, api)
    _check_same_dtype(self, A, api)
    batch = _rhs_batch(A, self, api)
    return TensorMeta(batch + self.shape[-2:], self.dtype), TensorMeta(batch + A.shape[-2:], A.dtype)


def linalg_solve_triangular_output_shape(self, B, *, upper, left=True, unitriangular=False):
    api = "linalg.solve_triangular"
    _check_square(self, api)
    _check_dtype(self, api)
    _check_same_dtype(self, B, api)
    if B.ndim < 2:
        raise RuntimeError(f"{api}: The input tensor B must have at least 2 dimensions.")
    n = self.shape[-1]
    if (B.shape[-2] if left else B.shape[-1]) != n:
        eq = "AX = B" if left else "XA = B"
        raise RuntimeError(
            f"{api}: Incompatible shapes of A and B for the equation {eq} ({n}x{n} and {B.shape[-2]}x{B.shape[-1]})"
        )
    batch = broadcast_shapes(self.shape[:-2], B.shape[:-2])
    return TensorMeta(batch + B.shape[-2:], B.dtype)


def linalg_cross_output_shape(self, other, *, dim=-1):
    if self.ndim != other.ndim:
        raise RuntimeError(
            f"linalg.cross: inputs must have the same number of dimensions. Got {self.ndim} and {other.ndim}"
        )
    if self.dtype != other.dtype:
        raise RuntimeError(
            f"expected scalar type {scalar_type_name(self.dtype)} but found {scalar_type_name(other.dtype)}"
        )
    shape = broadcast_shapes(self.shape, other.shape)
    d = normalize_dim(dim, len(shape))
    if self.shape[d] != 3 or other.shape[d] != 3:
        raise RuntimeError(
            f"linalg.cross: inputs dimension {dim} must have length 3. Got {self.shape[d]} and {other.shape[d]}"
        )
    return TensorMeta(shape, self.dtype)


def linalg_matrix_exp_output_shape(self):
    _check_square(self, "linalg.matrix_exp")
    _check_dtype(self, "linalg.matrix_exp")
    return TensorMeta(self.shape, self.dtype)


def trace_output_shape(self):
    if self.ndim != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {self.ndim}")
    if self.dtype is torch.bool:
        raise NotImplementedError("\"trace\" not implemented for 'Bool'")
    integral = not (self.dtype.is_floating_point or self.dtype.is_complex)
    return TensorMeta((), torch.int64 if integral else self.dtype)


def geqrf_output_shape(self):
    api = "torch.geqrf"
    if self.ndim < 2:
        raise RuntimeError(f"{api}: input must have at least 2 dimensions.")
    if not (self.dtype in (torch.float32, torch.float64) or self.dtype.is_complex):
        raise NotImplementedError(f"\"geqrf_cpu\" not implemented for '{scalar_type_name(self.dtype)}'")
    m, n = self.shape[-2:]
    return TensorMeta(self.shape, self.dtype), TensorMeta(self.shape[:-2] + (min(m, n),), self.dtype)


def ormqr_output_shape(self, input2, input3, left=True, transpose=False):
    api = "torch.ormqr"
    input, tau, other = self, input2, input3
    if input.ndim < 2:
        raise RuntimeError(f"{api}: input must have at least 2 dimensions.")
    if other.ndim < 2:
        raise RuntimeError(f"{api}: other must have at least 2 dimensions.")
    side = -2 if left else -1
    if tau.ndim == 0 or other.shape[side] < tau.shape[-1]:
        raise RuntimeError(f"{api}: other.shape[{side}] must be greater than or equal to tau.shape[-1]")
    if other.shape[side] != input.shape[-2]:
        raise RuntimeError(f"{api}: other.shape[{side}] must be equal to input.shape[-2]")
    if tau.shape[-1] != min(other.shape[side], input.shape[-1]):
        raise RuntimeError(f"{api}: tau.shape[-1] must be equal to min(other.shape[{side}], input.shape[-1])")
    if input.ndim - tau.ndim != 1:
        raise RuntimeError(
            f"{api}: Expected tau to have one dimension less than input, but got tau.ndim equal to "
            f"{tau.ndim} and input.ndim is equal to {input.ndim}"
        )
    if input.ndim != other.ndim:
        raise RuntimeError(
            f"{api}: Expected other to have the same number of dimensions as input, but got other.ndim "
            f"equal to {other.ndim} and input.ndim is equal to {input.ndim}"
        )
    if input.ndim > 2:
        if tau.shape[:-1] != input.shape[:-2]:
            raise RuntimeError(
                f"{api}: Expected batch dimensions of tau to be equal to input.shape[:-2], but got {tau.shape[:-1]}"
            )
        if other.shape[:-2] != input.shape[:-2]:
            raise RuntimeError(
                f"{api}: Expected batch dimensions of other to be equal to input.shape[:-2], but got {other.shape[:-2]}"
            )
    if tau.dtype != input.dtype:
        raise RuntimeError(
            f"{api}: Expected input and tau to have the same dtype, but input has dtype {input.dtype} and tau has "
            f"dtype {tau.dtype}"
        )
    if other.dtype != input.dtype:
        raise RuntimeError(
            f"{api}: Expected input and other to have the same dtype, but input has dtype {input.dtype} and other has "
            f"dtype {other.dtype}"
        )
    _check_dtype(input, api)
    return TensorMeta(other.shape, other.dtype)


def _check_tolerance(t, name):
    if t is not None and t.dtype.is_complex:
        raise RuntimeError(f"linalg.pinv: {name} tensor of complex type is not supported.")


def linalg_pinv_atol_rtol_tensor_output_shape(self, *, atol=None, rtol=None, hermitian=False):
    api = "linalg.pinv"
    _check_matrix(self, api)
    _check_dtype(self, api)
    _check_tolerance(atol, "atol")
    _check_tolerance(rtol, "rtol")
    m, n = self.shape[-2:]
    if self.numel() == 0:
        return TensorMeta(self.shape[:-2] + (n, m), self.dtype)
    batch = self.shape[:-2]
    for t in (atol, rtol):
        if t is not None:
            batch = broadcast_shapes(batch, t.shape)
    return TensorMeta(batch + (n, m), self.dtype)


_COMPLEX = {torch.float32: torch.complex64, torch.float64: torch.complex128}


def linalg_eig_output_shape(self):
    _square(self, "linalg.eig")
    dtype = _COMPLEX.get(self.dtype, self.dtype)
    return TensorMeta(self.shape[:-1], dtype), TensorMeta(self.shape, dtype)
