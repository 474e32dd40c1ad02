"""Runtime benchmark: per-op eager overhead, tracing cost per op, and the compiled MLP
step, each as a median and a ratio against baselines measured in the same run
(PyTorch CPU eager, plain jax.numpy, and the same computation written in JAX).

    python scripts/bench_runtime.py
"""

from __future__ import annotations

import copy
import time

import jax
import jax.numpy as jnp
import torch

import xla_native_functions as xnf
from xla_native_functions.runtime.lazy import tracing


def median_us(fn, number: int = 2000, repeat: int = 7) -> float:
    return paired_us({"fn": fn}, number, repeat)["fn"]


def paired_us(fns: dict, number: int = 2000, repeat: int = 7) -> dict:
    """Median microseconds per call of each function. The functions take turns within
    every repeat, so load on a shared machine hits them alike and their ratios hold."""
    for fn in fns.values():
        fn()
    runs: dict = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(number):
                fn()
            runs[name].append((time.perf_counter() - start) / number * 1e6)
    return {name: sorted(r)[repeat // 2] for name, r in runs.items()}


def eager_add() -> None:
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    xa, xb = xnf.to_xla(a), xnf.to_xla(b)
    with jax.enable_x64(True):
        ja, jb = jnp.asarray(a.numpy()), jnp.asarray(b.numpy())
        t = paired_us({"jnp": lambda: jnp.add(ja, jb), "torch": lambda: a + b, "ours": lambda: xa + xb}, repeat=15)
    t_jnp, t_torch, t_ours = t["jnp"], t["torch"], t["ours"]
    print("eager 16x16 float32 add (median us per op)")
    print(f"  torch CPU {t_torch:7.1f}   jax.numpy {t_jnp:7.1f}   ours {t_ours:7.1f}  "
          f"-> {t_ours / t_jnp:.2f}x jax.numpy, {t_ours / t_torch:.1f}x torch (target <= 2x jax.numpy)")


def tracing_cost() -> None:
    a = xnf.to_xla(torch.randn(16, 16))
    n = 200

    def record():
        with tracing() as trace:
            x = a
            for _ in range(n):
                x = x + 1
            trace.storages = []  # record only: drop the outputs instead of running them
    t = median_us(record, number=5) / n
    print(f"tracing: {t:.1f} us per recorded op (target < 15 us)")


def mlp_step() -> None:
    torch.manual_seed(0)
    dims = [256, 512, 512, 10]
    layers = []
    for i, o in zip(dims, dims[1:]):
        layers += [torch.nn.Linear(i, o), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers[:-1])
    x = torch.randn(64, 256)
    params = [(jnp.asarray(l.weight.detach().numpy()), jnp.asarray(l.bias.detach().numpy())) for l in model if isinstance(l, torch.nn.Linear)]

    @jax.jit
    def pure(params, x):
        for i, (w, b) in enumerate(params):
            x = x @ w.T + b
            if i < len(params) - 1:
                x = jax.nn.relu(x)
        return x

    jx = jnp.asarray(x.numpy())
    with torch.no_grad():
        moved = xnf.to_xla(copy.deepcopy(model))
        xx = xnf.to_xla(x)
        step = xnf.compile(moved)
        t = paired_us(
            {
                "torch": lambda: model(x),
                "jax": lambda: pure(params, jx).block_until_ready(),
                "compiled": lambda: xnf.to_jax(step(xx)).block_until_ready(),
                "eager": lambda: xnf.to_torch(moved(xx)),
            },
            number=50,
        )
    t_torch, t_jax, t_ours, t_eager = t["torch"], t["jax"], t["compiled"], t["eager"]
    print("MLP 256-512-512-10 forward, batch 64 (median us per step)")
    print(f"  torch CPU {t_torch:8.1f}   pure JAX jit {t_jax:8.1f}   ours eager {t_eager:8.1f}   ours compiled {t_ours:8.1f}")
    print(f"  compiled: {t_ours / t_torch:.2f}x torch, {t_ours / t_jax:.2f}x pure JAX (targets <= 1x torch, <= 1.1x JAX)")


def main() -> None:
    eager_add()
    tracing_cost()
    mlp_step()


if __name__ == "__main__":
    main()
