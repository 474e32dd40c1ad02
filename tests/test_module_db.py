"""A representative, fast part of the module_db sweep (scripts/module_report.py runs all
of it): the first sample of every ModuleInfo in float32, eager, in the `train` setting
(forward, backward, outputs and gradients compared) and the `inference_mode` setting,
and through `torch.compile(module, backend="xla_native")` in the `train` setting,
compared with PyTorch CPU by tests/module_harness.py.

A unit that fails today is a strict expected failure with the reason from
tests/module_db_skips.py: it must fail the way the reason says (its failure class or
aten operator is named there), and once it passes the test fails until the entry is
removed. The units run in one worker subprocess, so an abort or a hang fails one test
instead of the session.
"""

from __future__ import annotations

import pytest
import torch

import module_db_skips as skips
import module_harness as mh
import opinfo_harness as h

SETTINGS = ("train", "inference_mode")
DTYPE, MODE = "float32", "eager"
DYNAMO_SETTINGS = ("train",)
TIME_LIMIT = 120.0


class KnownFailure(AssertionError):
    """The unit failed as its xfail entry says."""


def _params(settings=SETTINGS, mode=MODE):
    out = []
    for name in mh.module_infos():
        for setting in settings:
            reason = skips.xfail_reason(name, DTYPE, setting, mode)
            marks = [pytest.mark.xfail(strict=True, raises=KnownFailure, reason=reason)] if reason else []
            out.append(pytest.param(name, setting, marks=marks, id=f"{name}-{setting}"))
    return out


@pytest.fixture(scope="module")
def pool():
    p = h.WorkerPool(runner="module_harness:run_unit", warm="module_harness:worker_ready")
    yield p
    p.stop()


@pytest.mark.parametrize("name,setting", _params())
def test_first_sample(pool, name, setting):
    _check_first_sample(pool, name, setting, MODE)


@pytest.mark.parametrize("name,setting", _params(DYNAMO_SETTINGS, "dynamo"))
def test_first_sample_through_torch_compile(pool, name, setting):
    _check_first_sample(pool, name, setting, "dynamo")


def _check_first_sample(pool, name: str, setting: str, mode: str) -> None:
    entry = skips.treatment(name, DTYPE, setting, mode)
    if entry and entry[0] == "skip":
        pytest.skip(entry[1])
    res = pool.call((name, DTYPE, setting, mode, TIME_LIMIT, [0]), TIME_LIMIT)
    problem = res.get("first_problem")
    if res["status"] == "done" and res["passed"] == 1:
        return
    detail = (
        f"{name} {DTYPE} {setting} {mode}: {res['status']}, {res['passed']} passed, {res['failed']} failed, "
        f"{res['errored']} errored, {res['skipped']} skipped by PyTorch CPU"
        + (f" -- {problem['class']}: {problem['message']}" if problem else "")
        + ("".join(f" -- {m}" for m in res.get("messages", [])[:2]))
    )
    reason = skips.xfail_reason(name, DTYPE, setting, mode)
    if reason and problem and skips.known_failure(reason, problem):
        raise KnownFailure(detail)
    raise AssertionError(detail)


# ----------------------------------------------------------------- the comparison itself


def _result(out, weight_grad=None, input_grad=None, running_mean=None):
    return {
        "output": out,
        "param_grads": {"weight": weight_grad},
        "input_grads": [input_grad],
        "buffers": {"running_mean": running_mean if running_mean is not None else torch.zeros(3)},
    }


def test_compare_names_what_differs():
    x = torch.linspace(-1, 1, 12).reshape(3, 4)
    ref = _result(x, x.sum(0), x * 2)
    assert mh.compare(_result(x.clone(), x.sum(0), x * 2), ref, (1.3e-6, 1e-5)) == []
    wrong = mh.compare(_result(x + 1e-3, None, x * 2 + 1e-3), ref, (1.3e-6, 1e-5))
    assert [w for w, _ in wrong] == ["output", "parameter grad", "input grad"]
    assert "weight: None, expected a tensor" in wrong[1][1]
    # random modules: shapes and dtypes only
    assert mh.compare(_result(x + 1, x.sum(0) + 1, x), ref, None, random=True) == []
    assert [w for w, _ in mh.compare(_result(x[:2], x.sum(0), x), ref, None, random=True)] == ["output"]


