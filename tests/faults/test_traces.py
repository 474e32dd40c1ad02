"""A traced call that raises (Note [Failed traces] in runtime/exec/trace.py) leaves every
tensor usable and as eager PyTorch CPU leaves it: the ops recorded before the error
run, so the writes made before it land; when they cannot run (or the error is a
BaseException like KeyboardInterrupt) nothing is written and every tensor keeps its
value, while a tensor made by the lost ops raises a clear error when read."""

from __future__ import annotations

import copy
import io

import pytest
import torch

import xla_native_functions as xnf
from training_steps import batchnorm_mlp, training_step
from xla_native_functions.runtime.core.context import context
from xla_native_functions.runtime.exec import trace as trace_module
from xla_native_functions.runtime.platform.metrics import metrics

MODES = ["compile", "replay_false", "lazy"]


def cpu(t):
    return xnf.to_torch(t)


class Interrupt(BaseException):
    """Stands for KeyboardInterrupt: not an Exception, so not caught by `except Exception`."""


def compiled(mode: str, fn):
    """A callable running fn in `mode` (one lazy_mode block per call)."""
    if mode == "compile":
        return xnf.compile(fn)
    if mode == "replay_false":
        return xnf.compile(fn, replay=False)
    if mode == "lazy":
        def call(*args):
            with xnf.lazy_mode():
                return fn(*args)
        return call
    assert mode == "eager"
    return fn


def _raises_like(ref_call, our_call):
    with pytest.raises(BaseException) as expected:
        ref_call()
    with pytest.raises(type(expected.value)):
        our_call()
    assert context.trace is None


def _assert_state_dicts_equal(ours, ref):
    buf = io.BytesIO()
    torch.save(ours.state_dict(), buf)  # pickles CPU copies: every tensor must be readable
    buf.seek(0)
    saved = torch.load(buf)
    expected = ref.state_dict()
    assert saved.keys() == expected.keys()
    for k, v in expected.items():
        assert saved[k].device.type == "cpu"
        torch.testing.assert_close(saved[k], v, atol=1e-5, rtol=1e-5, msg=k)


# ---------------------------------------------------------------- a BatchNorm training step


def _bn_model():
    return batchnorm_mlp(4, 6, 3)


def _bn_batches(n=4):
    """Good batches, and a bad one: its targets are one fewer than its inputs, so its
    step's loss raises after the forward has updated BatchNorm's running stats."""
    torch.manual_seed(1)
    good = [(torch.randn(8, 4), torch.randint(0, 3, (8,))) for _ in range(n)]
    bad = (torch.randn(8, 4), torch.randint(0, 3, (7,)))
    return good, bad


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("first", [True, False], ids=["first_call", "later_call"])
def test_batchnorm_step_raising_after_the_forward_updates_running_stats_once(mode, first):
    ref = _bn_model()
    ours = xnf.to_xla(copy.deepcopy(ref))
    ref_step = training_step(ref, torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9))
    step = compiled(mode, training_step(ours, torch.optim.SGD(ours.parameters(), lr=0.1, momentum=0.9)))
    good, (bx, by) = _bn_batches()
    if not first:  # the compiled step is replayed by now (a new signature then traces again)
        for x, y in good[:3]:
            torch.testing.assert_close(cpu(step(xnf.to_xla(x), xnf.to_xla(y))), ref_step(x, y))
    _raises_like(lambda: ref_step(bx, by), lambda: step(xnf.to_xla(bx), xnf.to_xla(by)))
    assert int(cpu(ours[1].num_batches_tracked)) == int(ref[1].num_batches_tracked)
    _assert_state_dicts_equal(ours, ref)
    # and training goes on from there
    x, y = good[3]
    torch.testing.assert_close(cpu(step(xnf.to_xla(x), xnf.to_xla(y))), ref_step(x, y))
    _assert_state_dicts_equal(ours, ref)


# ---------------------------------------------------------------- an optimizer step raising halfway


def _params():
    torch.manual_seed(2)
    return [torch.nn.Parameter(torch.randn(3, 4)) for _ in range(4)]


