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


def lower_linalg_lstsq_values(self, b, rcond, driver, residuals):
    """(solution, residuals, rank, singular_values) of torch.linalg.lstsq with `driver`
    resolved; `residuals` says whether to compute them (m > n, driver other than gelsy).

    gelsy's rank comes from a pivoted QR's condition estimate; here every driver but
    gels counts singular values above rcond * the largest, which agrees except for
    matrices right at the cut-off."""
    A, B = self, b
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


# ------------------------------------------------------------------ LDL^T (Bunch-Kaufman)
#
# LAPACK's unblocked sytf2/hetf2 (lower), step for step: the pivots and the factor
# layout are LAPACK's, so the output is what torch.linalg.ldl_factor gives on CPU.
# `ipiv` is 1-based: k > 0 for a 1x1 block whose row and column were swapped with
# row k; -k in both entries of a 2x2 block whose second row was swapped with row k.

_BK_ALPHA = (1 + 17**0.5) / 8


def _abs1(x):
    # LAPACK's icamax/izamax measure |re| + |im|.
    if jnp.issubdtype(x.dtype, jnp.complexfloating):
        return jnp.abs(jnp.real(x)) + jnp.abs(jnp.imag(x))
    return jnp.abs(x)


def _swap(a, i, j):
    ai, aj = a[i], a[j]
    return a.at[i].set(aj).at[j].set(ai)


def _ldl_factor_one(a, hermitian):
    n = a.shape[-1]
    complex_ = jnp.issubdtype(a.dtype, jnp.complexfloating)
    herm = hermitian and complex_
    conj = jnp.conj if herm else (lambda x: x)
    re = jnp.real if herm else (lambda x: x)
    idx = jnp.arange(n)
    a = jnp.tril(a)
    if herm:
        a = a.at[idx, idx].set(jnp.real(jnp.diagonal(a)).astype(a.dtype))

    def interchange(a, k, kk, kp, two):
        # Rows and columns kk and kp of the trailing lower triangle A[k:, k:].
        col_kk, col_kp = a[:, kk], a[:, kp]
        below = idx > kp
        a = a.at[:, kk].set(jnp.where(below, col_kp, col_kk)).at[:, kp].set(jnp.where(below, col_kk, col_kp))
        between = (idx > kk) & (idx < kp)
        row_kp = a[kp, :]
        col_kk = a[:, kk]
        a = a.at[:, kk].set(jnp.where(between, conj(row_kp), col_kk))
        a = a.at[kp, :].set(jnp.where(between, conj(col_kk), row_kp))
        if herm:
            a = a.at[kp, kk].set(jnp.conj(a[kp, kk]))
        dkk, dkp = a[kk, kk], a[kp, kp]
        a = a.at[kk, kk].set(dkp).at[kp, kp].set(dkk)
        t, u = a[k + 1, k], a[kp, k]
        swapped = a.at[k + 1, k].set(u).at[kp, k].set(t)
        return jnp.where(two, swapped, a)

    def update1(a, k):
        d11 = 1 / re(a[k, k])
        x = jnp.where(idx > k, a[:, k], 0)
        trail = (idx[:, None] > k) & (idx[None, :] > k) & (idx[:, None] >= idx[None, :])
        a = a - jnp.where(trail, d11 * x[:, None] * conj(x)[None, :], 0)
        a = a.at[:, k].set(jnp.where(idx > k, x * d11, a[:, k]))
        if herm:
            a = a.at[idx, idx].set(jnp.real(jnp.diagonal(a)).astype(a.dtype))
        return a

    def update2(a, k):
        ck, ck1 = a[:, k], a[:, k + 1]
        if herm:
            d = jnp.abs(a[k + 1, k])
            d11 = jnp.real(a[k + 1, k + 1]) / d
            d22 = jnp.real(a[k, k]) / d
            tt = 1 / (d11 * d22 - 1)
            d21 = a[k + 1, k] / d
            d = tt / d
            wk = d * (d11 * ck - d21 * ck1)
            wkp1 = d * (d22 * ck1 - jnp.conj(d21) * ck)
        else:
            d21 = a[k + 1, k]
            d11 = a[k + 1, k + 1] / d21
            d22 = a[k, k] / d21
            t = 1 / (d11 * d22 - 1)
            d21 = t / d21
            wk = d21 * (d11 * ck - ck1)
            wkp1 = d21 * (d22 * ck1 - ck)
        rows = idx > k + 1
        wk = jnp.where(rows, wk, 0)
        wkp1 = jnp.where(rows, wkp1, 0)
        xk = jnp.where(rows, ck, 0)
        xk1 = jnp.where(rows, ck1, 0)
        trail = rows[:, None] & rows[None, :] & (idx[:, None] >= idx[None, :])
        a = a - jnp.where(trail, xk[:, None] * conj(wk)[None, :] + xk1[:, None] * conj(wkp1)[None, :], 0)
        a = a.at[:, k].set(jnp.where(rows, wk, ck)).at[:, k + 1].set(jnp.where(rows, wkp1, ck1))
        if herm:
            a = a.at[idx, idx].set(jnp.real(jnp.diagonal(a)).astype(a.dtype))
        return a

    def body(state):
        a, ipiv, info, k = state
        absakk = jnp.abs(re(a[k, k])) if herm else _abs1(a[k, k])
        off = jnp.where(idx > k, _abs1(a[:, k]), -1)
        imax = jnp.argmax(off)
        colmax = jnp.where(k < n - 1, off[imax], 0).astype(absakk.dtype)
        singular = (jnp.maximum(absakk, colmax) == 0) | jnp.isnan(absakk)
        # Row imax of the symmetric trailing matrix, from the lower triangle.
        row = jnp.where(idx < imax, a[imax, :], a[:, imax])
        rowmax = jnp.max(jnp.where((idx >= k) & (idx != imax), _abs1(row), 0))
        diag_imax = jnp.abs(re(a[imax, imax])) if herm else _abs1(a[imax, imax])
        safe_rowmax = jnp.where(rowmax == 0, 1, rowmax)
        keep = (absakk >= _BK_ALPHA * colmax) | (absakk >= _BK_ALPHA * colmax * (colmax / safe_rowmax))
        one_at_imax = ~keep & (diag_imax >= _BK_ALPHA * rowmax)
        two = ~singular & ~keep & ~one_at_imax & (k < n - 1)
        kp = jnp.where(singular | keep, k, imax)
        kk = k + two.astype(k.dtype)
        swapped = interchange(a, k, kk, kp, two)
        a_new = jnp.where(kp != kk, swapped, a)
        a_new = lax.cond(
            two, lambda x: update2(x, k), lambda x: lax.cond(k < n - 1, lambda y: update1(y, k), lambda y: y, x), a_new
        )
        a = jnp.where(singular, a, a_new)
        info = jnp.where((info == 0) & singular, k + 1, info)
        p1 = (kp + 1).astype(jnp.int32)
        ipiv = jnp.where(two, ipiv.at[k].set(-p1).at[k + 1].set(-p1), ipiv.at[k].set(p1))
        return a, ipiv, info, k + 1 + two.astype(k.dtype)

    state = (a, jnp.zeros((n,), jnp.int32), jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32))
    a, ipiv, info, _ = lax.while_loop(lambda s: s[3] < n, body, state)
    return jnp.tril(a), ipiv, info


