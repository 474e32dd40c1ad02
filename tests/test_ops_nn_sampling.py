"""Max unpooling, grid sampling, affine grids, bicubic / nearest-exact / antialiased (bilinear, bicubic) upsampling,
adaptive max pooling in 3-D, _trilinear, _euclidean_dist, embedding_renorm and the fused
weight norm against
PyTorch CPU (values), meta or CPU (shapes, dtypes) and CPU errors; OpInfo samples on the
backend, eagerly and compiled, with float64 gradients."""

from __future__ import annotations

import copy

import pytest
import torch

import xla_native_functions as xnf
from opinfo_samples import op_db_entry, sample_and_first_gradient_match_cpu, sample_on_xla
from lowering_harness import (
    Case,
    ErrorCase,
    assert_lowering_matches_cpu,
    assert_shape_fn_matches_meta,
    assert_shape_fn_raises_like_cpu,
    assert_signatures_match_schema,
    run_lowering,
    functions_in,
    CASES_LIVE_IN,
    T,
    assert_same,
    unambiguous_name,
)
from xla_native_functions.lowerings import grid_sample as lower_grid_sample
from xla_native_functions.lowerings import nn_misc as lower_nn_misc
from xla_native_functions.lowerings import pooling as lower_pooling
from xla_native_functions.lowerings import unpool as lower_unpool
from xla_native_functions.lowerings import upsample as lower_upsample
from xla_native_functions.shape_fns import grid_sample as shape_grid_sample
from xla_native_functions.shape_fns import nn_misc as shape_nn_misc
from xla_native_functions.shape_fns import pooling as shape_pooling
from xla_native_functions.shape_fns import unpool as shape_unpool
from xla_native_functions.shape_fns import upsample as shape_upsample

aten = torch.ops.aten
D = torch.float64
F32_TOL = dict(atol=1e-4, rtol=1e-4)

OPS_UNDER_TEST = CASES_LIVE_IN["test_ops_nn_sampling.py"]


LOWERINGS = functions_in(
    [lower_grid_sample, lower_nn_misc, lower_pooling, lower_unpool, lower_upsample], prefix="lower_"
)
SHAPE_FNS = functions_in(
    [shape_grid_sample, shape_nn_misc, shape_pooling, shape_unpool, shape_upsample], suffix="_output_shape"
)


torch.manual_seed(0)


def _pooled(shape, kernel, stride, nd):
    x = T(*shape, dtype=D)
    pool = aten.max_pool2d_with_indices if nd == 2 else aten.max_pool3d_with_indices
    return pool(x, kernel, stride)


def unpool_cases():
    cases = []
    for dtype in (torch.float32, D):
        sfx = "" if dtype is torch.float32 else "_f64"
        y, idx = _pooled((2, 3, 6, 5), [2, 2], [2, 2], 2)
        cases.append(Case("max_unpool2d" + sfx, aten.max_unpool2d.default, (y.to(dtype), idx, [6, 5])))
        y, idx = _pooled((3, 7, 7), [3, 3], [1, 1], 2)  # overlapping windows: repeated indices
        cases.append(Case("max_unpool2d_overlap" + sfx, aten.max_unpool2d.default, (y.to(dtype), idx, [7, 7])))
        y, idx = _pooled((1, 2, 4, 6, 4), [2, 2, 2], [2, 2, 2], 3)
        cases.append(
            Case("max_unpool3d" + sfx, aten.max_unpool3d.default, (y.to(dtype), idx, [4, 6, 4], [2, 2, 2], [0, 0, 0]))
        )
    # Two inputs name the same position: the later one is kept, as in PyTorch's loop.
    vals = torch.tensor([[[1.0, 2.0], [3.0, 4.0]]])
    dup = torch.tensor([[[0, 0], [3, 3]]])
    cases.append(Case("max_unpool2d_duplicate_last_wins", aten.max_unpool2d.default, (vals, dup, [2, 2])))
    cases.append(
        Case(
            "max_unpool2d_empty_batch",
            aten.max_unpool2d.default,
            (T(0, 2, 2, 2), torch.zeros(0, 2, 2, 2, dtype=torch.long), [4, 4]),
        )
    )
    cases.append(
        Case("max_unpool2d_bfloat16", aten.max_unpool2d.default, (vals.to(torch.bfloat16), dup, [3, 2]))
    )
    return cases


