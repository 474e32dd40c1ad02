"""Data-dependent, histogram and search ops against PyTorch CPU.

The `supported` ops (unique family, bincount, repeat_interleave.Tensor, equal,
allclose) read their inputs on the host and run on our tensors, eagerly and compiled.
The full_codegen ones (histograms, segment_reduce, index_reduce, scatter with a
reduce, masked index, searchsorted with a scalar, isin, nonzero_static, hash_tensor)
run their lowerings under jax.jit as the runtime does (test_lowerings' harness), and
their shape functions are compared with meta (CPU where meta has no kernel). PyTorch's
own OpInfo samples check values and float64 gradients.
"""

from __future__ import annotations

import inspect
import math
import warnings

import jax
import pytest
import torch
from opinfo_samples import float64_gradients_match_cpu, forward_matches_cpu, op_db_entries, opinfo_id
from lowering_harness import (
    T,
    assert_shape_fn_raises_like_cpu,
    run_shape_fn,
    functions_in,
    as_meta,
    assert_same,
    call_lowering,
    Case,
    on_device,
    to_jax,
    to_torch,
    unambiguous_name,
)

import xla_native_functions as xnf
from xla_native_functions.lowerings import histogram as lower_histogram
from xla_native_functions.lowerings import scatter as lower_scatter
from xla_native_functions.shape_fns import histogram as shape_histogram
from xla_native_functions.shape_fns import scatter as shape_scatter

aten = torch.ops.aten
nan = float("nan")


LOWERINGS = functions_in([lower_histogram, lower_scatter], prefix="lower_")
SHAPE_FNS = functions_in([shape_histogram, shape_scatter], suffix="_output_shape")


def run_lowering(op, args, kwargs):
    fn = LOWERINGS[f"lower_{unambiguous_name(op)}"]
    lists = [a.name for a in op._schema.arguments if str(a.type) == "List[Optional[Tensor]]"]
    if not lists:
        return call_lowering(fn, op, args, kwargs)
    # test_lowerings' harness has no Tensor?[] kind: such a list is an operand here.
    bound = inspect.signature(fn).bind(*args, **kwargs).arguments
    with jax.enable_x64(True):
        operands = {k: (tuple(None if t is None else to_jax(t) for t in v) if k in lists else
                        to_jax(v) if isinstance(v, torch.Tensor) else v) for k, v in bound.items()}
        return to_torch(jax.jit(fn)(**operands))


torch.manual_seed(0)


def idx(*values, dtype=torch.int64):
    return torch.tensor(values, dtype=dtype)


def X(t):
    return xnf.to_xla(t)


def C(t):
    return xnf.to_torch(t)


f34 = T(3, 4)
f20 = T(20, low=-3, high=3)
d20 = T(20, dtype=torch.float64, low=-3, high=3)
pts = T(10, 2, low=-2, high=2)
with_nan = torch.tensor([0.5, nan, 1.5, 3.0, -1.0, float("inf")])
seg_data = T(6, 3)
seg_lengths = idx(2, 0, 3, 1)
seg_offsets = idx(0, 2, 2, 5, 6)
i34 = torch.randint(-5, 5, (3, 4))

