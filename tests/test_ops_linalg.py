"""Matrix products, FFTs and torch.linalg: lowerings against PyTorch CPU, shape
functions against meta, errors against CPU, and models' uses end to end."""

from __future__ import annotations


import pytest
import torch
import torch.nn.functional as F

import xla_native_functions as xnf
from lowering_harness import (
    assert_lowering_matches_cpu,
    assert_shape_fn_matches_meta,
    assert_shape_fn_raises_like_cpu,
    assert_signatures_match_schema,
    cases_elsewhere,
    Case,
    ErrorCase,
    T,
    functions_in,
    as_meta,
    assert_same,
    ints,
    on_device,
    run_lowering,
    run_shape_fn,
    unambiguous_name,
)
from xla_native_functions.lowerings import fft as lower_fft
from xla_native_functions.lowerings import linalg_decomp as lower_decomp
from xla_native_functions.lowerings import matmul as lower_matmul
from xla_native_functions.shape_fns import fft as shape_fft
from xla_native_functions.shape_fns import linalg_decomp as shape_decomp
from xla_native_functions.shape_fns import matmul as shape_matmul

aten = torch.ops.aten
LOWERINGS = functions_in([lower_matmul, lower_fft, lower_decomp], prefix="lower_")
SHAPE_FNS = functions_in([shape_matmul, shape_fft, shape_decomp], suffix="_output_shape")

torch.manual_seed(0)
f64 = torch.float64
c64, c128 = torch.complex64, torch.complex128
TOL32 = {"rtol": 1e-4, "atol": 1e-4}


def spd(*batch, n=4, dtype=torch.float32):
    a = T(*batch, n, n, dtype=dtype)
    return a @ a.mH + n * torch.eye(n, dtype=dtype)


def wellcond(*batch, n=4, dtype=torch.float32):
    return T(*batch, n, n, dtype=dtype) + 4 * torch.eye(n, dtype=dtype)


def lower_tri(*batch, n=4, dtype=torch.float32, upper=False):
    a = wellcond(*batch, n=n, dtype=dtype)
    return a.triu() if upper else a.tril()


def _lu_factor(a):
    lu, piv, _ = aten.linalg_lu_factor_ex(a)
    return lu, piv


A32, A64, Ac = wellcond(2, 3), wellcond(3, dtype=f64), wellcond(2, dtype=c64)
LU64, PIV64 = _lu_factor(wellcond(2, dtype=f64))
LUrect, PIVrect = _lu_factor(T(2, 5, 3, dtype=f64))

