"""torch.amp.GradScaler("jax"): its two kernels (`_amp_foreach_non_finite_check_and_unscale_`,
runtime/supported/amp.py; `_amp_update_scale_`, lowerings/amp.py), each an in-place op
that writes two arguments (the generator derives them: `writes_also` in codegen/model.py),
against PyTorch CPU's values and errors, and whole training loops with a non-finite step,
eagerly and compiled."""

from __future__ import annotations

import copy

import pytest
import torch

import xla_native_functions as xnf
from xla_native_functions.runtime.platform.metrics import metrics

INF, NAN = float("inf"), float("nan")


def ours(t):
    return xnf.to_xla(t)


def cpu(t):
    return xnf.to_torch(t)


@pytest.mark.parametrize(
    "grads",
    [
        [torch.tensor([1.0, 3.0]), torch.tensor([[2.0, -4.0]])],
        [torch.tensor([1.0, INF]), torch.tensor([2.0])],
        [torch.tensor([1.0, 3.0]), torch.tensor([NAN, 6.0], dtype=torch.bfloat16)],
        [torch.tensor([1.0, 3.0], dtype=torch.float16), torch.tensor([7.0], dtype=torch.float16)],
        [torch.tensor([1e300, -1e300], dtype=torch.float64)],  # finite; their squares' sum is not
        [torch.zeros(0), torch.tensor([-INF])],
        [],
    ],
    ids=["finite", "inf", "nan-bfloat16", "float16", "float64-large", "empty-tensor", "no-tensors"],
)
@pytest.mark.parametrize("found_before", [0.0, 1.0])
def test_unscale_and_check_are_pytorchs(grads, found_before):
    inv_scale = torch.tensor([1 / 3.0])  # not a power of two: float16 gradients unscale in float32
    expected, expected_found = [g.clone() for g in grads], torch.tensor([found_before])
    torch._amp_foreach_non_finite_check_and_unscale_(expected, expected_found, inv_scale)
    got, got_found = [ours(g) for g in grads], ours(torch.tensor([found_before]))
    torch._amp_foreach_non_finite_check_and_unscale_(got, got_found, ours(inv_scale))
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape
        torch.testing.assert_close(cpu(g), e, rtol=0, atol=0, equal_nan=True)
    assert torch.equal(cpu(got_found), expected_found)


@pytest.mark.parametrize(
    "call",
    [
        lambda g, f, s: torch._amp_foreach_non_finite_check_and_unscale_(g, f.repeat(2), s),
        lambda g, f, s: torch._amp_foreach_non_finite_check_and_unscale_(g, f, s.repeat(2)),
        lambda g, f, s: torch._amp_foreach_non_finite_check_and_unscale_(g, f.double(), s),
        lambda g, f, s: torch._amp_foreach_non_finite_check_and_unscale_(g, f, s.double()),
        lambda g, f, s: torch._amp_foreach_non_finite_check_and_unscale_([g[0].long()], f, s),
        lambda g, f, s: torch._amp_update_scale_(s.repeat(2), f.int(), f, 2.0, 0.5, 2),
        lambda g, f, s: torch._amp_update_scale_(s, f, f, 2.0, 0.5, 2),
        lambda g, f, s: torch._amp_update_scale_(s.double(), f.int(), f, 2.0, 0.5, 2),
        lambda g, f, s: torch._amp_update_scale_(s, f.int(), f.double(), 2.0, 0.5, 2),
    ],
)
def test_errors_are_pytorchs(call):
    args = ([torch.ones(3)], torch.zeros(1), torch.ones(1))
    with pytest.raises(Exception) as expected:
        call(*args)
    with pytest.raises(type(expected.value)) as got:
        call([ours(g) for g in args[0]], ours(args[1]), ours(args[2]))
    assert str(got.value) == str(expected.value)


def test_update_scale_is_pytorchs_step_by_step():
    """Backed off after a non-finite step, grown every `growth_interval` finite steps,
    the tracker reset by either, and a grown scale that overflows float32 kept as it was."""
    scale, tracker = torch.tensor([3.0]), torch.zeros(1, dtype=torch.int32)
    our_scale, our_tracker = ours(scale), ours(tracker)
    for found in [0.0, 0.0, 0.0, 1.0, 0.0, NAN, 0.0, 0.0, 0.0]:
        returned = torch._amp_update_scale_(our_scale, our_tracker, ours(torch.tensor([found])), 2.5, 0.3, 3)
        torch._amp_update_scale_(scale, tracker, torch.tensor([found]), 2.5, 0.3, 3)
        assert returned is our_scale
        assert torch.equal(cpu(our_scale), scale) and torch.equal(cpu(our_tracker), tracker)
    huge, tracker = torch.tensor([3e38]), torch.ones(1, dtype=torch.int32)
    our_huge, our_tracker = ours(huge), ours(tracker)
    torch._amp_update_scale_(huge, tracker, torch.zeros(1), 2.0, 0.5, 2)
    torch._amp_update_scale_(our_huge, our_tracker, ours(torch.zeros(1)), 2.0, 0.5, 2)
    assert torch.equal(cpu(our_huge), huge) and torch.equal(cpu(our_tracker), tracker)


def _train(model, device, compiled, steps=8, bad_step=4):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler(device, init_scale=1000.0, growth_interval=2)

    def step(x):
        opt.zero_grad()
        loss = model(x).square().mean()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss.detach()

    if compiled:
        step = xnf.compile(step)
    torch.manual_seed(1)
    losses = []
    for i in range(steps):
        x = torch.randn(3, 4)
        if i == bad_step:
            x[0, 0] = INF  # its gradients are not finite: the step is skipped, the scale backed off
        losses.append(cpu(step(x.to(device))))
    return torch.stack(losses), scaler.get_scale(), [cpu(p.detach()) for p in model.parameters()]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_training_with_a_skipped_step_is_pytorchs(compiled):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    expected_losses, expected_scale, expected_params = _train(copy.deepcopy(model), "cpu", False)
    replays = metrics.replays
    losses, scale, params = _train(xnf.to_xla(model), "jax", compiled)
    assert scale == expected_scale == 4000.0  # grown three times, backed off once
    torch.testing.assert_close(losses, expected_losses, rtol=1e-6, atol=0)
    for p, e in zip(params, expected_params):
        torch.testing.assert_close(p, e, rtol=1e-6, atol=1e-7)
    if compiled:  # GradScaler reads found_inf on the host: each outcome is a path that replays
        assert metrics.replays - replays >= 3, xnf.metrics_report()
