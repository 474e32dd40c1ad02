"""Least squares and LDL^T (Bunch-Kaufman) factorization and solve, following the
LAPACK drivers PyTorch calls on CPU (gels/gelsy/gelsd/gelss, sytrf/hetrf, sytrs/hetrs)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

_HIGHEST = lax.Precision.HIGHEST


def _mH(x):
    return jnp.conj(jnp.swapaxes(x, -1, -2))


def _matmul(a, b):
    return jnp.matmul(a, b, precision=_HIGHEST)


def _real_dtype(dtype):
    return jnp.finfo(dtype).dtype


def lstsq_is_vector_rhs(a_shape, b_shape):
    return len(b_shape) == 1 or (len(b_shape) == len(a_shape) - 1 and tuple(b_shape) == tuple(a_shape[:-1]))


def _gels(a, b):
    """LAPACK gels: QR for m >= n, LQ (the minimum-norm solution) for m < n; assumes
    full rank."""
    m, n = a.shape[-2:]
    if m >= n:
        q, r = jnp.linalg.qr(a, mode="reduced")
        return lax.linalg.triangular_solve(r, _matmul(_mH(q), b), left_side=True, lower=False)
    q, r = jnp.linalg.qr(_mH(a), mode="reduced")
    y = lax.linalg.triangular_solve(r, b, left_side=True, lower=False, transpose_a=True, conjugate_a=True)
    return _matmul(q, y)


def lstsq_values(A, B, rcond, driver, residuals):
    """(solution, residuals, rank, singular_values) of torch.linalg.lstsq with `driver`
    resolved; `residuals` says whether to compute them (m > n, driver other than gelsy).

    gelsy's rank comes from a pivoted QR's condition estimate; here every driver but
    gels counts singular values above rcond * the largest, which agrees except for
    matrices right at the cut-off."""
    vector = lstsq_is_vector_rhs(A.shape, B.shape)
    b = B[..., None] if vector else B
    m, n = A.shape[-2:]
    k = b.shape[-1]
    batch = jnp.broadcast_shapes(A.shape[:-2], b.shape[:-2])
    real = _real_dtype(A.dtype)
    cut = jnp.finfo(real).eps * max(m, n) if rcond is None else rcond
    a = jnp.broadcast_to(A, batch + (m, n))
    b = jnp.broadcast_to(b, batch + (m, k))
    p = min(m, n)
    s = None
    if p == 0:
        x = jnp.zeros(batch + (n, k), A.dtype)
        s = jnp.zeros(A.shape[:-2] + (0,), real)
        rank = jnp.zeros(A.shape[:-2], jnp.int64)
    elif driver == "gels":
        x = _gels(a, b)
    else:
        u, s, vh = jnp.linalg.svd(A, full_matrices=False)
        keep = s > cut * s[..., :1]
        rank = jnp.sum(keep, axis=-1, dtype=jnp.int64)
        s_inv = jnp.where(keep, 1 / jnp.where(keep, s, 1), 0).astype(A.dtype)
        u = jnp.broadcast_to(u, batch + u.shape[-2:])
        v = jnp.broadcast_to(_mH(vh), batch + (n, p))
        x = _matmul(v, s_inv[..., :, None] * _matmul(_mH(u), b))
    if residuals:
        if n == 0 and driver == "gels":
            # gels zeroes B when A has no columns.
            res = jnp.zeros(batch + (k,), real)
        elif n == 0:
            res = jnp.sum(jnp.abs(b) ** 2, axis=-2)
        else:
            q, _ = jnp.linalg.qr(a, mode="complete")
            res = jnp.sum(jnp.abs(_matmul(_mH(q), b)[..., n:, :]) ** 2, axis=-2)
        res = res.astype(real)
    else:
        res = jnp.zeros((0,), real)
    if driver == "gels":
        rank = jnp.zeros((0,), jnp.int64)
    if driver not in ("gelsd", "gelss"):
        s = jnp.zeros((0,), real)
    return (x[..., 0] if vector else x), res, rank, s
