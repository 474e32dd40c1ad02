"""Runtime benchmark: per-op eager overhead, tracing cost per op, and compiled steps (an
MLP forward and training step, two transformer blocks), each as a median and a ratio
against baselines measured in the same run (PyTorch CPU eager, plain jax.numpy, and the
same computation written in JAX). `compile()` is measured both ways: replaying stable
calls (the default) and tracing every call (`replay=False`).

    python scripts/bench_runtime.py [row ...]
"""

from __future__ import annotations

import copy
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import torch

import xla_native_functions as xnf
from xla_native_functions.runtime.exec.trace import tracing

# Steady-state eager timings: every op signature compiled before its first call returns,
# not answered by PyTorch CPU while it compiles (first calls: scripts/bench_first_call.py).
xnf.config.first_calls_on_cpu = False

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from training_steps import training_step  # noqa: E402


def median_us(fn, number: int = 2000, repeat: int = 7) -> float:
    return _median(paired_us({"fn": fn}, number, repeat)["fn"])


def paired_us(fns: dict, number: int = 2000, repeat: int = 7, pause: float = 0.05) -> dict[str, list[float]]:
    """Microseconds per call of each function in each of `repeat` rounds. The functions
    take turns within every round, so load on a shared machine hits them alike, and a
    ratio is taken round by round (`ratio`). Before each turn, a pause lets the previous
    function's thread pools (PyTorch's OpenMP workers, XLA's) go idle, and one untimed
    call absorbs the switch: otherwise whichever runs right after PyTorch is slowed by
    its spinning workers."""
    for fn in fns.values():
        fn()
    runs: dict = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            time.sleep(pause)
            fn()
            start = time.perf_counter()
            for _ in range(number):
                fn()
            runs[name].append((time.perf_counter() - start) / number * 1e6)
    return runs


def _median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


def ratio(runs: dict, name: str, baseline: str) -> float:
    """The median over rounds of `name`'s time over `baseline`'s in the same round."""
    return _median([a / b for a, b in zip(runs[name], runs[baseline])])


def eager_add() -> None:
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    xa, xb = xnf.to_xla(a), xnf.to_xla(b)
    with jax.enable_x64(True):
        ja, jb = jnp.asarray(a.numpy()), jnp.asarray(b.numpy())
        runs = paired_us({"jnp": lambda: jnp.add(ja, jb), "torch": lambda: a + b, "ours": lambda: xa + xb}, repeat=15)
    t_jnp, t_torch, t_ours = (_median(runs[k]) for k in ("jnp", "torch", "ours"))
    print("eager 16x16 float32 add (median us per op)")
    print(
        f"  torch CPU {t_torch:7.1f}   jax.numpy {t_jnp:7.1f}   ours {t_ours:7.1f}  "
        f"-> {ratio(runs, 'ours', 'jnp'):.2f}x jax.numpy, {ratio(runs, 'ours', 'torch'):.1f}x torch (target <= 2x "
        "jax.numpy)"
    )
    eager_floor(a, b)


def eager_matmul() -> None:
    """A 64x64 float32 matmul, eager: per-op cost where the op itself costs a little."""
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    xa, xb = xnf.to_xla(a), xnf.to_xla(b)
    with jax.enable_x64(True):
        ja, jb = jnp.asarray(a.numpy()), jnp.asarray(b.numpy())
        # PyTorch's matmul wakes its OpenMP workers, which spin for up to 200 ms after it
        # (KMP_BLOCKTIME) and slowed the next turn by half: pause longer
        runs = paired_us({"jnp": lambda: jnp.matmul(ja, jb), "torch": lambda: a @ b, "ours": lambda: xa @ xb},
                         repeat=15, pause=0.3)
    t_jnp, t_torch, t_ours = (_median(runs[k]) for k in ("jnp", "torch", "ours"))
    print("eager 64x64 float32 matmul (median us per op)")
    print(
        f"  torch CPU {t_torch:7.1f}   jax.numpy {t_jnp:7.1f}   ours {t_ours:7.1f}  "
        f"-> {ratio(runs, 'ours', 'jnp'):.2f}x jax.numpy, {ratio(runs, 'ours', 'torch'):.1f}x torch (target <= 2x "
        "jax.numpy)"
    )


