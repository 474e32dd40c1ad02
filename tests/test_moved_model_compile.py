"""torch.compile(model, backend="xla_native") of a model moved with to_xla: Dynamo cannot
trace our tensors, so it runs op by op; the backend says so once, with the fix (Note
[Moved models under torch.compile] in runtime/frontends/moved_models.py), and results
stay right. The recommended path (a CPU model the backend moves) compiles and warns
nothing. scripts/bench_moved_compile.py times the four ways of running such a model."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import nn
from torch._dynamo.utils import counters

import xla_native_functions as xnf
from xla_native_functions.runtime.frontends import dynamo as backend_module
from xla_native_functions.runtime.frontends import moved_models
from xla_native_functions.runtime.frontends.moved_models import MovedModelWarning


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    torch._dynamo.reset()
    backend_module.reset_dynamo_stats()
    monkeypatch.setattr(moved_models, "_warned", [False])
    counters.clear()
    monkeypatch.setattr(moved_models, "_seen", [0])
    yield
    torch._dynamo.reset()


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def _moved_warnings(caught):
    return [w for w in caught if issubclass(w.category, MovedModelWarning)]


def test_moved_model_warns_once_with_the_fix_and_stays_correct():
    cpu = _model()
    moved = xnf.to_xla(copy.deepcopy(cpu))
    x = torch.randn(3, 8)
    compiled = torch.compile(moved, backend="xla_native")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = compiled(xnf.to_xla(x))  # the line the warning names
        for _ in range(3):
            out = compiled(xnf.to_xla(x))
        torch.compile(copy.deepcopy(moved), backend="xla_native")(xnf.to_xla(x))
    found = _moved_warnings(caught)
    assert len(found) == 1
    message = str(found[0].message)
    assert "Dynamo cannot trace them" in message and "torch.compile(cpu_model, backend='xla_native')" in message
    assert "xla_native_functions.compile(step)" in message
    assert found[0].filename.endswith("test_moved_model_compile.py"), found[0].filename
    torch.testing.assert_close(xnf.to_torch(out), cpu(x))
    assert backend_module.stats.graphs == 0  # nothing compiled: op by op


def test_moved_model_training_step_under_torch_compile_is_right():
    cpu = _model()
    moved = xnf.to_xla(copy.deepcopy(cpu))
    x, y = torch.randn(4, 8), torch.randn(4, 4)

    def step(model, inp, target):
        loss = nn.functional.mse_loss(model(inp), target)
        loss.backward()
        return loss

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loss = torch.compile(step, backend="xla_native")(moved, xnf.to_xla(x), xnf.to_xla(y))
    assert len(_moved_warnings(caught)) == 1
    expected = step(cpu, x, y)
    torch.testing.assert_close(xnf.to_torch(loss), expected)
    for p, q in zip(moved.parameters(), cpu.parameters()):
        torch.testing.assert_close(xnf.to_torch(p.grad), q.grad)


def test_cpu_model_compiles_and_warns_nothing():
    xnf.to_xla(_model())  # the watch is on
    cpu = _model()
    ref = copy.deepcopy(cpu)
    x = torch.randn(3, 8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = torch.compile(cpu, backend="xla_native")
        for _ in range(2):
            out = compiled(x)
    assert _moved_warnings(caught) == []
    assert backend_module.stats.graphs >= 1 and backend_module.stats.calls == 2
    torch.testing.assert_close(out, ref(x))


def test_compile_of_the_moved_model_is_the_compiled_path():
    # What the warning recommends for a moved model: compile() compiles and replays it.
    cpu = _model()
    moved = xnf.to_xla(copy.deepcopy(cpu))
    x = torch.randn(3, 8)
    step = xnf.compile(lambda inp: moved(inp))
    for _ in range(4):
        out = step(xnf.to_xla(x))
    torch.testing.assert_close(xnf.to_torch(out), cpu(x))