def grid_cases():
    cases = []
    x2, g2 = T(2, 3, 5, 6, dtype=D), T(2, 4, 7, 2, dtype=D, low=-1.3, high=1.3)
    x3, g3 = T(2, 2, 4, 3, 5, dtype=D), T(2, 3, 2, 4, 3, dtype=D, low=-1.3, high=1.3)
    go2, go3 = T(2, 3, 4, 7, dtype=D), T(2, 2, 3, 2, 4, dtype=D)
    for mode in (0, 1, 2):
        for pad in (0, 1, 2):
            for ac in (False, True):
                tag = f"_m{mode}_p{pad}_{'ac' if ac else 'nc'}"
                cases.append(Case("grid_sampler_2d" + tag, aten.grid_sampler_2d.default, (x2, g2, mode, pad, ac)))
                cases.append(
                    Case(
                        "grid_sampler_2d_backward" + tag,
                        aten.grid_sampler_2d_backward.default,
                        (go2, x2, g2, mode, pad, ac, [True, True]),
                    )
                )
                if mode == 2:
                    continue  # bicubic is 2-D only
                cases.append(Case("grid_sampler_3d" + tag, aten.grid_sampler_3d.default, (x3, g3, mode, pad, ac)))
                cases.append(
                    Case(
                        "grid_sampler_3d_backward" + tag,
                        aten.grid_sampler_3d_backward.default,
                        (go3, x3, g3, mode, pad, ac, [True, True]),
                    )
                )
    for mode in (0, 2):
        x, g = x2.float(), g2.float()
        cases.append(
            Case(f"grid_sampler_2d_m{mode}_f32", aten.grid_sampler_2d.default, (x, g, mode, 2, False), tol=F32_TOL)
        )
    cases.append(
        Case("grid_sampler_3d_f32", aten.grid_sampler_3d.default, (x3.float(), g3.float(), 0, 1, True), tol=F32_TOL)
    )
    go = T(2, 3, 4, 7, dtype=D)
    x2, g2 = T(2, 3, 5, 6, dtype=D), T(2, 4, 7, 2, dtype=D)
    cases.append(
        Case(
            "grid_sampler_2d_backward_grid_only",
            aten.grid_sampler_2d_backward.default,
            (go, x2, g2, 0, 0, False, [False, True]),
        )
    )
    # Grid points exactly on pixel centres and edges (the clip's ends).
    edge = torch.tensor([[[[-1.0, -1.0], [1.0, 1.0], [0.0, 0.0], [-1.5, 2.0]]]], dtype=D)
    for pad in (0, 1, 2):
        cases.append(
            Case(
                f"grid_sampler_2d_edges_p{pad}",
                aten.grid_sampler_2d.default,
                (T(1, 1, 3, 4, dtype=D), edge, 0, pad, True),
            )
        )
    cases.append(
        Case(
            "grid_sampler_2d_half",
            aten.grid_sampler_2d.default,
            (T(1, 2, 3, 3, dtype=torch.float16), T(1, 2, 2, 2, dtype=torch.float16, low=-1, high=1), 0, 0, False),
            tol=dict(atol=1e-2, rtol=1e-2),
        )
    )
    return cases


