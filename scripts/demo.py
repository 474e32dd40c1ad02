"""The main job: a small transformer block and an MLP, run on PyTorch CPU and on JAX
(eager and compiled), with the differences and timings printed.

    python scripts/demo.py
"""

from __future__ import annotations

import copy
import time

import torch

import xla_native_functions as xnf


class Block(torch.nn.Module):
    """Pre-norm self-attention and MLP, written with plain torch ops."""

    def __init__(self, dim: int = 64, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.norm1 = torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.norm2 = torch.nn.LayerNorm(dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(d, dim=-1)
        q, k, v = (
            y.view(b, t, self.heads, d // self.heads).transpose(1, 2).reshape(b * self.heads, t, -1) for y in (q, k, v)
        )
        att = torch.softmax(torch.bmm(q, k.transpose(1, 2)) / (d // self.heads) ** 0.5, dim=-1)
        y = torch.bmm(att, v).view(b, self.heads, t, -1).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.mlp(self.norm2(x))


def _time(fn, n: int = 20) -> float:
    fn()
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def main() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(Block(), Block())
    x = torch.randn(8, 16, 64)
    with torch.no_grad():
        reference = model(x)
        moved = xnf.to_xla(copy.deepcopy(model))
        xx = xnf.to_xla(x)
        eager = moved(xx)
        compiled_fn = xnf.compile(moved)
        compiled = compiled_fn(xx)
        print("transformer blocks on JAX CPU, batch 8 x 16 tokens x 64")
        for name, out in (("eager", eager), ("compiled", compiled)):
            diff = (xnf.to_torch(out) - reference).abs().max().item()
            print(f"  {name:9s} max |ours - torch| = {diff:.2e}")
        t_torch = _time(lambda: model(x))
        t_eager = _time(lambda: xnf.to_torch(moved(xx)))
        t_comp = _time(lambda: xnf.to_torch(compiled_fn(xx)))
    print(f"  median step: torch {t_torch * 1e3:.2f} ms, eager {t_eager * 1e3:.2f} ms "
          f"({t_eager / t_torch:.1f}x), compiled {t_comp * 1e3:.2f} ms ({t_comp / t_torch:.2f}x)")
    print(xnf.metrics_report().split("\n  op calls")[0])


if __name__ == "__main__":
    main()
