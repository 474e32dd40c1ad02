"""Lowerings of torch.linalg's factorizations and solvers, and the ops their
decompositions and backward formulas reach (trace, cross, triangular solves).

Conventions follow LAPACK as PyTorch exposes it: `pivots` are 1-based int32 row
swaps, `info` is int32 per matrix (0 on success, k > 0 when the k-th pivot or leading
minor fails). Eigen- and singular vectors are unique only up to phase; we return
what JAX's LAPACK-backed routines give (the same LAPACK drivers on CPU), and tests
compare invariants such as reconstructions, as PyTorch's own tests do.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
from jax import lax

_HIGHEST = lax.Precision.HIGHEST


def _mT(x):
    return jnp.swapaxes(x, -1, -2)


def _mH(x):
    return jnp.conj(_mT(x))


def _matmul(a, b):
    return jnp.matmul(a, b, precision=_HIGHEST)


def _broadcast_batch(a, b):
    """a and b with their batch dims (all but the last two) broadcast together."""
    batch = jnp.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return jnp.broadcast_to(a, batch + a.shape[-2:]), jnp.broadcast_to(b, batch + b.shape[-2:])


def _tri_solve(a, b, *, left, lower, transpose=False, conjugate=False, unit=False):
    a, b = _broadcast_batch(a, b)
    return lax.linalg.triangular_solve(
        a, b, left_side=left, lower=lower, transpose_a=transpose, conjugate_a=conjugate, unit_diagonal=unit
    )


def _lu(a):
    """(LU, 1-based int32 pivots, permutation, info) of LAPACK's getrf."""
    lu, pivots, perm = lax.linalg.lu(a)
    k = min(a.shape[-2], a.shape[-1])
    diag = jnp.diagonal(lu, axis1=-2, axis2=-1)[..., :k]
    zero = diag == 0
    if k == 0:
        return lu, (pivots + 1).astype(jnp.int32), perm, jnp.zeros(a.shape[:-2], jnp.int32)
    info = jnp.where(jnp.any(zero, axis=-1), jnp.argmax(zero, axis=-1) + 1, 0).astype(jnp.int32)
    return lu, (pivots + 1).astype(jnp.int32), perm, info


def _permute_rows(b, perm):
    perm = jnp.broadcast_to(perm, b.shape[:-2] + perm.shape[-1:])
    return jnp.take_along_axis(b, perm[..., None], axis=-2)


def _lu_solve(lu, perm, b, adjoint):
    """Solves A X = B (or A^H X = B) where P A = L U, P selecting the rows `perm`."""
    if not adjoint:
        x = _permute_rows(jnp.broadcast_to(b, jnp.broadcast_shapes(lu.shape[:-2], b.shape[:-2]) + b.shape[-2:]), perm)
        x = _tri_solve(lu, x, left=True, lower=True, unit=True)
        return _tri_solve(lu, x, left=True, lower=False)
    # A^H = U^H L^H P, so X = P^T L^-H U^-H B.
    x = _tri_solve(lu, b, left=True, lower=False, transpose=True, conjugate=True)
    x = _tri_solve(lu, x, left=True, lower=True, transpose=True, conjugate=True, unit=True)
    inverse = jnp.argsort(perm, axis=-1)
    return _permute_rows(x, inverse)


def _lu_solve_sided(lu, perm, b, left, adjoint):
    if left:
        return _lu_solve(lu, perm, b, adjoint)
    # X A = B  <=>  A^H X^H = B^H (and X A^H = B  <=>  A X^H = B^H).
    return _mH(_lu_solve(lu, perm, _mH(b), not adjoint))


def _pivots_to_perm(pivots, m):
    return lax.linalg.lu_pivots_to_permutation(pivots - 1, m)


def _cholesky_info(a):
    """The order of the first leading minor that is not positive definite (0 if none),
    found by Cholesky's own recurrence on the Hermitian matrix the lower triangle of
    `a` defines."""
    n = a.shape[-1]
    low = jnp.tril(a)
    m = low + _mH(jnp.tril(a, -1))
    rows = jnp.arange(n)

    def step(k, carry):
        m, info = carry
        d = jnp.real(m[..., k, k])
        bad = ~(d > 0)
        info = jnp.where((info == 0) & bad, k + 1, info)
        safe = jnp.where(bad, 1, d)
        col = jnp.where(rows >= k, m[..., :, k], 0) / jnp.sqrt(safe)[..., None].astype(m.dtype)
        m = m - col[..., :, None] * jnp.conj(col)[..., None, :]
        return m, info

    info = jnp.zeros(a.shape[:-2], jnp.int32)
    if n == 0 or a.size == 0:
        return info
    _, info = lax.fori_loop(0, n, step, (m, info))
    return info