def upsample_cases():
    cases = []
    for dtype in (torch.float32, D):
        sfx = "" if dtype is torch.float32 else "_f64"
        tol = F32_TOL if dtype is torch.float32 else {}
        x = T(2, 3, 5, 7, dtype=dtype)
        for size, ac, scales in (
            ([9, 4], False, ()),
            ([9, 4], True, ()),
            ([10, 14], False, (2.0, 2.0)),
            ([1, 1], True, ()),
        ):
            tag = f"_{size[0]}x{size[1]}_{'ac' if ac else 'nc'}{'_scales' if scales else ''}{sfx}"
            cases.append(
                Case("upsample_bicubic2d" + tag, aten.upsample_bicubic2d.default, (x, size, ac, *scales), tol=tol)
            )
            cases.append(
                Case(
                    "upsample_bilinear2d_aa" + tag,
                    aten._upsample_bilinear2d_aa.default,
                    (x, size, ac, *scales),
                    tol=tol,
                )
            )
            cases.append(
                Case(
                    "upsample_bicubic2d_aa" + tag, aten._upsample_bicubic2d_aa.default, (x, size, ac, *scales), tol=tol
                )
            )
            go = T(2, 3, *size, dtype=dtype)
            cases.append(
                Case(
                    "upsample_bicubic2d_backward" + tag,
                    aten.upsample_bicubic2d_backward.default,
                    (go, size, [2, 3, 5, 7], ac, *scales),
                    tol=tol,
                )
            )
            cases.append(
                Case(
                    "upsample_bicubic2d_aa_backward" + tag,
                    aten._upsample_bicubic2d_aa_backward.default,
                    (go, size, [2, 3, 5, 7], ac, *scales),
                    tol=tol,
                )
            )
            cases.append(
                Case(
                    "upsample_bilinear2d_aa_backward" + tag,
                    aten._upsample_bilinear2d_aa_backward.default,
                    (go, size, [2, 3, 5, 7], ac, *scales),
                    tol=tol,
                )
            )
        cases += [
            Case("nearest_exact1d" + sfx, aten._upsample_nearest_exact1d.default, (T(2, 3, 5, dtype=dtype), [8])),
            Case("nearest_exact1d_down" + sfx, aten._upsample_nearest_exact1d.default, (T(2, 3, 7, dtype=dtype), [3])),
            Case("nearest_exact2d" + sfx, aten._upsample_nearest_exact2d.default, (x, [11, 4])),
            Case("nearest_exact2d_scales" + sfx, aten._upsample_nearest_exact2d.default, (x, [7, 10], 1.5, 1.5)),
            Case(
                "nearest_exact3d" + sfx,
                aten._upsample_nearest_exact3d.default,
                (T(1, 2, 3, 4, 5, dtype=dtype), [5, 3, 7]),
            ),
            Case(
                "nearest_exact1d_backward" + sfx,
                aten._upsample_nearest_exact1d_backward.default,
                (T(2, 3, 8, dtype=dtype), [8], [2, 3, 5]),
            ),
            Case(
                "nearest_exact2d_backward" + sfx,
                aten._upsample_nearest_exact2d_backward.default,
                (T(2, 3, 11, 4, dtype=dtype), [11, 4], [2, 3, 5, 7]),
            ),
            Case(
                "nearest_exact3d_backward" + sfx,
                aten._upsample_nearest_exact3d_backward.default,
                (T(1, 2, 5, 3, 7, dtype=dtype), [5, 3, 7], [1, 2, 3, 4, 5]),
            ),
        ]
    cases.append(
        Case(
            "nearest_exact2d_uint8", aten._upsample_nearest_exact2d.default, (T(1, 2, 3, 3, dtype=torch.uint8), [5, 4])
        )
    )
    return cases


