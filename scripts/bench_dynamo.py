"""torch.compile backend benchmark: steady-state medians of our Dynamo backend
("xla_native") against our own compiled mode (xla_native_functions.compile), PyTorch
CPU eager and torch.compile's default backend (inductor), all measured in this run.

    python scripts/bench_dynamo.py [--quick]

Workloads: an MLP (256-512-512-10, batch 64) forward under no_grad, and its training
step (forward, mean squared error, backward, SGD step). The backend runs forward and backward
on JAX with CPU-resident parameters and the optimizer step on PyTorch CPU; our
compiled mode runs the whole step, optimizer included, as one XLA program on
parameters that live on the JAX side. The transfer line isolates what the backend
pays per call to move CPU tensors in and out.
"""

from __future__ import annotations

import argparse
import copy
import time

import torch
import torch.nn as nn

import xla_native_functions as xnf
from xla_native_functions.runtime import dynamo


def median_ms(fn, number: int, repeat: int) -> float:
    for _ in range(3):
        fn()
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        runs.append((time.perf_counter() - start) / number * 1e3)
    return sorted(runs)[repeat // 2]


def make_mlp() -> nn.Module:
    torch.manual_seed(0)
    dims = [256, 512, 512, 10]
    layers: list[nn.Module] = []
    for i, o in zip(dims, dims[1:]):
        layers += [nn.Linear(i, o), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def inference(number: int, repeat: int) -> dict[str, float]:
    model = make_mlp()
    x = torch.randn(64, 256)
    times = {}
    with torch.no_grad():
        times["torch eager"] = median_ms(lambda: model(x), number, repeat)
        torch._dynamo.reset()
        inductor = torch.compile(copy.deepcopy(model))
        times["torch.compile inductor"] = median_ms(lambda: inductor(x), number, repeat)
        torch._dynamo.reset()
        ours = torch.compile(copy.deepcopy(model), backend=dynamo.BACKEND_NAME)
        times["torch.compile xla_native"] = median_ms(lambda: ours(x), number, repeat)
        moved = xnf.to_xla(copy.deepcopy(model))
        xx = xnf.to_xla(x)
        step = xnf.compile(lambda inp: moved(inp))

        def compiled_mode():
            out = step(xx)
            xnf.to_jax(out).block_until_ready()

        times["xla_native_functions.compile"] = median_ms(compiled_mode, number, repeat)
    return times


def training(number: int, repeat: int) -> dict[str, float]:
    x, y = torch.randn(64, 256), torch.randn(64, 10)

    def torch_step(model, opt):
        def step():
            opt.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
            return loss
        return step

    times = {}
    model = make_mlp()
    times["torch eager"] = median_ms(torch_step(model, torch.optim.SGD(model.parameters(), lr=1e-3)), number, repeat)
    torch._dynamo.reset()
    model = make_mlp()
    times["torch.compile inductor"] = median_ms(
        torch_step(torch.compile(model), torch.optim.SGD(model.parameters(), lr=1e-3)), number, repeat)
    torch._dynamo.reset()
    model = make_mlp()
    times["torch.compile xla_native"] = median_ms(
        torch_step(torch.compile(model, backend=dynamo.BACKEND_NAME), torch.optim.SGD(model.parameters(), lr=1e-3)),
        number, repeat)

    moved = xnf.to_xla(make_mlp())
    opt = torch.optim.SGD(moved.parameters(), lr=1e-3)
    xx, yy = xnf.to_xla(x), xnf.to_xla(y)

    def our_step():
        opt.zero_grad()
        loss = ((moved(xx) - yy) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    compiled = xnf.compile(our_step)

    def compiled_mode():
        xnf.to_jax(compiled()).block_until_ready()

    times["xla_native_functions.compile"] = median_ms(compiled_mode, number, repeat)
    return times


def transfer(number: int, repeat: int) -> float:
    """Per call: the MLP's 6 parameters and one batch into JAX, one result out."""
    model = make_mlp()
    tensors = [p.detach() for p in model.parameters()] + [torch.randn(64, 256)]
    out = dynamo._cpu_to_jax(torch.randn(64, 10))

    def move():
        with xnf.x64():
            arrays = [dynamo._cpu_to_jax(t) for t in tensors]
        arrays[-1].block_until_ready()
        dynamo._jax_to_cpu(out + 0)

    return median_ms(move, number, repeat)


def print_table(title: str, times: dict[str, float]) -> None:
    base = times["torch eager"]
    ours = times["torch.compile xla_native"]
    print(title)
    print(f"  {'mode':32s} {'median ms':>10s} {'vs torch eager':>15s} {'vs xla_native backend':>22s}")
    for name, t in times.items():
        print(f"  {name:32s} {t:10.3f} {t / base:14.2f}x {t / ours:21.2f}x")
    mode = times["xla_native_functions.compile"]
    print(f"  backend / our compiled mode: {ours / mode:.2f}x (target <= 1.10x); "
          f"backend / inductor: {ours / times['torch.compile inductor']:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--threads", type=int, default=1,
                        help="PyTorch intra-op threads (on a shared 2-core machine more threads make torch's "
                             "timings erratic)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} torch thread(s)")
    number, repeat = (10, 3) if args.quick else (50, 7)
    print_table("MLP 256-512-512-10, batch 64, forward (no_grad)", inference(number, repeat))
    print_table("MLP 256-512-512-10, batch 64, training step (SGD)", training(number, repeat))
    t = transfer(number, repeat)
    print(f"per-call transfer if nothing were cached (6 parameters + batch in, result out): {t:.3f} ms")
    print(dynamo.dynamo_report())


if __name__ == "__main__":
    main()