CASES = [
    # histograms
    Case("histc_default_range", aten.histc.default, (f20,)),
    Case("histc_bins_range", aten.histc.default, (f34, 7, -1, 1)),
    Case("histc_f64_max_edge", aten.histc.default, (torch.tensor([0.0, 1.0, 1.0, 0.5], dtype=torch.float64), 4, 0, 1)),
    Case("histc_constant_input", aten.histc.default, (torch.full((5,), 2.0), 4)),
    Case("histc_empty", aten.histc.default, (torch.zeros(0), 3)),
    Case("histc_nan_skipped_with_range", aten.histc.default, (with_nan, 5, -1, 3)),
    Case("histc_bf16", aten.histc.default, (T(30, dtype=torch.bfloat16), 9)),
    Case("histogram_bin_ct", aten.histogram.bin_ct, (f20, 6)),
    Case(
        "histogram_bin_ct_range_weight_density",
        aten.histogram.bin_ct,
        (f20, 5),
        {"range": [-1.0, 2.0], "weight": T(20, low=0, high=1), "density": True},
    ),
    Case("histogram_bin_ct_f64_2d", aten.histogram.bin_ct, (T(4, 5, dtype=torch.float64), 3)),
    Case("histogram_bin_ct_empty", aten.histogram.bin_ct, (torch.zeros(0), 4)),
    Case("histogram_bins_tensor", aten.histogram.bins_tensor, (f20, torch.tensor([-2.0, -0.5, 0.0, 0.1, 2.5]))),
    Case(
        "histogram_bins_tensor_weight_density",
        aten.histogram.bins_tensor,
        (d20, torch.tensor([-3.0, 0.0, 3.0], dtype=torch.float64)),
        {"weight": T(20, dtype=torch.float64), "density": True},
    ),
    Case("histogramdd_bin_edges", aten._histogramdd_bin_edges.default, (pts, [3, 4])),
    Case(
        "histogramdd_bin_edges_range",
        aten._histogramdd_bin_edges.default,
        (pts, [2, 2]),
        {"range": [0.0, 1.0, -1.0, 1.0]},
    ),
    Case("histogramdd_from_bin_cts", aten._histogramdd_from_bin_cts.default, (pts, [3, 4])),
    Case(
        "histogramdd_from_bin_cts_weight_density",
        aten._histogramdd_from_bin_cts.default,
        (T(2, 5, 3), [2, 3, 2]),
        {"weight": T(2, 5, low=0, high=1), "density": True},
    ),
    Case(
        "histogramdd_from_bin_tensors",
        aten._histogramdd_from_bin_tensors.default,
        (pts, [torch.tensor([-2.0, 0.0, 2.0]), torch.tensor([-1.0, -0.5, 0.5, 1.0])]),
    ),
    # segment_reduce and its backward
    *(
        Case(f"segment_reduce_lengths_{r}", aten.segment_reduce.default, (seg_data, r), {"lengths": seg_lengths})
        for r in ("sum", "mean", "max", "min", "prod")
    ),
    *(
        Case(
            f"segment_reduce_offsets_{r}_initial",
            aten.segment_reduce.default,
            (seg_data, r),
            {"offsets": seg_offsets, "initial": 1.5},
        )
        for r in ("sum", "mean", "max")
    ),
    Case(
        "segment_reduce_nan",
        aten.segment_reduce.default,
        (torch.tensor([1.0, nan, 2.0, 3.0]), "max"),
        {"lengths": idx(2, 2)},
    ),
    Case(
        "segment_reduce_axis1_2d_lengths",
        aten.segment_reduce.default,
        (T(2, 5, 3), "sum"),
        {"lengths": torch.tensor([[2, 3], [5, 0]]), "axis": 1},
    ),
    Case(
        "segment_reduce_int32_lengths_f64",
        aten.segment_reduce.default,
        (T(6, dtype=torch.float64), "mean"),
        {"lengths": idx(1, 5, dtype=torch.int32)},
    ),
    *(
        Case(
            f"segment_reduce_backward_{r}",
            aten._segment_reduce_backward.default,
            (T(4, 3), torch.segment_reduce(seg_data, r, lengths=seg_lengths), seg_data, r),
            {"lengths": seg_lengths},
        )
        for r in ("sum", "mean", "max", "min", "prod")
    ),
    Case(
        "segment_reduce_backward_prod_zero",
        aten._segment_reduce_backward.default,
        (T(2), torch.tensor([0.0, 0.0]), torch.tensor([2.0, 0.0, 3.0, 0.0, 0.0]), "prod"),
        {"lengths": idx(3, 2)},
    ),
    Case(
        "segment_reduce_backward_max_ties",
        aten._segment_reduce_backward.default,
        (torch.tensor([2.0, -1.0]), torch.tensor([3.0, 1.0]), torch.tensor([3.0, 3.0, 1.0, 1.0]), "max"),
        {"lengths": idx(2, 2)},
    ),
    # index_reduce
    *(
        Case(
            f"index_reduce_{r}_{'self' if inc else 'noself'}",
            aten.index_reduce.default,
            (T(4, 3, low=0.5, high=2), 0, idx(0, 2, 0), T(3, 3, low=0.5, high=2), r),
            {"include_self": inc},
        )
        for r in ("prod", "mean", "amax", "amin")
        for inc in (True, False)
    ),
    Case(
        "index_reduce_mean_int_floor",
        aten.index_reduce.default,
        (torch.tensor([-1, 2, 3]), 0, idx(0, 0, 1), torch.tensor([-2, 3, 4]), "mean"),
        {"include_self": False},
    ),
    Case(
        "index_reduce_amax_nan_dim1",
        aten.index_reduce.default,
        (f34, 1, idx(3, 3), torch.tensor([[nan, 1.0]] * 3), "amax"),
    ),
    # scatter with reduce
    Case(
        "scatter_reduce_add",
        aten.scatter.reduce,
        (f34, 1, torch.tensor([[0, 0], [1, 3], [2, 2]]), T(3, 2)),
        {"reduce": "add"},
    ),
    Case(
        "scatter_reduce_multiply",
        aten.scatter.reduce,
        (f34, 0, torch.tensor([[0, 1, 2, 0], [0, 1, 2, 2]]), T(2, 4)),
        {"reduce": "multiply"},
    ),
    Case(
        "scatter_value_reduce_add_int",
        aten.scatter.value_reduce,
        (i34, 0, torch.tensor([[0, 0, 1, 2]]), 2.7),
        {"reduce": "add"},
    ),
    Case(
        "scatter_value_reduce_multiply_bool",
        aten.scatter.value_reduce,
        (torch.ones(3, 2, dtype=torch.bool), 0, torch.tensor([[0, 2]]), False),
        {"reduce": "multiply"},
    ),
    # masked index
    Case(
        "unsafe_masked_index",
        aten._unsafe_masked_index.default,
        (f34, torch.tensor([[True], [False], [True]]), [idx(0, 5, -1), None], -7.0),
    ),
    Case(
        "unsafe_masked_index_int",
        aten._unsafe_masked_index.default,
        (i34, torch.tensor([[True], [False]]), [idx(2, 1).reshape(2, 1), idx(3, 0, -4)], 9),
    ),
    Case(
        "unsafe_masked_index_put_accumulate",
        aten._unsafe_masked_index_put_accumulate.default,
        (f34, torch.tensor([True, False, True, True]), [idx(0, 9, 2, 0)], T(4, 4)),
    ),
    # search and membership
    Case("searchsorted_scalar_int_in_float", aten.searchsorted.Scalar, (torch.tensor([1.0, 2.0, 2.0, 3.0]), 2)),
    Case(
        "searchsorted_scalar_right", aten.searchsorted.Scalar, (torch.tensor([1.0, 2.0, 2.0, 3.0]), 2), {"right": True}
    ),
    Case("searchsorted_scalar_float_in_int_int32", aten.searchsorted.Scalar, (idx(1, 2, 3), 2.5), {"out_int32": True}),
    Case(
        "searchsorted_scalar_sorter",
        aten.searchsorted.Scalar,
        (torch.tensor([3.0, 1.0, 2.0]), 2.0),
        {"side": "right", "sorter": idx(1, 2, 0)},
    ),
    Case("isin", aten.isin.Tensor_Tensor, (i34, idx(0, 3, -5, 7))),
    Case("isin_promotes_invert", aten.isin.Tensor_Tensor, (idx(1, 2, 3), torch.tensor([2.0, 3.5])), {"invert": True}),
    Case("isin_nan_never_found", aten.isin.Tensor_Tensor, (with_nan, torch.tensor([nan, 1.5]))),
    Case("isin_empty_test", aten.isin.Tensor_Tensor, (f34, torch.zeros(0))),
    Case(
        "nonzero_static_pad",
        aten.nonzero_static.default,
        (torch.tensor([[1.0, 0.0], [1.0, 1.0]]),),
        {"size": 5, "fill_value": -7},
    ),
    Case("nonzero_static_truncate", aten.nonzero_static.default, (i34,), {"size": 2}),
    Case("nonzero_static_empty", aten.nonzero_static.default, (torch.zeros(2, 0, 3),), {"size": 2}),
    Case("nonzero_static_0d", aten.nonzero_static.default, (torch.tensor(1.0),), {"size": 3}),
    Case("hash_tensor_all", aten.hash_tensor.default, (f34,)),
    Case("hash_tensor_dim_keepdim", aten.hash_tensor.default, (i34, [1]), {"keepdim": True}),
    Case("hash_tensor_bool_f16", aten.hash_tensor.default, (T(3, 4, dtype=torch.float16), [0, 1])),
    Case("hash_tensor_int8_negative", aten.hash_tensor.default, (torch.tensor([-3, 5], dtype=torch.int8),)),
]