def misc_cases():
    cases = []
    for dtype in (torch.float32, D):
        sfx = "" if dtype is torch.float32 else "_f64"
        tol = F32_TOL if dtype is torch.float32 else {}
        x = T(2, 3, 5, 7, 4, dtype=dtype)
        cases.append(Case("adaptive_max_pool3d" + sfx, aten.adaptive_max_pool3d.default, (x, [2, 3, 3])))
        cases.append(Case("adaptive_max_pool3d_unbatched" + sfx, aten.adaptive_max_pool3d.default, (x[0], [3, 1, 5])))
        out, idx = aten.adaptive_max_pool3d(x, [2, 3, 3])
        cases.append(
            Case(
                "adaptive_max_pool3d_backward" + sfx,
                aten.adaptive_max_pool3d_backward.default,
                (T(*out.shape, dtype=dtype), x, idx),
            )
        )
        i1, w, i2 = T(4, 3, dtype=dtype), T(5, 3, 2, dtype=dtype), T(4, 2, dtype=dtype)
        cases.append(
            Case("trilinear_bilinear" + sfx, aten._trilinear.default, (i1, w, i2, [1, 3], [0], [1, 2], [2, 3]), tol=tol)
        )
        cases.append(
            Case(
                "euclidean_dist" + sfx,
                aten._euclidean_dist.default,
                (T(4, 3, dtype=dtype), T(6, 3, dtype=dtype)),
                tol=tol,
            )
        )
        cases.append(
            Case(
                "euclidean_dist_batched" + sfx,
                aten._euclidean_dist.default,
                (T(2, 1, 4, 3, dtype=dtype), T(3, 5, 3, dtype=dtype)),
                tol=tol,
            )
        )
        table = T(6, 4, dtype=dtype, low=-3, high=3)
        idx = torch.tensor([[0, 2], [2, 5]])
        for p in (2.0, 1.0, 3.0, float("inf")):
            cases.append(
                Case(f"embedding_renorm_p{p}{sfx}", aten.embedding_renorm.default, (table, idx, 1.5, p), tol=tol)
            )
    cases += weight_norm_cases()
    cases.append(
        Case(
            "trilinear_int64",
            aten._trilinear.default,
            (
                T(4, 3, dtype=torch.int64),
                T(5, 3, 2, dtype=torch.int64),
                T(4, 2, dtype=torch.int64),
                [1, 3],
                [0],
                [1, 2],
                [2, 3],
            ),
        )
    )
    return cases


def weight_norm_cases():
    cases = []
    for dtype in (torch.float32, D, torch.bfloat16):
        sfx = {torch.float32: "", D: "_f64", torch.bfloat16: "_bf16"}[dtype]
        tol = {torch.float32: F32_TOL, D: {}, torch.bfloat16: {"atol": 1e-2, "rtol": 1e-2}}[dtype]
        v = T(6, 3, 5, dtype=dtype)
        for dim, g_shape in ((0, (6, 1, 1)), (2, (1, 1, 5))):
            g = T(*g_shape, dtype=dtype)
            cases.append(Case(f"weight_norm_dim{dim}{sfx}", aten._weight_norm_interface.default, (v, g, dim), tol=tol))
            _, norms = aten._weight_norm_interface(v, g, dim)
            cases.append(Case(f"weight_norm_backward_dim{dim}{sfx}", aten._weight_norm_interface_backward.default,
                              (T(6, 3, 5, dtype=dtype), v, g, norms, dim), tol=tol))
    # A 1-D weight normalised over its only dim. The norms take g's shape on CPU; meta says (1,).
    cases.append(
        Case("weight_norm_1d", aten._weight_norm_interface.default, (T(5), T(5), 0), tol=F32_TOL, meta_agrees=False)
    )
    return cases


def affine_grid_cases():
    cases = []
    for size in ([2, 1, 4, 5], [3, 2, 1, 6], [2, 1, 3, 1], [2, 3, 2, 3, 4], [1, 1, 1, 1, 1]):
        d = len(size) - 2
        for align_corners in (False, True):
            for dtype, tol in ((D, {}), (torch.float32, F32_TOL)):
                cases.append(Case(f"affine_grid_{'x'.join(map(str, size))}_ac{int(align_corners)}_{str(dtype)[6:]}",
                                  aten.affine_grid_generator.default,
                                  (T(size[0], d, d + 1, dtype=dtype), size, align_corners), tol=tol))
    return cases


CASES = unpool_cases() + grid_cases() + affine_grid_cases() + upsample_cases() + misc_cases()
assert len({c.id for c in CASES}) == len(CASES), "duplicate case ids"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_lowering_matches_cpu(case):
    assert_lowering_matches_cpu(case)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_shape_fn_matches_meta(case):
    assert_shape_fn_matches_meta(case)


def test_every_op_is_covered():
    assert {unambiguous_name(c.op) for c in CASES} == OPS_UNDER_TEST


@pytest.mark.parametrize("name", sorted(OPS_UNDER_TEST))
def test_signatures_match(name):
    op = next(c.op for c in CASES if unambiguous_name(c.op) == name)
    assert_signatures_match_schema(name, op, LOWERINGS, SHAPE_FNS, check_defaults=False)


