"""Convolution-heavy steps against PyTorch CPU eager, in every mode.

    python scripts/bench_conv.py                          # every row (about 5 minutes)
    python scripts/bench_conv.py resnet18-64 unet --modes compile eager
    python scripts/bench_conv.py --profile resnet18-64    # where a compiled step's time goes

Rows: a ResNet-18-sized network (torchvision's layout: 7x7 stem, max pool, four stages
of two basic blocks, 64 to 512 channels; written here with torch.nn, torchvision is not
a dependency) at batch 8 on 64x64 and 224x224 images, and a UNet block (two 3x3
conv + GroupNorm + SiLU, a strided down conv, a transposed up conv, a skip
concatenation) at batch 8, 64 channels, 64x64, and a DCGAN-style decoder (two
ConvTranspose2d(k=4, s=2, p=1), 16x16 to 64x64, batch 8), and an EfficientNet-B0-sized
network (depthwise convolutions; scripts/bench_first_call.py's) and a RegNetY-400MF-sized
one (grouped convolutions of 8 channels per group), both at batch 8, 64x64, and a small
VGG-style network (three convolutions, then Linear(4096, 1024)) at batch 16, 32x32; each as
inference (no_grad, eval mode) and as an SGD training step. Modes: `compile` (xla_native_functions.compile, the
step replayed), `eager` (op by op on our device), `dynamo` (torch.compile with the
xla_native backend, CPU tensors in and out). Each mode's time is the median over turns
of its time over PyTorch's in the same turn (turns alternate PyTorch and the mode, with
a pause between); on this shared 2-core machine single runs move by 30%.

`--profile` dumps the compiled step's XLA CPU profile summary: which HLO instructions
(convolutions, their backward, transposes, reductions) take the time.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from typing import Callable

import torch
from torch import nn

import xla_native_functions as xnf

TURNS = 5

# Steady-state eager timings: every op signature compiled before its first call returns,
# not answered by PyTorch CPU while it compiles (first calls: scripts/bench_first_call.py).
xnf.config.first_calls_on_cpu = False


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + (x if self.down is None else self.down(x)))


class ResNet18(nn.Module):
    """torchvision's resnet18 layout."""

    def __init__(self, classes: int = 1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        layers, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


class UNetBlock(nn.Module):
    def __init__(self, ch: int = 64):
        super().__init__()

        def double(cin, cout):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.GroupNorm(8, cout), nn.SiLU(),
                                 nn.Conv2d(cout, cout, 3, padding=1), nn.GroupNorm(8, cout), nn.SiLU())

        self.enc = double(ch, ch)
        self.down = nn.Conv2d(ch, 2 * ch, 3, stride=2, padding=1)
        self.mid = double(2 * ch, 2 * ch)
        self.up = nn.ConvTranspose2d(2 * ch, ch, 2, stride=2)
        self.dec = double(2 * ch, ch)

    def forward(self, x):
        skip = self.enc(x)
        y = self.up(self.mid(self.down(skip)))
        return self.dec(torch.cat([y, skip], 1))


class Decoder(nn.Module):
    """A DCGAN-style decoder: ConvTranspose2d(k=4, s=2, p=1) up-sampling, 16x16 to 64x64."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.ConvTranspose2d(128, 64, 4, 2, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
            nn.ConvTranspose2d(64, 32, 4, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
            nn.Conv2d(32, 3, 3, padding=1), nn.Tanh())

    def forward(self, x):
        return self.net(x)


class RegNetYBlock(nn.Module):
    """torchvision's RegNetY block: 1x1 conv, grouped 3x3 conv (groups of 8 channels),
    squeeze-excitation, 1x1 conv, residual."""

    def __init__(self, cin: int, cout: int, stride: int, group_width: int = 8):
        super().__init__()
        self.a = nn.Sequential(nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())
        self.b = nn.Sequential(nn.Conv2d(cout, cout, 3, stride, 1, groups=cout // group_width, bias=False),
                               nn.BatchNorm2d(cout), nn.ReLU())
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(cout, max(1, cin // 4), 1), nn.ReLU(),
                                nn.Conv2d(max(1, cin // 4), cout, 1), nn.Sigmoid())
        self.c = nn.Sequential(nn.Conv2d(cout, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.proj = None
        if stride != 1 or cin != cout:
            self.proj = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.b(self.a(x))
        y = self.c(y * self.se(y))
        return torch.relu(y + (x if self.proj is None else self.proj(x)))


def regnet_y_400mf(classes: int = 1000) -> nn.Module:
    """torchvision's regnet_y_400mf layout: widths 48, 104, 208, 440; depths 1, 3, 6, 6."""
    layers: list[nn.Module] = [nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU()]
    cin = 32
    for cout, depth in ((48, 1), (104, 3), (208, 6), (440, 6)):
        for i in range(depth):
            layers.append(RegNetYBlock(cin, cout, 2 if i == 0 else 1))
            cin = cout
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes))


def vgg_small(classes: int = 10) -> nn.Module:
    """A VGG-style network for 32x32 images: three 3x3 convolutions (the last two strided)
    and a classifier whose first product, Linear(4096, 1024), outweighs any convolution."""
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, 2, 1), nn.ReLU(),
        nn.Conv2d(64, 64, 3, 2, 1), nn.ReLU(), nn.Flatten(1),
        nn.Linear(64 * 8 * 8, 1024), nn.ReLU(), nn.Linear(1024, classes),
    )


