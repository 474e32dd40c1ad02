"""Lowerings of the orthogonal polynomials of torch.special: Chebyshev T, U, V, W (plain
and shifted to [0, 1]), Hermite H and He, Laguerre L and Legendre P, each with its
Tensor-Tensor, Scalar-x and Scalar-n overloads.

PyTorch CPU evaluates P_n(x) elementwise with the three-term recurrence, after special
cases that are part of its semantics: n is truncated to an integer (a non-finite or
out-of-range n counts as negative), n < 0 gives 0, |x| == 1 has closed values, the
Chebyshev families use trigonometric closed forms for larger n inside (-1, 1), and
Hermite returns NaN above n = 128 (float32) / 512 (float64). The same branches are
taken here, in the same order and in the same dtype, so overflow to inf/NaN happens
where it does on CPU.

n is data, so the recurrence is a while loop whose trip count is the largest n that
still needs it. Elements are advanced in lockstep for the first _LOCKSTEP steps; the
few with a larger n are then gathered into fixed-size groups and finished group by
group, so one huge n does not make every element of a large tensor iterate.
Trigonometric closed forms evaluate acos/cos/sin in float64 and round once, like the
(correctly rounded) libm float functions PyTorch calls.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from .common import promote_operands

_UNROLL = 4  # recurrence steps per while-loop iteration
_LOCKSTEP = 256  # steps every element takes together before grouping the rest
_GROUP = 64  # elements per group after that

_HERMITE_LIMIT = {jnp.dtype(jnp.float32): 128, jnp.dtype(jnp.float64): 512}


def _t(value, like):
    return jnp.asarray(value).astype(like.dtype)


def _libm(fn, v):
    """fn evaluated in float64 and rounded once to v's dtype."""
    return fn(v.astype(jnp.float64)).astype(v.dtype)


def _order(n):
    # C++ static_cast<int64_t>: truncation; NaN, inf and |n| >= 2**63 give INT64_MIN
    # on x86, i.e. a negative order.
    valid = jnp.abs(n) < 2.0**63
    return jnp.where(valid, jnp.trunc(jnp.where(valid, n, 0)), -1).astype(jnp.int64)


def _prepare(op, x, n):
    (x, n), out = promote_operands(op, x, n)
    x, n = jnp.broadcast_arrays(x, n)
    return x, _order(n), out


def _steps(step, x, n, m, p, q, count):
    """`count` recurrence steps from P_{m-1} = p, P_m = q; elements stop at m == n or
    once q is NaN (which would stay NaN)."""
    for u in range(count):
        k = m + 1 + u
        active = (k <= n) & ~jnp.isnan(q)
        r = step(k, x, p, q)
        p, q = jnp.where(active, q, p), jnp.where(active, r, q)
    return p, q


def _running(n, m, q):
    return (m < n) & ~jnp.isnan(q)


def _recurrence(step, x, n, p0, q0):
    """P_n for every element (P_0 = p0, P_1 = q0, n >= 1; elements with n <= 1 keep q0)."""
    shape = x.shape
    p, q = jnp.broadcast_to(p0, shape).reshape(-1), jnp.broadcast_to(q0, shape).reshape(-1)
    x, n = x.reshape(-1), n.reshape(-1)
    if x.size == 0:
        return q.reshape(shape)

    def lock_cond(state):
        m, p, q = state
        return (m < _LOCKSTEP) & jnp.any(_running(n, m, q))

    def lock_body(state):
        m, p, q = state
        p, q = _steps(step, x, n, m, p, q, _UNROLL)
        return m + _UNROLL, p, q

    m, p, q = lax.while_loop(lock_cond, lock_body, (jnp.int64(1), p, q))
    size = x.size
    group = min(_GROUP, size)

    # Groups finish their elements completely; `done` keeps them out of later groups.
    done = jnp.zeros(x.shape, bool)

    def group_cond(state):
        p, q, done = state
        return jnp.any(_running(n, m, q) & ~done)

    def group_body(state):
        p, q, done = state
        pending = _running(n, m, q) & ~done
        (idx,) = jnp.nonzero(pending, size=group, fill_value=size)
        take = jnp.minimum(idx, size - 1)
        gx, gn, gp, gq = x[take], jnp.where(idx < size, n[take], 0), p[take], q[take]

        def cond(s):
            k, gp, gq = s
            return jnp.any(_running(gn, k, gq))

        def body(s):
            k, gp, gq = s
            gp, gq = _steps(step, gx, gn, k, gp, gq, _UNROLL)
            return k + _UNROLL, gp, gq

        _, gp, gq = lax.while_loop(cond, body, (m, gp, gq))
        p = p.at[idx].set(gp, mode="drop")
        q = q.at[idx].set(gq, mode="drop")
        done = done.at[idx].set(True, mode="drop")
        return p, q, done

    p, q, done = lax.while_loop(group_cond, group_body, (p, q, done))
    return q.reshape(shape)


