"""First calls of compile()'s graphs answered by interpretation, node by node through
eager executables, while the graph compiles in the background (Note [First calls of
compiled graphs] in runtime/exec/graph_first_call.py): training steps against PyTorch
CPU and against the setting off, call after call across the switch to the executable;
that the first call was interpreted, that later calls run the executable compiled in the
background without compiling again, and that the setting off changes nothing."""

from __future__ import annotations

import copy
import threading

import jax
import pytest
import torch

import xla_native_functions as xnf
from xla_native_functions.runtime.exec import first_call, graph, graph_first_call

stats = first_call.stats

# JAX's events of tracing, compiling or reading a compiled program, by thread: once a
# graph is compiled in the background, its calls do none of them in the caller's thread
_EVENTS = ("/jax/core/compile/jaxpr_trace_duration", "/jax/core/compile/backend_compile_duration",
           "/jax/compilation_cache/cache_retrieval_time_sec")
_COMPILES: list[int] = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, duration, **kw: _COMPILES.append(threading.get_ident()) if event in _EVENTS else None)


def _compiles_here() -> int:
    return _COMPILES.count(threading.get_ident())


@pytest.fixture
def fresh(monkeypatch):
    """No graph compiled before: every graph of the test is built in it."""
    monkeypatch.setattr(graph, "_GRAPH_CACHE", {})
    monkeypatch.setattr(graph, "_LAST_KEYS", {})
    yield
    assert first_call.wait_for_background_compiles(timeout=300)


@pytest.fixture
def gate(monkeypatch):
    """Background graph compiles wait until the test opens the gate."""
    opened = threading.Event()
    compile_ = graph_first_call._compile
    monkeypatch.setattr(graph_first_call, "_compile", lambda *a: (opened.wait(120), compile_(*a))[1])
    yield opened
    opened.set()


def _setting(monkeypatch, on: bool) -> None:
    monkeypatch.setattr(xnf.config, "first_calls_on_cpu", on)
    monkeypatch.setattr(graph, "_GRAPH_CACHE", {})
    monkeypatch.setattr(graph, "_LAST_KEYS", {})


class _MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.Tanh(), torch.nn.Linear(24, 5))

    def forward(self, x):
        return self.body(x)


class _ConvNet(torch.nn.Module):
    def __init__(self, p: float):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 6, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(6)
        self.drop = torch.nn.Dropout(p)
        self.head = torch.nn.Linear(6 * 5 * 5, 4)

    def forward(self, x):
        return self.head(self.drop(torch.relu(self.bn(self.conv(x)))).flatten(1))


def _steps(model, opt_fn, inputs, target, calls: int, on_xla: bool, between=None) -> tuple[list, list]:
    """Losses of `calls` training steps and the final state (parameters and buffers)."""
    if on_xla:
        model = xnf.to_xla(model)
        inputs, target = xnf.to_xla(inputs), xnf.to_xla(target)
    model.train()
    opt = opt_fn(model.parameters())

    def step():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(inputs), target)
        loss.backward()
        opt.step()
        return loss.detach()

    run = xnf.compile(step) if on_xla else step
    losses = []
    for i in range(calls):
        if between is not None:
            between(i)
        loss = run()
        losses.append(float(xnf.to_torch(loss) if on_xla else loss))
    state = [xnf.to_torch(t).clone() if on_xla else t.detach().clone() for t in model.state_dict().values()]
    return losses, state


