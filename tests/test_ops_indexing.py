"""Indexing, scatter/gather, embedding_bag, losses and distances against PyTorch CPU.

Lowerings run under jax.jit as the runtime runs them (test_lowerings' harness) and are
compared with the CPU kernel; shape functions are compared with meta (or CPU where the
meta kernel disagrees with CPU). The `supported` ops (index.Tensor, index_put,
masked_select) and end-to-end user code run on our tensors, eagerly and compiled, and
PyTorch's own OpInfo samples check values and float64 gradients.
"""

from __future__ import annotations

import math
import warnings

import jax
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from opinfo_samples import float64_gradients_match_cpu, forward_matches_cpu, op_db_entries, opinfo_id
from lowering_harness import (
    T,
    assert_lowering_matches_cpu,
    assert_shape_fn_matches_meta,
    assert_shape_fn_raises_like_cpu,
    assert_signatures_match_schema,
    run_lowering,
    functions_in,
    Case,
    assert_same,
    ints,
    unambiguous_name,
)

import xla_native_functions as xnf
from xla_native_functions.lowerings import distance as lower_distance
from xla_native_functions.lowerings import embedding_bag as lower_embedding_bag
from xla_native_functions.lowerings import indexing as lower_indexing
from xla_native_functions.lowerings import loss as lower_loss
from xla_native_functions.lowerings import scatter as lower_scatter
from xla_native_functions.shape_fns import distance as shape_distance
from xla_native_functions.shape_fns import embedding_bag as shape_embedding_bag
from xla_native_functions.shape_fns import indexing as shape_indexing
from xla_native_functions.shape_fns import loss as shape_loss
from xla_native_functions.shape_fns import scatter as shape_scatter

aten = torch.ops.aten
LOWER_MODULES = [lower_indexing, lower_scatter, lower_loss, lower_embedding_bag, lower_distance]
SHAPE_MODULES = [shape_indexing, shape_scatter, shape_loss, shape_embedding_bag, shape_distance]


LOWERINGS = functions_in(LOWER_MODULES, prefix="lower_", operators_only=True)
SHAPE_FNS = functions_in(SHAPE_MODULES, suffix="_output_shape", operators_only=True)


torch.manual_seed(0)


def idx(*values):
    return torch.tensor(values, dtype=torch.int64)


f34, f45 = T(3, 4), T(4, 5)
d34 = T(3, 4, dtype=torch.float64)
i34 = ints(3, 4)
b34 = T(3, 4, dtype=torch.bool)
mask34 = torch.tensor([[True, False, True, False], [False, False, True, True], [True, True, False, False]])
gidx = torch.tensor([[0, 3], [2, 2], [1, 0]])
logp = torch.log_softmax(T(4, 5), 1)
logp2d = torch.log_softmax(T(2, 3, 4, 4), 1)
target4 = idx(0, 4, 2, 1)
target4_ign = idx(0, -100, 2, 1)
target2d = torch.randint(0, 3, (2, 4, 4))
probs = torch.rand(3, 4) * 0.98 + 0.01
ebag_w = T(10, 3)
ebag_ind = idx(1, 2, 4, 5, 4, 3, 9, 0)
ebag_off = idx(0, 2, 2, 5)
ebag_psw = T(8)
ebag_off_ilo = idx(0, 2, 2, 5, 8)  # with include_last_offset the last offset ends the last bag

