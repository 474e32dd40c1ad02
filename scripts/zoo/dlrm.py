"""A DLRM-style recommender (Naumov et al., 2019): dense features through a bottom
MLP, sparse features through EmbeddingBag tables, pairwise dot-product interaction of
all the resulting vectors, and a top MLP giving a click logit.

The tables cover the EmbeddingBag forms models use: mode="sum", mode="mean", and
mode="sum" with per_sample_weights, all with 1-D indices and offsets (bags of
different lengths, including an empty bag)."""

from __future__ import annotations

import torch
from torch import nn

from .common import SMALL, Case, Size


def _mlp(sizes: list[int], last_sigmoid: bool = False) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    def __init__(self, dense: int = 8, dim: int = 8, rows: tuple[int, ...] = (20, 30, 40), hidden: int = 16):
        super().__init__()
        self.bottom = _mlp([dense, hidden, dim])
        self.tables = nn.ModuleList([
            nn.EmbeddingBag(rows[0], dim, mode="sum"),
            nn.EmbeddingBag(rows[1], dim, mode="mean"),
            nn.EmbeddingBag(rows[2], dim, mode="sum"),  # used with per_sample_weights
        ])
        n = 1 + len(rows)
        self.pairs = n * (n - 1) // 2
        self.top = _mlp([dim + self.pairs, hidden, 1])

    def forward(self, dense, indices, offsets, weights):
        x = self.bottom(dense)
        embs = [
            self.tables[0](indices[0], offsets[0]),
            self.tables[1](indices[1], offsets[1]),
            self.tables[2](indices[2], offsets[2], per_sample_weights=weights),
        ]
        feats = torch.stack([x] + embs, dim=1)  # (batch, n, dim)
        dots = torch.bmm(feats, feats.transpose(1, 2))
        i, j = torch.triu_indices(feats.shape[1], feats.shape[1], offset=1)
        interactions = dots[:, i, j]
        return self.top(torch.cat([x, interactions], dim=1)).squeeze(1)


def _bags(batch: int, rows: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = torch.randint(1, 4, (batch,), generator=gen)
    lengths[-1] = 0  # an empty bag: sum gives zeros, mean gives zeros
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]])
    indices = torch.randint(0, rows, (int(lengths.sum()),), generator=gen)
    return indices, offsets


def build_dlrm(batch: int, size: Size = SMALL) -> Case:
    rows = (size.rows, size.rows * 3 // 2, size.rows * 2)
    dim = size.width // 2
    model = DLRM(dense=8, dim=dim, rows=rows, hidden=size.width)
    gen = torch.Generator().manual_seed(1)
    dense = torch.randn(batch, 8)
    bags = [_bags(batch, r, gen) for r in rows]
    indices = tuple(b[0] for b in bags)
    offsets = tuple(b[1] for b in bags)
    weights = torch.rand(indices[2].shape[0], generator=gen)
    target = torch.randint(0, 2, (batch,)).float()
    return Case(model, (dense, indices, offsets, weights), target,
                lambda out, t: nn.functional.binary_cross_entropy_with_logits(out, t))