# Ops whose CPU results are unique: compared value by value.
CASES = [
    # matrix products
    Case("mv_f32", aten.mv.default, (T(4, 5), T(5))),
    Case("mv_int64", aten.mv.default, (ints(4, 5), ints(5))),
    Case("mv_c64", aten.mv.default, (T(4, 5, dtype=c64), T(5, dtype=c64)), tol=TOL32),
    Case("dot_f64", aten.dot.default, (T(7, dtype=f64), T(7, dtype=f64))),
    Case("dot_int64", aten.dot.default, (ints(7), ints(7))),
    Case("dot_big_int64_exact", aten.dot.default, (torch.full((3,), 2**40), torch.tensor([3, 5, 7]))),
    Case("vdot_c128", aten.vdot.default, (T(6, dtype=c128), T(6, dtype=c128))),
    Case("vdot_f32", aten.vdot.default, (T(6), T(6))),
    Case("addmv_default", aten.addmv.default, (T(4), T(4, 5), T(5))),
    Case("addmv_scalars", aten.addmv.default, (T(1), T(4, 5), T(5)), {"beta": 0.5, "alpha": -2}),
    Case("addmv_beta0_nan", aten.addmv.default, (torch.full((4,), float("nan")), T(4, 5), T(5)), {"beta": 0}),
    Case("addmv_int", aten.addmv.default, (ints(4), ints(4, 5), ints(5)), {"beta": 2, "alpha": 3}),
    Case("addr_f32", aten.addr.default, (T(3, 4), T(3), T(4)), {"beta": 2, "alpha": 0.5}),
    Case("addr_broadcast_promote", aten.addr.default, (T(4), ints(3), T(4, dtype=f64))),
    Case("addr_int", aten.addr.default, (ints(3, 4), ints(3), ints(4)), {"alpha": 3}),
    Case("addr_bool", aten.addr.default, (T(3, 4, dtype=torch.bool), T(3, dtype=torch.bool), T(4, dtype=torch.bool))),
    Case(
        "addr_bool_beta_false",
        aten.addr.default,
        (T(3, 4, dtype=torch.bool), T(3, dtype=torch.bool), T(4, dtype=torch.bool)),
        {"beta": False},
    ),
    Case("addr_beta0_nan", aten.addr.default, (torch.full((3, 4), float("nan")), T(3), T(4)), {"beta": 0}),
    Case("baddbmm_f32", aten.baddbmm.default, (T(2, 3, 4), T(2, 3, 5), T(2, 5, 4)), {"beta": 0.5, "alpha": 2}),
    Case("baddbmm_broadcast_self", aten.baddbmm.default, (T(4), T(2, 3, 5), T(2, 5, 4))),
    Case("baddbmm_int64", aten.baddbmm.default, (ints(2, 3, 4), ints(2, 3, 5), ints(2, 5, 4)), {"alpha": -1}),
    Case(
        "baddbmm_bf16",
        aten.baddbmm.default,
        (T(2, 3, 4, dtype=torch.bfloat16), T(2, 3, 5, dtype=torch.bfloat16), T(2, 5, 4, dtype=torch.bfloat16)),
        tol={"rtol": 2e-2, "atol": 2e-2},
    ),
    Case("addbmm_f64", aten.addbmm.default, (T(3, 4, dtype=f64), T(2, 3, 5, dtype=f64), T(2, 5, 4, dtype=f64))),
    Case("addbmm_int64_beta0", aten.addbmm.default, (ints(3, 4), ints(2, 3, 5), ints(2, 5, 4)), {"beta": 0}),
    # FFT primitives (dims as torch.fft passes them: wrapped, any order)
    *(
        Case(
            f"fft_c2c_{dt}_n{norm}_{'fwd' if fwd else 'inv'}",
            aten._fft_c2c.default,
            (T(3, 8, 5, dtype=dt), [2, 1], norm, fwd),
            tol=TOL32,
        )
        for dt in (c64, c128)
        for norm in (0, 1, 2)
        for fwd in (True, False)
    ),
    Case("fft_c2c_no_dims", aten._fft_c2c.default, (T(3, 4, dtype=c64), [], 2, True)),
    Case("fft_c2c_4_dims", aten._fft_c2c.default, (T(2, 3, 4, 5, dtype=c128), [0, 1, 2, 3], 0, True)),
    *(
        Case(f"fft_r2c_{dt}_n{norm}_{one}", aten._fft_r2c.default, (T(4, 6, 7, dtype=dt), [0, 2], norm, one), tol=TOL32)
        for dt in (torch.float32, f64)
        for norm in (0, 1, 2)
        for one in (True, False)
    ),
    *(
        Case(
            f"fft_c2r_{dt}_n{norm}_{size}",
            aten._fft_c2r.default,
            (T(4, 6, size // 2 + 1, dtype=dt), [0, 2], norm, size),
            tol=TOL32,
        )
        for dt in (c64, c128)
        for norm in (0, 1, 2)
        for size in (7, 8)
    ),
    # linalg with unique results
    Case("cholesky_ex_f32", aten.linalg_cholesky_ex.default, (spd(2),), tol=TOL32),
    Case("cholesky_ex_upper_c128", aten.linalg_cholesky_ex.default, (spd(2, dtype=c128),), {"upper": True}),
    Case("cholesky_ex_empty", aten.linalg_cholesky_ex.default, (T(0, 0),)),
    Case(
        "cholesky_solve",
        aten.cholesky_solve.default,
        (T(3, 2, 4, 2, dtype=f64), torch.linalg.cholesky(spd(2, dtype=f64))),
    ),
    Case(
        "cholesky_solve_upper",
        aten.cholesky_solve.default,
        (T(4, 3), torch.linalg.cholesky(spd()).mT.contiguous(), True),
        tol=TOL32,
    ),
    Case("cholesky_inverse", aten.cholesky_inverse.default, (torch.linalg.cholesky(spd(dtype=f64)),)),
    Case(
        "cholesky_inverse_upper_c128",
        aten.cholesky_inverse.default,
        (torch.linalg.cholesky(spd(2, dtype=c128), upper=True), True),
    ),
    Case("inv_ex_f32", aten.linalg_inv_ex.default, (A32,), tol=TOL32),
    Case("inv_ex_c64", aten.linalg_inv_ex.default, (Ac,), tol=TOL32),
    Case(
        "inv_ex_singular_info",
        aten.linalg_inv_ex.default,
        (torch.tensor([[[1.0, 2.0], [2.0, 4.0]], [[1.0, 0.0], [0.0, 2.0]]], dtype=f64),),
        meta_agrees=True,
    ),
    Case("solve_ex_matrix", aten._linalg_solve_ex.default, (A64, T(2, 3, 4, 2, dtype=f64))),
    Case("solve_ex_vector", aten._linalg_solve_ex.default, (A64, T(3, 4, dtype=f64))),
    Case("solve_ex_1d", aten._linalg_solve_ex.default, (A64, T(4, dtype=f64))),
    Case("solve_ex_right", aten._linalg_solve_ex.default, (A64, T(3, 5, 4, dtype=f64)), {"left": False}),
    Case("solve_ex_c64", aten._linalg_solve_ex.default, (Ac, T(2, 4, 3, dtype=c64)), tol=TOL32),
    Case("lu_factor_ex_square", aten.linalg_lu_factor_ex.default, (A64,)),
    Case("lu_factor_ex_wide", aten.linalg_lu_factor_ex.default, (T(2, 3, 5, dtype=f64),)),
    Case("lu_factor_ex_tall_c128", aten.linalg_lu_factor_ex.default, (T(5, 3, dtype=c128),)),
    Case(
        "lu_factor_ex_singular", aten.linalg_lu_factor_ex.default, (torch.tensor([[0.0, 0.0], [0.0, 4.0]], dtype=f64),)
    ),
    Case("linalg_lu_tall", aten.linalg_lu.default, (T(2, 5, 3, dtype=f64),)),
    Case("linalg_lu_wide_f32", aten.linalg_lu.default, (T(3, 5),), tol=TOL32),
    Case("lu_unpack", aten.lu_unpack.default, (LUrect, PIVrect)),
    Case("lu_unpack_data_only", aten.lu_unpack.default, (LUrect, PIVrect, True, False)),
    Case("lu_unpack_pivots_only", aten.lu_unpack.default, (LU64, PIV64, False, True)),
    Case("lu_solve", aten.linalg_lu_solve.default, (LU64, PIV64, T(3, 2, 4, 2, dtype=f64))),
    Case("lu_solve_adjoint", aten.linalg_lu_solve.default, (LU64, PIV64, T(2, 4, 3, dtype=f64)), {"adjoint": True}),
    Case("lu_solve_right", aten.linalg_lu_solve.default, (LU64, PIV64, T(2, 3, 4, dtype=f64)), {"left": False}),
    Case(
        "lu_solve_right_adjoint",
        aten.linalg_lu_solve.default,
        (LU64, PIV64, T(2, 3, 4, dtype=f64)),
        {"left": False, "adjoint": True},
    ),
    Case("det_f64", aten._linalg_det.default, (A64,)),
    Case("det_singular", aten._linalg_det.default, (torch.tensor([[1.0, 2.0], [2.0, 4.0]], dtype=f64),)),
    Case("det_c128", aten._linalg_det.default, (wellcond(2, dtype=c128),)),
    Case("slogdet_f64", aten._linalg_slogdet.default, (T(3, 4, 4, dtype=f64),)),
    Case("slogdet_c128", aten._linalg_slogdet.default, (wellcond(2, dtype=c128),)),
    Case("slogdet_singular", aten._linalg_slogdet.default, (torch.tensor([[1.0, 2.0], [2.0, 4.0]], dtype=f64),)),
    Case("householder_product", aten.linalg_householder_product.default, (T(2, 5, 3, dtype=f64), T(2, 2, dtype=f64))),
    Case("householder_product_c128", aten.linalg_householder_product.default, (T(4, 4, dtype=c128), T(3, dtype=c128))),
    Case(
        "triangular_solve",
        aten.triangular_solve.default,
        (T(3, 2, 4, 2, dtype=f64), lower_tri(2, dtype=f64, upper=True)),
    ),
    Case(
        "triangular_solve_lower_t_unit",
        aten.triangular_solve.default,
        (T(4, 3, dtype=f64), lower_tri(dtype=f64), False, True, True),
    ),
    Case(
        "solve_triangular_left",
        aten.linalg_solve_triangular.default,
        (lower_tri(2, dtype=f64), T(2, 4, 3, dtype=f64)),
        {"upper": False},
    ),
    Case(
        "solve_triangular_right_upper_unit",
        aten.linalg_solve_triangular.default,
        (lower_tri(dtype=f64, upper=True), T(3, 3, 4, dtype=f64)),
        {"upper": True, "left": False, "unitriangular": True},
    ),
    Case(
        "solve_triangular_c64",
        aten.linalg_solve_triangular.default,
        (lower_tri(dtype=c64), T(4, 2, dtype=c64)),
        {"upper": False},
        tol=TOL32,
    ),
    Case("cross_f32", aten.linalg_cross.default, (T(4, 3), T(4, 3))),
    Case("cross_broadcast_dim", aten.linalg_cross.default, (T(3, 1, 5, dtype=f64), T(3, 4, 5, dtype=f64)), {"dim": 0}),
    Case("cross_int64", aten.linalg_cross.default, (ints(2, 3), ints(2, 3))),
    Case("matrix_exp_f64", aten.linalg_matrix_exp.default, (T(2, 4, 4, dtype=f64, low=-1, high=1),)),
    Case("matrix_exp_f32", aten.linalg_matrix_exp.default, (T(3, 3, low=-1, high=1),), tol=TOL32),
    Case("matrix_exp_c128", aten.linalg_matrix_exp.default, (T(3, 3, dtype=c128, low=-1, high=1),)),
    Case("trace_f32", aten.trace.default, (T(4, 4),)),
    Case("trace_rect", aten.trace.default, (T(3, 5, dtype=f64),)),
    Case("trace_int32", aten.trace.default, (ints(3, 3, dtype=torch.int32),)),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_lowering_matches_cpu(case):
    assert_lowering_matches_cpu(case)


@pytest.mark.parametrize("case", CASES + [], ids=lambda c: c.id)
def test_shape_fn_matches_meta(case):
    assert_shape_fn_matches_meta(case)


# Ops whose results are unique only up to phases: compare what is unique.
def _reconstruct(name, out):
    if name == "_linalg_eigh":
        w, v = out
        if v.numel() == 0:
            return w, v.shape
        return w, v @ torch.diag_embed(w).to(v.dtype) @ v.mH, v.mH @ v
    if name == "_linalg_svd":
        u, s, vh = out
        if u.numel() == 0:
            return s, u.shape, vh.shape
        k = s.shape[-1]
        return s, u[..., :k] @ torch.diag_embed(s).to(u.dtype) @ vh[..., :k, :], u.mH @ u, vh @ vh.mH
    if name == "linalg_qr":
        q, r = out
        if q.numel() == 0:
            return r.abs(), r.triu().abs()
        k = r.shape[-2]
        return q[..., :k] @ r, q.mH @ q, r.abs(), r.triu().abs()
    raise AssertionError(name)


PHASE_CASES = [
    Case("eigh_lower", aten._linalg_eigh.default, (spd(2, dtype=f64),)),
    Case("eigh_upper_c128", aten._linalg_eigh.default, (spd(2, dtype=c128), "U")),
    Case("eigh_no_vectors", aten._linalg_eigh.default, (spd(dtype=f64), "L", False)),
    Case("eigh_f32", aten._linalg_eigh.default, (spd(3),), tol=TOL32),
    Case("svd_tall", aten._linalg_svd.default, (T(2, 5, 3, dtype=f64),)),
    Case("svd_full_wide", aten._linalg_svd.default, (T(3, 5, dtype=f64), True)),
    Case("svd_values_only", aten._linalg_svd.default, (T(2, 4, 3, dtype=f64), False, False)),
    Case("svd_c64", aten._linalg_svd.default, (T(4, 3, dtype=c64),), tol=TOL32),
    Case("qr_reduced", aten.linalg_qr.default, (T(2, 5, 3, dtype=f64),)),
    Case("qr_complete_wide", aten.linalg_qr.default, (T(3, 5, dtype=f64), "complete")),
    Case("qr_r", aten.linalg_qr.default, (T(5, 3, dtype=f64), "r")),
    Case("qr_c128", aten.linalg_qr.default, (T(4, 4, dtype=c128),)),
]


@pytest.mark.parametrize("case", PHASE_CASES, ids=lambda c: c.id)
def test_phase_ambiguous_lowering_matches_cpu_invariants(case):
    name = unambiguous_name(case.op)
    expected = case.op(*case.args, **case.kwargs)
    ours = run_lowering(case.op, case.args, case.kwargs)
    for o, e in zip(ours, expected):
        assert (o.shape, o.dtype) == (e.shape, e.dtype)
    for o, e in zip(_reconstruct(name, ours), _reconstruct(name, expected)):
        if isinstance(e, torch.Size):
            assert o == e
        else:
            torch.testing.assert_close(o, e, **(case.tol or {"rtol": 1e-7, "atol": 1e-7}))


@pytest.mark.parametrize("case", PHASE_CASES, ids=lambda c: c.id)
def test_phase_ambiguous_shape_fn_matches_meta(case):
    assert run_shape_fn(case.op, case.args, case.kwargs) == as_meta(on_device(case.op, case.args, case.kwargs, "meta"))


def test_every_op_is_covered():
    tested = {unambiguous_name(c.op) for c in CASES + PHASE_CASES} | cases_elsewhere("test_ops_linalg.py")
    assert {f"lower_{n}" for n in tested} >= set(LOWERINGS)
    assert {f"{n}_output_shape" for n in tested} >= set(SHAPE_FNS)


@pytest.mark.parametrize("name", sorted({unambiguous_name(c.op) for c in CASES + PHASE_CASES}))
def test_signatures_match(name):
    op = next(c.op for c in CASES + PHASE_CASES if unambiguous_name(c.op) == name)
    assert_signatures_match_schema(name, op, LOWERINGS, SHAPE_FNS, check_defaults=False)


ERROR_CASES = [
    ErrorCase("mv_mismatch", aten.mv.default, (T(4, 5), T(4))),
    ErrorCase("mv_not_matrix", aten.mv.default, (T(5), T(5))),
    ErrorCase("mv_bool", aten.mv.default, (T(2, 2, dtype=torch.bool), T(2, dtype=torch.bool))),
    ErrorCase("dot_2d", aten.dot.default, (T(2, 2), T(2))),
    ErrorCase("dot_size", aten.dot.default, (T(3), T(4))),
    ErrorCase("dot_dtype", aten.dot.default, (T(3), T(3, dtype=f64))),
    ErrorCase("dot_bool", aten.dot.default, (T(3, dtype=torch.bool), T(3, dtype=torch.bool))),
    ErrorCase("addmv_dtype", aten.addmv.default, (T(4, dtype=f64), T(4, 5), T(5))),
    ErrorCase("addmv_self_shape", aten.addmv.default, (T(3), T(4, 5), T(5))),
    ErrorCase("addr_not_vector", aten.addr.default, (T(3, 4), T(3, 1), T(4))),
    ErrorCase("addr_int_float_alpha", aten.addr.default, (ints(3, 4), ints(3), ints(4)), {"alpha": 1.5}),
    ErrorCase("addr_float_bool_beta", aten.addr.default, (T(3, 4), T(3), T(4)), {"beta": False}),
    ErrorCase("addr_self_shape", aten.addr.default, (T(2, 4), T(3), T(4))),
    ErrorCase("baddbmm_batch", aten.baddbmm.default, (T(2, 3, 4), T(2, 3, 5), T(3, 5, 4))),
    ErrorCase("baddbmm_dtype", aten.baddbmm.default, (T(2, 3, 4, dtype=f64), T(2, 3, 5), T(2, 5, 4))),
    ErrorCase("addbmm_not_3d", aten.addbmm.default, (T(3, 4), T(3, 5), T(5, 4))),
    ErrorCase("fft_r2c_complex", aten._fft_r2c.default, (T(4, dtype=c64), [0], 0, True)),
    ErrorCase("fft_r2c_half", aten._fft_r2c.default, (T(4, dtype=torch.float16), [0], 0, True)),
    ErrorCase("fft_r2c_int", aten._fft_r2c.default, (ints(4), [0], 0, True)),
    ErrorCase("fft_c2c_real", aten._fft_c2c.default, (T(4), [0], 0, True)),
    ErrorCase("fft_c2c_dim_range", aten._fft_c2c.default, (T(4, dtype=c64), [1], 0, True)),
    ErrorCase("fft_c2r_real", aten._fft_c2r.default, (T(4), [0], 0, 6)),
    ErrorCase("fft_c2r_bad_size", aten._fft_c2r.default, (T(4, dtype=c64), [0], 0, 20)),
    ErrorCase("cholesky_not_square", aten.linalg_cholesky_ex.default, (T(3, 4),)),
    ErrorCase("cholesky_int", aten.linalg_cholesky_ex.default, (ints(3, 3),)),
    ErrorCase("inv_half", aten.linalg_inv_ex.default, (T(3, 3, dtype=torch.float16),)),
    ErrorCase("inv_1d", aten.linalg_inv_ex.default, (T(3),)),
    ErrorCase("solve_mismatch", aten._linalg_solve_ex.default, (T(3, 3), T(4, 2))),
    ErrorCase("solve_right_vector", aten._linalg_solve_ex.default, (T(3, 3), T(3)), {"left": False}),
    ErrorCase("solve_dtype", aten._linalg_solve_ex.default, (T(3, 3), T(3, 2, dtype=f64))),
    ErrorCase("lu_factor_no_pivot", aten.linalg_lu_factor_ex.default, (T(3, 3),), {"pivot": False}),
    ErrorCase("lu_solve_mismatch", aten.linalg_lu_solve.default, (LU64, PIV64, T(2, 3, 2, dtype=f64))),
    ErrorCase("lu_unpack_int64_pivots", aten.lu_unpack.default, (LU64, PIV64.long())),
    ErrorCase("qr_bad_mode", aten.linalg_qr.default, (T(3, 3), "full")),
    ErrorCase("eigh_not_square", aten._linalg_eigh.default, (T(3, 4),)),
    ErrorCase("svd_int", aten._linalg_svd.default, (ints(3, 4),)),
    ErrorCase("det_not_square", aten._linalg_det.default, (T(2, 3),)),
    ErrorCase("slogdet_1d", aten._linalg_slogdet.default, (T(3),)),
    ErrorCase("householder_tall_tau", aten.linalg_householder_product.default, (T(4, 3), T(4))),
    ErrorCase("triangular_solve_mismatch", aten.triangular_solve.default, (T(3, 2), T(2, 2))),
    ErrorCase("solve_triangular_mismatch", aten.linalg_solve_triangular.default, (T(3, 3), T(2, 2)), {"upper": True}),
    ErrorCase("cross_not_3", aten.linalg_cross.default, (T(2, 2), T(2, 2))),
    ErrorCase("cross_dtype", aten.linalg_cross.default, (T(3), T(3, dtype=f64))),
    ErrorCase("matrix_exp_not_square", aten.linalg_matrix_exp.default, (T(2, 3),)),
    ErrorCase("trace_3d", aten.trace.default, (T(2, 2, 2),)),
    ErrorCase("trace_bool", aten.trace.default, (T(2, 2, dtype=torch.bool),)),
]


@pytest.mark.parametrize("case", ERROR_CASES, ids=lambda c: c.id)
def test_shape_fn_raises_like_cpu(case):
    assert_shape_fn_raises_like_cpu(case)


# ---------------------------------------------------------------------------- end to end


def _grads(fn, inputs, on_xla):
    # An op missing in backward aborts the process instead of raising (a runtime
    # limitation), so ops outside this family run on CPU here; ours are still checked.
    xnf.config.allow_cpu_fallback = True
    try:
        return _grads_inner(fn, inputs, on_xla)
    finally:
        xnf.config.allow_cpu_fallback = False


def _grads_inner(fn, inputs, on_xla):
    xs = [(xnf.to_xla(x) if on_xla else x).detach().requires_grad_(x.is_floating_point()) for x in inputs]
    out = fn(*xs)
    out.sum().backward()
    as_cpu = (lambda t: xnf.to_torch(t)) if on_xla else (lambda t: t)
    return as_cpu(out.detach()), [as_cpu(x.grad) if x.grad is not None else None for x in xs]


END_TO_END = [
    ("matmul_batched_broadcast", torch.matmul, ((2, 1, 3, 4), (3, 4, 5))),
    ("matmul_matrix_vector", torch.matmul, ((3, 4), (4,))),
    ("matmul_vector_vector", torch.matmul, ((4,), (4,))),
    ("linear", F.linear, ((2, 3, 4), (5, 4), (5,))),
    ("einsum_bmm", lambda a, b: torch.einsum("bij,bjk->bik", a, b), ((2, 3, 4), (2, 4, 5))),
    ("einsum_mv", lambda a, b: torch.einsum("ij,j->i", a, b), ((3, 4), (4,))),
    ("baddbmm", lambda s, a, b: torch.baddbmm(s, a, b, beta=0.5, alpha=2), ((2, 3, 5), (2, 3, 4), (2, 4, 5))),
    ("addr", lambda s, a, b: torch.addr(s, a, b), ((3, 4), (3,), (4,))),
    ("det", torch.linalg.det, ((2, 4, 4),)),
    ("fft_abs", lambda x: torch.fft.rfft(x).real, ((3, 8),)),
]


@pytest.mark.parametrize("name,fn,shapes", END_TO_END, ids=[e[0] for e in END_TO_END])
def test_forward_backward_matches_cpu(name, fn, shapes):
    inputs = [torch.randn(*s, dtype=f64) for s in shapes]
    if name == "det":
        inputs = [inputs[0] + 4 * torch.eye(4, dtype=f64)]
    expected = _grads(fn, inputs, on_xla=False)
    ours = _grads(fn, inputs, on_xla=True)
    torch.testing.assert_close(ours, expected)


def test_matmul_int64_exact():
    a = torch.randint(-(2**31), 2**31, (3, 4, 5))
    b = torch.randint(-(2**20), 2**20, (3, 5, 2))
    torch.testing.assert_close(xnf.to_torch(torch.matmul(xnf.to_xla(a), xnf.to_xla(b))), a @ b, rtol=0, atol=0)


def test_sdpa_forward_backward_matches_cpu():
    q, k, v = (torch.randn(2, 2, 3 + i, 4, dtype=f64) for i in (0, 2, 2))
    expected = _grads(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), [q, k, v], on_xla=False)
    ours = _grads(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), [q, k, v], on_xla=True)
    torch.testing.assert_close(ours, expected)


@pytest.mark.parametrize("dtype", [torch.float32, f64, torch.bfloat16])
@pytest.mark.parametrize("kv_heads", [4, 2])
@pytest.mark.parametrize("causal_and_mask", [(False, False), (True, False), (False, True), (True, True)])
def test_cpu_flash_attention_kernels_match_cpu(dtype, kv_heads, causal_and_mask):
    """The kernels AOTAutograd graphs of F.scaled_dot_product_attention call on CPU
    models: output, logsumexp and the three gradients, with grouped key/value heads, a
    causal mask (top-left aligned, more queries than keys), an additive mask with one
    fully masked row (output 0, logsumexp 0 on CPU) and an explicit scale."""
    causal, with_mask = causal_and_mask
    q = torch.randn(2, 4, 6, 8, dtype=dtype)
    k, v = (torch.randn(2, kv_heads, 5, 8, dtype=dtype) for _ in range(2))
    mask = None
    if with_mask:
        mask = torch.randn(6, 5, dtype=dtype)
        mask[1] = float("-inf")
    kw = {"scale": 0.3 if causal else None}
    out, lse = aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, attn_mask=mask, **kw)
    x_mask = None if mask is None else xnf.to_xla(mask)
    x_out, x_lse = aten._scaled_dot_product_flash_attention_for_cpu(
        *xnf.to_xla([q, k, v]), 0.0, causal, attn_mask=x_mask, **kw
    )
    tol = {"rtol": 2e-2, "atol": 2e-2} if dtype == torch.bfloat16 else {}
    assert_same(xnf.to_torch(x_out), out, **tol)
    assert_same(xnf.to_torch(x_lse), lse, **tol)
    grad = torch.randn_like(out)
    expected = aten._scaled_dot_product_flash_attention_for_cpu_backward(
        grad, q, k, v, out, lse, 0.0, causal, attn_mask=mask, **kw
    )
    ours = aten._scaled_dot_product_flash_attention_for_cpu_backward(
        *xnf.to_xla([grad, q, k, v, out, lse]), 0.0, causal, attn_mask=x_mask, **kw
    )
    for a, b in zip(ours, expected):
        assert_same(xnf.to_torch(a), b, **tol)


