"""Convolution, normalization, pooling, padding and upsampling ops against PyTorch CPU
(values), meta (shapes, dtypes) and CPU errors; a small ResNet block forward and
backward, in training and evaluation mode, on the backend; OpInfo samples."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

import xla_native_functions as xnf
from opinfo_samples import op_db_entry, sample_and_first_gradient_match_cpu
from lowering_harness import (
    Case,
    ErrorCase,
    assert_lowering_matches_cpu,
    assert_shape_fn_matches_meta,
    assert_shape_fn_raises_like_cpu,
    assert_signatures_match_schema,
    call_lowering,
    call_shape_fn,
    functions_in,
    cases_elsewhere,
    T,
    ints,
    unambiguous_name,
)
from xla_native_functions.lowerings import conv as lower_conv
from xla_native_functions.lowerings import normalization as lower_norm
from xla_native_functions.lowerings import padding as lower_padding
from xla_native_functions.lowerings import pooling as lower_pooling
from xla_native_functions.lowerings import upsample as lower_upsample
from xla_native_functions.shape_fns import conv as shape_conv
from xla_native_functions.shape_fns import normalization as shape_norm
from xla_native_functions.shape_fns import padding as shape_padding
from xla_native_functions.shape_fns import pooling as shape_pooling
from xla_native_functions.shape_fns import upsample as shape_upsample

aten = torch.ops.aten

LOWER_MODULES = [lower_conv, lower_norm, lower_pooling, lower_padding, lower_upsample]
SHAPE_MODULES = [shape_conv, shape_norm, shape_pooling, shape_padding, shape_upsample]


LOWERINGS = functions_in(LOWER_MODULES, prefix="lower_", operators_only=True)
SHAPE_FNS = functions_in(SHAPE_MODULES, suffix="_output_shape", operators_only=True)
# native_batch_norm is `supported` (it writes the running statistics in place); its
# node computes batch_norm_with_update, checked here through a wrapper of its schema.


def _native_batch_norm_lowering(input, weight, bias, running_mean, running_var, training, momentum, eps):
    return lower_norm.lower_batch_norm_with_update(
        input, weight, bias, running_mean, running_var, training, momentum, eps
    )[:3]


def _native_batch_norm_meta(input, weight, bias, running_mean, running_var, training, momentum, eps):
    return shape_norm.batch_norm_with_update_output_shape(
        input, weight, bias, running_mean, running_var, training, momentum, eps
    )[:3]


LOWERINGS["lower_native_batch_norm"] = _native_batch_norm_lowering
SHAPE_FNS["native_batch_norm_output_shape"] = _native_batch_norm_meta


# this file's tables, which hold native_batch_norm's wrappers
def run_lowering(op, args, kwargs):
    return call_lowering(LOWERINGS[f"lower_{unambiguous_name(op)}"], op, args, kwargs)


def run_shape_fn(op, args, kwargs):
    return call_shape_fn(SHAPE_FNS[f"{unambiguous_name(op)}_output_shape"], args, kwargs)


torch.manual_seed(0)
D = torch.float64
F32_TOL = dict(atol=1e-4, rtol=1e-4)


def conv_cases():
    cases = []
    specs = [
        # id, input, weight, bias, stride, padding, dilation, transposed, output_padding, groups
        ("conv1d", (2, 4, 9), (6, 4, 3), True, [1], [0], [1], False, [0], 1),
        ("conv1d_stride_pad_dil", (2, 4, 11), (6, 2, 3), False, [2], [2], [2], False, [0], 2),
        ("conv2d", (2, 3, 7, 6), (4, 3, 3, 2), True, [1, 1], [1, 0], [1, 1], False, [0, 0], 1),
        ("conv2d_groups_depthwise", (1, 4, 6, 6), (8, 1, 3, 3), True, [2, 1], [1, 1], [1, 2], False, [0, 0], 4),
        ("conv3d", (1, 2, 5, 4, 6), (3, 2, 2, 3, 2), True, [1, 2, 1], [1, 0, 1], [1, 1, 2], False, [0, 0, 0], 1),
        ("conv_transpose1d", (2, 4, 5), (4, 3, 3), True, [2], [1], [1], True, [1], 1),
        ("conv_transpose2d", (2, 4, 5, 4), (4, 3, 3, 2), False, [2, 3], [1, 0], [1, 2], True, [1, 2], 1),
        ("conv_transpose2d_groups", (1, 4, 3, 3), (4, 2, 3, 3), True, [2, 2], [0, 1], [2, 1], True, [1, 0], 2),
        ("conv_transpose2d_big_padding", (1, 2, 6, 6), (2, 2, 2, 2), True, [1, 1], [1, 1], [1, 1], True, [0, 0], 1),
        (
            "conv_transpose3d",
            (1, 2, 3, 3, 2),
            (2, 3, 2, 2, 2),
            True,
            [2, 1, 2],
            [0, 1, 0],
            [1, 1, 1],
            True,
            [1, 0, 0],
            1,
        ),
    ]
    for id, xs, ws, has_bias, s, p, d, tr, op, g in specs:
        cout = ws[1] * g if tr else ws[0]
        for dtype in (torch.float32, D):
            x, w = T(*xs, dtype=dtype), T(*ws, dtype=dtype)
            b = T(cout, dtype=dtype) if has_bias else None
            tol = F32_TOL if dtype is torch.float32 else {}
            sfx = "" if dtype is torch.float32 else "_f64"
            cases.append(Case(id + sfx, aten.convolution.default, (x, w, b, s, p, d, tr, op, g), tol=tol))
            y = aten.convolution.default(x, w, b, s, p, d, tr, op, g)
            gy = T(*y.shape, dtype=dtype)
            bias_sizes = [cout] if has_bias else None
            for mask in ([True, True, True], [True, False, False], [False, True, has_bias]):
                cases.append(
                    Case(
                        f"{id}_backward_{''.join('1' if m else '0' for m in mask)}{sfx}",
                        aten.convolution_backward.default,
                        (gy, x, w, bias_sizes, s, p, d, tr, op, g, mask),
                        tol=tol,
                        # The meta kernel cannot size grad_bias without bias_sizes; CPU can.
                        meta_agrees=has_bias or not mask[2],
                    )
                )
    cases.append(
        Case(
            "conv2d_int64",
            aten.convolution.default,
            (ints(1, 2, 4, 4), ints(3, 2, 2, 2), ints(3), [1, 1], [1, 1], [1, 1], False, [0, 0], 1),
        )
    )
    cases.append(
        Case(
            "conv2d_bf16",
            aten.convolution.default,
            (
                T(1, 2, 5, 5, dtype=torch.bfloat16),
                T(3, 2, 3, 3, dtype=torch.bfloat16),
                None,
                [1, 1],
                [0, 0],
                [1, 1],
                False,
                [0, 0],
                1,
            ),
            tol=dict(atol=0.1, rtol=0.02),
        )
    )
    return cases


def norm_cases():
    cases = []
    x4, x3 = T(4, 3, 5, 5, dtype=D), T(6, 3, 7, dtype=D)
    w, b = T(3, dtype=D), T(3, dtype=D)
    rm, rv = T(3, dtype=D), T(3, dtype=D, low=0.5, high=2)
    for train in (True, False):
        mode = "train" if train else "eval"
        cases.append(
            Case(
                f"native_batch_norm_{mode}",
                aten.native_batch_norm.default,
                (x4, w, b, rm, rv, train, 0.1, 1e-5),
                meta_agrees=train,
            )
        )
        cases.append(
            Case(
                f"native_batch_norm_{mode}_3d_no_affine",
                aten.native_batch_norm.default,
                (x3, None, None, rm, rv, train, 0.3, 1e-3),
                meta_agrees=train,
            )
        )
        cases.append(
            Case(
                f"native_batch_norm_{mode}_f32",
                aten.native_batch_norm.default,
                (x4.float(), w.float(), b.float(), rm.float(), rv.float(), train, 0.1, 1e-5),
                tol=F32_TOL, meta_agrees=train,
            )
        )
        for mask in ([True, True, True], [True, False, False], [False, True, True]):
            m = "".join("1" if v else "0" for v in mask)
            _, sm, si = aten.native_batch_norm.default(x4, w, b, rm.clone(), rv.clone(), True, 0.1, 1e-5)
            cases.append(
                Case(
                    f"native_batch_norm_backward_{mode}_{m}",
                    aten.native_batch_norm_backward.default,
                    (T(4, 3, 5, 5, dtype=D), x4, w, rm, rv, sm, si, train, 1e-5, mask),
                    # Meta returns grad_input even when output_mask[0] is False; CPU None.
                    meta_agrees=mask[0],
                )
            )
        _, sm, si, reserve = aten._batch_norm_with_update.default(x4, w, b, rm.clone(), rv.clone(), 0.1, 1e-5)
        cases.append(
            Case(
                f"batch_norm_backward_{mode}",
                aten.batch_norm_backward.default,
                (T(4, 3, 5, 5, dtype=D), x4, w, rm, rv, sm, si, train, 1e-5, [True, True, True], reserve),
            )
        )
        cases.append(
            Case(
                f"native_batch_norm_backward_{mode}_no_weight",
                aten.native_batch_norm_backward.default,
                (
                    T(6, 3, 7, dtype=D),
                    x3,
                    None,
                    rm,
                    rv,
                    T(3, dtype=D),
                    T(3, dtype=D, low=0.5, high=2),
                    train,
                    1e-5,
                    [True, True, True],
                ),
            )
        )
        cases.append(
            Case(
                f"legit_functional_{mode}",
                aten._native_batch_norm_legit_functional.default,
                (x4, w, b, rm, rv, train, 0.1, 1e-5),
                meta_agrees=train,
            )
        )
    cases.append(
        Case(
            "legit_no_training",
            aten._native_batch_norm_legit_no_training.default,
            (x4, w, b, rm, rv, 0.1, 1e-5),
            meta_agrees=False,
        )
    )
    cases.append(Case("legit_no_stats", aten._native_batch_norm_legit.no_stats, (x3, w, None, True, 0.1, 1e-5)))
    cases.append(
        Case(
            "native_batch_norm_bf16_mixed",
            aten.native_batch_norm.default,
            (T(4, 3, 5, dtype=torch.bfloat16), w.float(), b.float(), rm.float(), rv.float(), True, 0.1, 1e-5),
            tol=dict(atol=0.05, rtol=0.02),
        )
    )
    xg = T(3, 6, 4, 5, dtype=D)
    for wb, tag in (((T(6, dtype=D), T(6, dtype=D)), ""), ((None, None), "_no_affine")):
        cases.append(Case(f"group_norm{tag}", aten.native_group_norm.default, (xg, *wb, 3, 6, 20, 3, 1e-5)))
        _, mean, rstd = aten.native_group_norm.default(xg, *wb, 3, 6, 20, 3, 1e-5)
        # PyTorch CPU fails to make grad_weight without a weight (autograd never asks).
        for mask in ([True, True, True], [True, False, False]) if tag == "" else ([True, False, False],):
            m = "".join("1" if v else "0" for v in mask)
            cases.append(
                Case(
                    f"group_norm_backward{tag}_{m}",
                    aten.native_group_norm_backward.default,
                    (T(3, 6, 4, 5, dtype=D), xg, mean, rstd, wb[0], 3, 6, 20, 3, mask),
                )
            )
    cases.append(
        Case("group_norm_f32_empty_batch", aten.native_group_norm.default, (T(0, 4, 3), T(4), T(4), 0, 4, 3, 2, 1e-5))
    )
    return cases


def pool_cases():
    cases = []
    x = T(2, 3, 9, 8, dtype=D)
    x3 = T(3, 9, 8, dtype=D)  # no batch dim
    ties = torch.tensor(
        [[[[1.0, 3.0, 3.0, 0.0], [3.0, 2.0, float("nan"), 1.0], [0.0, float("nan"), 5.0, 5.0]]]], dtype=D
    )
    mp = [
        ("k3", x, [3, 3], [], [0, 0], [1, 1], False),
        ("k3s2p1", x, [3, 2], [2, 2], [1, 1], [1, 1], False),
        ("ceil_dilation", x, [2, 3], [2, 2], [1, 1], [2, 1], True),
        ("unbatched", x3, [2, 2], [3, 1], [0, 1], [1, 1], True),
        ("ties_nan", ties, [2, 2], [1, 1], [0, 0], [1, 1], False),
        ("int64", ints(1, 2, 5, 5), [2, 2], [2, 2], [1, 1], [1, 1], True),
        # every value -inf: the index is each window's first tap inside the input
        ("all_neg_inf_padded", torch.full((1, 2, 5, 4), float("-inf"), dtype=D), [3, 3], [2, 2], [1, 1], [1, 1], True),
        # more taps than lowerings/pooling.py unrolls: windows are gathered instead
        ("k9_gathered", T(1, 2, 11, 10, dtype=D), [9, 9], [2, 1], [4, 2], [1, 1], False),
    ]
    for id, inp, k, s, p, d, c in mp:
        cases.append(Case(f"max_pool2d_{id}", aten.max_pool2d_with_indices.default, (inp, k, s, p, d, c)))
        if inp.dtype.is_floating_point:
            out, idx = aten.max_pool2d_with_indices.default(inp, k, s, p, d, c)
            cases.append(
                Case(
                    f"max_pool2d_backward_{id}",
                    aten.max_pool2d_with_indices_backward.default,
                    (T(*out.shape, dtype=D), inp, k, s or k, p, d, c, idx),
                )
            )
    cases.append(Case("max_pool2d_int_padding_default", aten.max_pool2d_with_indices.default, (x, [2, 2])))
    # Windows that tile the input place the gradient without a scatter (Note [Max pooling
    # backward over tiled windows]) when every index is a tap of its own window: in ceil
    # mode the last windows reach past the input; indices given by hand may lie anywhere
    # in the plane (elsewhere, or where a window's tap past the right edge would wrap
    # to the next row), and then the scatter runs.
    for id, inp, k, c in (("tiled_ceil", x, [2, 3], True), ("tiled_unbatched", x3, [3, 2], False)):
        out, idx = aten.max_pool2d_with_indices.default(inp, k, k, [0, 0], [1, 1], c)
        cases.append(Case(f"max_pool2d_backward_{id}", aten.max_pool2d_with_indices_backward.default,
                          (T(*out.shape, dtype=D), inp, k, k, [0, 0], [1, 1], c, idx)))
    out, idx = aten.max_pool2d_with_indices.default(x, [2, 3], [2, 3], [0, 0], [1, 1], True)
    anywhere = torch.randint(0, 9 * 8, idx.shape, generator=torch.Generator().manual_seed(3))
    wrapping = idx.clone()
    wrapping[..., 0, -1] = 8  # the last window of row 0 starts at column 6: its tap (0, 2) is column 8, row 1's first
    for id, given in (("anywhere", anywhere), ("wrapping", wrapping)):
        cases.append(Case(f"max_pool2d_backward_tiled_indices_{id}", aten.max_pool2d_with_indices_backward.default,
                          (T(*out.shape, dtype=D), x, [2, 3], [2, 3], [0, 0], [1, 1], True, given)))
    x5 = T(2, 2, 5, 6, 7, dtype=D)
    for id, k, s, p, d, c in (
        ("k2", [2, 2, 2], [], [0, 0, 0], [1, 1, 1], False),
        ("mixed", [3, 2, 2], [2, 1, 2], [1, 0, 1], [1, 2, 1], True),
    ):
        cases.append(Case(f"max_pool3d_{id}", aten.max_pool3d_with_indices.default, (x5, k, s, p, d, c)))
        out, idx = aten.max_pool3d_with_indices.default(x5, k, s, p, d, c)
        cases.append(
            Case(
                f"max_pool3d_backward_{id}",
                aten.max_pool3d_with_indices_backward.default,
                (T(*out.shape, dtype=D), x5, k, s or k, p, d, c, idx),
            )
        )
    ap = [
        ("k3", x, [3, 3], [], [0, 0], False, True, None),
        ("pad_exclude", x, [3, 2], [2, 2], [1, 1], False, False, None),
        ("pad_include_ceil", x, [3, 3], [2, 2], [1, 1], True, True, None),
        ("pad_exclude_ceil", x, [2, 3], [3, 2], [1, 1], True, False, None),
        ("divisor", x3, [2, 2], [1, 2], [1, 0], False, True, 3),
    ]
    for id, inp, k, s, p, c, cip, div in ap:
        cases.append(Case(f"avg_pool2d_{id}", aten.avg_pool2d.default, (inp, k, s, p, c, cip, div)))
        out = aten.avg_pool2d.default(inp, k, s, p, c, cip, div)
        cases.append(
            Case(
                f"avg_pool2d_backward_{id}",
                aten.avg_pool2d_backward.default,
                (T(*out.shape, dtype=D), inp, k, s or k, p, c, cip, div),
            )
        )
    cases.append(
        Case("avg_pool2d_int64", aten.avg_pool2d.default, (ints(1, 2, 5, 5), [2, 2], [2, 2], [1, 1], False, True, None))
    )
    cases.append(
        Case(
            "avg_pool2d_f32",
            aten.avg_pool2d.default,
            (x.float(), [3, 3], [1, 2], [1, 1], True, False, None),
            tol=F32_TOL,
        )
    )
    for id, k, s, p, c, cip, div in (
        ("k2", [2, 2, 2], [], [0, 0, 0], False, True, None),
        ("mixed", [3, 2, 3], [2, 1, 2], [1, 0, 1], True, False, None),
    ):
        cases.append(Case(f"avg_pool3d_{id}", aten.avg_pool3d.default, (x5, k, s, p, c, cip, div)))
        out = aten.avg_pool3d.default(x5, k, s, p, c, cip, div)
        cases.append(
            Case(
                f"avg_pool3d_backward_{id}",
                aten.avg_pool3d_backward.default,
                (T(*out.shape, dtype=D), x5, k, s or k, p, c, cip, div),
            )
        )
    for id, inp, size in (("down", x, [4, 3]), ("up", x3, [11, 9]), ("one", x, [1, 1])):
        cases.append(Case(f"adaptive_avg_pool2d_{id}", aten._adaptive_avg_pool2d.default, (inp, size)))
        cases.append(
            Case(
                f"adaptive_avg_pool2d_backward_{id}",
                aten._adaptive_avg_pool2d_backward.default,
                (T(*inp.shape[:-2], *size, dtype=D), inp),
            )
        )
        cases.append(Case(f"adaptive_max_pool2d_{id}", aten.adaptive_max_pool2d.default, (inp, size)))
        _, idx = aten.adaptive_max_pool2d.default(inp, size)
        cases.append(
            Case(
                f"adaptive_max_pool2d_backward_{id}",
                aten.adaptive_max_pool2d_backward.default,
                (T(*inp.shape[:-2], *size, dtype=D), inp, idx),
            )
        )
    cases.append(Case("adaptive_avg_pool2d_f32", aten._adaptive_avg_pool2d.default, (x.float(), [3, 5]), tol=F32_TOL))
    cases.append(Case("adaptive_max_pool2d_ties_nan", aten.adaptive_max_pool2d.default, (ties, [2, 3])))
    cases.append(Case("adaptive_avg_pool3d", aten._adaptive_avg_pool3d.default, (x5, [2, 4, 3])))
    cases.append(
        Case(
            "adaptive_avg_pool3d_backward", aten._adaptive_avg_pool3d_backward.default, (T(2, 2, 2, 4, 3, dtype=D), x5)
        )
    )
    return cases


def pad_cases():
    cases = [
        Case("constant_pad", aten.constant_pad_nd.default, (T(2, 3, 4), [1, 2, 0, 3], 1.5)),
        Case("constant_pad_negative", aten.constant_pad_nd.default, (T(2, 3, 4), [-1, 2, 1, -2])),
        Case("constant_pad_int", aten.constant_pad_nd.default, (ints(3, 4), [2, 1], 7)),
        Case("constant_pad_all_dims", aten.constant_pad_nd.default, (T(2, 3, dtype=D), [1, 1, 1, 1], -2.0)),
    ]
    shapes = {1: (2, 3, 6), 2: (2, 3, 5, 6), 3: (1, 2, 4, 5, 3)}
    pads = {1: [2, 3], 2: [1, 2, 3, 0], 3: [1, 0, 2, 2, 0, 1]}
    for nd in (1, 2, 3):
        for kind in ("reflection", "replication"):
            x = T(*shapes[nd], dtype=D)
            fwd = getattr(aten, f"{kind}_pad{nd}d").default
            cases.append(Case(f"{kind}_pad{nd}d", fwd, (x, pads[nd])))
            cases.append(Case(f"{kind}_pad{nd}d_unbatched", fwd, (x[0], pads[nd])))
            out = fwd(x, pads[nd])
            cases.append(
                Case(
                    f"{kind}_pad{nd}d_backward",
                    getattr(aten, f"{kind}_pad{nd}d_backward").default,
                    (T(*out.shape, dtype=D), x, pads[nd]),
                )
            )
    return cases


def upsample_cases():
    cases = []
    x = {1: T(2, 3, 5, dtype=D), 2: T(2, 3, 4, 5, dtype=D), 3: T(1, 2, 3, 4, 2, dtype=D)}
    sizes = {1: [[9], [3], [10]], 2: [[7, 10], [3, 2], [8, 10]], 3: [[5, 4, 3], [2, 6, 4], [6, 8, 4]]}
    scales = {
        1: [None, None, 2.0],
        2: [[None, None], [None, None], [2.0, 2.0]],
        3: [[None] * 3, [None] * 3, [2.0, 2.0, 2.0]],
    }
    for nd in (1, 2, 3):
        near = getattr(aten, f"upsample_nearest{nd}d").default
        near_b = getattr(aten, f"upsample_nearest{nd}d_backward").default
        lin_name = {1: "linear1d", 2: "bilinear2d", 3: "trilinear3d"}[nd]
        lin = getattr(aten, f"upsample_{lin_name}").default
        lin_b = getattr(aten, f"upsample_{lin_name}_backward").default
        for j, size in enumerate(sizes[nd]):
            sc = scales[nd][j]
            sc = [sc] if nd == 1 else sc
            inp = x[nd]
            cases.append(Case(f"nearest{nd}d_{j}", near, (inp, size, *sc)))
            cases.append(
                Case(
                    f"nearest{nd}d_backward_{j}",
                    near_b,
                    (T(*inp.shape[:2], *size, dtype=D), size, list(inp.shape), *sc),
                )
            )
            for ac in (False, True):
                cases.append(Case(f"{lin_name}_{j}_ac{int(ac)}", lin, (inp, size, ac, *sc)))
                cases.append(
                    Case(
                        f"{lin_name}_backward_{j}_ac{int(ac)}",
                        lin_b,
                        (T(*inp.shape[:2], *size, dtype=D), size, list(inp.shape), ac, *sc),
                    )
                )
    cases.append(
        Case(
            "bilinear2d_f32_scale",
            aten.upsample_bilinear2d.default,
            (T(1, 2, 5, 4), [8, 7], False, 1.7, 1.9),
            tol=F32_TOL,
        )
    )
    cases.append(Case("nearest2d_f32_scale", aten.upsample_nearest2d.default, (T(1, 2, 5, 4), [8, 7], 1.7, 1.9)))
    return cases


def col2im_cases():
    return [
        Case("col2im", aten.col2im.default, (T(2, 3 * 2 * 2, 9), [4, 4], [2, 2], [1, 1], [0, 0], [1, 1])),
        Case(
            "col2im_unbatched_padded_strided",
            aten.col2im.default,
            (T(2 * 3 * 3, 9), [5, 5], [3, 3], [1, 1], [1, 1], [2, 2]),
        ),
        Case(
            "col2im_dilated_f64",
            aten.col2im.default,
            (T(1, 4, 4, dtype=torch.float64), [4, 4], [2, 2], [2, 2], [0, 0], [1, 1]),
        ),
        Case("im2col", aten.im2col.default, (T(2, 3, 4, 5), [2, 2], [1, 1], [0, 0], [1, 1])),
        Case("im2col_unbatched_padded_strided", aten.im2col.default, (T(2, 5, 5), [3, 3], [1, 1], [1, 1], [2, 2])),
        Case(
            "im2col_dilated_f64",
            aten.im2col.default,
            (T(1, 2, 5, 5, dtype=torch.float64), [2, 2], [2, 2], [0, 0], [1, 1]),
        ),
    ]


CASES = conv_cases() + norm_cases() + pool_cases() + pad_cases() + upsample_cases() + col2im_cases()
_ids = [c.id for c in CASES]
assert len(_ids) == len(set(_ids)), "duplicate case ids"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_lowering_matches_cpu(case):
    assert_lowering_matches_cpu(case, run_lowering)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_shape_fn_matches_meta(case):
    assert_shape_fn_matches_meta(case, run_shape_fn)


def test_every_op_is_covered():
    tested = {unambiguous_name(c.op) for c in CASES} | cases_elsewhere("test_ops_conv.py")
    assert {f"lower_{n}" for n in tested} >= set(LOWERINGS)
    assert {f"{n}_output_shape" for n in tested} >= set(SHAPE_FNS)


OPS = {unambiguous_name(c.op): c.op for c in CASES}


@pytest.mark.parametrize("name", sorted(OPS))
def test_signatures_match(name):
    assert_signatures_match_schema(name, OPS[name], LOWERINGS, SHAPE_FNS, check_defaults=False)


# ---------------------------------------------------------------------------- errors


ERROR_CASES = [
    ErrorCase(
        "conv_channel_mismatch",
        aten.convolution.default,
        (T(1, 3, 5, 5), T(4, 2, 3, 3), None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1),
    ),
    ErrorCase(
        "conv_rank_mismatch",
        aten.convolution.default,
        (T(3, 5, 5), T(4, 3, 3, 3), None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1),
    ),
    ErrorCase(
        "conv_kernel_too_big",
        aten.convolution.default,
        (T(1, 3, 2, 2), T(4, 3, 3, 3), None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1),
    ),
    ErrorCase(
        "conv_negative_padding",
        aten.convolution.default,
        (T(1, 3, 5, 5), T(4, 3, 3, 3), None, [1, 1], [-1, 0], [1, 1], False, [0, 0], 1),
    ),
    ErrorCase(
        "conv_zero_stride",
        aten.convolution.default,
        (T(1, 3, 5, 5), T(4, 3, 3, 3), None, [0, 1], [0, 0], [1, 1], False, [0, 0], 1),
    ),
    ErrorCase(
        "conv_bad_groups",
        aten.convolution.default,
        (T(1, 4, 5, 5), T(3, 2, 3, 3), None, [1, 1], [0, 0], [1, 1], False, [0, 0], 2),
    ),
    ErrorCase(
        "conv_bad_bias",
        aten.convolution.default,
        (T(1, 3, 5, 5), T(4, 3, 3, 3), T(3), [1, 1], [0, 0], [1, 1], False, [0, 0], 1),
    ),
    ErrorCase(
        "conv_dtype_mismatch",
        aten.convolution.default,
        (T(1, 3, 5, 5), T(4, 3, 3, 3, dtype=D), None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1),
    ),
    ErrorCase(
        "conv_transpose_channel_mismatch",
        aten.convolution.default,
        (T(1, 3, 5, 5), T(4, 2, 3, 3), None, [1, 1], [0, 0], [1, 1], True, [0, 0], 1),
    ),
    ErrorCase("group_norm_indivisible", aten.native_group_norm.default, (T(2, 6, 4), None, None, 2, 6, 4, 4, 1e-5)),
    ErrorCase("max_pool_big_padding", aten.max_pool2d_with_indices.default, (T(1, 2, 6, 6), [2, 2], [1, 1], [2, 2])),
    ErrorCase("max_pool_output_too_small", aten.max_pool2d_with_indices.default, (T(1, 2, 2, 2), [3, 3])),
    ErrorCase("max_pool_bad_rank", aten.max_pool2d_with_indices.default, (T(6, 6), [2, 2])),
    ErrorCase("max_pool_zero_stride", aten.max_pool2d_with_indices.default, (T(1, 6, 6), [2, 2], [0, 1])),
    ErrorCase("avg_pool_zero_divisor", aten.avg_pool2d.default, (T(1, 6, 6), [2, 2], [], [0, 0], False, True, 0)),
    ErrorCase("avg_pool3d_bad_rank", aten.avg_pool3d.default, (T(6, 6), [2, 2, 2])),
    ErrorCase("adaptive_avg_bad_rank", aten._adaptive_avg_pool2d.default, (T(6), [2, 2])),
    ErrorCase("constant_pad_odd", aten.constant_pad_nd.default, (T(2, 3), [1, 2, 3])),
    ErrorCase("constant_pad_too_long", aten.constant_pad_nd.default, (T(3), [1, 1, 1, 1])),
    ErrorCase("constant_pad_negative_size", aten.constant_pad_nd.default, (T(3), [-2, -2])),
    ErrorCase("reflection_pad_too_big", aten.reflection_pad1d.default, (T(1, 3), [3, 0])),
    ErrorCase("reflection_pad_bad_length", aten.reflection_pad2d.default, (T(1, 3, 3), [1, 1])),
    ErrorCase("replication_pad_bad_rank", aten.replication_pad2d.default, (T(3), [1, 1, 1, 1])),
    ErrorCase("upsample_bad_output_size", aten.upsample_nearest2d.default, (T(1, 1, 3, 3), [4])),
    ErrorCase("upsample_zero_output", aten.upsample_bilinear2d.default, (T(1, 1, 3, 3), [0, 2], False)),
    ErrorCase("upsample_bad_rank", aten.upsample_nearest2d.default, (T(1, 3, 3), [4, 4])),
]


@pytest.mark.parametrize("case", ERROR_CASES, ids=lambda c: c.id)
def test_shape_fn_raises_like_cpu(case):
    assert_shape_fn_raises_like_cpu(case, run_shape_fn)


# ---------------------------------------------------------------------------- end to end


class ResBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, groups=2)
        self.bn2 = nn.BatchNorm2d(8)
        self.avg = nn.AdaptiveAvgPool2d((2, 2))
        self.fc = nn.Linear(32, 4)

    def forward(self, x):
        y = self.pool(torch.relu(self.bn1(self.conv1(x))))
        y = torch.relu(self.bn2(self.conv2(y)) + y)
        return self.fc(torch.flatten(self.avg(y), 1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_resnet_block_train_and_eval_match_cpu(dtype):
    torch.manual_seed(0)
    ref = ResBlock().to(dtype)
    ours = xnf.to_xla(copy.deepcopy(ref))
    x = torch.randn(2, 3, 9, 9, dtype=dtype)
    tol = {} if dtype is torch.float64 else dict(atol=1e-4, rtol=1e-4)
    for train in (True, False, True):
        ref.train(train)
        ours.train(train)
        ref.zero_grad()
        ours.zero_grad()
        expected = ref(x)
        expected.square().sum().backward()
        got = ours(xnf.to_xla(x))
        got.square().sum().backward()
        torch.testing.assert_close(xnf.to_torch(got), expected.detach(), **tol)
        for (name, a), (_, b) in zip(ref.named_parameters(), ours.named_parameters()):
            torch.testing.assert_close(xnf.to_torch(b.grad), a.grad, **tol, msg=name)
        for (name, a), (_, b) in zip(ref.named_buffers(), ours.named_buffers()):
            torch.testing.assert_close(xnf.to_torch(b), a, **tol, msg=name)


def test_resnet_block_compiled_training_step_updates_running_stats():
    torch.manual_seed(0)
    ref = ResBlock().double()
    ours = xnf.to_xla(copy.deepcopy(ref))
    x = torch.randn(2, 3, 9, 9, dtype=D)
    xx = xnf.to_xla(x)

    def step(model, inp):
        model.zero_grad()
        loss = model(inp).square().sum()
        loss.backward()
        return loss

    compiled = xnf.compile(step)
    for _ in range(2):
        expected = step(ref, x)
        got = compiled(ours, xx)
        torch.testing.assert_close(xnf.to_torch(got), expected.detach())
    for (name, a), (_, b) in zip(ref.named_buffers(), ours.named_buffers()):
        torch.testing.assert_close(xnf.to_torch(b), a, msg=name)
    for (name, a), (_, b) in zip(ref.named_parameters(), ours.named_parameters()):
        torch.testing.assert_close(xnf.to_torch(b.grad), a.grad, msg=name)


# ---------------------------------------------------------------------------- OpInfo samples

OPINFO_NAMES = [
    ("nn.functional.conv1d", ""),
    ("nn.functional.conv2d", ""),
    ("nn.functional.conv3d", ""),
    ("nn.functional.conv_transpose1d", ""),
    ("nn.functional.conv_transpose2d", ""),
    ("nn.functional.conv_transpose3d", ""),
    ("nn.functional.batch_norm", ""),
    ("nn.functional.group_norm", ""),
    ("nn.functional.max_pool2d", ""),
    ("nn.functional.max_pool3d", ""),
    ("nn.functional.avg_pool2d", ""),
    ("nn.functional.avg_pool3d", ""),
    ("nn.functional.adaptive_avg_pool2d", ""),
    ("nn.functional.adaptive_max_pool2d", ""),
    ("nn.functional.pad", "constant"),
    ("nn.functional.pad", "reflect"),
    ("nn.functional.pad", "replicate"),
    ("nn.functional.interpolate", "nearest"),
    ("nn.functional.interpolate", "bilinear"),
]
SAMPLES_PER_OP = 4


@pytest.mark.parametrize("name,variant", OPINFO_NAMES, ids=lambda x: x or "")
def test_opinfo_samples_and_float64_gradients(name, variant):
    op = op_db_entry(name, variant)
    for i, sample in enumerate(op.sample_inputs("cpu", torch.float64, requires_grad=True)):
        if i >= SAMPLES_PER_OP:
            break
        sample_and_first_gradient_match_cpu(op, sample)


@pytest.mark.parametrize("training", [True, False])
def test_native_batch_norm_legit_writes_running_stats(training):
    torch.manual_seed(0)
    x, w, b = torch.randn(4, 3, 5), torch.randn(3), torch.randn(3)
    mean, var = torch.randn(3), torch.rand(3) + 0.5
    ours_mean, ours_var = xnf.to_xla(mean.clone()), xnf.to_xla(var.clone())
    ref = aten._native_batch_norm_legit(x, w, b, mean, var, training, 0.1, 1e-5)
    ours = aten._native_batch_norm_legit(
        xnf.to_xla(x), xnf.to_xla(w), xnf.to_xla(b), ours_mean, ours_var, training, 0.1, 1e-5
    )
    for a, r in zip(ours, ref):
        torch.testing.assert_close(xnf.to_torch(a), r, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(xnf.to_torch(ours_mean), mean)
    torch.testing.assert_close(xnf.to_torch(ours_var), var)


@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_with_update_writes_running_stats_and_differentiates(affine):
    # the training-mode batch norm of export graphs, and its batch_norm_backward
    torch.manual_seed(0)
    x = torch.randn(4, 3, 5, dtype=torch.float64, requires_grad=True)
    w, b = (torch.randn(3, dtype=torch.float64, requires_grad=True) for _ in range(2)) if affine else (None, None)
    mean, var = torch.randn(3, dtype=torch.float64), torch.rand(3, dtype=torch.float64) + 0.5
    leaves = [t for t in (x, w, b) if t is not None]
    our_leaves = [xnf.to_xla(t.detach()).requires_grad_() for t in leaves]
    ox, ow, ob = (our_leaves + [None, None])[:3] if affine else (our_leaves[0], None, None)
    ours_mean, ours_var = xnf.to_xla(mean.clone()), xnf.to_xla(var.clone())
    ref = aten._batch_norm_with_update(x, w, b, mean, var, 0.1, 1e-5)
    ours = aten._batch_norm_with_update(ox, ow, ob, ours_mean, ours_var, 0.1, 1e-5)
    for a, r in zip(ours, ref):
        assert a.dtype == r.dtype and a.shape == r.shape
        torch.testing.assert_close(xnf.to_torch(a), r)
    torch.testing.assert_close(xnf.to_torch(ours_mean), mean)
    torch.testing.assert_close(xnf.to_torch(ours_var), var)
    g = torch.randn_like(ref[0])
    if not affine:  # batch_norm_backward's weight is not optional: PyTorch CPU raises too
        for out, inputs, grad in ((ref[0], leaves, g), (ours[0], our_leaves, xnf.to_xla(g))):
            with pytest.raises(RuntimeError, match="argument #2 'weight'"):
                torch.autograd.grad(out, inputs, grad)
        return
    want = torch.autograd.grad(ref[0], leaves, g)
    have = torch.autograd.grad(ours[0], our_leaves, xnf.to_xla(g))
    for h, e in zip(have, want):
        torch.testing.assert_close(xnf.to_torch(h), e)