def eager_in_place() -> None:
    """In-place adds, eager: a small tensor (a fresh buffer per write) and a 4 MB one
    (its buffer donated, Note [Donated in-place updates]), against PyTorch's in-place add."""
    for shape in ((16, 16), (1024, 1024)):
        a, b = torch.randn(shape), torch.randn(shape)
        xa, xb = xnf.to_xla(a), xnf.to_xla(b)
        runs = paired_us(
            {"torch": lambda: a.add_(b), "ours": lambda: xa.add_(xb)}, number=2000 if shape[0] < 64 else 200, repeat=15
        )
        t_torch, t_ours = _median(runs["torch"]), _median(runs["ours"])
        print(
            f"eager {shape[0]}x{shape[1]} float32 add_ (median us per op): torch CPU {t_torch:7.1f}   ours "
            f"{t_ours:7.1f}"
            f"  -> {ratio(runs, 'ours', 'torch'):.1f}x torch"
        )


class _Prebuilt(torch.Tensor):
    """A tensor subclass whose ops all return one prebuilt tensor: what PyTorch's
    dispatch to Python costs before any backend work."""

    result: torch.Tensor

    @staticmethod
    def __new__(cls, like):
        return torch.Tensor._make_wrapper_subclass(cls, like.shape, dtype=like.dtype)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return _Prebuilt.result


class _NewWrapper(_Prebuilt):
    """The same, returning a new wrapper tensor for each result."""

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return _NewWrapper(_Prebuilt.result)


def eager_floor(a: torch.Tensor, b: torch.Tensor) -> None:
    """Eager mode's floor per op: PyTorch's dispatch to a Python tensor subclass, one
    wrapper tensor for the result, and one call of a cached jax.jit executable."""
    pa, pb, wa, wb = _Prebuilt(a), _Prebuilt(b), _NewWrapper(a), _NewWrapper(b)
    _Prebuilt.result = _Prebuilt(a)
    with jax.enable_x64(True):
        ja, jb = jnp.asarray(a.numpy()), jnp.asarray(b.numpy())
        add = jax.jit(jnp.add)
        runs = paired_us({"dispatch": lambda: pa + pb, "wrapper": lambda: wa + wb, "jit": lambda: add(ja, jb),
                          "torch": lambda: a + b}, repeat=15)
    t = {k: _median(v) for k, v in runs.items()}
    floor = t["wrapper"] + t["jit"]
    print(f"  floor: dispatch to a Python subclass {t['dispatch']:.1f}, with a new wrapper {t['wrapper']:.1f}, "
          f"cached jax.jit call {t['jit']:.1f} -> {floor:.1f} us, {floor / t['torch']:.1f}x torch")


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