def test_unpool_drops_out_of_range_indices():
    """PyTorch CPU raises for an index outside the plane; indices are data here, so such
    an input is dropped and the rest of the plane is still written."""
    vals = torch.tensor([[[1.0, 2.0, 3.0]]])
    idx = torch.tensor([[[0, 9, -1]]])
    with pytest.raises(RuntimeError):
        aten.max_unpool2d(vals, idx, [2, 2])
    ours = run_lowering(aten.max_unpool2d.default, (vals, idx, [2, 2]), {})
    assert_same(ours, torch.tensor([[[1.0, 0.0], [0.0, 0.0]]]))


# ---------------------------------------------------------------------------- errors


_u2 = (T(1, 2, 2), torch.zeros(1, 2, 2, dtype=torch.long))
_u3 = (T(1, 1, 2, 2, 2), torch.zeros(1, 1, 2, 2, 2, dtype=torch.long))
_g = (T(1, 2, 3, 4), T(1, 5, 6, 2))

ERROR_CASES = [
    ErrorCase("unpool2d_int_indices", aten.max_unpool2d.default, (_u2[0], _u2[1].int(), [2, 2])),
    ErrorCase("unpool2d_bad_output_size", aten.max_unpool2d.default, (*_u2, [2])),
    ErrorCase("unpool2d_bad_rank", aten.max_unpool2d.default, (_u2[0][0], _u2[1][0], [2, 2])),
    ErrorCase("unpool2d_shape_mismatch", aten.max_unpool2d.default, (_u2[0], _u2[1][:, :1], [2, 2])),
    ErrorCase(
        "unpool2d_empty_channel",
        aten.max_unpool2d.default,
        (T(1, 0, 2), torch.zeros(1, 0, 2, dtype=torch.long), [2, 2]),
    ),
    ErrorCase("unpool2d_int64_input", aten.max_unpool2d.default, (_u2[0].long(), _u2[1], [2, 2])),
    ErrorCase("unpool3d_bad_stride_length", aten.max_unpool3d.default, (*_u3, [2, 2, 2], [1, 1], [0, 0, 0])),
    ErrorCase("unpool3d_bad_padding_length", aten.max_unpool3d.default, (*_u3, [2, 2, 2], [1, 1, 1], [0, 0])),
    ErrorCase("unpool3d_zero_stride", aten.max_unpool3d.default, (*_u3, [2, 2, 2], [0, 1, 1], [0, 0, 0])),
    ErrorCase(
        "unpool3d_bad_rank", aten.max_unpool3d.default, (_u3[0][0, 0], _u3[1][0, 0], [2, 2, 2], [1, 1, 1], [0, 0, 0])
    ),
    ErrorCase("grid2d_dtype_mismatch", aten.grid_sampler_2d.default, (_g[0], _g[1].double(), 0, 0, False)),
    ErrorCase("grid2d_last_dim", aten.grid_sampler_2d.default, (_g[0], _g[1][..., :1], 0, 0, False)),
    ErrorCase("grid2d_batch_mismatch", aten.grid_sampler_2d.default, (_g[0], _g[1].expand(2, 5, 6, 2), 0, 0, False)),
    ErrorCase("grid2d_empty_spatial", aten.grid_sampler_2d.default, (_g[0][:, :, :0], _g[1], 0, 0, False)),
    ErrorCase("grid2d_int64", aten.grid_sampler_2d.default, (_g[0].long(), _g[1].long(), 0, 0, False)),
    ErrorCase("affine_grid_3d_size", aten.affine_grid_generator.default, (T(2, 2, 3), [2, 1, 4], False)),
    ErrorCase("affine_grid_theta_shape", aten.affine_grid_generator.default, (T(2, 3, 3), [2, 1, 4, 5], False)),
    ErrorCase("grid3d_bicubic", aten.grid_sampler_3d.default, (T(1, 2, 3, 4, 5), T(1, 2, 2, 2, 3), 2, 0, False)),
    ErrorCase("grid3d_last_dim", aten.grid_sampler_3d.default, (T(1, 2, 3, 4, 5), T(1, 2, 2, 2, 2), 0, 0, False)),
    ErrorCase("bicubic_int64", aten.upsample_bicubic2d.default, (T(1, 1, 3, 3, dtype=torch.int64), [4, 4], False)),
    ErrorCase("bicubic_bad_output_size", aten.upsample_bicubic2d.default, (T(1, 1, 3, 3), [4], False)),
    ErrorCase("aa_half", aten._upsample_bilinear2d_aa.default, (T(1, 1, 3, 3, dtype=torch.float16), [4, 4], False)),
    ErrorCase("nearest_exact_bool", aten._upsample_nearest_exact1d.default, (T(1, 1, 3, dtype=torch.bool), [4])),
    ErrorCase("nearest_exact_zero_output", aten._upsample_nearest_exact2d.default, (T(1, 1, 3, 3), [0, 2])),
    ErrorCase(
        "adaptive_max_pool3d_int64", aten.adaptive_max_pool3d.default, (T(1, 2, 3, 3, 3, dtype=torch.int64), [2, 2, 2])
    ),
    ErrorCase("adaptive_max_pool3d_bad_rank", aten.adaptive_max_pool3d.default, (T(3, 3), [2, 2, 2])),
    ErrorCase("euclidean_dist_columns", aten._euclidean_dist.default, (T(4, 3), T(5, 2))),
    ErrorCase("embedding_renorm_float_indices", aten.embedding_renorm.default, (T(4, 3), T(2), 1.0, 2.0)),
    ErrorCase("embedding_renorm_1d", aten.embedding_renorm.default, (T(4), torch.tensor([1]), 1.0, 2.0)),
    ErrorCase("weight_norm_middle_dim", aten._weight_norm_interface.default, (T(4, 3, 5), T(1, 3, 1), 1)),
    ErrorCase("weight_norm_negative_dim", aten._weight_norm_interface.default, (T(4, 3, 5), T(1, 1, 5), -1)),
    ErrorCase("weight_norm_0d", aten._weight_norm_interface.default, (T(), T(), 0)),
    ErrorCase(
        "weight_norm_int64",
        aten._weight_norm_interface.default,
        (T(4, 3, dtype=torch.int64), T(4, 1, dtype=torch.int64), 0),
    ),
    ErrorCase("weight_norm_g_dtype", aten._weight_norm_interface.default, (T(4, 3), T(4, 1, dtype=D), 0)),
    ErrorCase(
        "weight_norm_backward_middle_dim",
        aten._weight_norm_interface_backward.default,
        (T(4, 3, 5), T(4, 3, 5), T(1, 3, 1), T(1, 3, 1), 1),
    ),
    ErrorCase(
        "weight_norm_backward_grad_dtype",
        aten._weight_norm_interface_backward.default,
        (T(4, 3, dtype=D), T(4, 3), T(4, 1), T(4, 1), 0),
    ),
    ErrorCase(
        "weight_norm_backward_norms_bf16",
        aten._weight_norm_interface_backward.default,
        (
            T(4, 8, dtype=torch.bfloat16),
            T(4, 8, dtype=torch.bfloat16),
            T(4, 1, dtype=torch.bfloat16),
            T(4, 1, dtype=torch.bfloat16),
            0,
        ),
    ),
    ErrorCase(
        "weight_norm_backward_int64",
        aten._weight_norm_interface_backward.default,
        (
            T(4, 3, dtype=torch.int64),
            T(4, 3, dtype=torch.int64),
            T(4, 1, dtype=torch.int64),
            T(4, 1, dtype=torch.int64),
            0,
        ),
    ),
]