@pytest.mark.parametrize("mode", MODES)
def test_optimizer_step_raising_halfway_keeps_the_updates_before_the_error(mode):
    ref_ps = _params()
    ps = [torch.nn.Parameter(xnf.to_xla(p.detach())) for p in ref_ps]
    ref_opt = torch.optim.SGD(ref_ps, lr=0.1, momentum=0.9, foreach=False)
    opt = torch.optim.SGD(ps, lr=0.1, momentum=0.9, foreach=False)
    for p, q in zip(ref_ps, ps):
        p.grad = torch.full_like(p, 0.5)
        q.grad = xnf.to_xla(p.grad)
    ref_opt.step()
    step = compiled(mode, lambda: opt.step())
    step()
    # the third parameter's momentum buffer gets a shape its update cannot broadcast to:
    # the step updates parameters 0 and 1, then raises
    ref_opt.state[ref_ps[2]]["momentum_buffer"] = torch.zeros(5)
    opt.state[ps[2]]["momentum_buffer"] = xnf.to_xla(torch.zeros(5))
    _raises_like(ref_opt.step, step)
    for i, (p, q) in enumerate(zip(ref_ps, ps)):
        torch.testing.assert_close(cpu(q), p, msg=f"parameter {i}")
        torch.testing.assert_close(cpu(opt.state[q]["momentum_buffer"]), ref_opt.state[p]["momentum_buffer"])


# ---------------------------------------------------------------- a failure while replaying


def test_guard_failure_then_an_exception_during_replay():
    """A replayed step whose guard fails runs its Python again, which raises: what it did
    before the error lands, as in eager mode, and later calls are right."""
    ref = _bn_model()
    ours = xnf.to_xla(copy.deepcopy(ref))
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    opt = torch.optim.SGD(ours.parameters(), lr=0.1)
    fail = [False]

    def make(model, opt):
        def step(x, y):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            if fail[0]:
                raise ValueError("after the optimizer step")
            return loss.detach()

        return step

    ref_step, step = make(ref, ref_opt), xnf.compile(make(ours, opt))
    xnf.reset_metrics()
    good, _ = _bn_batches(6)
    for x, y in good[:5]:
        torch.testing.assert_close(cpu(step(xnf.to_xla(x), xnf.to_xla(y))), ref_step(x, y))
    assert metrics.replays >= 1
    # a new learning rate fails the replay's hyperparameter guard: the Python runs, and raises
    fail[0] = True
    for o in (opt, ref_opt):
        o.param_groups[0]["lr"] = 0.05
    x, y = good[5]
    _raises_like(lambda: ref_step(x, y), lambda: step(xnf.to_xla(x), xnf.to_xla(y)))
    _assert_state_dicts_equal(ours, ref)
    fail[0] = False
    for x, y in good:
        torch.testing.assert_close(cpu(step(xnf.to_xla(x), xnf.to_xla(y))), ref_step(x, y))
    _assert_state_dicts_equal(ours, ref)


# ---------------------------------------------------------------- BaseException: nothing is written


@pytest.mark.parametrize("mode", MODES)
def test_base_exception_writes_nothing_and_tensors_stay_readable(mode):
    x = xnf.to_xla(torch.arange(6.0))
    view = x[2:]
    kept = []

    def fn(t):
        t.add_(1)
        view.mul_(10)
        y = t * 2
        kept.append(y)
        kept.append(y[1:])
        raise Interrupt

    step = compiled(mode, fn)
    with pytest.raises(Interrupt):
        step(x)
    assert context.trace is None
    assert torch.equal(cpu(x), torch.arange(6.0))
    assert torch.equal(cpu(view), torch.arange(2.0, 6.0))
    for y in kept:
        with pytest.raises(RuntimeError, match="whose recorded ops could not run"):
            cpu(y)
    # the tensors are usable by later calls, traced or not
    x.add_(1)
    assert torch.equal(cpu(x), torch.arange(6.0) + 1)
    assert torch.equal(cpu(compiled(mode, lambda t: t * 3)(x)), (torch.arange(6.0) + 1) * 3)