def _reference_meta(case):
    try:
        return as_meta(on_device(case.op, case.args, case.kwargs, "meta"))
    except NotImplementedError:  # no meta kernel: the CPU result's shape and dtype
        return as_meta(on_device(case.op, case.args, case.kwargs, "cpu"))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_lowering_matches_cpu(case):
    expected = on_device(case.op, case.args, case.kwargs, "cpu")
    ours = run_lowering(case.op, case.args, case.kwargs)
    if isinstance(expected, list):
        expected = tuple(expected)
    assert_same(ours, expected, **case.tol)
    assert as_meta(ours) == as_meta(expected)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_shape_fn_matches_meta(case):
    got = run_shape_fn(case.op, case.args, case.kwargs)
    got = tuple(got) if isinstance(got, list) else got
    assert got == _reference_meta(case)


def test_every_lowering_has_a_case():
    covered = {f"lower_{unambiguous_name(c.op)}" for c in CASES}
    ours = {n for n in LOWERINGS if n[len("lower_"):] + "_output_shape" in SHAPE_FNS}
    mine = {
        "lower_histc", "lower_histogram_bin_ct", "lower_histogram_bins_tensor", "lower__histogramdd_bin_edges",
        "lower__histogramdd_from_bin_cts", "lower__histogramdd_from_bin_tensors", "lower_segment_reduce",
        "lower__segment_reduce_backward", "lower_index_reduce", "lower_scatter_reduce", "lower_scatter_value_reduce",
        "lower__unsafe_masked_index", "lower__unsafe_masked_index_put_accumulate", "lower_searchsorted_Scalar",
        "lower_isin_Tensor_Tensor", "lower_nonzero_static", "lower_hash_tensor",
    }
    assert mine <= ours
    assert not mine - covered, f"lowerings without a test case: {sorted(mine - covered)}"