def lower_linalg_cholesky_ex(self, *, upper=False, check_errors=False):
    a = _mH(self) if upper else self
    low = lax.linalg.cholesky(a, symmetrize_input=False)
    low = jnp.tril(low)
    info = _cholesky_info(a)
    return (_mH(low) if upper else low), info


def lower_cholesky_solve(self, input2, upper=False):
    low = _mH(input2) if upper else input2
    x = _tri_solve(low, self, left=True, lower=True)
    return _tri_solve(low, x, left=True, lower=True, transpose=True, conjugate=True)


def lower_cholesky_inverse(self, upper=False):
    eye = jnp.broadcast_to(jnp.eye(self.shape[-1], dtype=self.dtype), self.shape)
    return lower_cholesky_solve(eye, self, upper)


def lower_linalg_inv_ex(A, *, check_errors=False):
    lu, _, perm, info = _lu(A)
    eye = jnp.broadcast_to(jnp.eye(A.shape[-1], dtype=A.dtype), A.shape)
    return _lu_solve(lu, perm, eye, False), info


def _is_vector_rhs(A, B):
    return B.ndim == 1 or (B.ndim == A.ndim - 1 and B.shape == A.shape[:-1])


def lower__linalg_solve_ex(A, B, *, left=True, check_errors=False):
    lu, pivots, perm, info = _lu(A)
    vector = _is_vector_rhs(A, B)
    b = B[..., None] if vector else B
    x = _lu_solve_sided(lu, perm, b, left, False)
    return (x[..., 0] if vector else x), lu, pivots, info


def lower_linalg_lu_factor_ex(A, *, pivot=True, check_errors=False):
    lu, pivots, _, info = _lu(A)
    return lu, pivots, info


def _unpack(lu, perm, dtype):
    m, n = lu.shape[-2:]
    k = min(m, n)
    lower = jnp.tril(lu[..., :, :k], -1) + jnp.eye(m, k, dtype=dtype)
    upper = jnp.triu(lu[..., :k, :])
    # A = P L U with P^T selecting the rows `perm` of A.
    p = jnp.swapaxes(jax.nn.one_hot(perm, m, dtype=dtype), -1, -2)
    return p, lower, upper


def lower_linalg_lu(A, *, pivot=True):
    lu, _, perm, _ = _lu(A)
    return _unpack(lu, perm, A.dtype)


def lower_lu_unpack(LU_data, LU_pivots, unpack_data=True, unpack_pivots=True):
    m = LU_data.shape[-2]
    empty = jnp.zeros((0,), LU_data.dtype)
    perm = _pivots_to_perm(LU_pivots, m)
    p, lower, upper = _unpack(LU_data, perm, LU_data.dtype)
    return (p if unpack_pivots else empty), (lower if unpack_data else empty), (upper if unpack_data else empty)


def lower_linalg_lu_solve(LU, pivots, B, *, left=True, adjoint=False):
    perm = _pivots_to_perm(pivots, LU.shape[-1])
    return _lu_solve_sided(LU, perm, B, left, adjoint)


def lower_linalg_qr(A, mode="reduced"):
    if mode == "r":
        return jnp.zeros((0,), A.dtype), jnp.linalg.qr(A, mode="r")
    return jnp.linalg.qr(A, mode=mode)


def lower__linalg_eigh(A, UPLO="L", compute_v=True):
    w, v = jnp.linalg.eigh(A, UPLO=UPLO, symmetrize_input=False)
    return w, (v if compute_v else jnp.zeros((0,), A.dtype))


def lower__linalg_svd(A, full_matrices=False, compute_uv=True, *, driver=None):
    if not compute_uv:
        empty = jnp.zeros((0,), A.dtype)
        return empty, jnp.linalg.svd(A, compute_uv=False), empty
    u, s, vh = jnp.linalg.svd(A, full_matrices=full_matrices)
    return u, s, vh


def _det_parts(A):
    # PyTorch factors a real row-major A as A^T (column-major for LAPACK, and
    # det(A^T) = det(A)) and returns that LU; its backward formulas expect it. A
    # lowering cannot see strides, so it follows the contiguous case.
    real = not jnp.issubdtype(A.dtype, jnp.complexfloating)
    lu, pivots, _, _ = _lu(_mT(A) if real else A)
    diag = jnp.diagonal(lu, axis1=-2, axis2=-1)
    swaps = jnp.sum(pivots != jnp.arange(1, A.shape[-1] + 1, dtype=jnp.int32), axis=-1)
    parity = jnp.where(swaps % 2 == 1, -1, 1).astype(A.dtype)
    return lu, pivots, diag, parity


