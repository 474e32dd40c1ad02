"""What a model builder returns, and the per-model tolerances."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch


@dataclass
class Case:
    """A model with its inputs: `model(*inputs)` is the forward pass and
    `loss_fn(output, target)` the training loss (a scalar tensor)."""

    model: torch.nn.Module
    inputs: tuple[Any, ...]
    target: Any
    loss_fn: Callable[[Any, Any], torch.Tensor]
    kwargs: dict[str, Any] | None = None


@dataclass(frozen=True)
class Tolerance:
    """float32 tolerances, as (rtol, atol) pairs, and why they are what they are.

    `output`: inference outputs. `loss`: the loss at every training step.
    `weights_sgd` / `weights_adamw`: every parameter and buffer after the training steps.
    """

    output: tuple[float, float] = (1e-4, 1e-5)
    loss: tuple[float, float] = (1e-4, 1e-5)
    weights_sgd: tuple[float, float] = (1e-4, 1e-5)
    weights_adamw: tuple[float, float] = (1e-4, 1e-4)
    reason: str = ""