def test_histogram_counts_match_returned_edges():
    # Values sitting exactly on float32 linspace edges land in the bin the returned
    # edges say (the local search after the interpolation).
    x = torch.linspace(-1, 1, 101)
    got = run_lowering(aten.histogram.bin_ct, (x, 100), {})
    assert_same(got, torch.histogram(x, 100))


def test_histc_data_dependent_checks_produce_zeros():
    # Note [Data-dependent histogram checks]: PyTorch raises for a NaN edge taken from
    # the data; inside the graph the NaN edges select nothing.
    with pytest.raises(RuntimeError, match="not finite"):
        torch.histc(with_nan, 4)
    got = run_lowering(aten.histc.default, (with_nan, 4), {})
    assert torch.equal(got, torch.zeros(4))


INTEGER_HISTC = {
    "int32_expert_ids": (
        torch.randint(0, 8, (50,), dtype=torch.int32, generator=torch.Generator().manual_seed(0)),
        8,
        0,
        7,
    ),
    "int64_range_from_data": (torch.tensor([[-5, 3, 8], [0, 0, 2]]), 5, 0, 0),
    "int16_constant": (torch.full((4,), 3, dtype=torch.int16), 3, 0, 0),
    "uint8_partial_range": (torch.arange(0, 100, 3, dtype=torch.uint8), 7, 10, 60),
    "int8_float_bounds": (torch.arange(-20, 20, 3, dtype=torch.int8), 4, -2.7, 9.9),
}


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("name", INTEGER_HISTC)
def test_integer_histc_counts_like_cuda(name, mode):
    # Note [Integer histc]: PyTorch CPU refuses integers; CUDA's integer bin arithmetic
    # agrees with CPU's float kernel on small integers and truncated bounds.
    x, bins, lo, hi = INTEGER_HISTC[name]
    with pytest.raises(NotImplementedError, match="histogram_cpu"):
        torch.histc(x, bins, lo, hi)
    expected = torch.histc(x.double(), bins, int(lo), int(hi)).to(x.dtype)
    fn = lambda t: torch.histc(t, bins, lo, hi)
    got = (xnf.compile(fn) if mode == "compiled" else fn)(xnf.to_xla(x))
    assert got.dtype == x.dtype
    assert torch.equal(xnf.to_torch(got), expected)


