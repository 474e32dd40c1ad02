"""Householder QR in compact form (geqrf, ormqr), pseudo-inverse, eigen-decomposition of
general matrices, LDL^T (Bunch-Kaufman) factor and solve, least squares and the
deprecated torch.cholesky: lowerings against PyTorch CPU, shape functions against
meta, errors against CPU, and the public functions end to end (eager, compiled,
gradients, out=)."""

from __future__ import annotations


import pytest
import torch

import xla_native_functions as xnf
from lowering_harness import (
    assert_shape_fn_raises_like_cpu,
    assert_signatures_match_schema,
    CASES_LIVE_IN,
    Case,
    ErrorCase,
    T,
    functions_in,
    as_meta,
    assert_same,
    on_device,
    run_lowering,
    run_shape_fn,
    unambiguous_name,
)
from xla_native_functions.lowerings import linalg_decomp as lower_decomp
from xla_native_functions.lowerings import linalg_solve as lower_solve
from xla_native_functions.shape_fns import linalg_decomp as shape_decomp
from xla_native_functions.shape_fns import linalg_solve as shape_solve

aten = torch.ops.aten
NEW_OPS = CASES_LIVE_IN["test_ops_linalg_solve.py"]  # geqrf, ormqr, pinv, eig, LDL
LOWERINGS = {
    k: v for k, v in functions_in([lower_decomp, lower_solve], prefix="lower_").items() if k[len("lower_") :] in NEW_OPS
}
SHAPE_FNS = {
    k: v
    for k, v in functions_in([shape_decomp, shape_solve], suffix="_output_shape").items()
    if k[: -len("_output_shape")] in NEW_OPS
}

torch.manual_seed(0)
f64 = torch.float64
c64, c128 = torch.complex64, torch.complex128
TOL32 = {"rtol": 1e-4, "atol": 1e-4}


def sym(*batch, n=5, dtype=f64, hermitian=False):
    a = T(*batch, n, n, dtype=dtype)
    return a + (a.mH if hermitian else a.mT)


def spd(*batch, n=4, dtype=torch.float32):
    a = T(*batch, n, n, dtype=dtype)
    return a @ a.mH + n * torch.eye(n, dtype=dtype)


def _geqrf(a):
    return torch.geqrf(a)


def _ldl(a, hermitian=False):
    ld, piv, _ = torch.linalg.ldl_factor_ex(a, hermitian=hermitian)
    return ld, piv


QR64, TAU64 = _geqrf(T(2, 5, 3, dtype=f64))
QRw, TAUw = _geqrf(T(3, 5, dtype=f64))
QRc, TAUc = _geqrf(T(4, 4, dtype=c128))
LD64, PIV64 = _ldl(sym(2))
LDc, PIVc = _ldl(sym(n=4, dtype=c128, hermitian=True), hermitian=True)
LDcs, PIVcs = _ldl(sym(n=4, dtype=c128))
# A matrix whose first pivot is zero: Bunch-Kaufman takes a 2x2 block at once.
TWO_BY_TWO = torch.tensor([[0.0, 1.0, 2.0], [1.0, 0.0, 3.0], [2.0, 3.0, 0.0]], dtype=f64)
SINGULAR = torch.zeros(3, 3, dtype=f64)
SINGULAR[1:, 1:] = torch.tensor([[2.0, 1.0], [1.0, 3.0]])


