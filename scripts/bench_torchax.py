"""One transformer encoder layer's training step: PyTorch CPU eager, our `compile()` and
torchax (Google's PyTorch-on-JAX library), side by side.

    pip install --no-deps torchax==0.0.13     # once; without it the torchax row is skipped
    python scripts/bench_torchax.py [--processes 3] [--rounds 7] [--number 20] [--torch-threads 1]

Workload: `nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=512,
batch_first=True, dropout=0.0)` on a fixed batch of 8 x 64 tokens x 128, float32; a
step is forward, mean squared error against a fixed target, backward and an SGD update
(lr 0.01). Rows:

- PyTorch CPU eager, `torch.optim.SGD`.
- ours: `xnf.compile(step)` of the same PyTorch step on the model moved with
  `xnf.to_xla`, `torch.optim.SGD` (as in scripts/bench_dynamo.py).
- torchax: the training step of its examples (examples/basic_training_jax.py):
  `torchax.train.make_train_step` (loss and gradients through
  `interop.jax_value_and_grad` of a `JittableModule.functional_call`, the update by
  `optax.sgd`) under `interop.jax_jit` with the weights and optimizer state donated:
  the whole step is one JAX program.

Each call blocks until its loss is ready. Both packages register PyTorch's "jax"
device, so each runs in processes of its own, which alternate (ours, torchax, ours, ...).
Every process times PyTorch CPU eager too, in turns with its row (bench_runtime.py's
`paired_us`), so each ratio is against PyTorch's time in the same round of the same
process; the figures are medians over all rounds. Before timing, each process checks
that its row's first three losses match PyTorch's from the same initial weights.

torchax 0.0.13 names overloads taking named dimensions that torch 2.13 no longer has
(`torch.ops.aten.prod.dim_Dimname` and `aten.index_copy.dimname` in a dict in
torchax/amp.py at import; `aten.all.dimname`, `aten.norm.names_ScalarOpt_dim`,
`aten.std.names_dim` and others in its op tables, imported when its environment is
built), and the lookups fail. While torchax is imported and its environment built, and
only then, looking up a missing overload whose name contains "imname" or "names" gives a
placeholder object that no call can reach; every other lookup, and every lookup after,
is PyTorch's own.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import os
import subprocess
import sys
import time

import torch

LR = 0.01


def paired_us(fns: dict, number: int, repeat: int, pause: float = 0.1) -> dict[str, list[float]]:
    """Microseconds per call of each function in each of `repeat` rounds, the functions
    taking turns within a round; before each turn a pause and one untimed call
    (bench_runtime.py's `paired_us`)."""
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


def median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


def make_layer() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=512, batch_first=True, dropout=0.0)


def make_data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(8, 64, 128, generator=g), torch.randn(8, 64, 128, generator=g)


def torch_step(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor):
    opt = torch.optim.SGD(model.parameters(), lr=LR)

    def step():
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss
    return step


def ours(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor):
    """Our row: returns (step, loss of a step's result as a float)."""
    import xla_native_functions as xnf

    compiled = xnf.compile(torch_step(xnf.to_xla(model), xnf.to_xla(x), xnf.to_xla(y)))
    return lambda: xnf.to_jax(compiled()).block_until_ready(), float


def import_torchax():
    """torchax and its environment (which imports its op tables), with the named-dimension
    overloads torch no longer has resolving to a placeholder (module docstring)."""
    packet = torch._ops.OpOverloadPacket
    original = packet.__getattr__

    def getattr_(self, key):
        try:
            return original(self, key)
        except AttributeError:
            if "imname" in key or "names" in key:  # Dimname/dimname, names_dim, ...
                return object()
            raise

    packet.__getattr__ = getattr_
    try:
        import torchax

        torchax.default_env()
    finally:
        packet.__getattr__ = original
    return torchax


def torchax_row(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor):
    """torchax's row: returns (step, loss of a step's result as a float)."""
    torchax = import_torchax()
    import optax
    from torchax import interop, train

    env = torchax.default_env()
    with env:
        model.to("jax")
        x, y = x.to("jax"), y.to("jax")
    jittable = interop.JittableModule(model)
    optimizer = optax.sgd(LR)
    state = {"weights": jittable.params, "opt_state": interop.call_jax(optimizer.init, jittable.params)}

    def model_fn(weights, buffers, args):
        return jittable.functional_call("forward", weights, buffers, *args)

    step_fn = train.make_train_step(model_fn, lambda out, target: ((out - target) ** 2).mean(), optimizer)
    step_fn = interop.jax_jit(step_fn, kwargs_for_jax_jit={"donate_argnums": (0, 2)})

    def step():
        loss, state["weights"], state["opt_state"] = step_fn(
            state["weights"], jittable.buffers, state["opt_state"], (x,), y)
        loss.jax().block_until_ready()
        return loss
    return step, lambda loss: float(loss.jax())