def _loop_order(n, needs_loop):
    # Elements answered by a special case do not iterate.
    return jnp.where(needs_loop, n, 1)


def _select(cases, default):
    """First matching (condition, value) wins, like the kernel's early returns."""
    out = default
    for cond, value in reversed(cases):
        out = jnp.where(cond, value, out)
    return out


def _sign_by_parity(n, even, odd):
    return jnp.where(n % 2 == 0, even, odd)


# ------------------------------------------------------------------ Chebyshev


def _two_y_step(k, y, p, q):
    return (y + y) * q - p


def _chebyshev(y, n, at_one, at_minus_one, threshold, closed_form, first):
    """Shared evaluation of T/U/V/W at y (x itself, or 2x - 1 for the shifted family):
    the special values at y = +-1 (`at_one`, `at_minus_one`, given as (condition,
    value) pairs by the caller), the closed form for n > threshold inside (-1, 1), then
    the recurrence from P_0 = 1, P_1 = first."""
    one = jnp.ones((), y.dtype)
    inside = (n > threshold) & (jnp.abs(y) < 1)
    special = (n < 0) | at_one[0] | at_minus_one[0] | inside | (n <= 1)
    loop = _recurrence(_two_y_step, y, _loop_order(n, ~special), one, first)
    return _select(
        [
            (n < 0, jnp.zeros((), y.dtype)),
            at_one,
            at_minus_one,
            (inside, closed_form),
            (n == 0, one),
            (n == 1, first),
        ],
        loop,
    )


def _acos(y):
    return _libm(jnp.arccos, y)


def _nf(n, like):
    return n.astype(like.dtype)


def _t_closed(y, n):
    return _libm(jnp.cos, _nf(n, y) * _acos(y))


def _u_closed(y, n):
    a = _acos(y)
    s = _libm(jnp.sin, a)
    n1 = _nf(n + 1, y)
    regular = _libm(jnp.sin, n1 * a) / s
    degenerate = n1 * _libm(jnp.cos, n1 * a) / y
    return jnp.where(s != 0, regular, degenerate)


def _v_closed(y, n):
    a = _acos(y)
    half = a / _t(2, y)
    odd_value = _nf(n + n + 1, y)
    regular = _libm(jnp.cos, (_nf(n, y) + _t(0.5, y)) * a) / _libm(jnp.cos, half)
    return jnp.where(_libm(jnp.sin, half) != 1, regular, _sign_by_parity(n, odd_value, -odd_value))


def _w_closed(y, n):
    a = _acos(y)
    half = a / _t(2, y)
    regular = _libm(jnp.sin, (_nf(n, y) + _t(0.5, y)) * a) / _libm(jnp.sin, half)
    one = jnp.ones((), y.dtype)
    degenerate = jnp.where(y > 0, _nf(n + n + 1, y), _sign_by_parity(n, one, -one))
    return jnp.where(_libm(jnp.cos, half) != 1, regular, degenerate)


def _cheb_t(y, n, is_one, is_minus_one, threshold):
    one = jnp.ones((), y.dtype)
    return _chebyshev(
        y, n,
        (is_one, one),
        (is_minus_one, _sign_by_parity(n, one, -one)),
        threshold, _t_closed(y, n), y,
    )


def _cheb_u(y, n, is_one, is_minus_one, threshold):
    n1 = _nf(n + 1, y)
    return _chebyshev(
        y, n,
        (is_one, n1),
        (is_minus_one, _sign_by_parity(n, n1, -n1)),
        threshold, _u_closed(y, n), y + y,
    )


def _cheb_v(y, n, is_one, is_minus_one, threshold):
    odd_value = _nf(n + n + 1, y)
    return _chebyshev(
        y, n,
        (is_one, jnp.ones((), y.dtype)),
        (is_minus_one, _sign_by_parity(n, odd_value, -odd_value)),
        threshold, _v_closed(y, n), y + y - _t(1, y),
    )


def _cheb_w(y, n, is_one, is_minus_one, threshold):
    one = jnp.ones((), y.dtype)
    return _chebyshev(
        y, n,
        (is_one, _nf(n + n + 1, y)),
        (is_minus_one, _sign_by_parity(n, one, -one)),
        threshold, _w_closed(y, n), y + y + _t(1, y),
    )


