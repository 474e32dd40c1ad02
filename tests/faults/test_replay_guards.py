"""A replayed compile() step guards what its optimizer and autograd touch (Note [Replay] in
runtime/frontends/replay.py): a parameter frozen with requires_grad_(False), unfrozen
again, or taken out of (or put into) an optimizer's param_groups is treated as eager
PyTorch treats it, on the first call after the change."""

from __future__ import annotations

import copy

import pytest
import torch

import xla_native_functions as xnf
from training_steps import training_step
from xla_native_functions.runtime.platform.metrics import metrics


def cpu(t):
    return xnf.to_torch(t)


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.ReLU(), torch.nn.Linear(12, 3))


def _batches(n):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(4, 6, generator=g), torch.randn(4, 3, generator=g)) for _ in range(n)]


MAKE_OPT = {
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.1),
    "sgd-momentum": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
    "adamw-capturable": lambda ps: torch.optim.AdamW(ps, lr=0.01, capturable=True),
}


def _freeze(model, opt):
    model[0].weight.requires_grad_(False)


def _unfreeze(model, opt):
    model[0].weight.requires_grad_(True)


def _drop_from_group(model, opt):
    params = opt.param_groups[0]["params"]
    del params[2]  # model[2].weight: still gets a gradient, no longer updated


def _new_group_list(model, opt):
    opt.param_groups[0]["params"] = [p for i, p in enumerate(opt.param_groups[0]["params"]) if i != 0]


def _add_back(model, opt):
    opt.param_groups[0]["params"].insert(2, model[2].weight)


CHANGES = [("freeze", [_freeze]), ("freeze_then_unfreeze", [_freeze, _unfreeze]),
           ("drop_from_group", [_drop_from_group]), ("replace_group_list", [_new_group_list]),
           ("drop_then_add_back", [_drop_from_group, _add_back])]


@pytest.mark.parametrize("opt_name", list(MAKE_OPT))
@pytest.mark.parametrize("name, changes", CHANGES, ids=[c[0] for c in CHANGES])
def test_replayed_step_follows_frozen_and_removed_parameters(opt_name, name, changes):
    ref = _mlp()
    ours = xnf.to_xla(copy.deepcopy(ref))
    make = MAKE_OPT[opt_name]
    ref_opt, opt = make(ref.parameters()), make(ours.parameters())
    if opt_name == "adamw-capturable":
        ref_opt = torch.optim.AdamW(ref.parameters(), lr=0.01)
    mse = torch.nn.functional.mse_loss
    ref_step, step = training_step(ref, ref_opt, mse), xnf.compile(training_step(ours, opt, mse))
    batches = _batches(6 + 3 * len(changes))
    it = iter(batches)

    def both():
        x, y = next(it)
        torch.testing.assert_close(cpu(step(xnf.to_xla(x), xnf.to_xla(y))), ref_step(x, y), atol=1e-5, rtol=1e-5)

    xnf.reset_metrics()
    for _ in range(5):
        both()
    assert metrics.replays >= 1  # the step is replayed by now
    for change in changes:
        change(ref, ref_opt)
        change(ours, opt)
        for _ in range(3):
            both()
            for (k, p), q in zip(ours.named_parameters(), ref.parameters()):
                torch.testing.assert_close(cpu(p), q, atol=1e-5, rtol=1e-5, msg=k)
                assert (p.grad is None) == (q.grad is None), k
    assert metrics.replays >= 2  # and replayed again after the change