CASES = [
    # index_select
    Case("index_select_f32", aten.index_select.default, (f34, 1, idx(3, 0, 0))),
    Case("index_select_neg_dim_int32", aten.index_select.default, (i34, -2, idx(2, 1).int())),
    Case("index_select_bool_0d_index", aten.index_select.default, (b34, 0, torch.tensor(1))),
    Case("index_select_0d_self", aten.index_select.default, (torch.tensor(2.5), 0, idx(0))),
    Case("index_select_empty", aten.index_select.default, (f34, 0, idx())),
    # gather
    Case("gather_f32", aten.gather.default, (f34, 1, gidx)),
    Case("gather_dim0_smaller", aten.gather.default, (f45, 0, torch.tensor([[0, 3], [2, 1]]))),
    Case("gather_int64_neg_dim", aten.gather.default, (i34, -1, gidx)),
    Case("gather_bool_int32_index", aten.gather.default, (b34, 1, gidx.int())),
    Case("gather_0d", aten.gather.default, (torch.tensor(1.5), 0, torch.tensor(0))),
    # take / put
    Case("take_neg", aten.take.default, (f34, torch.tensor([[0, -1], [11, 5]]))),
    Case("take_int64", aten.take.default, (i34, idx(3, 7))),
    Case("put_set", aten.put.default, (f34, idx(0, -1, 5), T(3))),
    Case("put_accumulate_dup", aten.put.default, (i34, idx(1, 1, 2), idx(5, 6, 7), True)),
    Case("put_bool_accumulate", aten.put.default, (b34, idx(0, 1), torch.tensor([True, False]), True)),
    # index_add / index_copy / index_fill
    Case("index_add_dup", aten.index_add.default, (f34, 0, idx(0, 2, 0), T(3, 4))),
    Case("index_add_alpha_int", aten.index_add.default, (i34, 1, idx(3, 1), ints(3, 2)), {"alpha": 3}),
    Case("index_add_bool", aten.index_add.default, (b34, 0, idx(1), T(1, 4, dtype=torch.bool))),
    Case("index_add_0d", aten.index_add.default, (torch.tensor(1.0), 0, idx(0), torch.tensor(2.0))),
    Case("index_copy", aten.index_copy.default, (f34, 1, idx(3, 0), T(3, 2))),
    Case("index_copy_f64", aten.index_copy.default, (d34, 0, idx(2), T(1, 4, dtype=torch.float64))),
    Case("index_fill_scalar_neg_index", aten.index_fill.int_Scalar, (f34, 1, idx(-1, 0), 7.5)),
    Case("index_fill_scalar_int", aten.index_fill.int_Scalar, (i34, 0, idx(2), -3)),
    Case("index_fill_tensor", aten.index_fill.int_Tensor, (f34, 0, idx(1), torch.tensor(2.0))),
    Case("index_fill_bool", aten.index_fill.int_Scalar, (b34, 1, idx(0, 2), True)),
    # masked_fill / masked_scatter
    Case("masked_fill_scalar", aten.masked_fill.Scalar, (f34, mask34, -1.5)),
    Case("masked_fill_scalar_int_float", aten.masked_fill.Scalar, (i34, mask34, 2)),
    Case("masked_fill_broadcast_mask", aten.masked_fill.Scalar, (f34, torch.tensor([True, False, False, True]), 0.0)),
    Case("masked_fill_broadcast_self", aten.masked_fill.Scalar, (T(4), mask34, 3.0)),
    Case("masked_fill_tensor", aten.masked_fill.Tensor, (f34, mask34, torch.tensor(9.0))),
    Case(
        "masked_fill_tensor_f64_value", aten.masked_fill.Tensor, (f34, mask34, torch.tensor(9.0, dtype=torch.float64))
    ),
    Case("masked_fill_bool", aten.masked_fill.Scalar, (b34, mask34, False)),
    Case("masked_scatter", aten.masked_scatter.default, (f34, mask34, T(12))),
    Case(
        "masked_scatter_broadcast",
        aten.masked_scatter.default,
        (f34, torch.tensor([True, False, False, True]), T(2, 3, 2)),
    ),
    Case("masked_scatter_int", aten.masked_scatter.default, (i34, mask34, ints(6))),
    Case("masked_scatter_backward", aten.masked_scatter_backward.default, (f34, mask34, [3, 5])),
    Case(
        "masked_scatter_backward_broadcast",
        aten.masked_scatter_backward.default,
        (f34, torch.tensor([True, False, False, True]), [2, 4]),
    ),
    Case(
        "masked_scatter_backward_no_true",
        aten.masked_scatter_backward.default,
        (f34, torch.zeros(3, 4, dtype=torch.bool), [5]),
    ),
    # scatter family
    Case("scatter_src", aten.scatter.src, (f34, 1, gidx, T(3, 3))),
    Case("scatter_src_dim0", aten.scatter.src, (f34, 0, torch.tensor([[2, 0, 1, 1]]), T(2, 4))),
    Case("scatter_value", aten.scatter.value, (f34, 1, gidx, 2.5)),
    Case("scatter_value_int", aten.scatter.value, (i34, 0, torch.tensor([[1, 2]]), 7)),
    Case("scatter_value_bool", aten.scatter.value, (b34, 1, gidx, True)),
    Case("scatter_add", aten.scatter_add.default, (f34, 1, gidx, T(3, 2))),
    Case("scatter_add_int", aten.scatter_add.default, (i34, 0, torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]]), ints(2, 4))),
    Case("scatter_add_0d", aten.scatter_add.default, (torch.tensor(1.0), 0, torch.tensor(0), torch.tensor(2.0))),
    *(
        Case(
            f"scatter_reduce_{r}_{'self' if inc else 'noself'}",
            aten.scatter_reduce.two,
            (T(3, 4, low=0.5, high=2), 1, gidx, T(3, 2, low=0.5, high=2), r),
            {"include_self": inc},
        )
        for r in ("sum", "prod", "mean", "amax", "amin")
        for inc in (True, False)
    ),
    Case("scatter_reduce_mean_int", aten.scatter_reduce.two, (i34, 1, gidx, ints(3, 2), "mean")),
    Case(
        "scatter_reduce_amax_int_noself",
        aten.scatter_reduce.two,
        (i34, 1, gidx, ints(3, 2), "amax"),
        {"include_self": False},
    ),
    Case("scatter_reduce_sum_bool", aten.scatter_reduce.two, (b34, 1, gidx, T(3, 2, dtype=torch.bool), "sum")),
    Case(
        "scatter_reduce_amax_nan",
        aten.scatter_reduce.two,
        (f34, 1, torch.tensor([[0], [1], [2]]), torch.tensor([[float("nan")], [1.0], [2.0]]), "amax"),
    ),
    Case("select_scatter", aten.select_scatter.default, (f34, T(4), 0, -1)),
    Case("select_scatter_dim1", aten.select_scatter.default, (i34, ints(3), 1, 2)),
    Case("slice_scatter", aten.slice_scatter.default, (f34, T(3, 2), 1, 1, 4, 2)),
    Case("slice_scatter_defaults", aten.slice_scatter.default, (f34, T(3, 4))),
    Case("slice_scatter_neg_clamped", aten.slice_scatter.default, (f34, T(2, 4), 0, -2, 100)),
    Case("diagonal_scatter", aten.diagonal_scatter.default, (f34, T(3))),
    Case("diagonal_scatter_offset", aten.diagonal_scatter.default, (f34, T(2), 2)),
    Case("diagonal_scatter_neg_offset_3d", aten.diagonal_scatter.default, (T(2, 3, 4), T(4, 2), -1, 1, 0)),
    # losses
    *(
        Case(f"nll_loss_{name}_r{red}", aten.nll_loss_forward.default, (logp, tgt, w, red, -100))
        for red in (0, 1, 2)
        for name, tgt, w in (("plain", target4, None), ("weight_ignore", target4_ign, T(5, low=0.1, high=2)))
    ),
    Case("nll_loss_1d", aten.nll_loss_forward.default, (logp[0], torch.tensor(3), None, 0, -100)),
    Case("nll_loss_1d_mean", aten.nll_loss_forward.default, (logp[0], torch.tensor(3), None, 1, -100)),
    Case("nll_loss_ignore_index_1", aten.nll_loss_forward.default, (logp, target4, None, 1, 4)),
    *(
        Case(
            f"nll_loss_backward_r{red}",
            aten.nll_loss_backward.default,
            (T() if red else T(4), logp, target4_ign, T(5, low=0.1, high=2), red, -100, torch.tensor(2.5)),
        )
        for red in (0, 1, 2)
    ),
    *(
        Case(f"nll_loss2d_r{red}", aten.nll_loss2d_forward.default, (logp2d, target2d, None, red, -100))
        for red in (0, 1, 2)
    ),
    # every target ignored, mean: total_weight 0; the ignored elements' gradient stays 0, not 0 * inf
    Case(
        "nll_loss_backward_all_ignored_mean",
        aten.nll_loss_backward.default,
        (T(), logp, torch.full((4,), 2), None, 1, 2, torch.tensor(0.0)),
    ),
    Case(
        "nll_loss2d_backward_all_ignored_mean",
        aten.nll_loss2d_backward.default,
        (T(), logp2d, torch.ones(2, 4, 4, dtype=torch.long), T(3, low=0.1, high=2), 1, 1, torch.tensor(0.0)),
    ),
    Case("nll_loss2d_weight_ignore", aten.nll_loss2d_forward.default, (logp2d, target2d, T(3, low=0.1, high=2), 1, 1)),
    *(
        Case(
            f"nll_loss2d_backward_r{red}",
            aten.nll_loss2d_backward.default,
            (T() if red else T(2, 4, 4), logp2d, target2d, T(3, low=0.1, high=2), red, 1, torch.tensor(7.0)),
        )
        for red in (0, 1, 2)
    ),
    *(Case(f"mse_loss_r{red}", aten.mse_loss.default, (f34, T(3, 4), red)) for red in (0, 1, 2)),
    Case("mse_loss_f64", aten.mse_loss.default, (d34, T(3, 4, dtype=torch.float64))),
    Case("mse_loss_broadcast", aten.mse_loss.default, (T(4), f34, 0)),
    *(
        Case(f"mse_loss_backward_r{red}", aten.mse_loss_backward.default, (T() if red else T(3, 4), f34, T(3, 4), red))
        for red in (0, 1, 2)
    ),
    *(
        Case(f"smooth_l1_loss_r{red}_b{b}", aten.smooth_l1_loss.default, (f34, T(3, 4), red, b))
        for red in (0, 1)
        for b in (1.0, 0.0, 0.5)
    ),
    *(
        Case(
            f"smooth_l1_loss_backward_r{red}",
            aten.smooth_l1_loss_backward.default,
            (T() if red else T(3, 4), f34, T(3, 4), red, 0.7),
        )
        for red in (0, 1)
    ),
    Case("smooth_l1_loss_backward_beta0", aten.smooth_l1_loss_backward.default, (T(), f34, T(3, 4), 2, 0.0)),
    *(Case(f"huber_loss_r{red}", aten.huber_loss.default, (f34, T(3, 4), red, 0.5)) for red in (0, 1, 2)),
    *(
        Case(
            f"huber_loss_backward_r{red}",
            aten.huber_loss_backward.default,
            (T() if red else T(3, 4), f34, T(3, 4), red, 0.5),
        )
        for red in (0, 1)
    ),
    *(
        Case(f"bce_r{red}", aten.binary_cross_entropy.default, (probs, torch.rand(3, 4), None, red))
        for red in (0, 1, 2)
    ),
    Case(
        "bce_weight_edges",
        aten.binary_cross_entropy.default,
        (torch.tensor([0.0, 1.0, 0.5]), torch.tensor([1.0, 0.0, 1.0]), T(3), 0),
    ),
    *(
        Case(
            f"bce_backward_r{red}",
            aten.binary_cross_entropy_backward.default,
            (T() if red else T(3, 4), probs, torch.rand(3, 4), T(3, 4), red),
        )
        for red in (0, 1)
    ),
    *(
        Case(
            f"bce_logits_r{red}",
            aten.binary_cross_entropy_with_logits.default,
            (T(3, 4, low=-30, high=30), torch.rand(3, 4), None, None, red),
        )
        for red in (0, 1, 2)
    ),
    Case(
        "bce_logits_weights",
        aten.binary_cross_entropy_with_logits.default,
        (f34, torch.rand(3, 4), T(4), T(4, low=0.5, high=3), 1),
    ),
    *(
        Case(
            f"soft_margin_r{red}",
            aten.soft_margin_loss.default,
            (f34, torch.randint(0, 2, (3, 4)).float() * 2 - 1, red),
        )
        for red in (0, 1)
    ),
    *(
        Case(
            f"soft_margin_backward_r{red}",
            aten.soft_margin_loss_backward.default,
            (T() if red else T(3, 4), f34, torch.randint(0, 2, (3, 4)).float() * 2 - 1, red),
        )
        for red in (0, 1)
    ),
    *(
        Case(f"multi_margin_p{p}_r{red}", aten.multi_margin_loss.default, (f34, idx(0, 3, 1), p, 0.7, None, red))
        for p in (1, 2)
        for red in (0, 1)
    ),
    # A 1-d input's unreduced loss is 0-d on CPU, (1,) on meta.
    Case(
        "multi_margin_weight_1d",
        aten.multi_margin_loss.default,
        (T(4), torch.tensor(2), 1, 1.0, T(4), 0),
        meta_agrees=False,
    ),
    *(
        Case(
            f"multi_margin_backward_p{p}",
            aten.multi_margin_loss_backward.default,
            (T(3), f34, idx(0, 3, 1), p, 0.7, T(4), 0),
            meta_agrees=False,
        )
        for p in (1, 2)
    ),
    Case(
        "multi_margin_backward_mean",
        aten.multi_margin_loss_backward.default,
        (T(), f34, idx(0, 3, 1), 1, 1.0, None, 1),
        meta_agrees=False,
    ),
    *(
        Case(
            f"multilabel_margin_r{red}",
            aten.multilabel_margin_loss_forward.default,
            (f34, torch.tensor([[0, 1, -1, 0], [3, -1, 0, 0], [1, 2, 3, -1]]), red),
        )
        for red in (0, 1, 2)
    ),
    Case(
        "multilabel_margin_1d",
        aten.multilabel_margin_loss_forward.default,
        (T(4), idx(2, 0, -1, 1), 0),
        meta_agrees=False,
    ),
    *(
        Case(
            f"multilabel_margin_backward_r{red}",
            aten.multilabel_margin_loss_backward.default,
            (
                T() if red else T(3),
                f34,
                torch.tensor([[0, 1, -1, 0], [3, -1, 0, 0], [1, 2, 3, -1]]),
                red,
                torch.tensor([[1.0, 1, 0, 0], [0, 0, 0, 1], [0, 1, 1, 1]]),
            ),
            meta_agrees=False,
        )  # no meta kernel
        for red in (0, 1)
    ),
    # embedding_bag (aux outputs follow CPU, whose shapes differ from meta's)
    *(
        Case(
            f"embedding_bag_mode{m}_ilo{ilo}_pad{pad}",
            aten._embedding_bag.default,
            (ebag_w, ebag_ind, ebag_off_ilo if ilo else ebag_off, False, m, False, None, ilo, pad),
            meta_agrees=False,
        )
        for m in (0, 1, 2)
        for ilo in (False, True)
        for pad in (-1, 4)
    ),
    Case(
        "embedding_bag_sum_psw",
        aten._embedding_bag.default,
        (ebag_w, ebag_ind, ebag_off, False, 0, False, ebag_psw),
        meta_agrees=False,
    ),
    Case(
        "embedding_bag_sum_psw_pad",
        aten._embedding_bag.default,
        (ebag_w, ebag_ind, ebag_off_ilo, False, 0, False, ebag_psw, True, 4),
        meta_agrees=False,
    ),
    *(
        Case(
            f"embedding_bag_forward_only_mode{m}_ilo{ilo}",
            aten._embedding_bag_forward_only.default,
            (ebag_w, ebag_ind, ebag_off_ilo if ilo else ebag_off, False, m, False, None, ilo, 4),
            meta_agrees=False,
        )
        for m in (0, 1, 2)
        for ilo in (False, True)
    ),
    Case(
        "embedding_bag_f64_int32",
        aten._embedding_bag.default,
        (T(10, 3, dtype=torch.float64), ebag_ind.int(), ebag_off.int(), False, 1),
        meta_agrees=False,
    ),
    *(
        Case(
            f"embedding_bag_no_indices_mode{m}",
            aten._embedding_bag.default,
            (ebag_w, torch.zeros(0, dtype=torch.long), idx(0, 0), False, m),
            meta_agrees=False,
        )
        for m in (0, 1, 2)
    ),
]


