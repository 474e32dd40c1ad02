"""compile() and the state a call leaves behind (Note [Module attributes the call sets]
and Note [Arguments kept by the call] in runtime/frontends/replay.py): tensors a called
module keeps in an attribute are set again by every replay, to the new call's values;
an argument kept anywhere else keeps the call traced. Each call is checked against the
same module run on PyTorch CPU."""

from __future__ import annotations

import copy

import pytest
import torch

import xla_native_functions as xnf
from xla_native_functions.runtime.platform.metrics import metrics

CALLS = 6  # three traced calls, then replays


pytestmark = pytest.mark.usefixtures("fresh_graph_cache")


def cpu(t):
    return xnf.to_torch(t)


class Keeps(torch.nn.Module):
    """Keeps, as an attribute, what `what` names: a new result, the input, a view of it."""

    def __init__(self, what: str):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.what = what
        self.last = None

    def forward(self, x):
        y = self.lin(x)
        self.last = {"result": lambda: y * 3, "input": lambda: x, "detached input": lambda: x.detach(),
                     "row of the input": lambda: x[1], "result and input": lambda: y}[self.what]()
        return y.sum(1) if self.what != "result and input" else y


@pytest.mark.parametrize("what", ["result", "input", "detached input", "row of the input", "result and input"])
def test_module_attribute_set_by_the_call_is_set_by_every_replay(what):
    torch.manual_seed(0)
    expected = Keeps(what)
    ours = xnf.to_xla(copy.deepcopy(expected))
    step = xnf.compile(lambda x: ours(x))
    with torch.no_grad():
        for _ in range(CALLS):
            x = torch.randn(3, 4)
            xj = xnf.to_xla(x)
            out = step(xj)
            torch.testing.assert_close(cpu(out), expected(x))
            torch.testing.assert_close(cpu(ours.last), expected.last)
            if what == "input":
                assert ours.last is xj
            if what == "result and input":
                assert ours.last is out  # one tensor, as the call made it
    assert metrics.replays == CALLS - 3


