"""Training steps through the torch.compile backend against PyTorch CPU: the module
compiled and the whole step compiled (forward, loss, backward() and optimizer.step()
in one torch.compile'd function), parameters changed by the user between steps, and the
way graph results reach the caller (Note [Graph outputs] in runtime/frontends/dynamo.py)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

from xla_native_functions.runtime.frontends import dynamo
from xla_native_functions.runtime.frontends.dynamo import BACKEND_NAME, stats


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch.manual_seed(1)  # the data of each test, whatever ran before it
    torch._dynamo.reset()
    dynamo.reset_dynamo_stats()
    yield
    torch._dynamo.reset()


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 160), nn.Tanh(), nn.Linear(160, 4))


def make_step(model, x, y, optimizer):
    opt = optimizer(model.parameters())

    def step():
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss.detach()
    return step


OPTIMIZERS = {
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9),
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.01),
}


@pytest.mark.parametrize("whole", [False, True], ids=["module", "whole_step"])
@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_training_steps_match_torch_and_see_parameter_changes(whole, optimizer):
    x, y = torch.randn(16, 8), torch.randn(16, 4)
    ref = mlp()
    ours = copy.deepcopy(ref)
    ref_step = make_step(ref, x, y, OPTIMIZERS[optimizer])
    if whole:
        our_step = torch.compile(make_step(ours, x, y, OPTIMIZERS[optimizer]), backend=BACKEND_NAME)
    else:
        our_step = make_step(torch.compile(ours, backend=BACKEND_NAME), x, y, OPTIMIZERS[optimizer])

    # XLA's matmuls sum in another order than PyTorch's, and AdamW divides by the
    # square root of its running second moment, which magnifies that early on: with
    # other data (the fixture seeds it) one of the 10,240 elements of a weight can land
    # 2e-5 from PyTorch's (seed 0).
    tol = dict(rtol=1e-4, atol=1e-5) if optimizer == "adamw" else {}

    def check():
        torch.testing.assert_close(our_step(), ref_step(), **tol)
        for a, b in zip(ours.parameters(), ref.parameters()):
            torch.testing.assert_close(a, b, **tol)

    for _ in range(3):
        check()
    # The user changes parameters between steps, in place and through .data (no
    # version bump), and swaps one for new memory: the next step reads the new values.
    for model in (ours, ref):
        with torch.no_grad():
            model[0].weight.mul_(0.5)
        model[2].bias.data.add_(1.0)
        model[4].weight.data = model[4].weight.data * 2  # new memory under the same Parameter
    for _ in range(2):
        check()
    assert stats.traces > 0 and stats.partitioned_graphs == 0, stats.split_ops


def test_whole_step_compiles_the_forward_graph():
    # Dynamo breaks a compiled step at backward() and around optimizer.step(); the
    # forward and the loss before the break must still reach the backend as a graph.
    x, y = torch.randn(16, 8), torch.randn(16, 4)
    model = mlp()
    step = torch.compile(make_step(model, x, y, OPTIMIZERS["sgd"]), backend=BACKEND_NAME)
    step()
    step()
    # forward, backward and the optimizer's update, each one JAX function
    assert stats.graphs >= 3
    assert stats.traces >= 3
    calls = stats.calls
    step()
    assert stats.calls >= calls + 3


def test_backward_inside_a_compiled_step_breaks_where_pytorch_breaks():
    # The autograd engine's wrapper (frontends/dispatch.py) is not compiled by Dynamo:
    # its frame used to fail to compile on every new graph ("torch.* op returned
    # non-Tensor" at _is_multithreading_enabled, then run_backward).
    from torch._dynamo.utils import counters

    counters.clear()
    x, y = torch.randn(16, 8), torch.randn(16, 4)
    step = torch.compile(make_step(mlp(), x, y, OPTIMIZERS["sgd"]), backend=BACKEND_NAME)
    step()
    reasons = " ".join(counters["graph_break"])
    assert "_is_multithreading_enabled" not in reasons
    assert "run_backward" not in reasons


@pytest.mark.parametrize("n", [3, 40, 200])  # results under and over the 64 KiB handover size
def test_results_are_writable_independent_tensors(n):
    def f(a, b):
        s = a @ b
        return s, s.relu(), (s * 2).t(), a.sum(0)

    a, b = torch.randn(n, n), torch.randn(n, n)
    compiled = torch.compile(f, backend=BACKEND_NAME)
    for _ in range(3):
        out = compiled(a, b)
        for got, want in zip(out, f(a, b)):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)  # products summed in another order
            assert got.stride() == want.stride()
    assert isinstance(out, tuple)
    s, r, t, _ = out
    s.add_(1.0)  # the results hold separate memory, which the caller may write
    torch.testing.assert_close(r, f(a, b)[1], rtol=1e-4, atol=1e-4)
    t.mul_(0.0)
    again = compiled(a, b)
    torch.testing.assert_close(again[0], a @ b, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(again[2], (a @ b * 2).t(), rtol=1e-4, atol=1e-4)


def test_nested_results_keep_their_structure():
    def f(x):
        return {"sum": x.sum(), "parts": [x * 2, (x + 1, x - 1)]}

    x = torch.randn(5)
    got = torch.compile(f, backend=BACKEND_NAME)(x)
    want = f(x)
    assert set(got) == {"sum", "parts"}
    torch.testing.assert_close(got["sum"], want["sum"])
    torch.testing.assert_close(got["parts"][0], want["parts"][0])
    torch.testing.assert_close(got["parts"][1][1], want["parts"][1][1])
