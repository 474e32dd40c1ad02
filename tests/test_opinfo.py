"""A representative, fast part of the OpInfo sweep (scripts/coverage_report.py runs
all of op_db): OpInfos whose aten operators are all lowered, in float32 and int64
(eager, compiled, in-place), bfloat16, float16 and complex64 (eager), float64 gradients
and error_inputs, every sample compared with PyTorch CPU by tests/opinfo_harness.py.
Every sample must pass unless tests/opinfo_skips.py lists the unit with a reason.

Units run in one worker subprocess, so a process abort or a hang fails one test
instead of the session.
"""

from __future__ import annotations

import pytest
import torch

import opinfo_harness as h
from opinfo_skips import xfail_reason

# Chosen to cover each lowering family (pointwise unary/binary/comparison, reductions,
# matmul, shape and view ops, nn, factories) with few samples each; every aten
# operator their samples reach is in the manifest today.
OPINFOS = [
    "abs",
    "add",
    "sub",
    "mul",
    "div.no_rounding_mode",
    "div.trunc_rounding",
    "div.floor_rounding",
    "neg",
    "exp",
    "log",
    "cos",
    "sin",
    "sqrt",
    "rsqrt",
    "tanh",
    "sigmoid",
    "nn.functional.relu",
    "nn.functional.gelu",
    "maximum",
    "minimum",
    "eq",
    "lt",
    "where",
    "pow",
    "mm",
    "bmm",
    "addmm",
    "softmax",
    "log_softmax",
    "nn.functional.layer_norm",
    "mean",
    "sum",
    "amax",
    "argmax",
    "cat",
    "clone",
    "t",
    "transpose",
    "unsqueeze",
    "zeros_like",
    "ones_like",
    "full_like",
    "atan2",
    "clamp",
    "addcdiv",
    "lerp",
    "nn.functional.silu",
    "nn.functional.conv2d",
    "nn.functional.max_pool2d",
    "nn.functional.batch_norm",
    "nn.functional.embedding_bag",
    "nn.functional.cross_entropy",
    "gather",
    "scatter_add",
    "index_put",
    "sort",
    "cumsum",
    "var",
    "flip",
    "linalg.solve",
    "fft.rfft",
    "logaddexp",
    "dist",
    "atan",
    "acosh",
    "byte",
    "logsumexp",
]

DTYPES = ("float32", "int64", "float64")
# `operator`: the OpInfo's Python operator (`x << y`), whose aten op may differ from the
# function's (__lshift__ for bitwise_left_shift)
MODES = ("eager", "compiled", "inplace", "grad", "error_inputs", "operator")
TIME_LIMIT = 60.0
# OpInfos with far more samples than the others (max_pool2d: 1,440 per unit, two minutes
# of CI): one sample in so many here, all of them in scripts/coverage_report.py
SAMPLE_EVERY = {"nn.functional.max_pool2d": 8}

# Eager bfloat16 for the OpInfos above, and float16 for a few, except where PyTorch's
# CPU kernel rounds intermediate results to the low precision and we round once (our
# results are the closer to float64 ones there; see docs/reports/coverage.md): log_softmax near
# 0, batch_norm; and sort, whose order of bfloat16 ties differs.
LOW_PRECISION_EXCLUDED = {"log_softmax", "nn.functional.batch_norm", "sort"}
FLOAT16_OPINFOS = {
    "mul",
    "exp",
    "tanh",
    "mm",
    "softmax",
    "nn.functional.layer_norm",
    "sum",
    "cat",
    "nn.functional.conv2d",
}


# Eager complex64 for these (scripts/coverage_report.py --dtypes complex64 runs all)
COMPLEX_OPINFOS = {"abs", "mul", "exp", "sqrt", "pow", "mm", "sum", "tanh", "logaddexp", "dist", "atan", "acosh",
                   "byte", "cumsum", "fft.rfft", "logsumexp"}


def _units(key: str):
    units = h.plan_units([key], DTYPES, MODES)
    # float64 only for gradients, compiled only in float32: the rest of the sweep is in
    # scripts/coverage_report.py, this keeps CI short
    units = [u for u in units if (u[1] != "float64" or u[2] == "grad") and (u[1] != "int64" or u[2] != "compiled")]
    if key in COMPLEX_OPINFOS:
        units += h.plan_units([key], ("complex64",), ("eager",))
    if key not in LOW_PRECISION_EXCLUDED:
        units += h.plan_units([key], ("bfloat16", "float16") if key in FLOAT16_OPINFOS else ("bfloat16",), ("eager",))
    return units


