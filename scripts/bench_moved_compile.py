"""What torch.compile(backend="xla_native") costs on a model already moved with to_xla
(Note [Moved models under torch.compile] in runtime/frontends/moved_models.py): it runs
op by op, so it is timed against eager mode on the same moved model, and against the two
compiled paths the warning recommends: the backend on the CPU model, and
xla_native_functions.compile on the moved model. Steady-state medians, interleaved.

    python scripts/bench_moved_compile.py [--quick]

Workloads: an MLP (256-512-512-10, batch 64) forward under no_grad, and its training
step (forward, mean squared error, backward; gradients cleared each step, no optimizer).
"""

from __future__ import annotations

import argparse
import copy
import warnings

import torch
import torch.nn as nn

import xla_native_functions as xnf
from bench_dynamo import make_mlp, medians_ms


def _train(model, x, y):
    for p in model.parameters():
        p.grad = None
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    return loss.detach()


def run(number: int, repeat: int) -> None:
    warnings.simplefilter("ignore")  # the moved model's MovedModelWarning, expected here
    cpu = make_mlp()
    x, y = torch.randn(64, 256), torch.randn(64, 10)
    moved = xnf.to_xla(copy.deepcopy(cpu))
    xj, yj = xnf.to_xla(x), xnf.to_xla(y)
    torch._dynamo.reset()
    moved_compiled = torch.compile(moved, backend="xla_native")
    cpu_copy = copy.deepcopy(cpu)
    cpu_compiled = torch.compile(cpu_copy, backend="xla_native")

    def infer_step(inp):
        with torch.no_grad():
            return moved(inp)

    infer = xnf.compile(infer_step)
    with torch.no_grad():
        forward = {
            "eager, moved model": lambda: xnf.to_torch(moved(xj)),
            "torch.compile, moved model (op by op)": lambda: xnf.to_torch(moved_compiled(xj)),
            "torch.compile, CPU model (backend moves it)": lambda: cpu_compiled(x),
            "compile(), moved model": lambda: xnf.to_torch(infer(xj)),
        }
        print("forward, no_grad (ms per call):")
        for name, ms in medians_ms(forward, number, repeat).items():
            print(f"  {name:48s} {ms:8.3f}")

    train = xnf.compile(lambda a, b: _train(moved, a, b))
    steps = {
        "eager, moved model": lambda: xnf.to_torch(_train(moved, xj, yj)),
        "torch.compile, moved model (op by op)": lambda: xnf.to_torch(_train(moved_compiled, xj, yj)),
        "torch.compile, CPU model (backend moves it)": lambda: _train(cpu_compiled, x, y),
        "compile(), moved model": lambda: xnf.to_torch(train(xj, yj)),
    }
    print("training step: forward, loss, backward (ms per call):")
    for name, ms in medians_ms(steps, number, repeat).items():
        print(f"  {name:48s} {ms:8.3f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    run(*((5, 5) if args.quick else (20, 9)))