def _embedding_bag_backward_cases():
    cases = []
    # scale_grad_by_freq is checked in test_embedding_bag_scale_grad_by_freq: CPU's
    # kernel divides some rows by another row's frequency.
    for mode in (0, 1, 2):
        for scale in (False,):
            for pad in (-1, 4):
                psw = ebag_psw if mode == 0 and pad == -1 else None
                _, o2b, bag_size, max_idx = aten._embedding_bag(
                    ebag_w, ebag_ind, ebag_off, scale, mode, False, psw, False, pad
                )
                grad = T(4, 3)
                cases.append(Case(
                    f"embedding_bag_backward_mode{mode}_scale{scale}_pad{pad}", aten._embedding_bag_backward.default,
                    (grad, ebag_ind, ebag_off, o2b, bag_size, max_idx, 10, scale, mode, False, psw, pad),
                ))
                if o2b.numel():
                    cases.append(
                        Case(
                            f"embedding_bag_dense_backward_mode{mode}_scale{scale}_pad{pad}",
                            aten._embedding_bag_dense_backward.default,
                            (grad, ebag_ind, o2b, bag_size, max_idx, 10, scale, mode, psw, pad),
                            meta_agrees=False,
                        )
                    )
    for pad in (-1, 4):
        _, o2b, _, _ = aten._embedding_bag(ebag_w, ebag_ind, ebag_off, False, 0, False, ebag_psw, False, pad)
        cases.append(Case(
            f"embedding_bag_psw_backward_pad{pad}", aten._embedding_bag_per_sample_weights_backward.default,
            (T(4, 3), ebag_w, ebag_ind, ebag_off, o2b, 0, pad),
        ))
    return cases