def test_cpu_flash_attention_errors_match_cpu():
    q, k = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)
    for args, kwargs in [
        ((q, k, torch.randn(1, 2, 3, 5)), {}),
        ((q, k, k, 0.5), {}),
        ((q, k, k), {"attn_mask": torch.ones(3, 3, dtype=torch.bool)}),
    ]:
        with pytest.raises(RuntimeError) as expected:
            aten._scaled_dot_product_flash_attention_for_cpu(*args, **kwargs)
        x_kwargs = {n: xnf.to_xla(t) for n, t in kwargs.items()}
        with pytest.raises(RuntimeError) as ours:
            aten._scaled_dot_product_flash_attention_for_cpu(*xnf.to_xla(list(args[:3])), *args[3:], **x_kwargs)
        assert str(ours.value) == str(expected.value)


def test_compiled_products_and_fft_match_cpu():
    a, b, s = torch.randn(2, 3, 4), torch.randn(2, 4, 5), torch.randn(2, 3, 5)

    def f(s, a, b):
        return torch.baddbmm(s, a, b, alpha=0.5), torch.fft.fft(a.to(torch.complex64), dim=-1)

    ours = xnf.compile(f)(*map(xnf.to_xla, (s, a, b)))
    torch.testing.assert_close([xnf.to_torch(o) for o in ours], list(f(s, a, b)), **TOL32)