# ---------------------------------------------------------------- errors

ERROR_CASES = [
    Case("histc_bool", aten.histc.default, (torch.tensor([True, False]), 3)),
    Case("histc_zero_bins", aten.histc.default, (f20, 0)),
    Case("histogram_int", aten.histogram.bin_ct, (idx(1, 2), 3)),
    Case("histogram_half_range_from_data", aten.histogram.bin_ct, (T(4, dtype=torch.float16), 3)),
    Case("histogram_range_reversed", aten.histogram.bin_ct, (f20, 3), {"range": [2.0, 1.0]}),
    Case("histogram_range_inf", aten.histogram.bin_ct, (f20, 3), {"range": [0.0, math.inf]}),
    Case("histogram_weight_dtype", aten.histogram.bin_ct, (f20, 3), {"weight": T(20, dtype=torch.float64)}),
    Case("histogram_weight_shape", aten.histogram.bin_ct, (f20, 3), {"weight": T(19)}),
    Case("histogram_bins_dtype", aten.histogram.bins_tensor, (f20, idx(0, 1))),
    Case("histogram_bins_2d", aten.histogram.bins_tensor, (f20, T(2, 2))),
    Case("histogram_bins_empty", aten.histogram.bins_tensor, (f20, torch.zeros(0))),
    Case("histogramdd_1d_input", aten._histogramdd_from_bin_cts.default, (f20, [3])),
    Case("histogramdd_bins_count", aten._histogramdd_from_bin_tensors.default, (pts, [torch.tensor([0.0, 1.0])])),
    Case("histogramdd_range_length", aten._histogramdd_bin_edges.default, (pts, [2, 2]), {"range": [0.0, 1.0]}),
    Case("histogramdd_weight_shape", aten._histogramdd_from_bin_cts.default, (pts, [2, 2]), {"weight": T(10, 2)}),
    Case("segment_reduce_no_segments", aten.segment_reduce.default, (seg_data, "sum")),
    Case("segment_reduce_indices", aten.segment_reduce.default, (seg_data, "sum"), {"indices": idx(0, 1)}),
    Case("segment_reduce_bad_reduce", aten.segment_reduce.default, (seg_data, "any"), {"lengths": seg_lengths}),
    Case("segment_reduce_axis", aten.segment_reduce.default, (T(6, 2), "sum"), {"lengths": seg_lengths, "axis": 1}),
    Case("segment_reduce_float_lengths", aten.segment_reduce.default, (seg_data, "sum"), {"lengths": T(4)}),
    Case("segment_reduce_int_data", aten.segment_reduce.default, (i34, "sum"), {"lengths": idx(1, 2)}),
    Case("index_reduce_sum", aten.index_reduce.default, (f34, 0, idx(0), T(1, 4), "sum")),
    Case("index_reduce_float_index", aten.index_reduce.default, (f34, 0, T(1), T(1, 4), "prod")),
    Case(
        "index_reduce_2d_index",
        aten.index_reduce.default,
        (f34, 0, torch.zeros(1, 1, dtype=torch.int64), T(1, 4), "prod"),
    ),
    Case("index_reduce_dtype", aten.index_reduce.default, (f34, 0, idx(0), T(1, 4, dtype=torch.float64), "prod")),
    Case("index_reduce_count", aten.index_reduce.default, (f34, 0, idx(0, 1), T(3, 4), "prod")),
    Case("index_reduce_shape", aten.index_reduce.default, (f34, 0, idx(0, 1), T(2, 3), "prod")),
    Case(
        "scatter_reduce_sum_name",
        aten.scatter.reduce,
        (f34, 0, torch.zeros(1, 4, dtype=torch.int64), T(1, 4)),
        {"reduce": "sum"},
    ),
    Case(
        "scatter_value_reduce_bad",
        aten.scatter.value_reduce,
        (f34, 0, torch.zeros(1, 4, dtype=torch.int64), 1.0),
        {"reduce": "max"},
    ),
    Case("searchsorted_scalar_2d", aten.searchsorted.Scalar, (f34, 1.0)),
    Case("searchsorted_scalar_side", aten.searchsorted.Scalar, (f20, 1.0), {"side": "middle"}),
    Case("isin_bool", aten.isin.Tensor_Tensor, (torch.tensor([True]), torch.tensor([True]))),
    Case("nonzero_static_negative_size", aten.nonzero_static.default, (f34,), {"size": -1}),
    Case("hash_tensor_mode", aten.hash_tensor.default, (f34,), {"mode": 1}),
    Case("hash_tensor_empty_all", aten.hash_tensor.default, (torch.zeros(0, 3),)),
    Case("hash_tensor_empty_dim", aten.hash_tensor.default, (torch.zeros(0, 3), [0])),
    Case("hash_tensor_dim_twice", aten.hash_tensor.default, (f34, [0, 0])),
]