def _case(build, opt_fn, shape, classes, calls=6, monkeypatch=None, wait_after=3, check_first=True):
    torch.manual_seed(0)
    model = build()
    x, y = torch.randn(*shape), torch.randint(0, classes, (shape[0],))
    want_losses, want_state = _steps(copy.deepcopy(model), opt_fn, x, y, calls, on_xla=False)

    _setting(monkeypatch, False)
    off_losses, off_state = _steps(copy.deepcopy(model), opt_fn, x, y, calls, on_xla=True)

    _setting(monkeypatch, True)
    seen = []

    def between(i):
        if i == wait_after:
            assert first_call.wait_for_background_compiles(timeout=300)
        seen.append((stats.graphs_interpreted, stats.graph_background_compiles, _compiles_here()))

    losses, state = _steps(copy.deepcopy(model), opt_fn, x, y, calls, on_xla=True, between=between)
    seen.append((stats.graphs_interpreted, stats.graph_background_compiles, _compiles_here()))
    if check_first:
        # the first call was interpreted; once compiled, no call was
        assert seen[1][0] > seen[0][0], "the first call of a new graph was not interpreted"
        assert seen[-1][0] == seen[wait_after][0], "a call after the background compile was interpreted"
        assert seen[-1][1] > seen[0][1], "no graph was compiled in the background"
        # the executables compiled in the background are the ones the calls ran: nothing traced or compiled again
        assert seen[-1][2] == seen[wait_after][2]
    for got in (losses, off_losses):
        torch.testing.assert_close(torch.tensor(got), torch.tensor(want_losses), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(off_losses), rtol=1e-5, atol=1e-6)
    for a, b, c in zip(state, off_state, want_state):
        torch.testing.assert_close(a, c, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    return losses


def test_mlp_sgd_step(fresh, monkeypatch):
    _case(_MLP, lambda p: torch.optim.SGD(p, lr=0.5, momentum=0.9), (7, 12), 5, monkeypatch=monkeypatch)


def test_mlp_adamw_step(fresh, monkeypatch):
    _case(_MLP, lambda p: torch.optim.AdamW(p, lr=0.05), (9, 12), 5, monkeypatch=monkeypatch)


def test_batch_norm_conv_net_in_train_mode(fresh, monkeypatch):
    # running statistics are written by every call; dropout with p=0 keeps PyTorch's values
    _case(lambda: _ConvNet(0.0), lambda p: torch.optim.SGD(p, lr=0.1), (3, 3, 5, 5), 4, monkeypatch=monkeypatch)


def test_calls_while_the_compile_is_in_flight_are_interpreted(fresh, gate, monkeypatch):
    monkeypatch.setattr(xnf.config, "first_calls_on_cpu", True)
    torch.manual_seed(1)
    ref = _MLP()
    model = xnf.to_xla(copy.deepcopy(ref))
    x = torch.randn(4, 12)
    opt, ref_opt = torch.optim.SGD(model.parameters(), lr=0.3), torch.optim.SGD(ref.parameters(), lr=0.3)

    def make(m, o, inp):
        def step():
            o.zero_grad()
            loss = m(inp).square().mean()
            loss.backward()
            o.step()
            return loss.detach()
        return step

    step, ref_step = xnf.compile(make(model, opt, xnf.to_xla(x))), make(ref, ref_opt, x)
    before = stats.graphs_interpreted
    for i in range(5):  # traced twice, then replayed: every call interpreted while the gate holds the compile
        torch.testing.assert_close(xnf.to_torch(step()), ref_step(), rtol=1e-5, atol=1e-6)
        assert stats.graphs_interpreted == before + i + 1
    assert not first_call.wait_for_background_compiles(timeout=0.2)
    gate.set()
    assert first_call.wait_for_background_compiles(timeout=300)
    done, compiles = stats.graphs_interpreted, _compiles_here()
    for _ in range(3):
        torch.testing.assert_close(xnf.to_torch(step()), ref_step(), rtol=1e-5, atol=1e-6)
    assert stats.graphs_interpreted == done
    assert _compiles_here() == compiles
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(xnf.to_torch(p), q.detach(), rtol=1e-5, atol=1e-6)


def test_dropout_draws_new_masks_and_matches_the_compiled_graph(fresh, monkeypatch):
    torch.manual_seed(2)
    net = _ConvNet(0.5)
    x = torch.randn(4, 3, 5, 5)

    def outputs(on: bool) -> list:
        _setting(monkeypatch, on)
        model = xnf.to_xla(copy.deepcopy(net))
        model.train()
        inp = xnf.to_xla(x)
        torch.manual_seed(3)  # the same keys with the setting on and off
        step = xnf.compile(lambda: model.drop(model.bn(model.conv(inp))))
        before = stats.graphs_interpreted
        outs = [xnf.to_torch(step()) for _ in range(4)]
        if on:
            assert stats.graphs_interpreted > before
        return outs

    off, on = outputs(False), outputs(True)
    for a, b in zip(on, off):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)  # the random bits of the same keys
    masks = [(o == 0) for o in on]
    assert all(0.3 < m.float().mean() < 0.7 for m in masks)
    assert not torch.equal(masks[0], masks[1]) and not torch.equal(masks[1], masks[2])


def test_in_place_parameter_update_outside_an_optimizer(fresh, monkeypatch):
    monkeypatch.setattr(xnf.config, "first_calls_on_cpu", True)
    torch.manual_seed(4)
    ref = torch.nn.Linear(6, 3)
    model = xnf.to_xla(copy.deepcopy(ref))
    x = torch.randn(5, 6)

    def make(m, inp):
        def step():
            loss = m(inp).square().sum()
            loss.backward()
            with torch.no_grad():
                for p in m.parameters():
                    p.mul_(0.99).sub_(0.01 * p.grad)
                    p.grad = None
            return loss.detach()
        return step

    step, ref_step = xnf.compile(make(model, xnf.to_xla(x))), make(ref, x)
    before = stats.graphs_interpreted
    for i in range(5):
        if i == 3:
            assert first_call.wait_for_background_compiles(timeout=300)
        torch.testing.assert_close(xnf.to_torch(step()), ref_step(), rtol=1e-5, atol=1e-5)
        if i == 0:
            assert stats.graphs_interpreted == before + 1
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(xnf.to_torch(p), q.detach(), rtol=1e-5, atol=1e-5)