def test_cholesky_info_on_failure():
    """info is the order of the first leading minor that is not positive definite; the
    factor of a failed matrix is unspecified (LAPACK leaves a partial one, we NaN)."""
    a = torch.tensor([[[4.0, 2.0], [2.0, 5.0]], [[1.0, 2.0], [2.0, 1.0]], [[-1.0, 0.0], [0.0, 1.0]]], dtype=f64)
    low, info = run_lowering(aten.linalg_cholesky_ex.default, (a,), {})
    expected_low, expected_info = aten.linalg_cholesky_ex(a)
    torch.testing.assert_close(info, expected_info)
    torch.testing.assert_close(low[0], expected_low[0])


def test_linalg_errors_raise_eagerly():
    singular = xnf.to_xla(torch.tensor([[1.0, 2.0], [2.0, 4.0]], dtype=f64))
    with pytest.raises(torch.linalg.LinAlgError):
        torch.linalg.inv(singular)
    with pytest.raises(torch.linalg.LinAlgError):
        torch.linalg.cholesky(xnf.to_xla(torch.tensor([[1.0, 2.0], [2.0, 1.0]])))
    inverse, info = torch.linalg.inv_ex(singular)
    assert int(xnf.to_torch(info)) == 2


def test_solve_and_eigh_on_xla_tensors():
    a = spd(2, dtype=f64)
    b = torch.randn(2, 4, 3, dtype=f64)
    x = torch.linalg.solve(xnf.to_xla(a), xnf.to_xla(b))
    torch.testing.assert_close(xnf.to_torch(x), torch.linalg.solve(a, b))
    w = torch.linalg.eigvalsh(xnf.to_xla(a))
    torch.testing.assert_close(xnf.to_torch(w), torch.linalg.eigvalsh(a))