def test_float64_arbitration():
    """Ours differs from PyTorch CPU's float32 result: accepted when within the float32
    tolerance of PyTorch CPU's float64 result, with PyTorch's own distance noted."""
    tol = h._DEFAULT_TOL["float32"]
    exact = torch.linspace(-1, 1, 12, dtype=torch.float64).reshape(3, 4)
    ref64 = _result(exact, exact.sum(0), exact * 2)
    cpu_wrong = _result(exact.float() + 1e-2, exact.sum(0).float(), (exact * 2).float())
    ours = _result(exact.float(), exact.sum(0).float(), (exact * 2).float())
    problems = mh.compare(ours, cpu_wrong, tol)
    assert [w for w, _ in problems] == ["output"]
    left, records, note = mh.arbitrate(ours, cpu_wrong, ref64, problems, tol)
    assert left == [] and note is None
    assert records[0]["what"] == "output" and records[0]["cpu_float32_outside_tolerance_of_float64"]
    # ours further from float64 than the tolerance, and than PyTorch's float32 result: the failure stands
    ours_off = _result(exact.float() - 2e-2, exact.sum(0).float(), (exact * 2).float())
    problems = mh.compare(ours_off, cpu_wrong, tol)
    left, records, note = mh.arbitrate(ours_off, cpu_wrong, ref64, problems, tol)
    assert left == problems and records is None
    assert note["cpu_float32_also_outside_tolerance"]
    assert (
        abs(note["ours_max_error_vs_float64"] - 2e-2) < 1e-6
        and abs(note["cpu_float32_max_error_vs_float64"] - 1e-2) < 1e-6
    )
    # a gradient present on one side only is not arbitrated, whatever float64 says
    no_grad_cpu = _result(exact.float(), exact.sum(0).float(), None)
    problems = mh.compare(ours, no_grad_cpu, tol)
    assert mh.arbitrate(ours, no_grad_cpu, ref64, problems, tol) == (problems, None, None)


def test_rounding_rule():
    """A float32 difference in a tensor whose float64 value cancels to near zero among
    large ones: ours passes within a few float32 steps of the tensor's largest value
    when PyTorch's own float32 result is of the same distance from float64, never beyond
    those steps unless ours is the closer of the two, and never when PyTorch's float32
    result is much closer."""
    tol = h._DEFAULT_TOL["float32"]
    exact = torch.tensor([200.0, -150.0, 1e-3, 3.0], dtype=torch.float64)
    ref64 = _result(exact)

    def f32(delta):
        return _result((exact + torch.tensor([0.0, 0.0, delta, 0.0], dtype=torch.float64)).float())

    eps_steps = 16 * torch.finfo(torch.float32).eps * 200  # about 3.8e-4
    cpu = f32(2e-5)
    for ours_delta, accepted in ((-3e-5, True), (6e-5, True), (5e-4, False)):
        ours = f32(ours_delta)
        problems = mh.compare(ours, cpu, tol)
        assert [w for w, _ in problems] == ["output"]
        left, records, _ = mh.arbitrate(ours, cpu, ref64, problems, tol)
        assert (left == []) == accepted, (ours_delta, eps_steps)
        if accepted:
            assert records[0]["float32_rounding"] and records[0]["cpu_float32_outside_tolerance_of_float64"]
            assert abs(records[0]["ours_max_error_vs_float64"] - abs(ours_delta)) < 1e-6
    # beyond the steps but closer to float64 than PyTorch's float32 result: accepted
    cpu_far = f32(9e-4)
    ours = f32(6e-4)
    problems = mh.compare(ours, cpu_far, tol)
    left, records, _ = mh.arbitrate(ours, cpu_far, ref64, problems, tol)
    assert left == [] and records[0]["float32_rounding"]
    # PyTorch's float32 result exact: ours 3e-5 off is more than four times as far
    exact_cpu = f32(0.0)
    ours = f32(3e-5)
    problems = mh.compare(ours, exact_cpu, tol)
    assert mh.arbitrate(ours, exact_cpu, ref64, problems, tol)[0] == problems


def test_duplicate_samples_are_not_run_twice():
    """A sample whose PyTorch CPU step makes the same aten calls as an earlier one of the
    unit is a duplicate; another input shape is not."""
    from torch.testing._internal.common_modules import FunctionInput, ModuleInput

    mi = mh.module_infos()["nn.Linear"]
    tol = mh.tolerance(mi, DTYPE)
    seen: set = set()

    def sample(rows):
        return ModuleInput(constructor_input=FunctionInput(4, 3), forward_input=FunctionInput(torch.randn(rows, 4)))

    kinds = [mh.run_sample(mi, sample(rows), DTYPE, "no_grad", MODE, tol, None, seen).kind for rows in (2, 2, 5)]
    assert kinds == ["passed", "duplicate", "passed"]
