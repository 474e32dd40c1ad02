"""The small training setup that tests and scripts drive compile() with (the thread and
trace fault tests, scripts/soak.py, scripts/bench_runtime.py): a seeded MLP with
BatchNorm, and the plain optimizer step over a model."""

from __future__ import annotations

from collections.abc import Callable

import torch


def batchnorm_mlp(features: int, hidden: int, classes: int) -> torch.nn.Sequential:
    """Linear, BatchNorm1d, ReLU, Linear, with the weights torch.manual_seed(0) gives."""
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(features, hidden),
        torch.nn.BatchNorm1d(hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, classes),
    )


def training_step(
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    loss_fn: Callable[..., torch.Tensor] = torch.nn.functional.cross_entropy,
) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """`step(x, y)`: zero the gradients, `loss_fn(model(x), y)`, backward, `opt.step()`;
    returns the loss, detached."""

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    return step