def lower__linalg_det(A):
    lu, pivots, diag, parity = _det_parts(A)
    return parity * jnp.prod(diag, axis=-1), lu, pivots


def lower__linalg_slogdet(A):
    lu, pivots, diag, parity = _det_parts(A)
    absdiag = jnp.abs(diag)
    logabsdet = jnp.sum(jnp.log(absdiag), axis=-1)
    phase = jnp.prod(diag / jnp.where(absdiag == 0, 1, absdiag).astype(A.dtype), axis=-1)
    sign = jnp.where(jnp.any(absdiag == 0, axis=-1), 0, parity * phase).astype(A.dtype)
    return sign, logabsdet, lu, pivots


def lower_linalg_householder_product(input, tau):
    return lax.linalg.householder_product(input, tau)


def lower_triangular_solve(self, A, upper=True, transpose=False, unitriangular=False):
    a, b = _broadcast_batch(A, self)
    x = lax.linalg.triangular_solve(
        a, b, left_side=True, lower=not upper, transpose_a=transpose, unit_diagonal=unitriangular
    )
    return x, a


def lower_linalg_solve_triangular(self, B, *, upper, left=True, unitriangular=False):
    return _tri_solve(self, B, left=left, lower=not upper, unit=unitriangular)


def lower_linalg_cross(self, other, *, dim=-1):
    shape = jnp.broadcast_shapes(self.shape, other.shape)
    return jnp.cross(jnp.broadcast_to(self, shape), jnp.broadcast_to(other, shape), axis=dim)


def lower_linalg_matrix_exp(self):
    return jsl.expm(self)


def lower_trace(self):
    diag = jnp.diagonal(self)
    if jnp.issubdtype(self.dtype, jnp.integer) or self.dtype == jnp.bool_:
        return jnp.sum(diag, dtype=jnp.int64)
    if self.dtype in (jnp.float16, jnp.bfloat16):
        return jnp.sum(diag.astype(jnp.float32)).astype(self.dtype)
    return jnp.sum(diag)


def lower_geqrf(self):
    # jnp's "raw" mode is LAPACK's geqrf on the transposed (row-major) matrix.
    h, tau = jnp.linalg.qr(self, mode="raw")
    return _mT(h), tau


def lower_ormqr(self, input2, input3, left=True, transpose=False):
    k = input2.shape[-1]
    if k == 0 or input3.size == 0:
        return input3
    return lax.linalg.ormqr(self[..., :, :k], input2, input3, left=left, transpose=transpose)


def _real_dtype(dtype):
    return jnp.finfo(dtype).dtype


def _pinv_tolerances(A, atol, rtol):
    # PyTorch's defaults are float64 tensors; its tolerance arithmetic follows tensor
    # promotion, which JAX's array promotion reproduces.
    f64 = jnp.float64
    atol_t = jnp.zeros((), f64) if atol is None else atol
    if rtol is None:
        default = jnp.asarray(jnp.finfo(_real_dtype(A.dtype)).eps * max(A.shape[-2], A.shape[-1]), f64)
        rtol_t = default if atol is None else jnp.where(atol > 0, jnp.zeros((), f64), default)
    else:
        rtol_t = rtol
    return atol_t, rtol_t


def lower_linalg_pinv_atol_rtol_tensor(self, *, atol=None, rtol=None, hermitian=False):
    m, n = self.shape[-2:]
    if self.size == 0:
        return jnp.zeros(self.shape[:-2] + (n, m), self.dtype)
    atol_t, rtol_t = _pinv_tolerances(self, atol, rtol)
    if not hermitian:
        u, s, vh = jnp.linalg.svd(self, full_matrices=False)
        top = s[..., :1]
        keep = s
    else:
        s, u = jnp.linalg.eigh(self, UPLO="L", symmetrize_input=False)
        keep = jnp.abs(s)
        top = jnp.max(keep, axis=-1, keepdims=True)
        vh = _mH(u)
    tol = jnp.maximum(atol_t[..., None], rtol_t[..., None] * top)
    s_inv = jnp.where(keep > tol, 1 / s, jnp.zeros((), s.dtype)).astype(self.dtype)
    return _matmul(_mH(vh) * s_inv[..., None, :], _mH(u))


def lower_linalg_eig(self):
    cdtype = jnp.result_type(self.dtype, jnp.complex64)
    if self.size == 0:
        return jnp.zeros(self.shape[:-1], cdtype), jnp.zeros(self.shape, cdtype)
    w, v = jnp.linalg.eig(self)
    return w.astype(cdtype), v.astype(cdtype)