def _plain(fn, threshold):
    def evaluate(op, x, n):
        x, n, out = _prepare(op, x, n)
        at_unit = jnp.abs(x) == 1
        return fn(x, n, at_unit & (x > 0), at_unit & ~(x > 0), threshold).astype(out)

    return evaluate


def _shifted(fn, threshold):
    def evaluate(op, x, n):
        x, n, out = _prepare(op, x, n)
        y = x + x - _t(1, x)
        return fn(y, n, x == 1, x == 0, threshold).astype(out)

    return evaluate


_chebyshev_t = _plain(_cheb_t, 6)
_chebyshev_u = _plain(_cheb_u, 8)
_chebyshev_v = _plain(_cheb_v, 8)
_chebyshev_w = _plain(_cheb_w, 8)
_shifted_t = _shifted(_cheb_t, 6)
_shifted_u = _shifted(_cheb_u, 6)
_shifted_v = _shifted(_cheb_v, 6)
_shifted_w = _shifted(_cheb_w, 4)


# ------------------------------------------------------------ Hermite, Laguerre, Legendre


def _hermite_h_step(k, x, p, q):
    return (x + x) * q - _nf(2 * (k - 1), x) * p


def _hermite_he_step(k, x, p, q):
    return x * q - _nf(k - 1, x) * p


def _hermite(op, x, n, step, first_fn):
    x, n, out = _prepare(op, x, n)
    one = jnp.ones((), x.dtype)
    limit = _HERMITE_LIMIT[jnp.dtype(x.dtype)]
    first = first_fn(x)
    special = (n <= 1) | (n > limit)
    loop = _recurrence(step, x, _loop_order(n, ~special), one, first)
    y = _select(
        [
            (n < 0, jnp.zeros((), x.dtype)),
            (n == 0, one),
            (n == 1, first),
            (n > limit, jnp.full((), jnp.nan, x.dtype)),
        ],
        loop,
    )
    return y.astype(out)


def _laguerre_step(k, x, p, q):
    j = k - 1
    return ((_nf(j + j, x) + (_t(1, x) - x)) * q - _nf(j, x) * p) / _nf(j + 1, x)


def _laguerre(op, x, n):
    x, n, out = _prepare(op, x, n)
    one = jnp.ones((), x.dtype)
    first = one - x
    special = (n <= 1) | (jnp.abs(x) == 0)
    loop = _recurrence(_laguerre_step, x, _loop_order(n, ~special), one, first)
    y = _select(
        [(n < 0, jnp.zeros((), x.dtype)), (jnp.abs(x) == 0, one), (n == 0, one), (n == 1, first)],
        loop,
    )
    return y.astype(out)


def _legendre_step(k, x, p, q):
    j = k - 1
    return (_nf(j + j + 1, x) * x * q - _nf(j, x) * p) / _nf(j + 1, x)


def _legendre(op, x, n):
    x, n, out = _prepare(op, x, n)
    one = jnp.ones((), x.dtype)
    at_unit = jnp.abs(x) == 1
    special = (n <= 1) | at_unit
    loop = _recurrence(_legendre_step, x, _loop_order(n, ~special), one, x)
    y = _select(
        [
            (n < 0, jnp.zeros((), x.dtype)),
            (at_unit, jnp.where((x > 0) | (n % 2 == 0), one, -one)),
            (n == 0, one),
            (n == 1, x),
        ],
        loop,
    )
    return y.astype(out)


def _hermite_h(op, x, n):
    return _hermite(op, x, n, _hermite_h_step, lambda x: x + x)


def _hermite_he(op, x, n):
    return _hermite(op, x, n, _hermite_he_step, lambda x: x)


# ---------------------------------------------------------------- lowerings


def lower_special_chebyshev_polynomial_t(x, n):
    return _chebyshev_t("special_chebyshev_polynomial_t", x, n)


def lower_special_chebyshev_polynomial_t_x_scalar(x, n):
    return _chebyshev_t("special_chebyshev_polynomial_t_x_scalar", x, n)


def lower_special_chebyshev_polynomial_t_n_scalar(x, n):
    return _chebyshev_t("special_chebyshev_polynomial_t_n_scalar", x, n)


def lower_special_chebyshev_polynomial_u(x, n):
    return _chebyshev_u("special_chebyshev_polynomial_u", x, n)


def lower_special_chebyshev_polynomial_u_x_scalar(x, n):
    return _chebyshev_u("special_chebyshev_polynomial_u_x_scalar", x, n)


def lower_special_chebyshev_polynomial_u_n_scalar(x, n):
    return _chebyshev_u("special_chebyshev_polynomial_u_n_scalar", x, n)


def lower_special_chebyshev_polynomial_v(x, n):
    return _chebyshev_v("special_chebyshev_polynomial_v", x, n)