def _mlp() -> torch.nn.Sequential:
    torch.manual_seed(0)
    dims = [256, 512, 512, 10]
    layers = []
    for i, o in zip(dims, dims[1:]):
        layers += [torch.nn.Linear(i, o), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


def _pure_mlp(params, x):
    for i, (w, b) in enumerate(params):
        x = x @ w.T + b
        if i < len(params) - 1:
            x = jax.nn.relu(x)
    return x


def _report(title: str, runs: dict) -> None:
    print(title)
    print("  " + "   ".join(f"{name} {_median(us):8.1f}" for name, us in runs.items()))
    for name in ("compiled", "traced every call"):
        if name in runs:
            print(f"  {name}: {ratio(runs, name, 'torch'):.2f}x torch, {ratio(runs, name, 'pure JAX'):.2f}x pure JAX"
                  + (" (targets <= 1x torch, <= 1.1x JAX)" if name == "compiled" else ""))


def _forward_timings(model: torch.nn.Module, x: torch.Tensor, pure, number: int) -> dict:
    """A forward pass under no_grad: PyTorch, the given pure-JAX call, and ours compiled
    (replaying, and tracing every call) and eager, timed in turns."""
    with torch.no_grad():
        moved = xnf.to_xla(copy.deepcopy(model))
        xx = xnf.to_xla(x)
        step, traced = xnf.compile(moved), xnf.compile(moved, replay=False)
        return paired_us(
            {
                "torch": lambda: model(x),
                "pure JAX": pure,
                "compiled": lambda: xnf.to_jax(step(xx)).block_until_ready(),
                "traced every call": lambda: xnf.to_jax(traced(xx)).block_until_ready(),
                "eager": lambda: xnf.to_torch(moved(xx)),
            },
            number=number,
        )


def mlp_step() -> None:
    model = _mlp()
    x = torch.randn(64, 256)
    params = [
        (jnp.asarray(m.weight.detach().numpy()), jnp.asarray(m.bias.detach().numpy()))
        for m in model
        if isinstance(m, torch.nn.Linear)
    ]
    pure = jax.jit(_pure_mlp)
    jx = jnp.asarray(x.numpy())
    t = _forward_timings(model, x, lambda: pure(params, jx).block_until_ready(), number=50)
    _report("MLP 256-512-512-10 forward, batch 64 (median us per step)", t)


def mlp_training_step() -> None:
    """Forward, MSE loss, backward and an SGD step: in PyTorch, in JAX (value_and_grad and
    the update in one jitted function) and in compile(). The JAX step does not donate its
    parameters: on XLA CPU donating them measured about 12% slower."""
    lr = 0.01
    model = _mlp()
    x, y = torch.randn(64, 256), torch.randn(64, 10)
    jx, jy = jnp.asarray(x.numpy()), jnp.asarray(y.numpy())

    def loss_of(params, x, y):
        return jnp.mean((_pure_mlp(params, x) - y) ** 2)

    @jax.jit
    def pure_step(params, x, y):
        loss, grads = jax.value_and_grad(loss_of)(params, x, y)
        return jax.tree.map(lambda p, g: p - lr * g, params, grads), loss

    state = {"params": [(jnp.asarray(m.weight.detach().numpy()), jnp.asarray(m.bias.detach().numpy()))
                        for m in model if isinstance(m, torch.nn.Linear)]}

    def pure():
        state["params"], loss = pure_step(state["params"], jx, jy)
        loss.block_until_ready()

    def sgd_step(module):
        return training_step(module, torch.optim.SGD(module.parameters(), lr=lr), torch.nn.functional.mse_loss)

    torch_step = sgd_step(model)
    xx, yy = xnf.to_xla(x), xnf.to_xla(y)
    step = xnf.compile(sgd_step(xnf.to_xla(copy.deepcopy(model))))
    traced = xnf.compile(sgd_step(xnf.to_xla(copy.deepcopy(model))), replay=False)
    t = paired_us(
        {
            "torch": lambda: torch_step(x, y),
            "pure JAX": pure,
            "compiled": lambda: xnf.to_jax(step(xx, yy)).block_until_ready(),
            "traced every call": lambda: xnf.to_jax(traced(xx, yy)).block_until_ready(),
        },
        number=30,
    )
    _report("MLP 256-512-512-10 SGD training step, batch 64 (median us per step)", t)


def transformer_blocks() -> None:
    """The demo's two pre-norm transformer blocks (scripts/demo.py); the JAX baseline is the
    same module exported as a pure JAX function (`jax_function`) under jax.jit."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from demo import Block

    torch.manual_seed(0)
    model = torch.nn.Sequential(Block(), Block())
    x = torch.randn(8, 16, 64)
    with torch.no_grad():
        fn, params = xnf.jax_function(xnf.to_xla(copy.deepcopy(model)))
        pure = jax.jit(fn)
        jx = xnf.to_jax(xnf.to_xla(x))
        t = _forward_timings(model, x, lambda: pure(params, jx).block_until_ready(), number=30)
    _report("2 transformer blocks forward, batch 8 x 16 tokens x 64 (median us per step)", t)


ROWS = (
    "eager_add",
    "eager_matmul",
    "eager_in_place",
    "tracing_cost",
    "mlp_step",
    "mlp_training_step",
    "transformer_blocks",
)


def main() -> None:
    """Every row, or those named on the command line (`bench_runtime.py eager_in_place`)."""
    for name in sys.argv[1:] or ROWS:
        if name not in ROWS:
            raise SystemExit(f"unknown row {name!r}: one of {', '.join(ROWS)}")
        globals()[name]()


if __name__ == "__main__":
    main()