CASES = [
    Case("geqrf_tall_f64", aten.geqrf.default, (T(2, 5, 3, dtype=f64),)),
    Case("geqrf_wide_f32", aten.geqrf.default, (T(3, 5),), tol=TOL32),
    Case("geqrf_c128", aten.geqrf.default, (T(4, 4, dtype=c128),)),
    Case("geqrf_empty", aten.geqrf.default, (T(0, 3, dtype=f64),)),
    Case("ormqr_left", aten.ormqr.default, (QR64, TAU64, T(2, 5, 4, dtype=f64))),
    Case("ormqr_left_transpose", aten.ormqr.default, (QR64, TAU64, T(2, 5, 4, dtype=f64), True, True)),
    Case("ormqr_right", aten.ormqr.default, (QR64, TAU64, T(2, 4, 5, dtype=f64), False)),
    Case("ormqr_right_transpose", aten.ormqr.default, (QR64, TAU64, T(2, 4, 5, dtype=f64), False, True)),
    Case("ormqr_wide_reflectors", aten.ormqr.default, (QRw, TAUw, T(3, 2, dtype=f64))),
    Case("ormqr_c128_adjoint", aten.ormqr.default, (QRc, TAUc, T(4, 2, dtype=c128), True, True)),
    Case("pinv_default", aten.linalg_pinv.atol_rtol_tensor, (T(2, 5, 3, dtype=f64),)),
    Case("pinv_f32_wide", aten.linalg_pinv.atol_rtol_tensor, (T(3, 5),), tol=TOL32),
    Case(
        "pinv_rtol_cuts",
        aten.linalg_pinv.atol_rtol_tensor,
        (T(4, 4, dtype=f64),),
        {"rtol": torch.tensor(0.5, dtype=f64)},
    ),
    Case(
        "pinv_atol_batch_broadcast",
        aten.linalg_pinv.atol_rtol_tensor,
        (T(4, 3, dtype=f64),),
        {"atol": torch.tensor([0.0, 1.0, 100.0], dtype=f64)},
    ),
    Case(
        "pinv_atol_f32_rtol",
        aten.linalg_pinv.atol_rtol_tensor,
        (T(2, 4, 4),),
        {"atol": torch.tensor(0.3), "rtol": torch.tensor(0.1)},
        tol=TOL32,
    ),
    Case("pinv_hermitian", aten.linalg_pinv.atol_rtol_tensor, (sym(2, n=4),), {"hermitian": True}),
    Case(
        "pinv_hermitian_c128",
        aten.linalg_pinv.atol_rtol_tensor,
        (sym(n=4, dtype=c128, hermitian=True),),
        {"hermitian": True},
    ),
    Case("pinv_singular", aten.linalg_pinv.atol_rtol_tensor, (T(5, 2, dtype=f64) @ T(2, 5, dtype=f64),)),
    Case("pinv_empty", aten.linalg_pinv.atol_rtol_tensor, (T(0, 3, dtype=f64),)),
    Case("ldl_factor", aten.linalg_ldl_factor_ex.default, (sym(2),)),
    Case("ldl_factor_f32", aten.linalg_ldl_factor_ex.default, (sym(3, n=6, dtype=torch.float32),), tol=TOL32),
    Case("ldl_factor_two_by_two_pivot", aten.linalg_ldl_factor_ex.default, (TWO_BY_TWO,)),
    Case("ldl_factor_singular_info", aten.linalg_ldl_factor_ex.default, (SINGULAR,), meta_agrees=True),
    Case("ldl_factor_reads_lower_triangle", aten.linalg_ldl_factor_ex.default, (T(4, 4, dtype=f64),)),
    Case(
        "ldl_factor_hermitian_c128",
        aten.linalg_ldl_factor_ex.default,
        (sym(n=5, dtype=c128, hermitian=True),),
        {"hermitian": True},
    ),
    Case("ldl_factor_symmetric_c128", aten.linalg_ldl_factor_ex.default, (sym(n=5, dtype=c128),)),
    Case("ldl_factor_hermitian_real", aten.linalg_ldl_factor_ex.default, (sym(n=4),), {"hermitian": True}),
    Case("ldl_factor_empty", aten.linalg_ldl_factor_ex.default, (T(0, 0, dtype=f64),)),
    Case("ldl_solve", aten.linalg_ldl_solve.default, (LD64, PIV64, T(2, 5, 3, dtype=f64))),
    # (PyTorch CPU crashes when B's batch adds dimensions to a batched LD's.)
    Case("ldl_solve_broadcast_b", aten.linalg_ldl_solve.default, (LD64, PIV64, T(1, 5, 2, dtype=f64))),
    Case("ldl_solve_broadcast_ld", aten.linalg_ldl_solve.default, (LD64[0], PIV64[0], T(3, 5, 2, dtype=f64))),
    Case("ldl_solve_two_by_two", aten.linalg_ldl_solve.default, (*_ldl(TWO_BY_TWO), T(3, 2, dtype=f64))),
    Case(
        "ldl_solve_hermitian_c128", aten.linalg_ldl_solve.default, (LDc, PIVc, T(4, 2, dtype=c128)), {"hermitian": True}
    ),
    Case("ldl_solve_symmetric_c128", aten.linalg_ldl_solve.default, (LDcs, PIVcs, T(4, 2, dtype=c128))),
    Case("ldl_solve_int64_pivots", aten.linalg_ldl_solve.default, (LD64, PIV64.long(), T(2, 5, 3, dtype=f64))),
    Case(
        "ldl_solve_empty",
        aten.linalg_ldl_solve.default,
        (T(0, 0, dtype=f64), torch.zeros(0, dtype=torch.int32), T(0, 5, dtype=f64)),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_lowering_matches_cpu(case):
    expected = case.op(*case.args, **case.kwargs)
    ours = run_lowering(case.op, case.args, case.kwargs)
    assert_same(ours, expected, **case.tol)
    for o, e in zip(
        ours if isinstance(ours, tuple) else (ours,), expected if isinstance(expected, tuple) else (expected,)
    ):
        assert (o.shape, o.dtype) == (e.shape, e.dtype)


def test_ldl_pivots_are_lapack_format():
    """Pivots equal CPU's bit for bit: 1x1 blocks positive, 2x2 blocks negative twice."""
    ld, piv, info = run_lowering(aten.linalg_ldl_factor_ex.default, (TWO_BY_TWO,), {})
    expected = torch.linalg.ldl_factor_ex(TWO_BY_TWO)
    assert torch.equal(piv, expected.pivots)
    assert (piv < 0).any()
    assert int(info) == 0


EIG_CASES = [
    Case("eig_f64", aten.linalg_eig.default, (T(3, 5, 5, dtype=f64),)),
    Case("eig_f32", aten.linalg_eig.default, (T(4, 4),), tol=TOL32),
    Case("eig_c128", aten.linalg_eig.default, (T(2, 4, 4, dtype=c128),)),
    Case("eig_symmetric_real_spectrum", aten.linalg_eig.default, (sym(n=4),)),
    Case("eig_empty", aten.linalg_eig.default, (T(0, 0, dtype=f64),)),
]


def _eig_invariants(w, v):
    # LAPACK's geev normalizes each eigenvector to unit norm with its largest component
    # real, which leaves a sign per vector that differs between LAPACK builds (MKL on
    # PyTorch's side, OpenBLAS on JAX's): compare what that sign does not change.
    return w, v.abs(), v.abs().pow(2).sum(-2)


@pytest.mark.parametrize("case", EIG_CASES, ids=lambda c: c.id)
def test_eig_matches_cpu_up_to_sign(case):
    w, v = case.op(*case.args)
    ow, ov = run_lowering(case.op, case.args, {})
    assert (ow.shape, ow.dtype, ov.shape, ov.dtype) == (w.shape, w.dtype, v.shape, v.dtype)
    for o, e in zip(_eig_invariants(ow, ov), _eig_invariants(w, v)):
        torch.testing.assert_close(o, e, **(case.tol or {"rtol": 1e-7, "atol": 1e-7}))
    a = case.args[0].to(w.dtype)
    torch.testing.assert_close(a @ ov, ov * ow.unsqueeze(-2), **(case.tol or {"rtol": 1e-7, "atol": 1e-7}))


@pytest.mark.parametrize("case", CASES + EIG_CASES, ids=lambda c: c.id)
def test_shape_fn_matches_meta(case):
    device = "meta" if case.meta_agrees else "cpu"
    try:
        expected = as_meta(on_device(case.op, case.args, case.kwargs, device))
    except NotImplementedError:
        expected = as_meta(case.op(*case.args, **case.kwargs))  # no meta kernel: CPU's result
    assert run_shape_fn(case.op, case.args, case.kwargs) == expected


def test_every_op_is_covered():
    tested = {unambiguous_name(c.op) for c in CASES + EIG_CASES}
    assert tested == NEW_OPS
    assert {f"lower_{n}" for n in tested} == set(LOWERINGS)
    assert {f"{n}_output_shape" for n in tested} == set(SHAPE_FNS)


@pytest.mark.parametrize("name", sorted(NEW_OPS))
def test_signatures_match(name):
    op = next(c.op for c in CASES + EIG_CASES if unambiguous_name(c.op) == name)
    assert_signatures_match_schema(name, op, LOWERINGS, SHAPE_FNS, check_defaults=False)


ERROR_CASES = [
    ErrorCase("geqrf_1d", aten.geqrf.default, (T(3, dtype=f64),)),
    ErrorCase("geqrf_int", aten.geqrf.default, (torch.ones(3, 3, dtype=torch.int64),)),
    ErrorCase("geqrf_half", aten.geqrf.default, (torch.ones(3, 3, dtype=torch.float16),)),
    ErrorCase("ormqr_tau_too_long", aten.ormqr.default, (QR64, T(2, 4, dtype=f64), T(2, 5, 4, dtype=f64))),
    ErrorCase("ormqr_tau_too_short", aten.ormqr.default, (QR64, TAU64[..., :2].contiguous(), T(2, 5, 4, dtype=f64))),
    ErrorCase("ormqr_other_rows", aten.ormqr.default, (QR64, TAU64, T(2, 4, 4, dtype=f64))),
    ErrorCase("ormqr_batch", aten.ormqr.default, (QR64, TAU64, T(3, 5, 4, dtype=f64))),
    ErrorCase("ormqr_dtype", aten.ormqr.default, (QR64, TAU64, T(2, 5, 4))),
    ErrorCase("ormqr_tau_ndim", aten.ormqr.default, (QR64, TAU64[0], T(2, 5, 4, dtype=f64))),
    ErrorCase("pinv_1d", aten.linalg_pinv.atol_rtol_tensor, (T(3, dtype=f64),)),
    ErrorCase("pinv_int", aten.linalg_pinv.atol_rtol_tensor, (torch.ones(3, 3, dtype=torch.int64),)),
    ErrorCase(
        "pinv_complex_atol", aten.linalg_pinv.atol_rtol_tensor, (T(3, 3, dtype=f64),), {"atol": torch.tensor(1j)}
    ),
    ErrorCase("eig_not_square", aten.linalg_eig.default, (T(3, 4, dtype=f64),)),
    ErrorCase("eig_int", aten.linalg_eig.default, (torch.ones(3, 3, dtype=torch.int64),)),
    ErrorCase("ldl_factor_not_square", aten.linalg_ldl_factor_ex.default, (T(3, 4, dtype=f64),)),
    ErrorCase("ldl_factor_int", aten.linalg_ldl_factor_ex.default, (torch.ones(3, 3, dtype=torch.int64),)),
    ErrorCase("ldl_solve_float_pivots", aten.linalg_ldl_solve.default, (LD64, PIV64.double(), T(2, 5, 3, dtype=f64))),
    ErrorCase("ldl_solve_pivot_shape", aten.linalg_ldl_solve.default, (LD64, PIV64[0], T(2, 5, 3, dtype=f64))),
    ErrorCase("ldl_solve_b_rows", aten.linalg_ldl_solve.default, (LD64, PIV64, T(2, 4, 3, dtype=f64))),
    ErrorCase("ldl_solve_b_1d", aten.linalg_ldl_solve.default, (LD64, PIV64, T(5, dtype=f64))),
    ErrorCase("ldl_solve_dtype", aten.linalg_ldl_solve.default, (LD64, PIV64, T(2, 5, 3))),
]


@pytest.mark.parametrize("case", ERROR_CASES, ids=lambda c: c.id)
def test_shape_fn_raises_like_cpu(case):
    assert_shape_fn_raises_like_cpu(case)


# ---------------------------------------------------------------------------- least squares

LSTSQ_FULL_RANK = [
    ((5, 3), (5, 2)),
    ((3, 5), (3, 2)),
    ((2, 5, 3), (2, 5)),
    ((1, 5, 3), (4, 5, 2)),
    ((2, 1, 5, 3), (1, 4, 5, 2)),
    ((0, 3), (0, 2)),
    ((3, 0), (3, 2)),
    ((0, 5, 3), (0, 5, 2)),
    ((4, 4), (4,)),
]
DRIVERS = [None, "gels", "gelsy", "gelsd", "gelss"]


def _lstsq_both(a, b, **kw):
    expected = torch.linalg.lstsq(a, b, **kw)
    ours = torch.linalg.lstsq(xnf.to_xla(a), xnf.to_xla(b), **kw)
    return tuple(xnf.to_torch(t) for t in ours), tuple(expected)


def _assert_outputs(ours, expected, **tol):
    assert [(o.shape, o.dtype) for o in ours] == [(e.shape, e.dtype) for e in expected]
    torch.testing.assert_close(ours, expected, **tol)


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("shapes", LSTSQ_FULL_RANK, ids=lambda s: f"{s[0]}x{s[1]}")
def test_lstsq_matches_cpu(shapes, driver):
    a, b = T(*shapes[0], dtype=f64), T(*shapes[1], dtype=f64)
    _assert_outputs(*_lstsq_both(a, b, driver=driver))


@pytest.mark.parametrize("driver", ["gelsy", "gelsd", "gelss"])
def test_lstsq_rank_deficient(driver):
    """The minimum-norm solution and the rank; gelsd/gelss drop their residuals when a
    matrix of the batch is rank-deficient (a shape that depends on the values)."""
    a = T(2, 6, 3, dtype=f64)
    a[0, :, 2] = a[0, :, 1]
    ours, expected = _lstsq_both(a, T(2, 6, 2, dtype=f64), driver=driver)
    _assert_outputs(ours, expected)
    assert ours[1].shape == (0,) and ours[2].tolist() == [2, 3]


def test_lstsq_rcond_and_precision():
    a = T(6, 4, dtype=f64)
    _assert_outputs(*_lstsq_both(a, T(6, 2, dtype=f64), rcond=0.5, driver="gelsd"))
    a32 = T(3, 6, 4)
    _assert_outputs(*_lstsq_both(a32, T(3, 6, 2)), **TOL32)
    _assert_outputs(*_lstsq_both(T(6, 4, dtype=c128), T(6, 2, dtype=c128), driver="gelsd"))


@pytest.mark.parametrize(
    "a,b,kw",
    [
        ((5, 3), (4, 2), {}),
        ((3,), (3,), {}),
        ((5, 3), (4, 5, 2), {}),
        ((5, 3), (5, 2), {"driver": "gelsq"}),
        ((2, 5, 3), (3, 5, 2), {}),
    ],
    ids=["rows", "1d", "rank", "driver", "batch"],
)
def test_lstsq_errors_like_cpu(a, b, kw):
    A, B = T(*a, dtype=f64), T(*b, dtype=f64)
    with pytest.raises(RuntimeError):
        torch.linalg.lstsq(A, B, **kw)
    with pytest.raises(RuntimeError):
        torch.linalg.lstsq(xnf.to_xla(A), xnf.to_xla(B), **kw)


def test_lstsq_dtype_mismatch_raises():
    with pytest.raises(RuntimeError, match="same dtype"):
        torch.linalg.lstsq(xnf.to_xla(T(5, 3)), xnf.to_xla(T(5, 2, dtype=f64)))


def test_lstsq_shape_fn_matches_cpu():
    a, b = T(2, 5, 3, dtype=f64), T(2, 5, 4, dtype=f64)
    for driver in DRIVERS[1:]:
        residuals = driver != "gelsy"
        metas = shape_solve.linalg_lstsq_values_output_shape(*(as_meta((a, b))), None, driver, residuals)
        assert metas == as_meta(tuple(torch.linalg.lstsq(a, b, driver=driver)))


def test_lstsq_compiled_and_out():
    a = T(2, 6, 3, dtype=f64)
    a[0, :, 2] = a[0, :, 1]
    b = T(2, 6, 2, dtype=f64)
    for driver in ("gelsy", "gelsd", "gels"):
        f = xnf.compile(lambda x, y: tuple(torch.linalg.lstsq(x, y, driver=driver)))
        ours = tuple(xnf.to_torch(t) for t in f(xnf.to_xla(a), xnf.to_xla(b)))
        if driver == "gels":  # gels assumes full rank (PyTorch CPU may raise on the first matrix, by its
            # rounding): compare only the full-rank one, solved alone on CPU
            ours, expected = [o[1:] for o in ours[:2]], list(torch.linalg.lstsq(a[1:], b[1:], driver=driver))[:2]
        else:
            expected = tuple(torch.linalg.lstsq(a, b, driver=driver))
        _assert_outputs(ours, expected)
    outs = [xnf.to_xla(torch.empty(0, dtype=f64)) for _ in range(2)] + [
        xnf.to_xla(torch.empty(0, dtype=torch.int64)),
        xnf.to_xla(torch.empty(0, dtype=f64)),
    ]
    torch.linalg.lstsq(xnf.to_xla(a[1]), xnf.to_xla(b[1]), driver="gelsd", out=tuple(outs))
    _assert_outputs(tuple(xnf.to_torch(o) for o in outs), tuple(torch.linalg.lstsq(a[1], b[1], driver="gelsd")))


# ---------------------------------------------------------------------------- torch.cholesky


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_matches_cpu(upper):
    for a in (spd(2, dtype=f64), spd(3), spd(dtype=c128)):
        ours = xnf.to_torch(torch.cholesky(xnf.to_xla(a), upper=upper))
        torch.testing.assert_close(ours, torch.cholesky(a, upper=upper), **TOL32)


def test_cholesky_raises_on_indefinite_input_like_cpu():
    a = torch.tensor([[1.0, 2.0], [2.0, 1.0]], dtype=f64)
    with pytest.raises(torch.linalg.LinAlgError) as cpu:
        torch.cholesky(a)
    with pytest.raises(torch.linalg.LinAlgError) as ours:
        torch.cholesky(xnf.to_xla(a))
    assert str(ours.value) == str(cpu.value)


def test_cholesky_compiled_and_out():
    a = spd(2, dtype=f64)
    f = xnf.compile(lambda x: torch.cholesky(x, upper=True) + 1)
    torch.testing.assert_close(xnf.to_torch(f(xnf.to_xla(a))), torch.cholesky(a, upper=True) + 1)
    out = xnf.to_xla(torch.empty(0, dtype=f64))
    torch.cholesky(xnf.to_xla(a), out=out)
    torch.testing.assert_close(xnf.to_torch(out), torch.cholesky(a))


# ---------------------------------------------------------------------------- end to end


def test_geqrf_and_pinv_out_variants():
    a = T(5, 3, dtype=f64)
    qr, tau = xnf.to_xla(torch.empty(0, dtype=f64)), xnf.to_xla(torch.empty(0, dtype=f64))
    torch.geqrf(xnf.to_xla(a), out=(qr, tau))
    torch.testing.assert_close((xnf.to_torch(qr), xnf.to_torch(tau)), tuple(torch.geqrf(a)))
    out = xnf.to_xla(torch.empty(0, dtype=f64))
    torch.linalg.pinv(xnf.to_xla(a), out=out)
    torch.testing.assert_close(xnf.to_torch(out), torch.linalg.pinv(a))


def test_compiled_factorizations_match_cpu():
    a, s = T(2, 5, 3, dtype=f64), sym(2)

    def f(a, s):
        qr, tau = torch.geqrf(a)
        ld, piv = torch.linalg.ldl_factor(s)
        return (
            torch.ormqr(qr, tau, a, transpose=True),
            torch.linalg.pinv(a),
            ld,
            piv,
            torch.linalg.ldl_solve(ld, piv, a),
        )

    ours = xnf.compile(f)(xnf.to_xla(a), xnf.to_xla(s))
    torch.testing.assert_close([xnf.to_torch(o) for o in ours], list(f(a, s)))


def _grads(fn, inputs):
    def run(xs):
        xs = [x.detach().requires_grad_() for x in xs]
        out = fn(*xs)
        out.backward()
        return out.detach(), [x.grad for x in xs]

    expected = run(inputs)
    out, grads = run([xnf.to_xla(x) for x in inputs])
    return (xnf.to_torch(out), [xnf.to_torch(g) for g in grads]), expected


GRADS = [
    (
        "cholesky",
        lambda a: torch.cholesky(a @ a.mT + 4 * torch.eye(4, dtype=f64, device=a.device), upper=True).pow(2).sum(),
        [(2, 4, 4)],
    ),
    (
        "ormqr",
        lambda a, t, c: (
            torch.ormqr(a, t, c, left=False).pow(2).mul(torch.arange(5.0, dtype=f64, device=a.device)).sum()
        ),
        [(5, 3), (3,), (4, 5)],
    ),
    ("pinv", lambda a: torch.linalg.pinv(a).sin().sum(), [(2, 5, 3)]),
    ("pinv_hermitian", lambda a: torch.linalg.pinv(a + a.mT, hermitian=True).sin().sum(), [(4, 4)]),
    ("lstsq", lambda a, b: torch.linalg.lstsq(a, b).solution.sin().sum(), [(6, 3), (6, 2)]),
    ("lstsq_residuals", lambda a, b: torch.linalg.lstsq(a, b, driver="gels").residuals.sum(), [(6, 3), (6, 2)]),
    ("eigvals", lambda a: torch.linalg.eigvals(a).abs().sum(), [(2, 4, 4)]),
    (
        "eig",
        lambda a: torch.linalg.eig(a)[1].abs().pow(2).mul(torch.arange(4.0, dtype=f64, device=a.device)).sum(),
        [(4, 4)],
    ),
]


@pytest.mark.parametrize("name,fn,shapes", GRADS, ids=[g[0] for g in GRADS])
def test_gradients_match_cpu(name, fn, shapes):
    inputs = [T(*s, dtype=f64) for s in shapes]
    ours, expected = _grads(fn, inputs)
    torch.testing.assert_close(ours, expected)