@pytest.mark.parametrize("update", ["replaced", "in place"])
def test_state_carried_from_call_to_call_matches_torch(update):
    class Ema(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("mean", torch.zeros(4))

        def forward(self, x):
            if update == "replaced":
                self.mean = 0.9 * self.mean + 0.1 * x.mean(0)  # a new tensor, registered as the buffer
            else:
                self.mean.mul_(0.9).add_(0.1 * x.mean(0))
            return x - self.mean

    expected = Ema()
    ours = xnf.to_xla(Ema())
    step = xnf.compile(lambda x: ours(x))
    for i in range(CALLS):
        x = torch.full((2, 4), float(i))
        torch.testing.assert_close(cpu(step(xnf.to_xla(x))), expected(x))
        torch.testing.assert_close(cpu(ours.mean), expected.mean)
        assert dict(ours.named_buffers())["mean"] is ours.mean
    if update == "in place":
        assert metrics.replays >= CALLS - 3
        return
    # each call reads the tensor the previous one made and replaces it: traced. (The first
    # two calls leave the same values, zeros, which a replay reading the state as a
    # constant would have taken for a settled call.)
    assert metrics.replays == 0
    assert any("state carried from call to call" in n for n in metrics.replay_notes), metrics.replay_notes


def test_state_kept_by_a_training_step_is_set_detached():
    class Recurrent(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.cell = torch.nn.Linear(4, 4)
            self.state = None

        def forward(self, x):
            h = torch.zeros(x.shape[0], 4)
            h = h.to(x.device)
            for t in range(x.shape[1]):
                h = torch.tanh(self.cell(x[:, t]) + h)
            self.state = h  # the final state, part of the autograd graph
            return h

    torch.manual_seed(0)
    expected = Recurrent()
    ours = xnf.to_xla(copy.deepcopy(expected))

    def training_step(model, opt, x):
        opt.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        return loss.detach()

    opt_cpu = torch.optim.SGD(expected.parameters(), lr=0.1)
    opt = torch.optim.SGD(ours.parameters(), lr=0.1)
    step = xnf.compile(lambda x: training_step(ours, opt, x))
    for _ in range(CALLS):
        x = torch.randn(2, 3, 4)
        torch.testing.assert_close(cpu(step(xnf.to_xla(x))), training_step(expected, opt_cpu, x))
        torch.testing.assert_close(cpu(ours.state.detach()), expected.state.detach())
    assert metrics.replays == CALLS - 3
    assert not ours.state.requires_grad  # a replay builds no autograd graph


def test_attribute_that_requires_grad_without_backward_is_not_replayed():
    torch.manual_seed(0)
    ours = xnf.to_xla(Keeps("result"))
    step = xnf.compile(lambda x: ours(x).detach())
    for _ in range(CALLS):
        step(xnf.to_xla(torch.randn(3, 4)))
        assert ours.last.grad_fn is not None  # traced: the attribute keeps its autograd graph
    assert metrics.replays == 0
    assert any("stores in a module attribute" in n for n in metrics.replay_notes), metrics.replay_notes


@pytest.mark.parametrize("where", ["list", "dict", "view in a list"])
def test_argument_kept_outside_a_module_keeps_the_call_traced(where):
    kept = {"list": [], "dict": {}, "view in a list": []}[where]
    lin = xnf.to_xla(torch.nn.Linear(4, 4))

    def f(x):
        if where == "list":
            kept.append(x)
        elif where == "dict":
            kept["x"] = x
        else:
            kept.append(x[0])
        return lin(x).detach()

    step = xnf.compile(f)
    for _ in range(CALLS):
        x = xnf.to_xla(torch.randn(2, 4))
        step(x)
        last = kept["x"] if where == "dict" else kept[-1]
        assert last is x if where != "view in a list" else torch.equal(cpu(last), cpu(x[0]))
    assert metrics.replays == 0
    assert any("keeps an argument" in n for n in metrics.replay_notes), metrics.replay_notes


def test_argument_kept_after_calls_with_one_argument_stays_traced():
    # The same tensor passed again is already where the call puts it, which counting its
    # references cannot see: once a call of the signature kept an argument, it stays traced.
    kept = {}
    lin = xnf.to_xla(torch.nn.Linear(4, 4))

    def f(x):
        kept["x"] = x
        return lin(x).detach()

    step = xnf.compile(f)
    first = xnf.to_xla(torch.randn(2, 4))
    for x in [first] * 4 + [xnf.to_xla(torch.randn(2, 4)) for _ in range(3)]:
        step(x)
        assert kept["x"] is x
    assert metrics.replays == 0


@pytest.mark.parametrize("returned", ["the argument", "a row of it", "a view of a view of it"])
def test_returned_argument_or_view_of_it_is_replayed(returned):
    lin = xnf.to_xla(torch.nn.Linear(4, 4))

    def f(x):
        y = lin(x).detach()
        if returned == "the argument":
            return x, y
        if returned == "a row of it":
            return x[1], y
        return x.view(2, 2, 2).transpose(0, 1), y

    step = xnf.compile(f)
    for _ in range(CALLS):
        x = torch.randn(2, 4)
        xj = xnf.to_xla(x)
        out, _ = step(xj)
        if returned == "the argument":
            assert out is xj
        else:
            torch.testing.assert_close(cpu(out), x[1] if returned == "a row of it" else x.view(2, 2, 2).transpose(0, 1))
    assert metrics.replays == CALLS - 3


@pytest.mark.parametrize("where", ["list", "dict", "list on a module", "row in a list", "training loss in a list"])
def test_returned_tensor_kept_elsewhere_keeps_the_call_traced(where):
    # A replay returns a new tensor; the one the traced call kept would stay where it is
    # (Note [Results kept by the call]).
    torch.manual_seed(0)
    ref = torch.nn.Linear(4, 4)
    lin = xnf.to_xla(copy.deepcopy(ref))
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    kept = {} if where == "dict" else []

    def f(x):
        if where == "training loss in a list":
            opt.zero_grad()
            loss = lin(x).square().mean()
            loss.backward()
            opt.step()
            kept.append(loss)
            return loss
        with torch.no_grad():
            y = lin(x)
        if where == "list":
            kept.append(y)
        elif where == "dict":
            kept["y"] = y
        elif where == "list on a module":
            lin.history = getattr(lin, "history", []) + [y]
        else:
            row = y[0]
            kept.append(row)
            return row
        return y

    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    step = xnf.compile(f)
    for _ in range(CALLS):
        x = torch.randn(2, 4)
        out = step(xnf.to_xla(x))
        if where == "training loss in a list":
            ref_opt.zero_grad()
            want = ref(x).square().mean()
            want.backward()
            ref_opt.step()
        else:
            want = ref(x)[0] if where == "row in a list" else ref(x)
        last = {"dict": lambda: kept["y"], "list on a module": lambda: lin.history[-1]}.get(where, lambda: kept[-1])()
        assert last is out
        torch.testing.assert_close(cpu(last), want.detach())
    assert metrics.replays == 0
    assert any("keeps a tensor it returns" in n for n in metrics.replay_notes), metrics.replay_notes


@pytest.mark.parametrize("returned", ["a result and a row of it", "the same result twice", "nested containers"])
def test_returned_tensors_held_only_by_the_result_are_replayed(returned):
    torch.manual_seed(0)
    ref = torch.nn.Linear(4, 4)
    lin = xnf.to_xla(copy.deepcopy(ref))

    def f(x, lin):
        with torch.no_grad():
            y = lin(x)
        if returned == "a result and a row of it":
            return y, y[0]
        if returned == "the same result twice":
            return y, y
        return {"y": y, "rest": [(y * 2,)]}

    step = xnf.compile(f)
    for _ in range(CALLS):
        x = torch.randn(2, 4)
        got = f(x, ref)
        out = step(xnf.to_xla(x), lin)
        torch.testing.assert_close(xnf.to_torch(out), got)
        if returned == "the same result twice":
            assert out[0] is out[1]
    assert metrics.replays == CALLS - 3


@pytest.mark.parametrize("kept", ["a .grad", "a module attribute"])
def test_gradient_or_attribute_also_kept_in_a_list_keeps_the_call_traced(kept):
    torch.manual_seed(0)
    lin = xnf.to_xla(torch.nn.Linear(4, 4))
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    history = []

    def f(x):
        opt.zero_grad()
        loss = lin(x).square().mean()
        loss.backward()
        if kept == "a .grad":
            history.append(lin.weight.grad)
        else:
            lin.stat = (2 * loss).detach()
            history.append(lin.stat)
        opt.step()
        return loss.detach()

    step = xnf.compile(f)
    for _ in range(CALLS):
        loss = step(xnf.to_xla(torch.randn(2, 4)))
        if kept == "a .grad":
            assert history[-1] is lin.weight.grad
        else:
            assert history[-1] is lin.stat
            torch.testing.assert_close(cpu(history[-1]), 2 * cpu(loss))
    assert metrics.replays == 0
    assert any("keeps a tensor it returns or sets" in n for n in metrics.replay_notes), metrics.replay_notes


class Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(4, 4)
        self.head = torch.nn.Linear(4, 2)
        self.register_buffer("shift", torch.zeros(2))
        self.scale = torch.tensor(2.0)

    def forward(self, x):
        return self.head(torch.relu(self.body(x))) * self.scale + self.shift


@pytest.mark.parametrize("replaced", ["submodule", "parameter", "buffer", "plain tensor attribute",
                                      "submodule, by a torch.compile'd function"])
def test_module_state_rebound_between_calls_is_read_by_the_next_call(replaced):
    # The old object stays alive (an optimizer or a user's variable holds it): a replay
    # must not read it through the plan's reference (Note [Modules rebound between calls]).
    torch.manual_seed(0)
    ref = Head()
    ours = xnf.to_xla(copy.deepcopy(ref))
    ours.scale = xnf.to_xla(ref.scale)

    def f(m, x):
        with torch.no_grad():
            return m(x)

    step = xnf.compile(f)
    x = torch.randn(3, 4)
    for _ in range(CALLS):
        torch.testing.assert_close(cpu(step(ours, xnf.to_xla(x))), f(ref, x))
    replays = metrics.replays
    assert replays == CALLS - 3
    old = {"parameter": ours.head.weight, "buffer": ours.shift, "plain tensor attribute": ours.scale}.get(replaced,
                                                                                                        ours.head)
    if replaced == "submodule, by a torch.compile'd function":  # Dynamo traces the registration hooks
        ref.head = torch.nn.Linear(4, 2)
        new_head = xnf.to_xla(copy.deepcopy(ref.head))

        def rebind(t):
            ours.head = new_head
            return t * 2

        torch._dynamo.reset()
        torch.compile(rebind, backend="aot_eager")(torch.randn(2))
        assert ours.head is new_head
    elif replaced == "submodule":
        ref.head = torch.nn.Linear(4, 2)
        ours.head = xnf.to_xla(copy.deepcopy(ref.head))
    elif replaced == "parameter":
        ref.head.weight = torch.nn.Parameter(torch.randn(2, 4))
        ours.head.weight = torch.nn.Parameter(xnf.to_xla(ref.head.weight.detach()))
    elif replaced == "buffer":
        ref.shift = torch.ones(2)
        ours.shift = xnf.to_xla(ref.shift)
    else:
        ref.scale = torch.tensor(5.0)
        ours.scale = xnf.to_xla(ref.scale)
    for _ in range(CALLS):
        torch.testing.assert_close(cpu(step(ours, xnf.to_xla(x))), f(ref, x))
    assert replays < metrics.replays < replays + CALLS  # traced again, then replayed again
    del old