# ---------------------------------------------------------------- grouped products (Note [Grouped matrix products])


def _offs(*ends):
    return torch.tensor(ends, dtype=torch.int32)


# PyTorch CPU's _grouped_mm refusals.
GROUPED_MM_ERRORS = {
    "float64": ((T(8, 4, dtype=torch.float64), T(3, 4, 8, dtype=torch.float64), _offs(2, 4, 8)), {}),
    "int32": ((T(8, 4, dtype=torch.int32), T(3, 4, 8, dtype=torch.int32), _offs(2, 4, 8)), {}),
    "4d": ((T(2, 3, 8, 4), T(3, 4, 8), _offs(2, 4, 8)), {}),
    "contraction": ((T(8, 4), T(3, 8, 8), _offs(2, 4, 8)), {}),
    "offsets_missing": ((T(8, 4), T(3, 4, 8)), {}),
    "offsets_with_3d_3d": ((T(3, 8, 4), T(3, 4, 8), _offs(2, 4, 8)), {}),
    "offsets_2d": ((T(8, 4), T(3, 4, 8), _offs(2, 4, 8).reshape(3, 1)), {}),
    "offsets_int64": ((T(8, 4), T(3, 4, 8), _offs(2, 4, 8).long()), {}),
    "bias": ((T(8, 4), T(3, 4, 8), _offs(2, 4, 8)), {"bias": T(3, 8)}),
    "out_dtype": ((T(8, 4), T(3, 4, 8), _offs(2, 4, 8)), {"out_dtype": torch.bfloat16}),
    "group_count": ((T(8, 4), T(3, 4, 8), _offs(2, 8)), {}),
    "group_count_3d_2d": ((T(2, 8, 4), T(4, 8), _offs(2, 4, 8)), {}),
    "batch_3d_3d": ((T(2, 8, 4), T(3, 4, 8)), {}),
    "mixed_dtypes": ((T(8, 4), T(3, 4, 8, dtype=torch.bfloat16), _offs(2, 4, 8)), {}),
    "mixed_dtypes_3d_3d": ((T(3, 8, 4), T(3, 4, 8, dtype=torch.bfloat16)), {}),
}


