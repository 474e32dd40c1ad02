"""A small multilayer perceptron classifier."""

from __future__ import annotations

import torch
from torch import nn

from .common import Case


def build_mlp(batch: int) -> Case:
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 10))
    x = torch.randn(batch, 32)
    target = torch.randint(0, 10, (batch,))
    return Case(model, (x,), target, lambda out, t: nn.functional.cross_entropy(out, t))
