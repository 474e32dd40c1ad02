"""Reductions, sorting, scans, shape ops and random ops: lowerings against PyTorch CPU,
shape functions against meta, views and in-place/out= forms through the runtime, and
random ops by their statistics."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

import xla_native_functions as xnf
from lowering_harness import (
    assert_lowering_matches_cpu,
    assert_shape_fn_matches_meta,
    assert_shape_fn_raises_like_cpu,
    assert_signatures_match_schema,
    run_lowering,
    run_shape_fn,
    Case,
    ErrorCase,
    T,
    functions_in,
    as_meta,
    assert_same,
    ints,
    unambiguous_name,
)
from xla_native_functions.lowerings import cumulative as lower_cumulative
from xla_native_functions.lowerings import rearrange as lower_rearrange
from xla_native_functions.lowerings import sort as lower_sort
from xla_native_functions.lowerings import split as lower_split
from xla_native_functions.lowerings import statistics as lower_statistics
from xla_native_functions.shape_fns import cumulative as shape_cumulative
from xla_native_functions.shape_fns import rearrange as shape_rearrange
from xla_native_functions.shape_fns import sort as shape_sort
from xla_native_functions.shape_fns import split as shape_split
from xla_native_functions.shape_fns import statistics as shape_statistics

aten = torch.ops.aten

LOWERINGS = functions_in(
    [lower_statistics, lower_sort, lower_cumulative, lower_rearrange, lower_split], prefix="lower_"
)
SHAPE_FNS = functions_in([shape_statistics, shape_sort, shape_cumulative, shape_rearrange, shape_split],
                         suffix="_output_shape")


torch.manual_seed(0)
f23, f234, f0d, f0 = T(2, 3), T(2, 3, 4), T(), T(0, 3)
f64 = T(3, 4, dtype=torch.float64)
i23, i234 = ints(2, 3), ints(2, 3, 4)
b23 = T(2, 3, dtype=torch.bool)
u8 = ints(2, 3, low=0, high=3, dtype=torch.uint8)
nan = float("nan")
inf = float("inf")
nan_rows = torch.tensor([[1.0, nan, 3.0, 2.0, 0.5], [4.0, 1.0, 4.0, 0.0, 2.0], [nan, nan, nan, nan, nan]])
ties = torch.tensor([[1.0, 3.0, 3.0, 1.0, 2.0], [5.0, 5.0, 2.0, 2.0, 1.0]])
int_ties = torch.tensor([[2, 1, 2, 1, 3, 3], [0, 0, 0, 7, 7, 7]])
infs = torch.tensor([[float("inf"), 1.0, -float("inf")], [-float("inf"), -float("inf"), 2.0]])

CASES = [
    # minimum family
    Case("amin_all", aten.amin.default, (f23,)),
    Case("amin_dims_keepdim", aten.amin.default, (f234, [0, -1], True)),
    Case("amin_nan", aten.amin.default, (nan_rows, [1])),
    Case("amin_int", aten.amin.default, (i23, [1])),
    Case("amin_bool", aten.amin.default, (b23, [0])),
    Case("amin_0d", aten.amin.default, (f0d,)),
    Case("amin_empty_other_dim", aten.amin.default, (f0, [1])),
    Case("argmin_flat", aten.argmin.default, (f23,)),
    Case("argmin_dim_keepdim", aten.argmin.default, (f234, -1, True)),
    Case("argmin_flat_keepdim", aten.argmin.default, (f23, None, True)),
    Case("argmin_ties_nan", aten.argmin.default, (nan_rows, 1)),
    Case("argmin_int_ties", aten.argmin.default, (int_ties, 1)),
    Case("argmin_0d", aten.argmin.default, (f0d, 0)),
    Case("min_dim", aten.min.dim, (f234, 1)),
    Case("min_dim_keepdim_neg", aten.min.dim, (f234, -1, True)),
    Case("min_dim_nan", aten.min.dim, (nan_rows, 1)),
    Case("min_dim_int_ties", aten.min.dim, (int_ties, 1)),
    Case("min_dim_bool", aten.min.dim, (b23, 0)),
    Case("min_all", aten.min.default, (f23,)),
    Case("min_nan", aten.min.default, (nan_rows,)),
    Case("min_int", aten.min.default, (i23,)),
    Case("min_0d", aten.min.default, (f0d,)),
    Case("max_all", aten.max.default, (f234,)),
    Case("max_bool", aten.max.default, (b23,)),
    Case("max_nan", aten.max.default, (nan_rows,)),
    Case("aminmax_all", aten.aminmax.default, (f23,)),
    Case("aminmax_all_keepdim", aten.aminmax.default, (f234,), {"keepdim": True}),
    Case("aminmax_dim", aten.aminmax.default, (f234,), {"dim": -2}),
    Case("aminmax_dim_keepdim_int", aten.aminmax.default, (i23,), {"dim": 0, "keepdim": True}),
    Case("aminmax_0d", aten.aminmax.default, (f0d,)),
    # logical
    Case("any_f32", aten.any.default, (f23,)),
    Case("any_zeros", aten.any.default, (torch.zeros(2, 3),)),
    Case("any_uint8", aten.any.default, (u8,)),
    Case("any_empty", aten.any.default, (f0,)),
    Case("any_dim", aten.any.dim, (b23, 1)),
    Case("any_dim_keepdim_neg", aten.any.dim, (i234, -2, True)),
    Case("any_dims", aten.any.dims, (i234, [0, 2])),
    Case("any_dims_none_keepdim", aten.any.dims, (b23, None, True)),
    Case("any_dims_empty_list", aten.any.dims, (i23, [])),
    Case("any_nan", aten.any.dim, (nan_rows, 1)),
    # torch.distributions' argument validation
    Case("is_all_true", aten._is_all_true.default, (b23,)),
    Case("is_all_true_all", aten._is_all_true.default, (torch.ones(2, 3, dtype=torch.bool),)),
    Case("is_all_true_empty", aten._is_all_true.default, (torch.ones(0, dtype=torch.bool),)),
    Case("is_any_true", aten._is_any_true.default, (b23,)),
    Case("is_any_true_none", aten._is_any_true.default, (torch.zeros(2, 3, dtype=torch.bool),)),
    Case("is_any_true_empty", aten._is_any_true.default, (torch.ones(0, dtype=torch.bool),)),
    Case("all_f32", aten.all.default, (f23,)),
    Case("all_int", aten.all.default, (i23,)),
    Case("all_empty", aten.all.default, (f0,)),
    Case("all_0d", aten.all.default, (f0d,)),
    Case("all_dim", aten.all.dim, (b23, 0)),
    Case("all_dim_uint8", aten.all.dim, (u8, 1, True)),
    Case("all_dims", aten.all.dims, (i234, [1, -1])),
    Case("all_dims_none", aten.all.dims, (b23,)),
    # products and sums
    Case("prod_f32", aten.prod.default, (T(2, 3, low=0.5, high=1.5),)),
    Case("prod_int", aten.prod.default, (ints(2, 3, low=-3, high=4),)),
    Case("prod_bool", aten.prod.default, (b23,)),
    Case("prod_dtype", aten.prod.default, (i23,), {"dtype": torch.float64}),
    Case("prod_empty", aten.prod.default, (f0,)),
    Case("prod_dim", aten.prod.dim_int, (f234, 1)),
    Case("prod_dim_keepdim_neg", aten.prod.dim_int, (i234, -1, True)),
    Case("prod_dim_int32", aten.prod.dim_int, (ints(2, 3, dtype=torch.int32), 0)),
    Case("prod_dim_0d", aten.prod.dim_int, (f0d, 0)),
    Case("nansum_all", aten.nansum.default, (nan_rows,)),
    Case("nansum_dim_keepdim", aten.nansum.default, (nan_rows, [1], True)),
    Case("nansum_int", aten.nansum.default, (i23, [0])),
    Case("nansum_dtype", aten.nansum.default, (f23,), {"dtype": torch.float64}),
    Case("nansum_bool", aten.nansum.default, (b23,)),
    Case("count_nonzero", aten.count_nonzero.default, (i23,)),
    Case("count_nonzero_dim", aten.count_nonzero.default, (b23, -1)),
    Case("count_nonzero_nan", aten.count_nonzero.default, (nan_rows, 0)),
    Case("count_nonzero_dims", aten.count_nonzero.dim_IntList, (i234, [0, 2])),
    Case("count_nonzero_dims_empty", aten.count_nonzero.dim_IntList, (i234, [])),
    # variance family
    Case("std_default", aten.std.correction, (T(3, 4),)),
    Case("std_dim_keepdim", aten.std.correction, (f234, [1, 2]), {"keepdim": True}),
    Case("std_corr0_f64", aten.std.correction, (f64, [0]), {"correction": 0}),
    Case("std_complex", aten.std.correction, (T(3, 4, dtype=torch.complex64), [1])),
    Case("var_mean_default", aten.var_mean.correction, (T(3, 4),)),
    Case("var_mean_dim", aten.var_mean.correction, (f234, [-1]), {"correction": 2, "keepdim": True}),
    Case("var_mean_complex", aten.var_mean.correction, (T(4, dtype=torch.complex128),)),
    Case("std_mean_dim", aten.std_mean.correction, (f234, [0, 1])),
    Case("std_mean_f64", aten.std_mean.correction, (f64,), {"correction": 0.5}),
    # logsumexp and norms
    Case("logsumexp", aten.logsumexp.default, (f234, [1])),
    Case("logsumexp_keepdim_multi", aten.logsumexp.default, (f234, [0, 2], True)),
    Case("logsumexp_int", aten.logsumexp.default, (i23, [1])),
    Case("logsumexp_infs", aten.logsumexp.default, (infs, [1])),
    Case("logsumexp_large", aten.logsumexp.default, (torch.tensor([[1000.0, 1000.0], [-1000.0, 0.0]]), [1])),
    *(
        Case(f"vector_norm_{o}", aten.linalg_vector_norm.default, (T(3, 4, dtype=torch.float64), o))
        for o in (2, 1, 0, 3, 0.5, float("inf"), -float("inf"), -1)
    ),
    Case("vector_norm_dim_keepdim", aten.linalg_vector_norm.default, (f234, 2, [1, 2], True)),
    Case("vector_norm_dtype", aten.linalg_vector_norm.default, (f23, 2), {"dtype": torch.float64}),
    Case("vector_norm_complex", aten.linalg_vector_norm.default, (T(4, dtype=torch.complex64), 2)),
    Case("vector_norm_0d", aten.linalg_vector_norm.default, (f0d, 1)),
    Case("vector_norm_zeros", aten.linalg_vector_norm.default, (torch.zeros(3), 3)),
    Case("vector_norm_empty", aten.linalg_vector_norm.default, (f0, 2)),
    Case("vector_norm_overflows_like_cpu", aten.linalg_vector_norm.default, (torch.tensor([1e30, 1e30]), 3)),
    Case("norm_p", aten.norm.ScalarOpt_dim, (f234, 3, [1])),
    Case("norm_p_none_keepdim", aten.norm.ScalarOpt_dim, (f234, None, [0], True)),
    # sorting
    Case("sort", aten.sort.default, (f234,)),
    Case("sort_dim0_desc", aten.sort.default, (f234, 0, True)),
    Case("sort_nan", aten.sort.default, (nan_rows,)),
    Case("sort_nan_desc", aten.sort.default, (nan_rows, 1, True)),
    Case("sort_int_ties_stable", aten.sort.stable, (int_ties,), {"stable": True}),
    Case("sort_int_ties_stable_desc", aten.sort.stable, (int_ties,), {"stable": True, "descending": True}),
    Case("sort_bool_stable", aten.sort.stable, (b23,), {"stable": True, "dim": 0}),
    Case("sort_0d", aten.sort.default, (f0d,)),
    Case("sort_empty", aten.sort.default, (f0, 0)),
    Case("topk", aten.topk.default, (f234, 2)),
    Case("topk_smallest_dim0", aten.topk.default, (f234, 2, 0, False)),
    Case("topk_nan", aten.topk.default, (nan_rows[:2], 2)),
    Case("topk_int", aten.topk.default, (torch.tensor([[5, 1, 9, 3], [2, 8, 4, 6]]), 3)),
    Case("topk_zero", aten.topk.default, (f23, 0)),
    Case("topk_0d", aten.topk.default, (f0d, 1)),
    Case("kthvalue", aten.kthvalue.default, (f234, 2)),
    Case("kthvalue_dim_keepdim", aten.kthvalue.default, (f234, 2, 0, True)),
    Case("kthvalue_int", aten.kthvalue.default, (torch.tensor([[5, 1, 9, 3], [2, 8, 4, 6]]), 4)),
    Case("kthvalue_nan", aten.kthvalue.default, (torch.tensor([[1.0, nan, 0.0], [3.0, 2.0, 1.0]]), 3)),
    Case("kthvalue_0d", aten.kthvalue.default, (f0d, 1)),
    Case("median_odd", aten.median.default, (T(5),)),
    Case("median_even_lower", aten.median.default, (torch.tensor([4.0, 1.0, 3.0, 2.0]),)),
    Case("median_nan", aten.median.default, (nan_rows,)),
    Case("median_int", aten.median.default, (i23,)),
    Case("median_empty", aten.median.default, (f0,)),
    Case("median_0d", aten.median.default, (f0d,)),
    Case("median_dim", aten.median.dim, (T(3, 5), 1)),
    Case("median_dim_keepdim", aten.median.dim, (T(4, 3), 0, True)),
    Case("median_dim_nan_first_index", aten.median.dim, (nan_rows, 1)),
    Case("median_dim_0d", aten.median.dim, (f0d, 0)),
    Case("nanmedian", aten.nanmedian.default, (nan_rows,)),
    Case("nanmedian_all_nan", aten.nanmedian.default, (torch.full((3,), nan),)),
    Case("nanmedian_empty", aten.nanmedian.default, (f0,)),
    Case("nanmedian_dim", aten.nanmedian.dim, (nan_rows[:2], 1)),
    Case("nanmedian_dim_keepdim", aten.nanmedian.dim, (T(4, 3), -1, True)),
    Case("mode", aten.mode.default, (ties,)),
    Case("mode_int_keepdim", aten.mode.default, (int_ties, 1, True)),
    Case("mode_dim0", aten.mode.default, (torch.tensor([[1, 2], [1, 3], [2, 3]]), 0)),
    Case("mode_0d", aten.mode.default, (f0d,)),
    # scans
    Case("cumsum", aten.cumsum.default, (f234, 1)),
    Case("cumsum_neg", aten.cumsum.default, (f234, -1)),
    Case("cumsum_int", aten.cumsum.default, (i23, 1)),
    Case("cumsum_bool", aten.cumsum.default, (b23, 0)),
    Case("cumsum_int32", aten.cumsum.default, (ints(2, 3, dtype=torch.int32), 1)),
    Case("cumsum_dtype", aten.cumsum.default, (i23, 1), {"dtype": torch.float64}),
    Case("cumsum_0d", aten.cumsum.default, (f0d, 0)),
    Case("cumsum_empty", aten.cumsum.default, (f0, 0)),
    Case("cumprod", aten.cumprod.default, (T(2, 5, low=0.5, high=1.5), 1)),
    Case("cumprod_int", aten.cumprod.default, (ints(2, 4, low=-3, high=4), 1)),
    Case("cumprod_bool_dtype", aten.cumprod.default, (b23, 1), {"dtype": torch.float32}),
    Case("cummax", aten.cummax.default, (f234, 2)),
    Case("cummax_ties_nan", aten.cummax.default, (torch.tensor([1.0, 3.0, 3.0, nan, 2.0, nan, 5.0]), 0)),
    Case("cummax_int_ties", aten.cummax.default, (int_ties, 1)),
    Case("cummax_bool", aten.cummax.default, (b23, 1)),
    Case("cummax_0d", aten.cummax.default, (f0d, 0)),
    Case("cummin", aten.cummin.default, (f234, 0)),
    Case("cummin_ties_nan", aten.cummin.default, (torch.tensor([3.0, 1.0, 1.0, nan, 0.0, nan]), 0)),
    Case("cummin_int_ties", aten.cummin.default, (int_ties, -1)),
    Case("logcumsumexp", aten.logcumsumexp.default, (f234, 1)),
    Case("logcumsumexp_infs", aten.logcumsumexp.default, (infs, 1)),
    Case("logcumsumexp_f64", aten.logcumsumexp.default, (f64, 0)),
    Case("logcumsumexp_0d", aten.logcumsumexp.default, (f0d, 0)),
    # PyTorch accumulates complex values one by one: imaginary parts are not wrapped
    Case("logcumsumexp_complex", aten.logcumsumexp.default, (T(4, 6, 5, dtype=torch.complex64) * 3, 1)),
    Case("logcumsumexp_complex_ties_infs_nan", aten.logcumsumexp.default, (torch.tensor(
        [-inf + 1j, 1 + 2j, 1 - 2j, inf, inf + 1j, nan, 2], dtype=torch.complex128), 0)),
    # rearranging
    Case("flip", aten.flip.default, (f234, [0, 2])),
    Case("flip_neg", aten.flip.default, (i23, [-1])),
    Case("flip_none", aten.flip.default, (f23, [])),
    Case("flip_0d", aten.flip.default, (f0d, [0])),
    Case("repeat", aten.repeat.default, (f23, [2, 3])),
    Case("repeat_new_dims", aten.repeat.default, (T(3), [2, 1, 2])),
    Case("repeat_zero", aten.repeat.default, (b23, [0, 2])),
    Case("repeat_0d", aten.repeat.default, (f0d, [3])),
    Case("roll_flat", aten.roll.default, (f23, [2])),
    Case("roll_dims", aten.roll.default, (f234, [1, -5], [0, 2])),
    Case("roll_neg_dim", aten.roll.default, (i23, [4], [-1])),
    Case("roll_empty", aten.roll.default, (f0, [1], [0])),
    Case("tril", aten.tril.default, (T(4, 5),)),
    Case("tril_batched_offset", aten.tril.default, (T(2, 3, 4), -1)),
    Case("tril_bool", aten.tril.default, (T(3, 3, dtype=torch.bool), 1)),
    Case("triu", aten.triu.default, (T(4, 5),)),
    Case("triu_offset", aten.triu.default, (ints(2, 4, 3), 2)),
    Case("narrow_copy", aten.narrow_copy.default, (f234, 1, 1, 2)),
    Case("narrow_copy_neg_start", aten.narrow_copy.default, (f234, -1, -3, 2)),
    Case("narrow_copy_empty", aten.narrow_copy.default, (i23, 0, 2, 0)),
    Case("diag_embed", aten.diag_embed.default, (f23,)),
    Case("diag_embed_offset", aten.diag_embed.default, (f23, 1)),
    Case("diag_embed_neg_offset_dims", aten.diag_embed.default, (i23, -2, 0, 2)),
    Case("diag_embed_dims_swapped", aten.diag_embed.default, (f234, 0, -1, 0)),
    Case("expand_copy", aten.expand_copy.default, (T(3, 1), [2, 3, 4])),
    Case("stack", aten.stack.default, ([f23, f23 * 2],)),
    Case("stack_neg_dim_promote", aten.stack.default, ([i23, f23], -1)),
    Case("stack_0d", aten.stack.default, ([f0d, f0d],)),
    # views (values; aliasing is tested through the runtime below)
    Case("squeeze", aten.squeeze.default, (T(1, 3, 1, 2),)),
    Case("squeeze_0d", aten.squeeze.default, (f0d,)),
    Case("squeeze_dims", aten.squeeze.dims, (T(1, 3, 1, 2), [0, -2])),
    Case("squeeze_dims_not_one", aten.squeeze.dims, (T(1, 3, 1), [1, 2])),
    Case("squeeze_dims_0d", aten.squeeze.dims, (f0d, [0])),
    Case("as_strided", aten.as_strided.default, (T(4, 4), [3, 3], [4, 1])),
    Case("as_strided_offset_overlap", aten.as_strided.default, (T(10), [3, 2], [1, 1], 2)),
    Case("as_strided_broadcast", aten.as_strided.default, (T(3), [2, 3], [0, 1])),
    Case("as_strided_empty", aten.as_strided.default, (T(3), [0, 2], [1, 1])),
    Case("diagonal", aten.diagonal.default, (T(3, 4),)),
    Case("diagonal_offset", aten.diagonal.default, (T(3, 4), 1)),
    Case("diagonal_neg_offset_dims", aten.diagonal.default, (f234, -1, 2, 0)),
    Case("diagonal_offset_past_end", aten.diagonal.default, (T(3, 4), 5)),
    Case("unfold", aten.unfold.default, (f234, 2, 2, 1)),
    Case("unfold_step", aten.unfold.default, (T(7), 0, 3, 2)),
    Case("unfold_neg_dim", aten.unfold.default, (f234, -2, 3, 3)),
    Case("unfold_0d", aten.unfold.default, (f0d, 0, 1, 1)),
    # several results
    Case("split_Tensor", aten.split.Tensor, (T(5, 2), 2)),
    Case("split_Tensor_dim", aten.split.Tensor, (f234, 3, -1)),
    Case("split_with_sizes", aten.split_with_sizes.default, (T(6, 2), [1, 2, 3])),
    Case("split_with_sizes_zero", aten.split_with_sizes.default, (f234, [0, 3, 1], 2)),
    Case("unsafe_split", aten.unsafe_split.Tensor, (T(5, 2), 2)),
    Case("unbind", aten.unbind.int, (f234,)),
    Case("unbind_neg", aten.unbind.int, (i23, -1)),
]

# kthvalue's and mode's indices on ties are whatever PyTorch's selection algorithm
# happens to give; their cases above have no ties, and the tie cases are below.


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_lowering_matches_cpu(case):
    assert_lowering_matches_cpu(case)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_shape_fn_matches_meta(case):
    assert_shape_fn_matches_meta(case)


VIEW_BACKWARD = {"select_backward", "slice_backward", "diagonal_backward", "unfold_backward"}


def test_every_op_is_covered():
    tested = {unambiguous_name(c.op) for c in CASES} | VIEW_BACKWARD
    assert {f"lower_{n}" for n in tested} == set(LOWERINGS)
    assert {f"{n}_output_shape" for n in tested} == set(SHAPE_FNS)


OPS = {unambiguous_name(c.op): c.op for c in CASES}


@pytest.mark.parametrize("name", sorted(OPS))
def test_signatures_match(name):
    assert_signatures_match_schema(name, OPS[name], LOWERINGS, SHAPE_FNS, check_defaults=False)


@pytest.mark.parametrize(
    "op,args",
    [
        (aten.kthvalue.default, (ties, 2)),
        (aten.kthvalue.default, (int_ties, 3, 1, True)),
        (aten.mode.default, (ints(4, 300, low=0, high=6),)),
        (aten.topk.default, (int_ties, 4)),
        (aten.sort.default, (int_ties, -1, True)),
    ],
    ids=["kthvalue_ties", "kthvalue_int_ties", "mode_many_ties", "topk_ties", "sort_ties"],
)
def test_tied_selection_returns_valid_index(op, args):
    """With ties PyTorch's index is not unique: values must match, and each index must
    point at its value."""
    values, indices = op(*args)
    ours_values, ours_indices = run_lowering(op, args, {})
    torch.testing.assert_close(ours_values, values, equal_nan=True)
    dim = args[2] if op is aten.kthvalue.default and len(args) > 2 else -1
    gathered = torch.gather(
        args[0], dim, ours_indices if ours_indices.dim() == args[0].dim() else ours_indices.unsqueeze(dim)
    )
    torch.testing.assert_close(gathered.reshape(ours_values.shape), ours_values, equal_nan=True)


# ---------------------------------------------------------------------------- errors

ERROR_CASES = [
    ErrorCase("amin_empty_dim", aten.amin.default, (f0, [0])),
    ErrorCase("amin_duplicate_dims", aten.amin.default, (f23, [1, -1])),
    ErrorCase("argmin_empty", aten.argmin.default, (f0,)),
    ErrorCase("argmin_bool", aten.argmin.default, (b23, 1)),
    ErrorCase("is_all_true_not_bool", aten._is_all_true.default, (i23,)),
    ErrorCase("min_dim_empty", aten.min.dim, (f0, 0)),
    ErrorCase("min_empty", aten.min.default, (f0,)),
    ErrorCase("max_empty", aten.max.default, (f0,)),
    ErrorCase("aminmax_empty", aten.aminmax.default, (f0,)),
    ErrorCase("aminmax_empty_dim", aten.aminmax.default, (f0,), {"dim": 0}),
    ErrorCase("any_bad_dim", aten.any.dim, (f23, 2)),
    ErrorCase("std_int", aten.std.correction, (i23,)),
    ErrorCase("var_mean_bool", aten.var_mean.correction, (b23,)),
    ErrorCase("vector_norm_int", aten.linalg_vector_norm.default, (i23,)),
    ErrorCase("vector_norm_inf_empty", aten.linalg_vector_norm.default, (f0, float("inf"))),
    ErrorCase("vector_norm_int_dtype", aten.linalg_vector_norm.default, (f23, 2), {"dtype": torch.int64}),
    ErrorCase("norm_int", aten.norm.ScalarOpt_dim, (i23, 2, [0])),
    ErrorCase("nansum_complex", aten.nansum.default, (T(3, dtype=torch.complex64),)),
    ErrorCase("sort_bad_dim", aten.sort.default, (f23, 2)),
    ErrorCase("topk_k_too_big", aten.topk.default, (f23, 4)),
    ErrorCase("topk_k_negative", aten.topk.default, (f23, -1)),
    ErrorCase("kthvalue_k_zero", aten.kthvalue.default, (f23, 0)),
    ErrorCase("kthvalue_k_too_big", aten.kthvalue.default, (f23, 4)),
    ErrorCase("median_dim_empty", aten.median.dim, (f0, 0)),
    ErrorCase("nanmedian_dim_empty", aten.nanmedian.dim, (f0, 0)),
    ErrorCase("mode_bad_dim", aten.mode.default, (f23, 3)),
    ErrorCase("cumsum_bad_dim", aten.cumsum.default, (f23, 2)),
    ErrorCase("cummax_bad_dim", aten.cummax.default, (f23, -3)),
    ErrorCase("logcumsumexp_int", aten.logcumsumexp.default, (i23, 0)),
    ErrorCase("flip_duplicate", aten.flip.default, (f23, [0, -2])),
    ErrorCase("repeat_too_few", aten.repeat.default, (f234, [2, 2])),
    ErrorCase("repeat_negative", aten.repeat.default, (f23, [1, -1])),
    ErrorCase("roll_mismatch", aten.roll.default, (f23, [1, 2], [0])),
    ErrorCase("roll_no_shifts", aten.roll.default, (f23, [])),
    ErrorCase("tril_1d", aten.tril.default, (T(3),)),
    ErrorCase("triu_0d", aten.triu.default, (f0d,)),
    ErrorCase("narrow_copy_too_long", aten.narrow_copy.default, (f23, 1, 2, 2)),
    ErrorCase("narrow_copy_bad_start", aten.narrow_copy.default, (f23, 1, 4, 0)),
    ErrorCase("diag_embed_same_dims", aten.diag_embed.default, (f23, 0, 1, 1)),
    ErrorCase("stack_mismatch", aten.stack.default, ([f23, T(3, 2)],)),
    ErrorCase("stack_empty", aten.stack.default, ([],)),
    ErrorCase("squeeze_dims_bad_dim", aten.squeeze.dims, (f23, [2])),
    ErrorCase("as_strided_length_mismatch", aten.as_strided.default, (f23, [2, 3], [1])),
    ErrorCase("as_strided_negative_stride", aten.as_strided.default, (f23, [2], [-1])),
    ErrorCase("diagonal_same_dims", aten.diagonal.default, (f23, 0, 1, -1)),
    ErrorCase("unfold_too_big", aten.unfold.default, (f23, 1, 4, 1)),
    ErrorCase("unfold_zero_step", aten.unfold.default, (f23, 1, 2, 0)),
    ErrorCase("split_with_sizes_bad_sum", aten.split_with_sizes.default, (f23, [1, 2])),
    ErrorCase("split_with_sizes_negative", aten.split_with_sizes.default, (f23, [3, -1])),
    ErrorCase("unbind_0d", aten.unbind.int, (f0d,)),
]


@pytest.mark.parametrize("case", ERROR_CASES, ids=lambda c: c.id)
def test_shape_fn_raises_like_cpu(case):
    assert_shape_fn_raises_like_cpu(case)


# ---------------------------------------------------------------------------- runtime

cpu = xnf.to_torch
dev = xnf.to_xla


def test_public_functions_match_cpu_eagerly_and_compiled():
    x = torch.randn(3, 5)
    fns = [
        lambda t: t.amin(1) + t.sum(),
        lambda t: (t > 0).any(dim=1).int() + (t > 0).all(dim=1).int(),
        lambda t: t.sort(dim=1, descending=True).values * 2,
        lambda t: t.topk(2).values + t.cumsum(1)[:, :2],
        lambda t: t.flip(0).repeat(2, 1),
        lambda t: t.std(1) + t.var(1, unbiased=False) + torch.logsumexp(t, 1),
        lambda t: t.median(dim=1).values + t.kthvalue(2, dim=1).values,
        lambda t: torch.linalg.vector_norm(t, 3, dim=1) + t.norm(dim=1),
        lambda t: t.tril().roll(1, 0).diagonal(),
        lambda t: torch.stack(t.unbind(1), 0).cummax(0).values,
    ]
    for fn in fns:
        expected = fn(x)
        torch.testing.assert_close(cpu(fn(dev(x))), expected)
        torch.testing.assert_close(cpu(xnf.compile(fn)(dev(x))), expected)


def test_views_alias_their_base():
    base = dev(torch.zeros(3, 4))
    base.diagonal().fill_(1.0)
    base.as_strided((2,), (5,), 1).fill_(2.0)
    a, b = base.split_with_sizes([1, 3], 1)
    b[0].fill_(3.0)
    base.unbind(0)[2].fill_(4.0)
    base.unsqueeze(0).squeeze((0,))[1, 0] = 5.0
    expected = torch.zeros(3, 4)
    expected.diagonal().fill_(1.0)
    expected.as_strided((2,), (5,), 1).fill_(2.0)
    expected.split_with_sizes([1, 3], 1)[1][0].fill_(3.0)
    expected.unbind(0)[2].fill_(4.0)
    expected[1, 0] = 5.0
    torch.testing.assert_close(cpu(base), expected)
    unfolded = base.unfold(1, 2, 2)
    torch.testing.assert_close(cpu(unfolded), expected.unfold(1, 2, 2))


def test_inplace_and_out_forms():
    x = torch.randn(3, 4)
    ours = dev(x.clone())
    ours.cumsum_(1)
    torch.testing.assert_close(cpu(ours), x.cumsum(1))
    values, indices = dev(torch.empty(3, 4)), dev(torch.empty(3, 4, dtype=torch.int64))
    torch.sort(dev(x), 1, out=(values, indices))
    torch.testing.assert_close((cpu(values), cpu(indices)), tuple(torch.sort(x, 1)))
    out = dev(torch.empty(3, dtype=torch.bool))
    torch.any(dev(x) > 1, 1, out=out)
    torch.testing.assert_close(cpu(out), torch.any(x > 1, 1))
    ours = dev(x.clone())
    ours.tril_(-1)
    torch.testing.assert_close(cpu(ours), x.tril(-1))


STRICT_BACKWARD = {
    "amin": lambda t: t.amin(1).sum(),
    "prod": lambda t: t.prod(1).sum(),
    "cumsum": lambda t: (t.cumsum(1) * t).sum(),
    "flip_repeat": lambda t: (t.flip(0).repeat(2, 1)[0] ** 2).sum(),
    "logsumexp": lambda t: t.logsumexp(1).sum(),
    "diagonal": lambda t: (t.diagonal(1) ** 2).sum(),
    "unfold": lambda t: (t.unfold(1, 2, 1) ** 2).sum(),
    "tril_roll": lambda t: (t.tril().roll(1, 0) ** 2).sum(),
    "narrow": lambda t: (t[:, 1:4:2] ** 2).sum(),
}
# Their backward also needs scatter.src (sort, topk, median, min.dim) or masked_fill_
# (std, vector_norm), lowered by the indexing family; until then they run those two on CPU.
BACKWARD_WITH_INDEXING = {
    "std": lambda t: t.std(0).sum(),
    "sort": lambda t: (t.sort(1).values[:, 0] ** 2).sum(),
    "topk": lambda t: (t.topk(2).values ** 2).sum(),
    "median": lambda t: (t.median(1).values ** 2).sum(),
    "min_dim": lambda t: (t.min(1).values ** 2).sum(),
    "vector_norm": lambda t: torch.linalg.vector_norm(t, 2, 1).sum(),
}


def _check_grad(loss):
    x = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    (expected,) = torch.autograd.grad(loss(x), x)
    ours_x = dev(x.detach()).requires_grad_()
    (ours,) = torch.autograd.grad(loss(ours_x), ours_x)
    torch.testing.assert_close(cpu(ours), expected)


@pytest.mark.parametrize("name", sorted(STRICT_BACKWARD))
def test_backward_dispatches_only_listed_ops(name):
    assert not xnf.config.allow_cpu_fallback
    _check_grad(STRICT_BACKWARD[name])


@pytest.mark.parametrize("name", sorted(BACKWARD_WITH_INDEXING))
def test_backward_values(name, monkeypatch):
    monkeypatch.setattr(xnf.config, "allow_cpu_fallback", True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _check_grad(BACKWARD_WITH_INDEXING[name])


def test_sym_size_ops_never_reach_the_backend():
    """sym_size.int, sym_stride.int, sym_numel, sym_storage_offset and sym_is_contiguous
    are CompositeImplicitAutograd: a wrapper subclass answers them from its own metadata
    without dispatching, so they cannot be manifest entries."""
    calls_before = dict(xnf.runtime.platform.metrics.metrics.op_calls)
    x = dev(torch.zeros(3, 4)).t()
    assert torch.ops.aten.sym_size.int(x, 0) == 4
    assert torch.ops.aten.sym_stride.int(x, 0) == 1
    assert torch.ops.aten.sym_numel(x) == 12
    assert torch.ops.aten.sym_storage_offset(x) == 0
    assert torch.ops.aten.sym_is_contiguous(x) is False
    calls_after = dict(xnf.runtime.platform.metrics.metrics.op_calls)
    assert {str(k) for k in calls_after if calls_after[k] != calls_before.get(k)} <= {"aten.t.default"}


# ---------------------------------------------------------------------------- random

N = 20000


def _stats(t):
    t = cpu(t).double()
    return t.mean().item(), t.var().item()


def _xla_zeros(n=N, dtype=torch.float32):
    return dev(torch.zeros(n, dtype=dtype))


@pytest.mark.parametrize(
    "name,draw,mean,var",
    [
        ("uniform", lambda t: t.uniform_(2.0, 4.0), 3.0, 4 / 12),
        ("normal", lambda t: t.normal_(1.0, 2.0), 1.0, 4.0),
        ("exponential", lambda t: t.exponential_(2.0), 0.5, 0.25),
        ("geometric", lambda t: t.geometric_(0.25), 4.0, 0.75 / 0.0625),
        ("log_normal", lambda t: t.log_normal_(0.0, 0.5), math.exp(0.125), (math.exp(0.25) - 1) * math.exp(0.25)),
        ("bernoulli_float", lambda t: t.bernoulli_(0.3), 0.3, 0.21),
        ("bernoulli_tensor", lambda t: t.bernoulli_(dev(torch.full((N,), 0.7))), 0.7, 0.21),
        ("bernoulli", lambda t: torch.bernoulli(dev(torch.full((N,), 0.2))), 0.2, 0.16),
        ("random_to", lambda t: t.random_(10), 4.5, 99 / 12),
        ("rand_like", lambda t: torch.rand_like(t), 0.5, 1 / 12),
        ("randn_like", lambda t: torch.randn_like(t), 0.0, 1.0),
        ("randint_like", lambda t: torch.randint_like(t, 3, 9), 5.5, 35 / 12),
        ("normal_tensor_float", lambda t: torch.normal(dev(torch.full((N,), 3.0)), 0.5), 3.0, 0.25),
        ("normal_float_tensor", lambda t: torch.normal(-1.0, dev(torch.full((N,), 2.0))), -1.0, 4.0),
        ("normal_tensor_tensor", lambda t: torch.normal(dev(torch.zeros(N)), dev(torch.full((N,), 3.0))), 0.0, 9.0),
    ],
)
def test_distribution_statistics(name, draw, mean, var):
    torch.manual_seed(0)
    out = draw(_xla_zeros())
    assert out.shape == (N,) and out.dtype is torch.float32
    m, v = _stats(out)
    assert abs(m - mean) < 5 * math.sqrt(var / N) + 1e-3, (m, mean)
    assert abs(v - var) < 0.1 * var, (v, var)


def test_cauchy_median_and_spread():
    torch.manual_seed(0)
    out = cpu(_xla_zeros().cauchy_(1.0, 2.0))
    assert abs(out.median().item() - 1.0) < 0.1
    q1, q3 = out.quantile(torch.tensor([0.25, 0.75])).tolist()
    assert abs((q3 - q1) - 4.0) < 0.3  # the interquartile range of Cauchy(m, s) is 2s


def test_random_integer_ranges_and_dtypes():
    torch.manual_seed(0)
    device = dev(torch.zeros(1)).device
    r = cpu(torch.randint(3, 7, (N,), device=device))
    assert r.dtype is torch.int64 and r.min() == 3 and r.max() == 6
    r = cpu(torch.randint(5, (2, 3), device=device, dtype=torch.float32))
    assert r.dtype is torch.float32 and r.shape == (2, 3)
    full = cpu(_xla_zeros(N, torch.float32).random_())
    assert full.min() >= 0 and full.max() <= 2**24 and full.max() > 2**23
    big = cpu(_xla_zeros(N, torch.int64).random_())
    assert big.min() >= 0 and big.max() > 2**62
    assert set(cpu(_xla_zeros(1000, torch.bool).random_()).tolist()) == {False, True}
    p = cpu(torch.randperm(50, device=device))
    assert p.dtype is torch.int64 and sorted(p.tolist()) == list(range(50))
    assert cpu(torch.randperm(5, device=device, dtype=torch.float64)).dtype is torch.float64
    n = cpu(torch.normal(2.0, 3.0, (4, 5), device=device))
    assert n.shape == (4, 5) and n.dtype is torch.float32


def test_multinomial():
    torch.manual_seed(0)
    probs = torch.tensor([[0.1, 0.0, 0.9], [0.5, 0.5, 0.0]])
    draws = cpu(torch.multinomial(dev(probs), N, replacement=True))
    assert draws.shape == (2, N) and draws.dtype is torch.int64
    freq = torch.stack([torch.bincount(row, minlength=3) for row in draws]).double() / N
    torch.testing.assert_close(freq, probs.double(), atol=0.02, rtol=0)
    unique = cpu(torch.multinomial(dev(torch.ones(3, 6)), 6))
    assert all(sorted(row) == list(range(6)) for row in unique.tolist())
    never_zero = cpu(torch.multinomial(dev(probs), 2))
    assert not (never_zero[0] == 1).any() and not (never_zero[1] == 2).any()
    with pytest.raises(RuntimeError):
        torch.multinomial(dev(probs), 4)


@pytest.mark.parametrize(
    "draw",
    [
        lambda: _xla_zeros(100).uniform_(),
        lambda: _xla_zeros(100).normal_(),
        lambda: _xla_zeros(100).bernoulli_(0.5),
        lambda: _xla_zeros(100).exponential_(),
        lambda: torch.randperm(100, device=dev(torch.zeros(1)).device),
        lambda: torch.multinomial(dev(torch.ones(100)), 10),
    ],
    ids=["uniform", "normal", "bernoulli", "exponential", "randperm", "multinomial"],
)
def test_seed_governs_random_ops(draw):
    torch.manual_seed(7)
    a = cpu(draw())
    torch.manual_seed(7)
    b = cpu(draw())
    c = cpu(draw())
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    g = torch.Generator().manual_seed(3)
    x = cpu(_xla_zeros(100).uniform_(generator=g))
    g.manual_seed(3)
    assert torch.equal(x, cpu(_xla_zeros(100).uniform_(generator=g)))


def test_random_argument_errors():
    with pytest.raises(RuntimeError):
        _xla_zeros(3).uniform_(2.0, 1.0)
    with pytest.raises(RuntimeError):
        _xla_zeros(3).normal_(0.0, -1.0)
    with pytest.raises(RuntimeError):
        _xla_zeros(3).bernoulli_(1.5)
    with pytest.raises(RuntimeError):
        _xla_zeros(3).geometric_(0.0)
    with pytest.raises(RuntimeError):
        _xla_zeros(3).random_(0)


def test_tril_triu_indices():
    device = dev(torch.zeros(1)).device
    for args in [(3, 3), (4, 3, 1), (3, 5, -1), (0, 2)]:
        torch.testing.assert_close(cpu(torch.tril_indices(*args, device=device)), torch.tril_indices(*args))
        torch.testing.assert_close(cpu(torch.triu_indices(*args, device=device)), torch.triu_indices(*args))


@pytest.mark.parametrize(
    "op,args",
    [
        (aten.select_backward.default, (T(2, 4), [2, 3, 4], 1, -1)),
        (aten.slice_backward.default, (T(2, 2, 4), [2, 5, 4], 1, 1, 5, 2)),
        (aten.diagonal_backward.default, (T(2, 3), [3, 2, 4], 1, 0, 2)),
        (aten.diagonal_backward.default, (T(2, 3), [2, 3, 4], -1, -1, 1)),
        (aten.unfold_backward.default, (T(2, 2, 4, 3), [2, 7, 4], 1, 3, 2)),
        (aten.unfold_backward.default, (T(1), [], 0, 1, 1)),
    ],
    ids=["select", "slice", "diagonal", "diagonal_neg", "unfold", "unfold_0d"],
)
def test_view_backward_lowerings(op, args):
    assert_same(run_lowering(op, args, {}), op(*args))
    assert run_shape_fn(op, args, {}) == as_meta(op(*args))


# Ops that order values: PyTorch CPU refuses complex inputs (they have no order), and
# some bool ones, each with its own error; ours raise the same, eagerly and compiled.
_aten = torch.ops.aten
ORDERING_OPS = {
    "max": lambda a: _aten.max(a), "min": lambda a: _aten.min(a), "max.dim": lambda a: _aten.max.dim(a, 0),
    "min.dim": lambda a: _aten.min.dim(a, 0), "amax": lambda a: _aten.amax(a, [0]),
    "amin": lambda a: _aten.amin(a, [0]),
    "aminmax": lambda a: _aten.aminmax(a), "argmax": lambda a: _aten.argmax(a), "argmin": lambda a: _aten.argmin(a),
    "topk": lambda a: _aten.topk(a, 1), "sort": lambda a: _aten.sort(a), "kthvalue": lambda a: _aten.kthvalue(a, 1),
    "median": lambda a: _aten.median(a), "median.dim": lambda a: _aten.median.dim(a, 0),
    "nanmedian": lambda a: _aten.nanmedian(a), "mode": lambda a: _aten.mode(a), "cummax": lambda a: _aten.cummax(a, 0),
    "cummin": lambda a: _aten.cummin(a, 0), "maximum": lambda a: _aten.maximum(a, a),
    "max.other": lambda a: torch.max(a, a), "fmin": lambda a: _aten.fmin(a, a), "clamp": lambda a: _aten.clamp(a, 0, 1),
    "clamp.Tensor": lambda a: _aten.clamp.Tensor(a, a, a),
    "clamp_min": lambda a: _aten.clamp_min(a, 0), "clamp_max.Tensor": lambda a: _aten.clamp_max.Tensor(a, a),
    "lt": lambda a: _aten.lt.Tensor(a, a), "ge.Scalar": lambda a: _aten.ge.Scalar(a, 0),
    "unique": lambda a: torch.unique(a), "unique_consecutive": lambda a: torch.unique_consecutive(a),
    "unique dim": lambda a: torch.unique(a, dim=0), "searchsorted": lambda a: torch.searchsorted(a.reshape(-1), a),
}


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("dtype", [torch.complex64, torch.bool], ids=str)
def test_ordering_ops_refuse_what_pytorch_cpu_refuses(dtype, mode):
    torch.manual_seed(0)
    x = torch.randn(3, 3, dtype=dtype) if dtype.is_complex else torch.rand(3, 3) > 0.5
    refused = 0
    for name, fn in ORDERING_OPS.items():
        try:
            fn(x)
        except Exception as expected:
            refused += 1
            run = fn if mode == "eager" else xnf.compile(fn)
            with pytest.raises(type(expected)) as ours:
                run(xnf.to_xla(x))
            assert str(ours.value).strip() == str(expected).strip(), name
    assert refused >= (25 if dtype.is_complex else 5)