@pytest.fixture(scope="module")
def pool():
    p = h.WorkerPool()
    yield p
    p.stop()


@pytest.mark.parametrize("key", OPINFOS)
def test_opinfo(pool, key):
    if key not in h.opinfos():
        pytest.skip(f"no OpInfo {key} in this torch version")
    problems = []
    ran = 0
    for u in _units(key):
        res = pool.run(*u, time_limit=TIME_LIMIT, reference=False, every=SAMPLE_EVERY.get(key, 1))
        bad = res["failed"] + res["errored"]
        ran += res["passed"] + bad
        reason = xfail_reason(*u)
        if reason and res["status"] == "done" and not bad and res["passed"]:
            problems.append(f"{'/'.join(u)}: passes now; remove its entry from tests/opinfo_skips.py")
        if res["status"] not in ("done", "skip") or bad:
            # an expected failure covers the operators its reason names, not new ones
            if reason and all(m.split(".")[0].rstrip("_") in reason for m in res["missing"]):
                continue
            detail = "; ".join(res["messages"][:2])
            missing = ", ".join(res["missing"])
            problems.append(
                f"{'/'.join(u)}: {res['status']}, {res['passed']} passed, {res['failed']} failed, {res['errored']} "
                "errored"
                + (f" (not lowered: {missing})" if missing else "")
                + (f" -- {detail}" if detail else "")
            )
    assert not problems, "\n".join(problems)
    assert ran > 0, f"no sample of {key} was compared"


# ----------------------------------------------------------------- random ops
# Random OpInfos have no deterministic reference: the sweep compares their shapes and
# dtypes and same-seed reproducibility; here the distributions.


@pytest.fixture(scope="module")
def xnf():
    h._setup_worker()
    import xla_native_functions

    return xla_native_functions


@pytest.mark.parametrize("factory", ["rand", "randn"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_random_factories(xnf, factory, dtype):
    fn = getattr(torch, factory)
    with xnf.default_env():
        torch.manual_seed(3)
        a = fn(200, 300, dtype=dtype)
        torch.manual_seed(3)
        b = fn(200, 300, dtype=dtype)
        c = fn(200, 300, dtype=dtype)
    assert isinstance(a, torch.Tensor) and a.device.type == "jax"
    a, b, c = xnf.to_torch((a, b, c))
    assert a.shape == (200, 300) and a.dtype == dtype
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert not torch.equal(a, c), "a new draw repeated the previous one"
    n = a.numel()
    if factory == "rand":
        assert a.min() >= 0 and a.max() < 1
        # mean 1/2, sd 1/sqrt(12); 6 standard errors
        assert abs(a.mean().item() - 0.5) < 6 * (1 / 12) ** 0.5 / n**0.5
        assert abs(a.var().item() - 1 / 12) < 0.01
    else:
        assert abs(a.mean().item()) < 6 / n**0.5
        assert abs(a.std().item() - 1) < 0.02
        assert 0.99 < (a.abs() < 3).double().mean().item() < 0.999  # ~99.73% within 3 sd


@pytest.mark.parametrize("p", [0.0, 0.3, 0.9])
def test_dropout_distribution(xnf, p):
    x = torch.full((400, 250), 2.0)
    torch.manual_seed(11)
    y1 = torch.nn.functional.dropout(xnf.to_xla(x), p=p, training=True)
    torch.manual_seed(11)
    y2 = torch.nn.functional.dropout(xnf.to_xla(x), p=p, training=True)
    y1, y2 = xnf.to_torch((y1, y2))
    assert y1.shape == x.shape and y1.dtype == x.dtype
    torch.testing.assert_close(y1, y2, rtol=0, atol=0)
    kept = y1 != 0
    # survivors are scaled by 1/(1-p); the kept fraction is 1-p within 6 standard errors
    torch.testing.assert_close(y1[kept], torch.full_like(y1[kept], 2.0 / (1 - p)))
    n = x.numel()
    assert abs(kept.double().mean().item() - (1 - p)) < 6 * (p * (1 - p) / n) ** 0.5 + 1e-12
    y_eval = xnf.to_torch(torch.nn.functional.dropout(xnf.to_xla(x), p=p, training=False))
    torch.testing.assert_close(y_eval, x)