def worker(row: str, number: int, rounds: int) -> dict:
    """One process: PyTorch eager and `row` from the same weights; the first losses of
    both, then `rounds` paired rounds."""
    x, y = make_data()
    model = make_layer()
    reference = copy.deepcopy(model)
    make = ours if row == "ours" else torchax_row
    step, loss_value = make(model, x, y)
    eager = torch_step(reference, x, y)
    eager_losses = [eager().item() for _ in range(3)]
    row_losses = [loss_value(step()) for _ in range(3)]
    for _ in range(3):  # warm-up past compilation and replay's first calls
        step()
    runs = paired_us({"torch": eager, row: step}, number, rounds)
    return {"row": row, "eager_losses": eager_losses, "row_losses": row_losses, "runs": runs}


def run_worker(args, row: str) -> dict | None:
    cmd = [sys.executable, __file__, "--worker", row, "--number", str(args.number), "--rounds", str(args.rounds),
           "--torch-threads", str(args.torch_threads)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"{row}: worker failed\n{proc.stderr[-3000:]}")
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=3, help="processes per row (they alternate)")
    parser.add_argument("--rounds", type=int, default=7, help="paired rounds per process")
    parser.add_argument("--number", type=int, default=20, help="steps per turn")
    parser.add_argument("--torch-threads", type=int, default=1,
                        help="PyTorch intra-op threads (on a shared 2-core machine more make its times erratic)")
    parser.add_argument("--worker", choices=["ours", "torchax"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.torch_threads)
    if args.worker:
        print(json.dumps(worker(args.worker, args.number, args.rounds)))
        return

    rows = ["ours"]
    if importlib.util.find_spec("torchax") is None:
        print("torchax is not installed, its row is skipped: pip install --no-deps torchax==0.0.13")
    else:
        rows.append("torchax")
    load = os.getloadavg()
    print(f"torch {torch.__version__}, {args.torch_threads} torch thread(s); {args.processes} process(es) per row, "
          f"{args.rounds} rounds of {args.number} steps each")
    print("TransformerEncoderLayer(128, 4 heads, ffn 512), batch 8 x 64 tokens, float32, MSE + SGD training step")
    results: dict[str, list[dict]] = {row: [] for row in rows}
    for _ in range(args.processes):
        for row in rows:
            result = run_worker(args, row)
            if result is not None:
                results[row].append(result)
    load_after = os.getloadavg()
    report(results)
    print(f"medians over {args.processes * args.rounds} rounds per row, each ratio against PyTorch eager in the same "
          f"round of the same process; load average {load[0]:.1f} at the start, {load_after[0]:.1f} at the end")


def report(results: dict[str, list[dict]]) -> None:
    """Loss checks, then the table: median ms per step and median per-round ratio."""
    eager = [t for rs in results.values() for r in rs for t in r["runs"]["torch"]]
    lines, ratios = [f"| PyTorch CPU eager | {median(eager) / 1e3:.3f} | 1.00x |"], {}
    for row, rs in results.items():
        if not rs:
            continue
        diff = max(abs(a - b) / abs(b) for r in rs for a, b in zip(r["row_losses"], r["eager_losses"]))
        print(f"{row}: losses of the first three steps {', '.join(f'{v:.6f}' for v in rs[0]['row_losses'])}, "
              f"PyTorch's {', '.join(f'{v:.6f}' for v in rs[0]['eager_losses'])}: "
              f"{'match' if diff < 1e-5 else 'DIFFER'} (largest relative difference {diff:.1e})")
        ratios[row] = median([a / b for r in rs for a, b in zip(r["runs"][row], r["runs"]["torch"])])
        eager_here = median([t for r in rs for t in r["runs"]["torch"]]) / 1e3
        print(f"{row}: PyTorch CPU eager in its processes {eager_here:.3f} ms")
        lines.append(f"| {row} | {median([t for r in rs for t in r['runs'][row]]) / 1e3:.3f} | {ratios[row]:.2f}x |")
    print("\n| row | ms per step | over PyTorch CPU eager |\n|---|---:|---:|")
    print("\n".join(lines))
    if len(ratios) == 2:
        print(f"ours over torchax (ratio of their ratios to PyTorch): {ratios['ours'] / ratios['torchax']:.2f}x")


if __name__ == "__main__":
    main()