def test_host_read_splits_the_step_into_two_interpreted_graphs(fresh, monkeypatch):
    monkeypatch.setattr(xnf.config, "first_calls_on_cpu", True)
    torch.manual_seed(5)
    ref = _MLP()
    model = xnf.to_xla(copy.deepcopy(ref))
    x = torch.randn(6, 12)

    def make(m, inp, opt):
        def step():
            opt.zero_grad()
            loss = m(inp).square().mean()
            scale = 2.0 if loss.item() > 0.05 else 0.5  # a host read: the trace runs its first graph here
            (loss * scale).backward()
            opt.step()
            return loss.detach()
        return step

    step = xnf.compile(make(model, xnf.to_xla(x), torch.optim.SGD(model.parameters(), lr=0.1)))
    ref_step = make(ref, x, torch.optim.SGD(ref.parameters(), lr=0.1))
    before = stats.graphs_interpreted
    for i in range(5):
        if i == 3:
            assert first_call.wait_for_background_compiles(timeout=300)
            done, compiles = stats.graphs_interpreted, _compiles_here()
        torch.testing.assert_close(xnf.to_torch(step()), ref_step(), rtol=1e-5, atol=1e-6)
        if i == 0:
            assert stats.graphs_interpreted == before + 2  # both graphs of the first call
    assert stats.graphs_interpreted == done
    assert _compiles_here() == compiles
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(xnf.to_torch(p), q.detach(), rtol=1e-5, atol=1e-6)


def _summed_mlp(monkeypatch, first_calls_on_cpu: bool):
    """(model, input, compile()d sum of the model's output), no graph compiled yet."""
    _setting(monkeypatch, first_calls_on_cpu)
    torch.manual_seed(6)
    model = xnf.to_xla(_MLP())
    x = xnf.to_xla(torch.randn(3, 12))
    return model, x, xnf.compile(lambda: model(x).sum())


def test_the_background_compile_starts_when_the_compiled_call_returns(fresh, monkeypatch):
    # compile() learns its replay plan after the graph ran, in Python that the compile's
    # tracing would slow down by taking the GIL (Note [First calls of compiled graphs])
    model, x, step = _summed_mlp(monkeypatch, True)
    probes_at_submit = []
    submit = graph_first_call._worker.submit

    def watched(*args):
        entry = next(iter(step.signatures.values()))
        probes_at_submit.append(entry.probes)  # counted at the end of the call's probe
        return submit(*args)

    monkeypatch.setattr(graph_first_call._worker, "submit", watched)
    torch.testing.assert_close(xnf.to_torch(step()), xnf.to_torch(model(x).sum()))
    assert probes_at_submit == [1]


def test_setting_off_compiles_the_graph_at_its_first_call(fresh, monkeypatch):
    _, _, step = _summed_mlp(monkeypatch, False)
    before = (stats.graphs_interpreted, stats.graph_background_compiles)
    compiles = _compiles_here()
    step()
    assert _compiles_here() > compiles  # the first call compiled the graph
    compiles = _compiles_here()
    step()
    assert _compiles_here() == compiles
    assert (stats.graphs_interpreted, stats.graph_background_compiles) == before


def test_a_failing_interpretation_falls_back_to_the_executable(fresh, monkeypatch):
    monkeypatch.setattr(xnf.config, "first_calls_on_cpu", True)

    def broken(self, arrays, scalar_values):
        raise RuntimeError("interpretation failed")

    monkeypatch.setattr(graph_first_call.FirstCalls, "interpret", broken)
    torch.manual_seed(7)
    a = torch.randn(4, 9)
    x = xnf.to_xla(a)
    step = xnf.compile(lambda: (x.exp() * 3).sum(0))
    before = (stats.graphs_interpreted, stats.graph_background_compiles)
    torch.testing.assert_close(xnf.to_torch(step()), (a.exp() * 3).sum(0))
    assert (stats.graphs_interpreted, stats.graph_background_compiles) == before


def test_an_interpretation_drops_each_intermediate_after_its_last_reader():
    """Interpreting a graph holds no intermediate array past the step that reads it
    last, as eager mode would not: a training step's first calls would otherwise hold
    every activation, gradient and optimizer temporary at once."""
    import weakref

    import numpy as np

    from xla_native_functions.runtime.exec.graph_program import last_reads, run_program

    alive = {}

    def make():
        first = np.ones(4)
        alive["first"] = weakref.ref(first)
        return first

    def check(b, c):
        alive["at check"] = alive["first"]() is not None  # step 0's result: read last by step 1
        return b + c

    program = [
        (make, []),                                 # 0
        (lambda a: a + 1, [("node", 0, 0)]),        # 1: the last reader of 0
        (lambda: np.zeros(4), []),                  # 2
        (check, [("node", 1, 0), ("node", 2, 0)]),  # 3
    ]
    outputs = [("node", 3, 0), ("node", 1, 0)]
    assert last_reads(program, outputs) == [[], [0], [], [2]]
    out = run_program(program, outputs, [], [], last_reads(program, outputs))
    assert alive["at check"] is False
    np.testing.assert_array_equal(out[0], np.full(4, 2.0))
    np.testing.assert_array_equal(out[1], np.full(4, 2.0))