def _case(row: str) -> tuple[nn.Module, torch.Tensor, torch.Tensor, Callable]:
    torch.manual_seed(0)
    if row.startswith("resnet18"):
        side = int(row.split("-")[1])
        x = torch.randn(8, 3, side, side)
        return ResNet18(), x, torch.randint(0, 1000, (8,)), nn.functional.cross_entropy
    if row == "regnet":
        return regnet_y_400mf(), torch.randn(8, 3, 64, 64), torch.randint(0, 1000, (8,)), nn.functional.cross_entropy
    if row == "efficientnet":
        from bench_first_call import efficientnet_b0

        return efficientnet_b0(), torch.randn(8, 3, 64, 64), torch.randint(0, 1000, (8,)), nn.functional.cross_entropy
    if row == "vgg":
        return vgg_small(), torch.randn(16, 3, 32, 32), torch.randint(0, 10, (16,)), nn.functional.cross_entropy
    if row == "decoder":
        return Decoder(), torch.randn(8, 128, 16, 16), torch.randn(8, 3, 64, 64), nn.functional.mse_loss
    x = torch.randn(8, 64, 64, 64)
    return UNetBlock(), x, torch.randn(8, 64, 64, 64), nn.functional.mse_loss


ROWS = ("resnet18-64", "resnet18-224", "unet", "decoder", "efficientnet", "regnet", "vgg")
MODES = ("compile", "eager", "dynamo")


def _steps(row: str, train: bool, mode: str) -> tuple[Callable, Callable]:
    model, x, y, loss_fn = _case(row)
    model.train(train)
    ours_model = copy.deepcopy(model)
    if mode == "dynamo":
        torch._dynamo.reset()
        ours_model, ox, oy = torch.compile(ours_model, backend="xla_native"), x, y
    else:
        ours_model, ox, oy = xnf.to_xla(ours_model), xnf.to_xla(x), xnf.to_xla(y)

    def step_of(m, x, y):
        if not train:
            def infer():
                with torch.no_grad():
                    return m(x)
            return infer
        opt = torch.optim.SGD(m.parameters(), lr=0.01)

        def step():
            opt.zero_grad()
            loss = loss_fn(m(x), y)
            loss.backward()
            opt.step()
            return loss.detach()
        return step

    ref, ours = step_of(model, x, y), step_of(ours_model, ox, oy)
    if mode == "compile":
        ours = xnf.compile(ours)
    return ref, (lambda: xnf.to_torch(ours())) if mode != "dynamo" else ours


def measure(ref: Callable, ours: Callable, warmup: int) -> tuple[float, float, float]:
    """(PyTorch ms, ours ms, median per-turn ratio), after `warmup` calls of ours."""
    first = time.perf_counter()
    for _ in range(warmup):
        ours()
    first = time.perf_counter() - first
    ref()
    ratios, ref_ms, ours_ms = [], [], []
    for _ in range(TURNS):
        times = []
        for fn in (ref, ours):
            time.sleep(0.2)  # PyTorch's OpenMP workers go idle
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        ref_ms.append(times[0] * 1e3)
        ours_ms.append(times[1] * 1e3)
        ratios.append(times[1] / times[0])
    return statistics.median(ref_ms), statistics.median(ours_ms), statistics.median(ratios)


def profile(row: str, train: bool) -> None:
    """The compiled step's HLO ops by time, from a JAX profiler trace."""
    import jax

    _, ours = _steps(row, train, "compile")
    for _ in range(4):
        ours()
    out = f"/tmp/bench_conv_profile_{os.getpid()}"
    with jax.profiler.trace(out):
        for _ in range(3):
            ours()
    print(f"profile written to {out} (open with TensorBoard / xprof)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rows", nargs="*", default=list(ROWS))
    parser.add_argument("--modes", nargs="*", default=list(MODES))
    parser.add_argument("--tasks", nargs="*", default=["inference", "train"])
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--xla-conv-only", action="store_true",
                        help="every convolution on XLA's kernel (Note [Convolutions with few output positions] off)")
    parser.add_argument("--torch-threads", type=int, default=None,
                        help="PyTorch's intra-op threads (default: its own choice, 2 here); on a loaded machine "
                             "its two threads wait on each other and one thread is often faster")
    args = parser.parse_args(argv)
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    if args.xla_conv_only:
        from xla_native_functions.lowerings import conv as lower_conv

        lower_conv.SMALL_OUTPUT_POSITIONS = 0
    if args.profile:
        for row in args.rows:
            profile(row, "train" in args.tasks)
        return 0
    print(f"{'row':<26} {'mode':<8} {'torch ms':>9} {'ours ms':>9} {'ratio':>7}")
    for row in args.rows:
        for task in args.tasks:
            for mode in args.modes:
                try:
                    ref, ours = _steps(row, task == "train", mode)
                    t_ref, t_ours, r = measure(ref, ours, warmup=4 if mode != "eager" else 1)
                except Exception as e:  # a failed mode says why and the rest still run
                    print(f"{row + '/' + task:<26} {mode:<8} failed: {type(e).__name__}: {str(e)[:160]}")
                    continue
                print(f"{row + '/' + task:<26} {mode:<8} {t_ref:>9.1f} {t_ours:>9.1f} {r:>6.2f}x", flush=True)
    print(f"ratio: median over {TURNS} turns of ours / PyTorch CPU eager in the same turn; "
          f"torch threads {torch.get_num_threads()}; load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