@pytest.mark.parametrize("case", ERROR_CASES, ids=lambda c: c.id)
def test_shape_fn_raises_like_cpu(case):
    assert_shape_fn_raises_like_cpu(case)


# ---------------------------------------------------------------------------- OpInfo samples

OPINFO_NAMES = [
    ("nn.functional.max_unpool1d", ""),
    ("nn.functional.max_unpool2d", ""),
    ("nn.functional.max_unpool3d", ""),
    ("grid_sampler_2d", ""),
    ("grid_sampler_3d", ""),
    ("nn.functional.grid_sample", ""),
    ("nn.functional.interpolate", "bicubic"),
    ("nn.functional.interpolate", "nearest-exact"),
    ("_upsample_bilinear2d_aa", ""),
    ("nn.functional.adaptive_max_pool3d", ""),
    ("nn.functional.bilinear", ""),
    ("nn.functional.embedding", ""),
    ("cdist", ""),
]
SAMPLES_PER_OP = 6


@pytest.mark.parametrize("name,variant", OPINFO_NAMES, ids=lambda x: x or "")
def test_opinfo_samples_eager_and_float64_gradients(name, variant):
    op = op_db_entry(name, variant)
    for i, sample in enumerate(op.sample_inputs("cpu", torch.float64, requires_grad=True)):
        if i >= SAMPLES_PER_OP:
            break
        sample_and_first_gradient_match_cpu(op, sample)


