"""A small multilayer perceptron classifier."""

from __future__ import annotations

import torch
from torch import nn

from .common import SMALL, Case, Size


def build_mlp(batch: int, size: Size = SMALL) -> Case:
    d_in, hidden = 2 * size.width, 4 * size.width
    model = nn.Sequential(
        nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, 10)
    )
    x = torch.randn(batch, d_in)
    target = torch.randint(0, 10, (batch,))
    return Case(model, (x,), target, lambda out, t: nn.functional.cross_entropy(out, t))