def test_embedding_bag_scale_grad_by_freq():
    # Each row's gradient is divided by how often that row occurs in the batch (as
    # embedding_dense_backward does). PyTorch CPU's embedding_bag kernel divides row 5
    # here by the count of row 4 (2) instead of its own (1): we keep the definition.
    ind, off = idx(1, 2, 4, 5, 4, 3, 9, 0), idx(0, 2, 2, 5)
    grad = torch.tensor([[1.0], [10.0], [100.0], [1000.0]])
    for mode, per_bag in ((0, grad[:, 0]), (1, grad[:, 0] / torch.tensor([2.0, 1.0, 3.0, 3.0]))):
        _, o2b, bag_size, max_idx = aten._embedding_bag(T(10, 1), ind, off, True, mode)
        got = run_lowering(
            aten._embedding_bag_backward.default,
            (grad, ind, off, o2b, bag_size, max_idx, 10, True, mode, False, None),
            {},
        )
        bags = torch.tensor([0, 0, 2, 2, 2, 3, 3, 3])
        freq = torch.bincount(ind, minlength=10).double()
        expected = torch.zeros(10).index_add(0, ind, (per_bag[bags] / freq[ind]).float())
        assert_same(got[:, 0], expected)


def _distance_cases():
    x1, x2 = T(4, 3), T(5, 3)
    x1[1] = x2[2]  # a zero distance: its gradient is 0 by PyTorch's convention
    cases = []
    for p in (0.0, 1.0, 2.0, 3.0, 0.5, math.inf):
        cases.append(Case(f"cdist_p{p}", aten._cdist_forward.default, (x1, x2, p, None)))
        dist = torch.cdist(x1, x2, p)
        cases.append(
            Case(
                f"cdist_backward_p{p}",
                aten._cdist_backward.default,
                (T(4, 5), x1, x2, p, dist),
                tol={"atol": 1e-4, "rtol": 1e-4},
            )
        )
        cases.append(Case(f"pdist_p{p}", aten._pdist_forward.default, (x1, p)))
        cases.append(
            Case(
                f"pdist_backward_p{p}",
                aten._pdist_backward.default,
                (T(6), x1, p, F.pdist(x1, p)),
                tol={"atol": 1e-4, "rtol": 1e-4},
            )
        )
    xb1, xb2 = T(2, 1, 4, 3, dtype=torch.float64), T(3, 5, 3, dtype=torch.float64)
    cases.append(Case("cdist_batch_broadcast", aten._cdist_forward.default, (xb1, xb2, 2.0, None)))
    cases.append(Case("cdist_backward_batch", aten._cdist_backward.default,
                      (T(2, 3, 4, 5, dtype=torch.float64), xb1.expand(2, 3, 4, 3), xb2.expand(2, 3, 5, 3), 2.0,
                       torch.cdist(xb1, xb2))))
    bounds = torch.tensor([-1.0, 0.0, 0.5, 0.5, 2.0])
    vals = torch.tensor([[-2.0, 0.0, 0.5, 0.7], [3.0, 2.0, -1.0, 0.25]])
    for right in (False, True):
        cases.append(Case(f"bucketize_right{right}", aten.bucketize.Tensor, (vals, bounds), {"right": right}))
        cases.append(Case(f"searchsorted_right{right}", aten.searchsorted.Tensor, (bounds, vals), {"right": right}))
    cases.append(Case("bucketize_int32", aten.bucketize.Tensor, (idx(1, 5, 9), idx(0, 5, 10)), {"out_int32": True}))
    cases.append(Case("searchsorted_side_sorter", aten.searchsorted.Tensor, (torch.tensor([3.0, 1.0, 2.0]), T(4)),
                      {"side": "right", "sorter": idx(1, 2, 0)}))
    cases.append(Case("searchsorted_batched", aten.searchsorted.Tensor, (torch.sort(T(2, 5)).values, T(2, 3))))
    return cases


