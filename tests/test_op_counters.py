"""`xla_native_functions.metrics`: per-op counters in every mode (eager, compile() traced
and replayed, lazy, torch.compile), manifest sections, and CPU fallbacks, as tests
use them to prove where an op ran."""

from __future__ import annotations

import warnings

import pytest
import torch

import xla_native_functions as xnf
from xla_native_functions.runtime.exec import graph
from xla_native_functions.runtime.frontends import dynamo
from xla_native_functions.runtime.platform.metrics import metrics


@pytest.fixture(autouse=True)
def fresh():
    xnf.metrics.reset()
    yield
    xnf.config.allow_cpu_fallback = False


# A torch.library operator with a CPU kernel only and no lowering: it can run here only
# by CPU fallback.
@torch.library.custom_op("wfcounters::cpu_only", mutates_args=(), device_types="cpu")
def cpu_only(x: torch.Tensor) -> torch.Tensor:
    return x * 3


@cpu_only.register_fake
def _(x):
    return torch.empty_like(x)


def step(a, b):
    return (a.abs() + b).sum(0)


def test_eager_counts_by_overload_with_sections():
    x, y = xnf.to_xla(torch.randn(3, 4)), xnf.to_xla(torch.randn(3, 4))
    torch.abs(x)
    torch.abs(x)
    x.add_(y)
    torch.add(x, y)
    assert xnf.metrics.counter_value("aten::abs") == 2
    assert xnf.metrics.counter_value("aten::add.Tensor") == 1
    assert xnf.metrics.counter_value("aten::add_.Tensor") == 1
    assert xnf.metrics.counter_value("aten::mul.Tensor") == 0
    # other spellings of the same names
    assert xnf.metrics.counter_value("abs") == xnf.metrics.counter_value("aten::abs.default") == 2
    assert xnf.metrics.counter_value("add.Tensor") == 1
    assert xnf.metrics.counters() == {"aten::abs": 2, "aten::add.Tensor": 1, "aten::add_.Tensor": 1}
    assert xnf.metrics.counters(section=True) == {
        "aten::abs": (2, "full_codegen"),
        "aten::add.Tensor": (1, "full_codegen"),
        "aten::add_.Tensor": (1, "full_codegen"),
    }
    assert xnf.metrics.counters(section=True)["aten::abs"].section == "full_codegen"
    assert xnf.metrics.section_of("aten::cholesky") == "supported"
    assert xnf.metrics.section_of("aten::no_such_op") == "unlisted"
    assert xnf.metrics.executed_fallback_ops() == []
    xnf.metrics.reset()
    assert xnf.metrics.counters() == {}


def test_a_replayed_compile_step_counts_its_ops_once_per_call():
    x, y = xnf.to_xla(torch.randn(3, 4)), xnf.to_xla(torch.randn(3, 4))
    f = xnf.compile(step)
    replays = metrics.replays
    for _ in range(5):
        f(x, y)
    assert metrics.replays - replays >= 2, "the test needs calls that ran without tracing"
    assert xnf.metrics.counters() == {"aten::abs": 5, "aten::add.Tensor": 5, "aten::sum.dim_IntList": 5}
    # the same as tracing every call
    xnf.metrics.reset()
    g = xnf.compile(step, replay=False)
    for _ in range(5):
        g(x, y)
    assert xnf.metrics.counters() == {"aten::abs": 5, "aten::add.Tensor": 5, "aten::sum.dim_IntList": 5}
    # reset between replays: only the later calls count
    f(x, y)
    xnf.metrics.reset()
    f(x, y)
    f(x, y)
    assert xnf.metrics.counter_value("aten::abs") == 2
    assert "aten.abs.default: 2" in xnf.metrics_report()


def test_a_replayed_step_with_a_host_read_counts_both_graphs():
    x = xnf.to_xla(torch.randn(3, 4))

    def two_graphs(a):
        if a.sum().item() > -1e9:  # a host read: two graphs per call
            return a.exp()
        return a

    f = xnf.compile(two_graphs)
    replays = metrics.replays
    for _ in range(4):
        f(x)
    assert metrics.replays - replays >= 1
    counts = xnf.metrics.counters()
    assert counts["aten::exp"] == 4 and counts["aten::sum"] == 4, counts


def test_lazy_mode_counts():
    x = xnf.to_xla(torch.randn(3, 4))
    with xnf.lazy_mode():
        for _ in range(3):
            x = x.abs()
        xnf.mark_step()
    assert xnf.metrics.counter_value("aten::abs") == 3


def test_torch_compile_counts_each_call():
    torch._dynamo.reset()
    fn = torch.compile(lambda a: a.abs() * 2, backend="xla_native")
    x = torch.randn(3, 4)
    try:
        for _ in range(3):
            torch.testing.assert_close(fn(x), x.abs() * 2)
        assert dynamo.stats.traces >= 1
        assert xnf.metrics.counter_value("aten::abs") == 3
        assert xnf.metrics.counter_value("aten::mul.Tensor") == 3
        assert xnf.metrics.executed_fallback_ops() == []
    finally:
        torch._dynamo.reset()


def test_cpu_fallback_is_listed():
    x = xnf.to_xla(torch.randn(3))
    xnf.config.allow_cpu_fallback = True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = cpu_only(x)
        cpu_only(x)
    torch.testing.assert_close(xnf.to_torch(out), xnf.to_torch(x) * 3)
    assert xnf.metrics.executed_fallback_ops() == ["wfcounters::cpu_only"]
    assert xnf.metrics.counters(section=True)["wfcounters::cpu_only"] == (2, "unlisted")


def test_torch_compile_cpu_partitions_count_as_fallbacks_on_every_call():
    torch._dynamo.reset()
    fn = torch.compile(lambda a: cpu_only(a.abs()) + 1, backend="xla_native")
    x = torch.randn(3)
    try:
        for _ in range(3):
            torch.testing.assert_close(fn(x), x.abs() * 3 + 1)
        assert xnf.metrics.executed_fallback_ops() == ["wfcounters::cpu_only"]
        assert xnf.metrics.counter_value("wfcounters::cpu_only") == 3
        assert xnf.metrics.counter_value("aten::abs") == 3
    finally:
        torch._dynamo.reset()


def test_graph_cache_reuse_does_not_change_counts(monkeypatch):
    monkeypatch.setattr(graph, "_GRAPH_CACHE", {})
    x = xnf.to_xla(torch.randn(2, 2))
    for _ in range(2):
        xnf.compile(lambda a: a.exp(), replay=False)(x)
    assert xnf.metrics.counter_value("aten::exp") == 2
