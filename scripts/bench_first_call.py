"""First-call time: a fresh process's first training step, cold (empty compilation
cache) and warm (a second process with the cache the first one filled).

    python scripts/bench_first_call.py                  # every model, eager and compile()
    python scripts/bench_first_call.py resnet --modes eager

Each measurement runs in its own process, with XLA_NATIVE_FUNCTIONS_CACHE pointed at a
fresh temporary directory for the cold run and the same directory for the warm one
(Note [Persistent compilation cache] in runtime/platform/backend.py), which holds only
the C++ device guard built once per torch installation (Note [Native device guard]).
Models: the zoo's
ResNet (small size, batch 2) and an EfficientNet-B0-sized network (torchvision's
efficientnet_b0 layout written with torch.nn: MBConv blocks with depthwise 3x3 and 5x5
convolutions, squeeze-excitation and SiLU, 16 to 320 channels; batch 2, 64x64 images).
The step is forward, cross entropy, backward and an SGD step; PyTorch CPU's first step
is printed for scale. Import time is not counted: the clock starts at the first step.

Modes: `eager` (the default: first calls of each op signature run on PyTorch CPU while
their executables compile in the background, Note [First calls on PyTorch CPU] in
runtime/exec/first_call.py), `eager-sync` (config.first_calls_on_cpu = False: every
signature compiles before its first call returns), `compile` (a graph's first calls
interpreted node by node while it compiles in the background, Note [First calls of
compiled graphs] in runtime/exec/graph_first_call.py) and `compile-sync` (the setting
off: the first call compiles the graph). For compile(), the third step is printed too,
and "compiled step s" is the median of 15 replayed steps after the graph compiled. For eager, "compiled
after s" is when the background thread had compiled every signature of the first two
steps (counted from the first step's start), and "compiled step s" the second step after
that (the first one after a signature's compile also fills JAX's C++ dispatch cache).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def efficientnet_b0():
    """torchvision's efficientnet_b0 layout, written with torch.nn."""
    from torch import nn

    class MBConv(nn.Module):
        def __init__(self, cin, cout, expand, stride, kernel):
            super().__init__()
            mid = cin * expand
            layers = []
            if expand != 1:
                layers += [nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.SiLU()]
            layers += [nn.Conv2d(mid, mid, kernel, stride, kernel // 2, groups=mid, bias=False), nn.BatchNorm2d(mid),
                       nn.SiLU()]
            self.body = nn.Sequential(*layers)
            squeezed = max(1, cin // 4)
            self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(mid, squeezed, 1), nn.SiLU(),
                                    nn.Conv2d(squeezed, mid, 1), nn.Sigmoid())
            self.project = nn.Sequential(nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))
            self.residual = stride == 1 and cin == cout

        def forward(self, x):
            y = self.body(x)
            y = self.project(y * self.se(y))
            return x + y if self.residual else y

    blocks, cin = [], 32
    for expand, cout, repeats, stride, kernel in ((1, 16, 1, 1, 3), (6, 24, 2, 2, 3), (6, 40, 2, 2, 5),
                                                  (6, 80, 3, 2, 3), (6, 112, 3, 1, 5), (6, 192, 4, 2, 5),
                                                  (6, 320, 1, 1, 3)):
        for i in range(repeats):
            blocks.append(MBConv(cin, cout, expand, stride if i == 0 else 1, kernel))
            cin = cout
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.SiLU(), *blocks,
        nn.Conv2d(320, 1280, 1, bias=False), nn.BatchNorm2d(1280), nn.SiLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(1280, 1000),
    )


def _efficientnet_b0_case():
    import torch

    return efficientnet_b0(), torch.randn(2, 3, 64, 64), torch.randint(0, 1000, (2,))


def _resnet():
    sys.path.insert(0, str(HERE))
    from zoo import MODELS, SIZES

    case = MODELS["resnet"].build(2, size=SIZES["small"])
    return case.model, case.inputs[0], case.target