def lower_special_chebyshev_polynomial_v_x_scalar(x, n):
    return _chebyshev_v("special_chebyshev_polynomial_v_x_scalar", x, n)


def lower_special_chebyshev_polynomial_v_n_scalar(x, n):
    return _chebyshev_v("special_chebyshev_polynomial_v_n_scalar", x, n)


def lower_special_chebyshev_polynomial_w(x, n):
    return _chebyshev_w("special_chebyshev_polynomial_w", x, n)


def lower_special_chebyshev_polynomial_w_x_scalar(x, n):
    return _chebyshev_w("special_chebyshev_polynomial_w_x_scalar", x, n)


def lower_special_chebyshev_polynomial_w_n_scalar(x, n):
    return _chebyshev_w("special_chebyshev_polynomial_w_n_scalar", x, n)


def lower_special_shifted_chebyshev_polynomial_t(x, n):
    return _shifted_t("special_shifted_chebyshev_polynomial_t", x, n)


def lower_special_shifted_chebyshev_polynomial_t_x_scalar(x, n):
    return _shifted_t("special_shifted_chebyshev_polynomial_t_x_scalar", x, n)


def lower_special_shifted_chebyshev_polynomial_t_n_scalar(x, n):
    return _shifted_t("special_shifted_chebyshev_polynomial_t_n_scalar", x, n)


def lower_special_shifted_chebyshev_polynomial_u(x, n):
    return _shifted_u("special_shifted_chebyshev_polynomial_u", x, n)


def lower_special_shifted_chebyshev_polynomial_u_x_scalar(x, n):
    return _shifted_u("special_shifted_chebyshev_polynomial_u_x_scalar", x, n)


def lower_special_shifted_chebyshev_polynomial_u_n_scalar(x, n):
    return _shifted_u("special_shifted_chebyshev_polynomial_u_n_scalar", x, n)


def lower_special_shifted_chebyshev_polynomial_v(x, n):
    return _shifted_v("special_shifted_chebyshev_polynomial_v", x, n)


def lower_special_shifted_chebyshev_polynomial_v_x_scalar(x, n):
    return _shifted_v("special_shifted_chebyshev_polynomial_v_x_scalar", x, n)


def lower_special_shifted_chebyshev_polynomial_v_n_scalar(x, n):
    return _shifted_v("special_shifted_chebyshev_polynomial_v_n_scalar", x, n)


def lower_special_shifted_chebyshev_polynomial_w(x, n):
    return _shifted_w("special_shifted_chebyshev_polynomial_w", x, n)


def lower_special_shifted_chebyshev_polynomial_w_x_scalar(x, n):
    return _shifted_w("special_shifted_chebyshev_polynomial_w_x_scalar", x, n)


def lower_special_shifted_chebyshev_polynomial_w_n_scalar(x, n):
    return _shifted_w("special_shifted_chebyshev_polynomial_w_n_scalar", x, n)


def lower_special_hermite_polynomial_h(x, n):
    return _hermite_h("special_hermite_polynomial_h", x, n)


def lower_special_hermite_polynomial_h_x_scalar(x, n):
    return _hermite_h("special_hermite_polynomial_h_x_scalar", x, n)


def lower_special_hermite_polynomial_h_n_scalar(x, n):
    return _hermite_h("special_hermite_polynomial_h_n_scalar", x, n)


def lower_special_hermite_polynomial_he(x, n):
    return _hermite_he("special_hermite_polynomial_he", x, n)


def lower_special_hermite_polynomial_he_x_scalar(x, n):
    return _hermite_he("special_hermite_polynomial_he_x_scalar", x, n)


def lower_special_hermite_polynomial_he_n_scalar(x, n):
    return _hermite_he("special_hermite_polynomial_he_n_scalar", x, n)


def lower_special_laguerre_polynomial_l(x, n):
    return _laguerre("special_laguerre_polynomial_l", x, n)


def lower_special_laguerre_polynomial_l_x_scalar(x, n):
    return _laguerre("special_laguerre_polynomial_l_x_scalar", x, n)


def lower_special_laguerre_polynomial_l_n_scalar(x, n):
    return _laguerre("special_laguerre_polynomial_l_n_scalar", x, n)


def lower_special_legendre_polynomial_p(x, n):
    return _legendre("special_legendre_polynomial_p", x, n)


def lower_special_legendre_polynomial_p_x_scalar(x, n):
    return _legendre("special_legendre_polynomial_p_x_scalar", x, n)


def lower_special_legendre_polynomial_p_n_scalar(x, n):
    return _legendre("special_legendre_polynomial_p_n_scalar", x, n)