# ---------------------------------------------------------------- tensors the failed trace made


@pytest.mark.parametrize("mode", MODES)
def test_tensors_made_by_the_failed_call_hold_their_values(mode):
    base = torch.arange(6.0).reshape(2, 3)
    x = xnf.to_xla(base.clone())
    kept = {}

    def fn(t, into):
        y = t * 2
        into["y"], into["sum"], into["col"] = y, y.sum(), y[:, 1]
        t.add_(1)
        into["after"] = t + 0
        torch.mm(t, t)  # (2, 3) @ (2, 3): raises
        t.add_(100)

    ref_x, ref_kept = base.clone(), {}
    _raises_like(lambda: fn(ref_x, ref_kept), lambda: compiled(mode, fn)(x, kept))
    assert torch.equal(cpu(x), ref_x)
    assert kept.keys() == ref_kept.keys()
    for k, v in ref_kept.items():
        assert torch.equal(cpu(kept[k]), v), k


@pytest.mark.parametrize("mode", MODES)
def test_when_the_recorded_ops_cannot_run_nothing_is_written(mode, monkeypatch):
    x = xnf.to_xla(torch.arange(4.0))
    kept = []

    def fn(t):
        t.add_(1)
        kept.append(t * 2)
        raise ValueError("in the traced code")

    def fail_to_lower(*args, **kwargs):
        raise RuntimeError("the graph cannot be lowered")

    monkeypatch.setattr(trace_module, "lower_graph", fail_to_lower)
    with pytest.raises(ValueError, match="in the traced code"):
        compiled(mode, fn)(x)
    monkeypatch.undo()
    assert context.trace is None
    assert torch.equal(cpu(x), torch.arange(4.0))
    with pytest.raises(RuntimeError, match="whose recorded ops could not run"):
        cpu(kept[0])
    assert torch.equal(cpu(compiled(mode, lambda t: t.add_(1))(x)), torch.arange(4.0) + 1)


# ---------------------------------------------------------------- nested traced calls


def test_compiled_function_raising_inside_lazy_mode():
    """A compiled function called in lazy mode joins the lazy trace: caught inside the
    block, its writes before the error stay recorded; uncaught, they run at the exit."""
    base = torch.arange(4.0)

    def f(t):
        t.mul_(2)
        raise ValueError("inside")

    fc = xnf.compile(f)
    x = xnf.to_xla(base.clone())
    with xnf.lazy_mode():
        x.add_(1)
        with pytest.raises(ValueError):
            fc(x)
        x.add_(3)
    assert torch.equal(cpu(x), (base + 1) * 2 + 3)

    x = xnf.to_xla(base.clone())
    with pytest.raises(ValueError):
        with xnf.lazy_mode():
            x.add_(1)
            fc(x)
    assert context.trace is None
    assert torch.equal(cpu(x), (base + 1) * 2)


def test_compiled_function_inside_a_compiled_function():
    base = torch.arange(4.0)
    inner = xnf.compile(lambda t: t.mul_(2))

    def make_outer(inner):
        def outer(t):
            t.add_(1)
            inner(t)
            return t.sum()

        return outer

    fo = xnf.compile(make_outer(inner))
    ref_outer = make_outer(lambda t: t.mul_(2))
    x = xnf.to_xla(base.clone())
    ref = base.clone()
    for _ in range(4):
        torch.testing.assert_close(cpu(fo(x)), ref_outer(ref))
        assert torch.equal(cpu(x), ref)

    def failing(t):
        t.add_(1)
        inner(t)
        raise ValueError("after the inner call")

    with pytest.raises(ValueError):
        xnf.compile(failing)(x)
    assert torch.equal(cpu(x), (ref + 1) * 2)


def test_lazy_mode_inside_a_compiled_function():
    def f(t):
        with xnf.lazy_mode():
            t.add_(1)
        return t * 2

    fc = xnf.compile(f)
    x = xnf.to_xla(torch.arange(3.0))
    ref = torch.arange(3.0)
    for _ in range(3):
        assert torch.equal(cpu(fc(x)), f(ref))
        assert torch.equal(cpu(x), ref)