CASES += _embedding_bag_backward_cases() + _distance_cases()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_lowering_matches_cpu(case):
    assert_lowering_matches_cpu(case)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_shape_fn_matches_meta(case):
    assert_shape_fn_matches_meta(case)


def test_every_lowering_has_a_case():
    covered = {f"lower_{unambiguous_name(c.op)}" for c in CASES}
    missing = sorted(set(LOWERINGS) - covered)
    assert not missing, f"lowerings without a test case: {missing}"
    assert {f"{n[len('lower_'):]}_output_shape" for n in LOWERINGS} == set(SHAPE_FNS)


def test_signatures_match_the_schema():
    for case in CASES:
        assert_signatures_match_schema(unambiguous_name(case.op), case.op, LOWERINGS, SHAPE_FNS, check_defaults=False)


# ---------------------------------------------------------------- errors

ERROR_CASES = [
    Case("gather_float_index", aten.gather.default, (f34, 1, T(3, 1))),
    Case("gather_index_too_large", aten.gather.default, (f34, 1, torch.zeros(4, 1, dtype=torch.int64))),
    Case("gather_ndim_mismatch", aten.gather.default, (f34, 1, idx(0))),
    Case("gather_dim_out_of_range", aten.gather.default, (f34, 2, gidx)),
    Case("scatter_src_dtype", aten.scatter.src, (f34, 1, gidx, T(3, 2, dtype=torch.float64))),
    Case("scatter_src_too_small", aten.scatter.src, (f34, 1, gidx, T(3, 1))),
    Case("index_select_float_index", aten.index_select.default, (f34, 0, T(2))),
    Case("index_select_2d_index", aten.index_select.default, (f34, 0, torch.zeros(2, 2, dtype=torch.int64))),
    Case("take_int32_index", aten.take.default, (f34, idx(0).int())),
    Case("put_dtype", aten.put.default, (f34, idx(0), T(1, dtype=torch.float64))),
    Case("put_numel", aten.put.default, (f34, idx(0), T(2))),
    Case("index_add_dtype", aten.index_add.default, (f34, 0, idx(0), T(1, 4, dtype=torch.float64))),
    Case("index_add_count", aten.index_add.default, (f34, 0, idx(0), T(2, 4))),
    Case("index_copy_count", aten.index_copy.default, (f34, 0, idx(0), T(2, 4))),
    Case("index_fill_int32_index", aten.index_fill.int_Scalar, (f34, 0, idx(0).int(), 1.0)),
    Case("index_fill_tensor_value_1d", aten.index_fill.int_Tensor, (f34, 0, idx(0), T(2))),
    Case("masked_fill_uint8_mask", aten.masked_fill.Scalar, (f34, mask34.to(torch.uint8), 0.0)),
    Case("masked_fill_value_1d", aten.masked_fill.Tensor, (f34, mask34, T(2))),
    Case("masked_scatter_dtype", aten.masked_scatter.default, (f34, mask34, T(12, dtype=torch.float64))),
    Case("select_scatter_out_of_range", aten.select_scatter.default, (f34, T(4), 0, 3)),
    Case("select_scatter_shape", aten.select_scatter.default, (f34, T(3), 0, 1)),
    Case("slice_scatter_shape", aten.slice_scatter.default, (f34, T(3, 4), 0, 0, 2)),
    Case("diagonal_scatter_shape", aten.diagonal_scatter.default, (f34, T(4))),
    Case("nll_target_int32", aten.nll_loss_forward.default, (logp, target4.int(), None, 1, -100)),
    Case("nll_batch_mismatch", aten.nll_loss_forward.default, (logp, idx(0, 1), None, 1, -100)),
    Case("nll_weight_size", aten.nll_loss_forward.default, (logp, target4, T(4), 1, -100)),
    Case(
        "nll_3d_input", aten.nll_loss_forward.default, (T(2, 3, 4), torch.zeros(2, 4, dtype=torch.int64), None, 1, -100)
    ),
    Case("mse_int", aten.mse_loss.default, (i34, i34, 0)),
    Case("multi_margin_p3", aten.multi_margin_loss.default, (f34, idx(0, 1, 2), 3, 1.0)),
    Case("cdist_columns", aten._cdist_forward.default, (T(3, 4), T(2, 3), 2.0, None)),
    Case("cdist_int", aten._cdist_forward.default, (i34, i34, 2.0, None)),
    Case("cdist_negative_p", aten._cdist_forward.default, (f34, f34, -1.0, None)),
    Case("bucketize_2d_boundaries", aten.bucketize.Tensor, (T(3), T(2, 2))),
    Case(
        "embedding_bag_psw_mean", aten._embedding_bag.default, (ebag_w, ebag_ind, ebag_off, False, 1, False, ebag_psw)
    ),
]


@pytest.mark.parametrize("case", ERROR_CASES, ids=lambda c: c.id)
def test_shape_fn_raises_like_cpu(case):
    # embedding_bag_psw_mean: ours raises NotImplementedError, a RuntimeError, where CPU raises RuntimeError
    assert_shape_fn_raises_like_cpu(case, exact_type=False)


def test_data_indices_out_of_range_never_clamp():
    # Note [Out-of-bounds indices]: inside a compiled gather the index cannot raise; it
    # reads a fill value and a scatter drops the update, never a clamped neighbour.
    got = run_lowering(aten.gather.default, (f34, 1, torch.tensor([[4], [-1], [0]])), {})
    assert torch.isnan(got[:2]).all() and got[2, 0] == f34[2, 0]
    got = run_lowering(aten.scatter.value, (f34, 1, torch.tensor([[4], [-1], [0]]), 9.0), {})
    expected = f34.clone()
    expected[2, 0] = 9.0
    assert torch.equal(got, expected)
    got = run_lowering(aten.take.default, (i34, idx(12, -13)), {})
    assert (got == torch.iinfo(torch.int64).min).all()