@pytest.mark.parametrize("case", ERROR_CASES, ids=lambda c: c.id)
def test_shape_fn_raises_like_cpu(case):
    assert_shape_fn_raises_like_cpu(case, exact_type=False)


# ---------------------------------------------------------------- supported ops on our tensors


def _same(got, expected):
    got, expected = C(got), expected
    if isinstance(expected, (tuple, list)):
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            _same_tensor(g, e)
    else:
        _same_tensor(got, expected)


def _same_tensor(g, e):
    assert g.shape == e.shape and g.dtype == e.dtype, (g.shape, g.dtype, e.shape, e.dtype)
    torch.testing.assert_close(g, e, equal_nan=True, rtol=0, atol=0)


UNIQUE_INPUTS = {
    "f32_nan_negzero": torch.tensor([[2.0, nan, -0.0], [0.0, 2.0, nan], [1.0, 1.0, -3.0]]),
    "int64": torch.randint(-3, 3, (4, 5)),
    "bool": torch.tensor([[True, False], [True, True]]),
    "bf16": T(6, dtype=torch.bfloat16, low=-2, high=2).round(),
    "zero_d": torch.tensor(3.0),
    "empty": torch.zeros(0, 3),
}


@pytest.mark.parametrize("name", list(UNIQUE_INPUTS))
@pytest.mark.parametrize("sorted_", [True, False])
@pytest.mark.parametrize("inverse", [True, False])
@pytest.mark.parametrize("counts", [True, False])
def test_unique2(name, sorted_, inverse, counts):
    x = UNIQUE_INPUTS[name]
    expected = aten._unique2(x, sorted_, inverse, counts)
    _same(aten._unique2(X(x), sorted_, inverse, counts), expected)


@pytest.mark.parametrize("name", list(UNIQUE_INPUTS))
@pytest.mark.parametrize("inverse", [True, False])
def test_unique_legacy_overload(name, inverse):
    # aten._unique: what index_fill's backward calls; sorted whatever `sorted` says
    x = UNIQUE_INPUTS[name]
    _same(aten._unique(X(x), False, inverse), aten._unique(x, False, inverse))


@pytest.mark.parametrize("name", ["f32_nan_negzero", "int64", "bool", "bf16"])
@pytest.mark.parametrize("dim", [0, -1])
def test_unique_dim_and_consecutive(name, dim):
    x = UNIQUE_INPUTS[name]
    if x.dim() == 1 and dim == -1:
        dim = 0
    for args in ((dim, True, True, True), (dim, False, False, False)):
        _same(aten.unique_dim(X(x), *args), aten.unique_dim(x, *args))
    _same(aten.unique_dim_consecutive(X(x), dim, True, True), aten.unique_dim_consecutive(x, dim, True, True))
    for kwargs in ({}, {"return_inverse": True, "return_counts": True}, {"dim": dim}):
        _same(aten.unique_consecutive(X(x), **kwargs), aten.unique_consecutive(x, **kwargs))


def test_unique_dim_empty_and_errors():
    for shape, dim in (((0, 3), 0), ((2, 0, 3), 1)):
        x = torch.zeros(shape)
        _same(aten.unique_dim(X(x), dim, True, True, True), aten.unique_dim(x, dim, True, True, True))
    for shape, dim, err in (
        ((2, 0), 0, RuntimeError),
        ((0, 0), 0, RuntimeError),
        ((), 0, IndexError),
        ((2, 3), 2, IndexError),
    ):
        with pytest.raises(err):
            aten.unique_dim(torch.zeros(shape), dim)
        with pytest.raises(err):
            aten.unique_dim(X(torch.zeros(shape)), dim)