@pytest.mark.parametrize("name", sorted(GROUPED_MM_ERRORS))
def test_grouped_mm_errors_match_cpu_messages(name):
    args, kwargs = GROUPED_MM_ERRORS[name]
    with pytest.raises(RuntimeError) as expected:
        torch._grouped_mm(*args, **kwargs)
    on_xla = [xnf.to_xla(a) for a in args]
    with pytest.raises(RuntimeError) as ours:
        torch._grouped_mm(
            *on_xla, **{k: xnf.to_xla(v) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
        )
    assert str(ours.value) == str(expected.value)


GROUPED_LAYOUTS = {
    # experts' rows of tokens (mat_a 2-D, mat_b 3-D), as mixture-of-experts layers call it
    "2d_3d": ((12, 8), (3, 8, 4), (5, 5, 12)),
    "3d_2d": ((3, 4, 8), (8, 12), (4, 8, 12)),
    "2d_2d": ((4, 12), (12, 8), (0, 8, 12)),
    "3d_3d": ((3, 4, 8), (3, 8, 4), None),
}


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("layout", sorted(GROUPED_LAYOUTS))
def test_grouped_mm_forward_backward_matches_cpu(layout, mode):
    # PyTorch's own backward formula calls _grouped_mm in the other layouts, on views.
    a_shape, b_shape, ends = GROUPED_LAYOUTS[layout]
    a, b = torch.randn(*a_shape), torch.randn(*b_shape)
    offs = None if ends is None else torch.tensor(ends, dtype=torch.int32)
    weight = torch.randn(torch._grouped_mm(a, b, offs).shape)

    def step(a, b, offs, weight):
        a, b = a.detach().requires_grad_(), b.detach().requires_grad_()
        out = torch.nn.functional.grouped_mm(a, b, offs=offs)
        (out * weight).sum().backward()
        return out.detach(), a.grad, b.grad

    expected = step(a, b, offs, weight)
    run = xnf.compile(step) if mode == "compiled" else step
    ours = run(*[None if t is None else xnf.to_xla(t) for t in (a, b, offs, weight)])
    torch.testing.assert_close([xnf.to_torch(t) for t in ours], list(expected), **TOL32)


def _grouped_reference(a, b, offs, layout):
    """Note [Grouped matrix products]'s rule in plain PyTorch: group g is
    [offs[g-1], offs[g]); a later group's rows (columns) overwrite an earlier one's, each
    group of the contraction sums its own range, and the rest stays zero."""
    ends = offs.tolist()
    starts = [0] + ends[:-1]
    if layout == "2d_2d":
        out = torch.zeros(len(ends), a.shape[0], b.shape[1], dtype=torch.float64)
        for g, (s, e) in enumerate(zip(starts, ends)):
            out[g] = a[:, s:e].double() @ b[s:e].double()
        return out
    rows = layout == "2d_3d"
    out = torch.zeros(a.shape[0] if rows else a.shape[1], b.shape[-1], dtype=torch.float64)
    for g, (s, e) in enumerate(zip(starts, ends)):
        if rows:
            out[s:e] = a[s:e].double() @ b[g].double()
        else:
            out[:, s:e] = a[g].double() @ b[:, s:e].double()
    return out


# Sizes on both sides of the tiled loop's threshold (small: every group's full product).
GROUPED_SIZES = {
    "2d_3d_small": ("2d_3d", (20, 8), (4, 8, 8)),
    "2d_3d_tiled": ("2d_3d", (200, 64), (6, 64, 96)),
    "3d_2d_tiled": ("3d_2d", (6, 64, 96), (96, 200)),
    "2d_2d_small": ("2d_2d", (8, 20), (20, 8)),
    "2d_2d_tiled": ("2d_2d", (64, 200), (200, 96)),
}


@pytest.mark.parametrize(
    "ends", [(0, 37, 37, 90, 150, 180), (50, 20, 120, 120, 190, 200)], ids=["uneven_with_tail", "decreasing"]
)
@pytest.mark.parametrize("case", sorted(GROUPED_SIZES))
def test_grouped_mm_follows_its_rule(case, ends):
    layout, a_shape, b_shape = GROUPED_SIZES[case]
    groups = b_shape[0] if layout == "2d_3d" else a_shape[0] if layout == "3d_2d" else 6
    length = a_shape[0] if layout == "2d_3d" else b_shape[1] if layout == "3d_2d" else a_shape[1]
    offs = torch.tensor([min(e * length // 200, length) for e in ends][:groups], dtype=torch.int32)
    a, b = torch.randn(*a_shape), torch.randn(*b_shape)
    got = xnf.to_torch(torch._grouped_mm(*map(xnf.to_xla, (a, b, offs))))
    torch.testing.assert_close(got.double(), _grouped_reference(a, b, offs, layout), rtol=1e-4, atol=1e-4)


def test_grouped_mm_rows_outside_groups_and_other_experts():
    # Rows past the last offset are zeros (PyTorch leaves them unset), and one expert's
    # NaN weight stays out of the other experts' rows.
    a, b = torch.randn(6, 4), torch.randn(2, 4, 4)
    b[1, 0, 0] = float("nan")
    offs = torch.tensor([3, 5], dtype=torch.int32)
    ours = xnf.to_torch(torch._grouped_mm(*map(xnf.to_xla, (a, b, offs))))
    torch.testing.assert_close(ours[:3], a[:3] @ b[0], **TOL32)
    assert ours[3:5].isnan().any() and (a[3:5] @ b[1]).isnan().any()
    assert torch.equal(ours[5], torch.zeros(4))
