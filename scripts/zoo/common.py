"""What a model builder returns, and the per-model tolerances."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch


@dataclass
class Case:
    """A model with its inputs: `model(*inputs)` is the forward pass and
    `loss_fn(output, target)` the training loss (a scalar tensor). Inference runs under
    torch.no_grad(), or torch.inference_mode() with `inference_mode`."""

    model: torch.nn.Module
    inputs: tuple[Any, ...]
    target: Any
    loss_fn: Callable[[Any, Any], torch.Tensor]
    kwargs: dict[str, Any] | None = None
    inference_mode: bool = False


@dataclass(frozen=True)
class Size:
    """How big the zoo's models are. `small` keeps a step to a few hundred tiny ops (CI,
    and a measure of per-op overhead); `medium` is closer to real work, where compute
    starts to dominate."""

    name: str
    width: int  # hidden size of transformers and MLPs
    layers: int
    heads: int
    seq: int  # tokens per sequence
    image: int  # image side of the vision models
    channels: int  # ResNet stem channels
    rows: int  # DLRM embedding rows per table
    batch: int  # default batch


SIZES = {
    "small": Size("small", width=16, layers=2, heads=2, seq=8, image=16, channels=8, rows=20, batch=2),
    "medium": Size("medium", width=256, layers=4, heads=4, seq=64, image=32, channels=32, rows=10000, batch=16),
}
SMALL = SIZES["small"]


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