# ---------------------------------------------------------------- on our tensors

@pytest.fixture
def cpu_fallback_for_other_families():
    # Samples also call ops of other families (remainder in take_along_dim, aminmax);
    # those may run on CPU here, ours must not (checked by the metrics below).
    from xla_native_functions.runtime.platform.metrics import metrics

    old = xnf.config.allow_cpu_fallback
    xnf.config.allow_cpu_fallback = True
    metrics.fallback_calls.clear()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        xnf.config.allow_cpu_fallback = old
    ours = {str(c.op) for c in CASES} | {"aten.index.Tensor", "aten.index_put.default", "aten.masked_select.default"}
    # In-place and out= forms are derived from the functional op.
    fell_back = {str(op).replace("_.", ".").replace(".out", ".default") for op in metrics.fallback_calls}
    assert not (fell_back & ours), f"ran on CPU: {fell_back & ours}"





def X(t):
    return xnf.to_xla(t)


def C(t):
    return xnf.to_torch(t)


x45 = T(4, 5)
y3456 = T(3, 4, 5, 6)


@pytest.mark.parametrize(
    "key",
    [
        (idx(0, 2, -1),),
        (slice(None), idx(4, 0)),
        (None, idx(1, 3), slice(1, 3)),
        (idx(0, 1), idx(2, 3)),
        (torch.tensor([[0], [2]]), idx(1, 3, 4)),
        (x45 > 0,),
        (torch.tensor([True, False, True, True]),),
        (torch.tensor([True, False, True, True]), idx(0, 1, 4)),
        (Ellipsis, idx(-1)),
        (idx(2).int(),),
    ],
    ids=lambda k: "_".join(
        type(v).__name__ if not isinstance(v, torch.Tensor) else f"{v.dtype}{list(v.shape)}" for v in k
    ),
)
def test_getitem(key):
    dev_key = tuple(X(k) if isinstance(k, torch.Tensor) and k.dtype is torch.bool else k for k in key)
    assert_same(C(X(x45)[dev_key]), x45[key])


@pytest.mark.parametrize(
    "key",
    [
        (idx(1), slice(None), idx(2, 3)),
        (slice(None), idx(0, 2), slice(None), idx(1, 5)),
        (idx(0, 2), idx(1, 3)),
        (torch.tensor([[0], [1]]), slice(None), idx(1, 2, 3)),
    ],
    ids=["nonadjacent", "nonadjacent_4d", "adjacent", "broadcast_nonadjacent"],
)
def test_getitem_advanced_index_placement(key):
    assert_same(C(X(y3456)[key]), y3456[key])


def test_indexing_with_cpu_indices_keeps_their_values_when_they_change():
    """Eager index.Tensor and index_put take CPU index tensors as NumPy copies of their
    values: writing to the index tensor afterwards changes nothing, large or small."""
    for n in (3, 1 << 20):
        src = torch.randn(n + 5)
        i = torch.arange(n)
        got = X(src)[i]
        ours, ref = X(src), src.clone()
        ours.index_put_((i,), X(torch.ones(n)), accumulate=True)
        ref.index_put_((i,), torch.ones(n), accumulate=True)
        i.add_(5)
        assert_same(C(got), src[:n])
        assert_same(C(ours), ref)
        assert_same(C(X(src)[i]), src[5:])


def test_getitem_backward_with_cpu_indices():
    ref = torch.randn(2, 4, 4, requires_grad=True)
    ours = X(ref.detach()).requires_grad_()
    i, j = torch.triu_indices(4, 4, offset=1)
    (ref[:, i, j] * torch.arange(6.0)).sum().backward()
    (ours[:, i, j] * X(torch.arange(6.0))).sum().backward()
    assert_same(C(ours.grad), ref.grad)


def test_getitem_out_of_range_raises_eagerly():
    with pytest.raises(IndexError, match="out of bounds"):
        X(x45)[idx(4)]
    with pytest.raises(IndexError, match="out of bounds"):
        X(x45)[:, idx(-6)]
    with pytest.raises(IndexError, match="tensors used as indices must be long, int, byte or bool"):
        X(x45)[torch.tensor([0.0])]
    with pytest.raises(IndexError, match="shape of the mask"):
        X(x45)[X(torch.tensor([True, False]))]


def test_setitem():
    ref, ours = x45.clone(), X(x45)
    ref[idx(0, -1)] = 2.0
    ours[idx(0, -1)] = 2.0
    ref[:, idx(1, 3)] = torch.arange(8.0).reshape(4, 2)
    ours[:, idx(1, 3)] = X(torch.arange(8.0).reshape(4, 2))
    mask = ref > 0.5
    n = int(mask.sum())
    ref[mask] = torch.arange(float(n))
    ours[X(mask)] = X(torch.arange(float(n)))
    ref[ref > 1] = 1.0
    ours[ours > 1] = 1.0
    assert_same(C(ours), ref)
    with pytest.raises(IndexError, match="out of bounds"):
        ours[idx(9)] = 1.0
    with pytest.raises(RuntimeError, match="shape mismatch"):
        ours[idx(0)] = X(torch.ones(3))


def test_setitem_through_a_view_reaches_the_base():
    ref, ours = x45.clone(), X(x45)
    ref[:, 1][idx(0, 2, 2)] += 1
    ours[:, 1][idx(0, 2, 2)] += 1
    ref.t()[idx(3)] = 0.0
    ours.t()[idx(3)] = 0.0
    assert_same(C(ours), ref)


def test_index_put_accumulate_and_int_dtypes():
    base = ints(5, 3)
    ix = idx(0, 4, 0, 0)
    vals = ints(4, 3)
    ref = base.index_put((ix,), vals, accumulate=True)
    assert_same(C(X(base).index_put((X(ix),), X(vals), accumulate=True)), ref)