@pytest.mark.parametrize(
    "name,variant",
    [("nn.functional.max_unpool2d", ""), ("nn.functional.grid_sample", ""), ("nn.functional.interpolate", "bicubic")],
    ids=lambda x: x or "",
)
def test_opinfo_samples_compiled_float32(name, variant):
    op = op_db_entry(name, variant)
    fn = xnf.compile(lambda *a, **k: op(*a, **k))
    for i, sample in enumerate(op.sample_inputs("cpu", torch.float32)):
        if i >= 3:
            break
        ours = sample_on_xla(sample)
        expected = op(sample.input, *sample.args, **sample.kwargs)
        got = fn(ours.input, *ours.args, **ours.kwargs)
        torch.testing.assert_close(xnf.to_torch(got), expected, equal_nan=True)


def test_embedding_max_norm_renormalizes_the_table_in_place():
    weight = torch.randn(6, 4, dtype=D) * 3
    ids = torch.tensor([[0, 2], [2, 5]])
    ours = xnf.to_xla(weight.clone())
    expected = torch.nn.functional.embedding(ids, weight, max_norm=1.0)
    got = torch.nn.functional.embedding(xnf.to_xla(ids), ours, max_norm=1.0)
    torch.testing.assert_close(xnf.to_torch(got), expected)
    torch.testing.assert_close(xnf.to_torch(ours), weight)  # the table itself was renormalized


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("dim", [0, 2])
def test_weight_norm_parametrization_trains_like_cpu(dim, mode):
    # wav2vec2's positional convolution: weight_norm over the kernel dim (the last one).
    torch.manual_seed(0)
    conv = torch.nn.utils.parametrizations.weight_norm(torch.nn.Conv1d(4, 6, 3), dim=dim)
    ours = xnf.to_xla(copy.deepcopy(conv))
    x = torch.randn(2, 4, 10)

    def step(module, x):
        out = module(x)
        out.square().sum().backward()
        return [out.detach()] + [p.grad for p in module.parameters()]

    expected = step(conv, x)
    got = (xnf.compile(step) if mode == "compiled" else step)(ours, xnf.to_xla(x))
    torch.testing.assert_close([xnf.to_torch(t) for t in got], expected, **F32_TOL)


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_spatial_transformer_trains_like_cpu(mode):
    """F.affine_grid + F.grid_sample (a spatial transformer network): outputs and the
    gradients of theta and the image."""

    def transform(image, theta):
        grid = torch.nn.functional.affine_grid(theta, list(image.shape), align_corners=False)
        out = torch.nn.functional.grid_sample(image, grid, align_corners=False)
        out.square().sum().backward()
        return out.detach(), image.grad, theta.grad

    g = torch.Generator().manual_seed(5)
    image, theta = torch.randn(2, 3, 8, 8, generator=g), torch.randn(2, 2, 3, generator=g) * 0.3
    theta[:, 0, 0] += 1
    theta[:, 1, 1] += 1
    expected = transform(image.clone().requires_grad_(), theta.clone().requires_grad_())
    step = xnf.compile(transform) if mode == "compiled" else transform
    for _ in range(3):
        got = step(xnf.to_xla(image).requires_grad_(), xnf.to_xla(theta).requires_grad_())
    for g_, e in zip(got, expected):  # theta's gradient sums 64 positions of 3 channels in float32
        torch.testing.assert_close(g_.cpu(), e, rtol=1e-4, atol=1e-5)