def _batched(fn, batch_ndim, *args):
    for _ in range(batch_ndim):
        fn = jax.vmap(fn)
    return fn(*args)


def ldl_factor(A, hermitian):
    n = A.shape[-1]
    batch = A.shape[:-2]
    if A.size == 0:
        return A, jnp.zeros(batch + (n,), jnp.int32), jnp.zeros(batch, jnp.int32)
    return _batched(lambda a: _ldl_factor_one(a, hermitian), len(batch), A)


def _ldl_solve_one(ld, ipiv, b, hermitian):
    """LAPACK sytrs/hetrs (lower): A X = B with A = P L D L^T P^T as sytrf stores it."""
    n = ld.shape[-1]
    herm = hermitian and jnp.issubdtype(ld.dtype, jnp.complexfloating)
    conj = jnp.conj if herm else (lambda x: x)
    idx = jnp.arange(n)

    def forward(state):
        b, k = state
        p = ipiv[k]
        two = p < 0
        kk = k + two.astype(k.dtype)
        kp = jnp.where(two, -p, p) - 1
        b = _swap(b, kk, kp)
        ck = jnp.where(idx > kk, ld[:, k], 0)
        ck1 = jnp.where((idx > kk) & two, ld[:, jnp.minimum(k + 1, n - 1)], 0)
        b = b - ck[:, None] * b[k][None, :] - ck1[:, None] * b[jnp.minimum(k + 1, n - 1)][None, :]
        # the diagonal block
        k1 = jnp.minimum(k + 1, n - 1)
        if herm:
            one = b.at[k].set(b[k] * (1 / jnp.real(ld[k, k])))
        else:
            one = b.at[k].set(b[k] / ld[k, k])
        akm1k = ld[k1, k]
        akm1 = ld[k, k] / conj(akm1k)
        ak = ld[k1, k1] / akm1k
        denom = akm1 * ak - 1
        bkm1 = b[k] / conj(akm1k)
        bk = b[k1] / akm1k
        blk = b.at[k].set((ak * bkm1 - bk) / denom).at[k1].set((akm1 * bk - bkm1) / denom)
        b = jnp.where(two, blk, one)
        return b, kk + 1

    b, _ = lax.while_loop(lambda s: s[1] < n, forward, (b, jnp.zeros((), jnp.int32)))

    def backward(state):
        b, k = state  # k: the last row of the current block
        p = ipiv[k]
        two = p < 0
        k0 = jnp.where(two, k - 1, k)
        below = jnp.where(idx > k, 1, 0).astype(ld.dtype)
        lk = conj(ld[:, k]) * below
        b = b.at[k].add(-(lk @ b))
        lk0 = conj(ld[:, jnp.maximum(k - 1, 0)]) * below
        b = jnp.where(two, b.at[jnp.maximum(k - 1, 0)].add(-(lk0 @ b)), b)
        kp = jnp.where(two, -p, p) - 1
        b = _swap(b, k, kp)
        return b, k0 - 1

    b, _ = lax.while_loop(lambda s: s[1] >= 0, backward, (b, jnp.asarray(n - 1, jnp.int32)))
    return b


def ldl_solve(LD, pivots, B, hermitian):
    batch = jnp.broadcast_shapes(LD.shape[:-2], B.shape[:-2])
    n = LD.shape[-1]
    if B.size == 0 or n == 0 or 0 in batch:
        return jnp.zeros(batch + B.shape[-2:], B.dtype)
    ld = jnp.broadcast_to(LD, batch + LD.shape[-2:])
    piv = jnp.broadcast_to(pivots.astype(jnp.int32), batch + pivots.shape[-1:])
    b = jnp.broadcast_to(B, batch + B.shape[-2:])
    return _batched(lambda ld_one, p, x: _ldl_solve_one(ld_one, p, x, hermitian), len(batch), ld, piv, b)


def lower_linalg_ldl_factor_ex(self, *, hermitian=False, check_errors=False):
    return ldl_factor(self, hermitian)


def lower_linalg_ldl_solve(LD, pivots, B, *, hermitian=False):
    return ldl_solve(LD, pivots, B, hermitian)