def test_torch_unique_user_api():
    x = torch.tensor([3, 1, 2, 3, 1, 5, 0, 2])
    for kwargs in ({}, {"return_inverse": True, "return_counts": True}, {"sorted": False, "return_inverse": True}):
        _same(torch.unique(X(x), **kwargs), torch.unique(x, **kwargs))
    _same(
        torch.unique(X(x.reshape(2, 4)), dim=1, return_counts=True),
        torch.unique(x.reshape(2, 4), dim=1, return_counts=True),
    )
    _same(torch.unique_consecutive(X(x), return_counts=True), torch.unique_consecutive(x, return_counts=True))


@pytest.mark.parametrize(
    "x,weights,minlength",
    [
        (idx(0, 3, 3, 1), None, 0),
        (idx(0, 3, 3, 1), None, 7),
        (idx(), None, 2),
        (idx(2, 0, 2, dtype=torch.int32), torch.tensor([0.5, 1.0, 2.0]), 0),
        (idx(2, 0, 2).to(torch.uint8), torch.tensor([1, 2, 3]), 1),
        (idx(2, 0, 2), torch.tensor([0.5, 1.0, 2.0], dtype=torch.float16), 0),
    ],
    ids=["plain", "minlength", "empty", "float32_weights", "int_weights_double", "half_weights_double"],
)
def test_bincount(x, weights, minlength):
    got = torch.bincount(X(x), None if weights is None else X(weights), minlength)
    _same(got, torch.bincount(x, weights, minlength))


@pytest.mark.parametrize(
    "args",
    [
        (idx(-1, 2), None, 0),
        (T(3), None, 0),
        (idx(1, 2).reshape(1, 2), None, 0),
        (idx(1, 2), T(3), 0),
        (idx(1, 2), None, -1),
    ],
    ids=["negative", "float", "2d", "weights_length", "minlength"],
)
def test_bincount_errors(args):
    x, w, m = args
    with pytest.raises(RuntimeError) as cpu:
        torch.bincount(x, w, m)
    with pytest.raises(type(cpu.value), match=str(cpu.value)[:20]):
        torch.bincount(X(x), None if w is None else X(w), m)


def test_repeat_interleave_tensor():
    reps = idx(2, 0, 3)
    _same(torch.repeat_interleave(X(reps)), torch.repeat_interleave(reps))
    _same(torch.repeat_interleave(X(reps.int()), output_size=5), torch.repeat_interleave(reps.int(), output_size=5))
    x = T(3, 2)
    _same(torch.repeat_interleave(X(x), X(reps), dim=0), torch.repeat_interleave(x, reps, dim=0))
    for bad, err in ((idx(1, -1), RuntimeError), (idx(1, 2).reshape(1, 2), RuntimeError), (T(2), RuntimeError)):
        with pytest.raises(err):
            torch.repeat_interleave(bad)
        with pytest.raises(err):
            torch.repeat_interleave(X(bad))


@pytest.mark.parametrize(
    "a,b",
    [
        (f34, f34.clone()),
        (f34, f34 + 1),
        (f34, f34.reshape(4, 3)),
        (idx(1, 2), torch.tensor([1.0, 2.0])),
        (torch.tensor([nan]), torch.tensor([nan])),
        (torch.zeros(0), torch.zeros(0)),
    ],
    ids=["same", "different", "shape", "mixed_dtype", "nan", "empty"],
)
def test_equal(a, b):
    assert torch.equal(X(a), X(b)) is torch.equal(a, b)


@pytest.mark.parametrize(
    "a,b,kwargs",
    [
        (f34, f34 + 1e-6, {}),
        (f34, f34 + 1e-2, {}),
        (f34, f34 + 1e-2, {"atol": 0.1}),
        (torch.tensor([nan, 1.0]), torch.tensor([nan, 1.0]), {}),
        (torch.tensor([nan, 1.0]), torch.tensor([nan, 1.0]), {"equal_nan": True}),
        (torch.tensor([math.inf]), torch.tensor([math.inf]), {}),
        (idx(1, 2), idx(1, 3), {}),
        (idx(100, 2), idx(101, 2), {"rtol": 0.01}),
        (torch.tensor([True, False]), torch.tensor([True, False]), {}),
        (T(3), T(1), {"rtol": 10.0, "atol": 10.0}),
    ],
    ids=["close", "far", "atol", "nan", "equal_nan", "inf", "int_far", "int_rtol", "bool", "broadcast"],
)
def test_allclose(a, b, kwargs):
    assert torch.allclose(X(a), X(b), **kwargs) is torch.allclose(a, b, **kwargs)


