"""config.debug_accuracy_for_each_op under every way of running (Note [Accuracy check
under tracing] in runtime/frontends/debug.py): eager, compile() and lazy_mode() compare
the values the program computed (a deliberately wrong op is reported, once per call,
with the user's line), and the JAX-traced paths (jax_jit, jax_function under jax.jit,
the torch.compile backend) never raise: they skip, warn once and list what they skipped."""

from __future__ import annotations

import re
import warnings

import jax
import pytest
import torch

import xla_native_functions as xnf
from xla_native_functions.runtime.exec.registry import HANDLERS
from xla_native_functions.runtime.frontends import debug
from xla_native_functions.runtime.platform.metrics import metrics

aten = torch.ops.aten


@pytest.fixture
def accuracy(monkeypatch):
    monkeypatch.setattr(xnf.config, "debug_accuracy_for_each_op", True)
    monkeypatch.setattr(debug, "_warned_skip", [False])
    xnf.reset_metrics()
    yield
    xnf.reset_metrics()


@pytest.fixture
def wrong_neg(monkeypatch):
    """aten.neg computing -x + 1: the check must see it, wherever it runs."""
    key = id(aten.neg.default)
    right = HANDLERS[key]
    monkeypatch.setitem(HANDLERS, key, lambda x: right(x) + 1)


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


def _reports(text):
    return re.findall(r"accuracy: (\S+) differs from PyTorch CPU: .* at (.*)", text)


def test_eager_reports_a_wrong_op_with_the_users_line(accuracy, wrong_neg, capsys):
    x = xnf.to_xla(torch.randn(3, 4))
    out = (-x).relu()  # the line reported
    reports = _reports(capsys.readouterr().out)
    assert [op for op, _ in reports] == ["aten.neg.default"]
    assert "test_debug_accuracy.py" in reports[0][1] and "(-x).relu()" in reports[0][1]
    assert metrics.accuracy_differences == 1 and metrics.accuracy_checked >= 2
    assert out.shape == (3, 4)


def test_compile_compares_the_values_of_the_program(accuracy, wrong_neg, capsys):
    model = xnf.to_xla(_model())
    x = torch.randn(3, 4)

    def step(inp):
        return (-model(inp)).tanh()  # the line reported

    expected = (-_model()(x) + 1).tanh()  # what the wrong neg makes the step compute
    compiled = xnf.compile(step)
    for call in range(3):
        out = compiled(xnf.to_xla(x))
        reports = _reports(capsys.readouterr().out)
        # one report per call, after the call's graph ran; the other ops are right
        assert [op for op, _ in reports] == ["aten.neg.default"], call
        assert "(-model(inp)).tanh()" in reports[0][1]
        torch.testing.assert_close(xnf.to_torch(out), expected)
    assert metrics.replays == 0  # traced on every call while checking
    assert metrics.accuracy_checked >= 3 * 5 and metrics.accuracy_differences == 3
    assert not metrics.accuracy_skipped


def test_compile_checks_in_place_ops_with_their_inputs_before_the_write(accuracy, capsys):
    def step(a, b):
        a.mul_(2).add_(b)  # in place: the check must see a before each write
        return a.sum()

    x, y = torch.randn(5), torch.randn(5)
    a = xnf.to_xla(x)
    out = xnf.compile(step)(a, xnf.to_xla(y))
    assert _reports(capsys.readouterr().out) == []
    torch.testing.assert_close(xnf.to_torch(a), x * 2 + y)
    torch.testing.assert_close(xnf.to_torch(out), (x * 2 + y).sum())
    assert metrics.accuracy_checked >= 3 and metrics.accuracy_differences == 0


def test_lazy_mode_compares_at_the_sync(accuracy, wrong_neg, capsys):
    x = xnf.to_xla(torch.randn(4, 4))
    with xnf.lazy_mode():
        y = (-x) @ x
        assert _reports(capsys.readouterr().out) == []  # recorded, not run yet
        xnf.mark_step()
        assert [op for op, _ in _reports(capsys.readouterr().out)] == ["aten.neg.default"]
        z = -(y.sum())
        value = z.item()  # a read on the host syncs: checked there
        assert [op for op, _ in _reports(capsys.readouterr().out)] == ["aten.neg.default"]
    expected_y = (-xnf.to_torch(x) + 1) @ xnf.to_torch(x)
    assert value == pytest.approx(-(expected_y.sum().item()) + 1, rel=1e-5)


def test_correct_model_reports_nothing_under_compile_and_lazy_mode(accuracy, capsys):
    model = xnf.to_xla(_model())
    x = xnf.to_xla(torch.randn(3, 4))
    compiled = xnf.compile(lambda inp: model(inp).softmax(-1))
    for _ in range(2):
        compiled(x)
    with xnf.lazy_mode():
        model(x).sum().backward()
        xnf.mark_step()
    assert _reports(capsys.readouterr().out) == []
    assert metrics.accuracy_checked > 10 and not metrics.accuracy_skipped


def _jax_traced_runs():
    cpu_model = _model()
    moved = xnf.to_xla(_model())
    x = torch.randn(3, 4)
    fn, params = xnf.jax_function(cpu_model)
    return {
        "jax_jit": (lambda: xnf.to_torch(xnf.jax_jit(lambda a: moved(a))(xnf.to_xla(x))), cpu_model(x)),
        "jax_function+jax.jit": (lambda: torch.from_numpy(jax.device_get(jax.jit(fn)(params, x.numpy())).copy()),
                                 cpu_model(x)),
        "torch.compile": (lambda: torch.compile(_model(), backend="xla_native")(x), cpu_model(x)),
    }


@pytest.mark.parametrize("path", ["jax_jit", "jax_function+jax.jit", "torch.compile"])
def test_jax_traced_paths_skip_and_say_so(accuracy, wrong_neg, path, capsys):
    torch._dynamo.reset()
    run, expected = _jax_traced_runs()[path]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = run()
        run()
    torch.testing.assert_close(out, expected.detach())
    skip_warnings = [w for w in caught if "debug_accuracy_for_each_op" in str(w.message)]
    assert len(skip_warnings) == 1 and "metrics_report()" in str(skip_warnings[0].message)
    assert "aten.addmm.default" in metrics.accuracy_skipped
    report = xnf.metrics_report()
    assert "accuracy check skipped, values traced by JAX" in report and "aten.addmm.default" in report
    assert _reports(capsys.readouterr().out) == []


def test_random_ops_are_not_compared(accuracy, capsys):
    # our random numbers are not PyTorch CPU's stream: comparing them would report noise
    model = xnf.to_xla(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.5)))
    x = xnf.to_xla(torch.randn(16, 4))
    model(x)
    torch.rand(3, 3, device="jax")
    xnf.compile(lambda a: model(a).sum())(x)
    assert _reports(capsys.readouterr().out) == []
    assert metrics.accuracy_checked > 0


def test_factories_on_our_device_are_compared_with_cpu_ones(accuracy, capsys):
    torch.zeros(2, 3, device="jax")
    torch.arange(5, device="jax")
    with xnf.default_env():
        torch.ones(4)
    xnf.compile(lambda: torch.full((2, 2), 3.0, device="jax") + 1)()
    assert _reports(capsys.readouterr().out) == []
    assert metrics.accuracy_checked >= 5