def test_masked_select():
    for self_, mask in (
        (x45, x45 > 0),
        (ints(4, 5), torch.tensor([True, False, True, False, True])),
        (T(5), torch.zeros(3, 5, dtype=torch.bool)),
    ):
        assert_same(C(X(self_).masked_select(X(mask))), self_.masked_select(mask))


def _grads(fn, *tensors):
    ref = [t.detach().clone().requires_grad_() for t in tensors]
    ours = [X(t.detach()).requires_grad_() for t in tensors]
    out_ref, out = fn(*ref), fn(*ours)
    gout = torch.randn_like(out_ref)
    out_ref.backward(gout)
    out.backward(X(gout))
    assert_same(C(out), out_ref.detach(), atol=1e-5, rtol=1e-5)
    for a, b in zip(ours, ref):
        assert_same(C(a.grad), b.grad, atol=1e-5, rtol=1e-5)


def test_getitem_backward():
    mask = x45 > 0
    _grads(lambda t: t[idx(0, 2, 0)] * 2, x45)
    _grads(lambda t: t[X(mask) if isinstance(t, xnf.runtime.core.tensor.XlaTensor) else mask], x45)
    _grads(
        lambda t: t.gather(1, gidx.to(t.device) if not isinstance(t, xnf.runtime.core.tensor.XlaTensor) else X(gidx)),
        f34,
    )
    _grads(
        lambda t: t.index_select(0, X(idx(1, 1)) if isinstance(t, xnf.runtime.core.tensor.XlaTensor) else idx(1, 1)),
        f34,
    )


def _maybe(t, like):
    return X(t) if isinstance(like, xnf.runtime.core.tensor.XlaTensor) else t


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("psw", [False, True])
@pytest.mark.parametrize("padding_idx", [None, 4])
def test_embedding_bag_forward_backward(mode, psw, padding_idx):
    if psw and mode != "sum":
        pytest.skip("per_sample_weights exists only for mode='sum'")
    weights = T(10, 3, dtype=torch.float64)
    psw_t = T(8, dtype=torch.float64) if psw else None
    tensors = (weights,) + ((psw_t,) if psw else ())

    def fn(w, *rest):
        return F.embedding_bag(_maybe(ebag_ind, w), w, _maybe(ebag_off, w), mode=mode,
                               per_sample_weights=rest[0] if rest else None, padding_idx=padding_idx)

    _grads(fn, *tensors)


def test_take_rows_of_a_large_table_loops_and_reads_what_a_gather_reads():
    """Note [Few rows of a large table]: few rows of a table of 512 KB or more are read
    by a loop of dynamic slices on the CPU, with the gather's values (the fill value at
    index == len(table))."""
    table = jax.numpy.asarray(np.random.default_rng(0).standard_normal((1024, 128)).astype(np.float32))
    index = jax.numpy.asarray(np.array([0, 1023, 5, 5, 1024, 77]))
    ref = np.asarray(jax.numpy.take(table, index, axis=0, mode="fill", fill_value=np.nan))
    for rows, loops in [(table, True), (table[:900], False)]:  # 512 KB and more; less
        idx_ = jax.numpy.minimum(index, rows.shape[0])
        jaxpr = str(jax.make_jaxpr(lower_indexing.take_rows)(rows, idx_))
        assert ("scan" in jaxpr or "while" in jaxpr) is loops and ("gather" not in jaxpr) is loops
        got = np.asarray(jax.jit(lower_indexing.take_rows)(rows, idx_))
        expected = np.asarray(jax.numpy.take(rows, idx_, axis=0, mode="fill", fill_value=np.nan))
        np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(np.asarray(jax.jit(lower_indexing.take_rows)(table, index)), ref)
    many = jax.numpy.arange(lower_indexing.LOOP_ROWS + 1) % 1024
    assert "gather" in str(jax.make_jaxpr(lower_indexing.take_rows)(table, many))


@pytest.mark.parametrize("mode", ["sum", "mean", "max", "sum-weighted"])
def test_embedding_bag_of_a_large_table_matches_torch(mode):
    """The lookups of Note [Few rows of a large table], forward and backward, eager and
    compiled, against PyTorch CPU."""
    torch.manual_seed(0)
    bag = torch.nn.EmbeddingBag(2048, 128, mode=mode.split("-")[0])
    indices = torch.tensor([3, 2047, 3, 0, 512, 9, 1000])
    offsets = torch.tensor([0, 2, 2, 5])
    psw = torch.rand(len(indices), requires_grad=True) if mode == "sum-weighted" else None
    ref = bag(indices, offsets, per_sample_weights=psw)
    ref.pow(2).sum().backward()
    for compiled in (False, True):
        ours = xnf.to_xla(torch.nn.EmbeddingBag(2048, 128, mode=mode.split("-")[0]))
        ours.load_state_dict({k: X(v) for k, v in bag.state_dict().items()})
        ours_psw = None if psw is None else X(psw.detach()).requires_grad_()

        def step(i, o, w):
            out = ours(i, o, per_sample_weights=w)
            out.pow(2).sum().backward()
            return out.detach()

        got = (xnf.compile(step) if compiled else step)(X(indices), X(offsets), ours_psw)
        torch.testing.assert_close(C(got), ref.detach(), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(C(ours.weight.grad), bag.weight.grad, rtol=1e-5, atol=1e-6)
        if psw is not None:
            torch.testing.assert_close(C(ours_psw.grad), psw.grad, rtol=1e-5, atol=1e-6)


def test_embedding_bag_module_include_last_offset():
    torch.manual_seed(1)
    bag = torch.nn.EmbeddingBag(10, 4, mode="sum", include_last_offset=True)
    ours = xnf.to_xla(torch.nn.EmbeddingBag(10, 4, mode="sum", include_last_offset=True))
    ours.load_state_dict({k: X(v) for k, v in bag.state_dict().items()})
    offsets = idx(0, 3, 3, 8)
    psw = T(8)
    ref = bag(ebag_ind, offsets, per_sample_weights=psw)
    got = ours(X(ebag_ind), X(offsets), per_sample_weights=X(psw))
    assert_same(C(got), ref.detach())
    ref.sum().backward()
    got.sum().backward()
    assert_same(C(ours.weight.grad), bag.weight.grad)


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"weight": "w"}, {"ignore_index": 2}, {"reduction": "sum"}, {"reduction": "none"}, {"label_smoothing": 0.1}],
)
def test_cross_entropy_forward_backward(kwargs, cpu_fallback_for_other_families):
    w = T(5, low=0.1, high=2)
    target = idx(0, 4, 2, 1, 2)
    kw = dict(kwargs)

    def fn(logits):
        k = {key: (_maybe(w, logits) if v == "w" else v) for key, v in kw.items()}
        out = F.cross_entropy(logits, _maybe(target, logits), **k)
        return out

    _grads(fn, T(5, 5))