def child(model_name: str, mode: str) -> None:
    """One first step in this process; prints a JSON line."""
    import torch

    if mode == "torch":
        xnf = None
    else:
        import xla_native_functions as xnf

        xnf.config.first_calls_on_cpu = mode in ("eager", "compile")
    torch.manual_seed(0)
    model, x, y = {"resnet": _resnet, "efficientnet_b0": _efficientnet_b0_case}[model_name]()
    model.train()
    if xnf is not None:
        model, x, y = xnf.to_xla(model), xnf.to_xla(x), xnf.to_xla(y)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    if mode == "compile":
        step = xnf.compile(step)
    start = began = time.perf_counter()
    loss = step()
    float(loss.cpu() if xnf is None else xnf.to_torch(loss))
    first = time.perf_counter() - start
    start = time.perf_counter()
    loss = step()
    float(loss.cpu() if xnf is None else xnf.to_torch(loss))
    second = time.perf_counter() - start
    result = {"first_s": first, "second_s": second}
    if mode in ("compile", "compile-sync"):
        start = time.perf_counter()
        loss = step()
        float(xnf.to_torch(loss))
        result["third_s"] = time.perf_counter() - start
    if mode != "torch":
        from xla_native_functions.runtime.exec.first_call import wait_for_background_compiles

        wait_for_background_compiles()
        result["compiled_after_s"] = time.perf_counter() - began
        step()  # each signature's first call after its compile fills JAX's C++ cache
        start = time.perf_counter()
        loss = step()
        float(xnf.to_torch(loss))
        result["compiled_step_s"] = time.perf_counter() - start
        if mode in ("compile", "compile-sync"):  # the replayed step, median of 15
            times = []
            for _ in range(15):
                start = time.perf_counter()
                float(xnf.to_torch(step()))
                times.append(time.perf_counter() - start)
            result["compiled_step_s"] = sorted(times)[len(times) // 2]
    print(json.dumps(result))


def _fresh_cache() -> str:
    """An empty compilation cache, holding only the C++ device guard built for this
    torch installation (a one-time cost at the first import, not a first call's)."""
    cache = tempfile.mkdtemp(prefix="first-call-")
    home = os.environ.get("XLA_NATIVE_FUNCTIONS_CACHE") or str(Path.home() / ".cache" / "xla_native_functions")
    for built in Path(home).glob("device_guard-*.so") if Path(home).is_dir() else ():
        shutil.copy2(built, cache)
    return cache


def _run(model: str, mode: str, cache: str) -> dict:
    env = dict(os.environ, XLA_NATIVE_FUNCTIONS_CACHE=cache)
    env.pop("XLA_NATIVE_FUNCTIONS_NO_COMPILATION_CACHE", None)
    out = subprocess.run([sys.executable, __file__, "--child", model, mode], env=env, capture_output=True, text=True,
                         timeout=600)
    if out.returncode:
        raise RuntimeError(out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", default=["resnet", "efficientnet_b0"])
    parser.add_argument("--modes", nargs="*", default=["eager", "eager-sync", "compile"])
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(*args.child)
        return 0
    print(f"{'model':<18} {'mode':<10} {'cold first s':>13} {'warm first s':>13} {'second step s':>14} "
          f"{'compiled after s':>17} {'compiled step s':>16}")
    for model in args.models:
        torch_first = _run(model, "torch", tempfile.mkdtemp(prefix="first-call-"))
        print(f"{model:<18} {'torch':<10} {torch_first['first_s']:>13.2f} {'':>13} {torch_first['second_s']:>14.3f}")
        for mode in args.modes:
            cache = _fresh_cache()
            try:
                cold = _run(model, mode, cache)
                warm = _run(model, mode, cache)
            except Exception as e:  # a failed row says why and the others still run
                print(f"{model:<18} {mode:<10} failed: {e}")
                continue
            after = (f" {cold['compiled_after_s']:>11.1f} cold {warm['compiled_after_s']:>5.1f} warm "
                     f"{warm['compiled_step_s']:>10.4f}" if "compiled_after_s" in cold else "")
            third = (f" (third: cold {cold['third_s']:.3f}, warm {warm['third_s']:.3f}; cold second "
                     f"{cold['second_s']:.3f})" if "third_s" in cold else "")
            print(f"{model:<18} {mode:<10} {cold['first_s']:>13.2f} {warm['first_s']:>13.2f} {warm['second_s']:>14.3f}"
                  f"{after}{third}", flush=True)
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} (targets: cold <= 10 s, warm <= 2 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