def test_allclose_errors():
    for a, b, kwargs in ((idx(1), torch.tensor([1.0]), {}), (T(2), T(3), {}), (T(2), T(2), {"rtol": -1.0})):
        with pytest.raises(RuntimeError):
            torch.allclose(a, b, **kwargs)
        with pytest.raises(RuntimeError):
            torch.allclose(X(a), X(b), **kwargs)


def test_compiled_data_dependent_ops_sync_the_trace():
    x = torch.tensor([3.0, 1.0, 2.0, 3.0, 1.0])
    counts_in = idx(0, 2, 2, 4)

    def step(t, c):
        y = t * 2
        values, inverse, counts = torch.unique(y, return_inverse=True, return_counts=True)
        same = torch.equal(y, y)
        return values.sum() + inverse.sum() + counts.sum() + torch.bincount(c).sum() + same

    expected = step(x, counts_in)
    compiled = xnf.compile(step)
    for _ in range(2):
        assert_same(C(compiled(X(x), X(counts_in))), expected)


def test_compiled_full_codegen_ops():
    x, lengths = T(12, low=-2, high=2), idx(4, 8)

    def step(t, lens):
        h = torch.histc(t, 5)
        s = torch.segment_reduce(t, "sum", lengths=lens)
        n = torch.nonzero_static(t > 0, size=3)
        return h.sum() + s.sum() + n.sum()

    assert_same(C(xnf.compile(step)(X(x), X(lengths))), step(x, lengths))


def test_inplace_and_out_forms():
    base, index, src = T(4, 3), idx(0, 2, 0), T(3, 3)
    expected = base.clone().index_reduce_(0, index, src, "amax")
    ours = X(base)
    ours.index_reduce_(0, X(index), X(src), "amax")
    _same(ours, expected)
    out = X(torch.empty(5))
    torch.histc(X(f20), 5, out=out)
    _same(out, torch.histc(f20, 5))
    g = torch.tensor([[0, 1]])
    expected = base.clone().scatter_(0, g, 2.0, reduce="multiply")
    ours = X(base)
    ours.scatter_(0, X(g), 2.0, reduce="multiply")
    _same(ours, expected)


# ---------------------------------------------------------------- OpInfo samples

OPINFOS = [
    "unique", "unique_consecutive", "bincount", "equal", "allclose", "nonzero_static", "repeat_interleave",
    "hash_tensor", "histc", "histogram", "histogramdd", "searchsorted", "isin", "_segment_reduce", "index_reduce",
    "scatter", "_unsafe_masked_index", "_unsafe_masked_index_put_accumulate", "cov", "corrcoef",
]
MAX_SAMPLES = 8


@pytest.fixture
def quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bool], ids=str)
@pytest.mark.parametrize("opinfo", op_db_entries(OPINFOS), ids=opinfo_id)
def test_opinfo_samples(opinfo, dtype, quiet):
    if dtype not in opinfo.supported_dtypes("cpu"):
        pytest.skip(f"{opinfo.name} has no {dtype} kernel on CPU")
    checked = 0
    for sample in opinfo.sample_inputs("cpu", dtype):
        if checked == MAX_SAMPLES:
            break
        if forward_matches_cpu(opinfo, sample):
            checked += 1


GRAD_OPINFOS = [
    "_segment_reduce",
    "index_reduce",
    "scatter",
    "_unsafe_masked_index",
    "_unsafe_masked_index_put_accumulate",
    "cov",
]
GRAD_SAMPLES = 5


@pytest.mark.parametrize(
    "opinfo", [o for o in op_db_entries(OPINFOS) if o.name in GRAD_OPINFOS and o.supports_autograd], ids=opinfo_id
)
def test_opinfo_float64_gradients(opinfo, quiet):
    checked = 0
    for sample in opinfo.sample_inputs("cpu", torch.float64, requires_grad=True):
        if checked == GRAD_SAMPLES:
            break
        if float64_gradients_match_cpu(opinfo, sample):
            checked += 1