def test_cross_entropy_2d_and_losses_backward(cpu_fallback_for_other_families):
    logits = T(2, 3, 4, 4)
    target = torch.randint(0, 3, (2, 4, 4))
    _grads(lambda t: F.cross_entropy(t, _maybe(target, t)), logits)
    y = T(3, 4)
    for fn in (F.mse_loss, F.smooth_l1_loss, F.huber_loss, F.soft_margin_loss, F.binary_cross_entropy_with_logits):
        _grads(lambda t: fn(t, _maybe(y, t)), f34)
    _grads(lambda t: F.binary_cross_entropy(torch.sigmoid(t), _maybe(probs, t)), f34)
    _grads(lambda t: F.multi_margin_loss(t, _maybe(idx(0, 3, 1), t)), f34)
    _grads(
        lambda t: F.multilabel_margin_loss(t, _maybe(torch.tensor([[0, 1, -1, 0], [3, -1, 0, 0], [1, 2, 3, -1]]), t)),
        f34,
    )
    other = T(5, 4)
    _grads(lambda t: torch.cdist(t, _maybe(other, t)), f34)
    _grads(lambda t: F.pdist(t), f34)


def test_compiled_indexing_matches_eager():
    mask = x45 > 0

    def step(x, i, m, g):
        y = x[i] * 2
        x[m] = 0.0
        z = x.gather(1, g).sum() + y.sum()
        x.scatter_add_(1, g, torch.ones_like(g, dtype=x.dtype))
        return z

    gi = torch.tensor([[0, 4], [1, 1], [3, 2], [0, 0]])
    ref_x = x45.clone()
    ref = step(ref_x, idx(1, 3), mask, gi)
    compiled = xnf.compile(step)
    ours_x = X(x45)
    got = compiled(ours_x, X(idx(1, 3)), X(mask), X(gi))
    assert_same(C(got), ref)
    assert_same(C(ours_x), ref_x)


def test_compiled_cross_entropy_training_step():
    torch.manual_seed(2)
    ref_model = torch.nn.Linear(6, 5)
    model = xnf.to_xla(torch.nn.Linear(6, 5))
    model.load_state_dict({k: X(v) for k, v in ref_model.state_dict().items()})
    data, target = T(8, 6), torch.randint(0, 5, (8,))

    def step(m, x, t):
        loss = F.cross_entropy(m(x), t)
        loss.backward()
        return loss

    ref = step(ref_model, data, target)
    got = xnf.compile(step)(model, X(data), X(target))
    assert_same(C(got), ref.detach(), atol=1e-5, rtol=1e-5)
    assert_same(C(model.weight.grad), ref_model.weight.grad, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------- OpInfo samples

OPINFOS = [
    "index_put", "__getitem__", "gather", "index_select", "take", "take_along_dim", "scatter", "scatter_add",
    "scatter_reduce", "index_add", "index_copy", "index_fill", "masked_fill", "masked_scatter", "masked_select",
    "put", "select_scatter", "slice_scatter", "diagonal_scatter", "as_strided_scatter",
    "nn.functional.embedding_bag", "nn.functional.cross_entropy", "nn.functional.nll_loss", "nn.functional.mse_loss",
    "nn.functional.smooth_l1_loss", "nn.functional.huber_loss", "nn.functional.binary_cross_entropy",
    "nn.functional.binary_cross_entropy_with_logits", "nn.functional.soft_margin_loss",
    "nn.functional.multi_margin_loss", "nn.functional.multilabel_margin_loss", "cdist", "nn.functional.pdist",
    "bucketize", "searchsorted",
]
MAX_SAMPLES = 12


def _has_list_index(sample):
    # A Python list index reaches the backend as a CPU tensor copied to our device
    # through aten::_copy_from, which the runtime does not register (see the report).
    return any(
        isinstance(a, list) or (isinstance(a, tuple) and any(isinstance(b, list) for b in a)) for a in sample.args
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool], ids=str)
@pytest.mark.parametrize(
    "opinfo", op_db_entries(OPINFOS), ids=opinfo_id
)
def test_opinfo_samples(opinfo, dtype, cpu_fallback_for_other_families):
    if dtype not in opinfo.supported_dtypes("cpu"):
        pytest.skip(f"{opinfo.name} has no {dtype} kernel on CPU")
    checked = 0
    for sample in opinfo.sample_inputs("cpu", dtype):
        if checked == MAX_SAMPLES:
            break
        if _has_list_index(sample):
            continue
        if forward_matches_cpu(opinfo, sample):
            checked += 1


GRAD_OPINFOS = [
    "index_put", "__getitem__", "gather", "index_select", "take", "scatter", "scatter_add", "scatter_reduce",
    "index_add", "masked_fill", "masked_scatter", "masked_select", "put", "select_scatter", "slice_scatter",
    "diagonal_scatter", "nn.functional.embedding_bag", "nn.functional.cross_entropy", "nn.functional.nll_loss",
    "nn.functional.mse_loss", "nn.functional.smooth_l1_loss", "nn.functional.huber_loss",
    "nn.functional.binary_cross_entropy", "nn.functional.soft_margin_loss", "nn.functional.multi_margin_loss",
    "nn.functional.multilabel_margin_loss", "cdist", "nn.functional.pdist",
]
GRAD_SAMPLES = 6


@pytest.mark.parametrize(
    "opinfo", [o for o in op_db_entries(OPINFOS) if o.name in GRAD_OPINFOS and o.supports_autograd], ids=opinfo_id
)
def test_opinfo_float64_gradients(opinfo, cpu_fallback_for_other_families):
    checked = 0
    for sample in opinfo.sample_inputs("cpu", torch.float64, requires_grad=True):
        if checked == GRAD_SAMPLES:
            break
        if _has_list_index(sample):
            continue
        if float64_gradients_match_cpu(opinfo, sample):
            checked += 1
