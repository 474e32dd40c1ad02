"""Soak test: the runtime under load for a bounded time, every value checked against
PyTorch CPU, memory watched.

    python scripts/soak.py                 # 30 minutes
    python scripts/soak.py --minutes 1     # a quick run

Workers run side by side until the time is up:
  - train: a long compiled training loop (an MLP with BatchNorm, SGD with momentum,
    replayed by compile()), in lockstep with the same model on PyTorch CPU: every loss
    compared, the weights every 20 steps;
  - shapes: eager ops on ever-new input shapes, each result compared, so eager mode
    keeps compiling and its executable cache keeps evicting (config.eager_cache_bytes,
    --eager-cache-mb);
  - shared-small, shared-large: threads adding into one shared tensor (12 bytes, and
    2 MB whose buffer is donated) while others read it: every update must land, every
    read be a whole snapshot (Note [Threads and storages]);
  - generator: `python -m codegen.generate --out <tmpdir>` killed with SIGKILL after a
    random delay, then run again, which must succeed (and its output pass --check).
Every 10 seconds it prints RSS, the process's memory mappings and each worker's count.
It exits with 1 on a wrong value or an error in any worker, and on growth of RSS or
mappings past a budget from the baseline taken after warm-up (a quarter of the run, at
most 2 minutes); a crash ends the process with its signal.
"""

from __future__ import annotations

import argparse
import copy
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

import torch

import xla_native_functions as xnf
from xla_native_functions.runtime.platform.executable_cache import eager_executables

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from training_steps import batchnorm_mlp, training_step  # noqa: E402


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def mappings() -> int:
    with open("/proc/self/maps", "rb") as f:
        return sum(1 for _ in f)


class Soak:
    def __init__(self, deadline: float):
        self.deadline = deadline
        self.counts: dict[str, int] = {}
        self.failures: list[str] = []
        self.stop = threading.Event()

    def running(self) -> bool:
        return not self.stop.is_set() and time.monotonic() < self.deadline

    def count(self, name: str, n: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + n

    def fail(self, name: str, message: str) -> None:
        self.failures.append(f"{name}: {message}")
        self.stop.set()

    def worker(self, name: str, body) -> threading.Thread:
        def run():
            try:
                body(self, name)
            except BaseException:  # noqa: BLE001 - every error ends the soak
                self.fail(name, traceback.format_exc())

        self.counts[name] = 0
        t = threading.Thread(target=run, name=name, daemon=True)
        t.start()
        return t


def close(ours: torch.Tensor, ref: torch.Tensor, what: str, atol=1e-4, rtol=1e-4) -> None:
    got = xnf.to_torch(ours)
    if got.shape != ref.shape or got.dtype != ref.dtype or not torch.allclose(got, ref, atol=atol, rtol=rtol):
        raise AssertionError(f"{what}: got {got.flatten()[:6].tolist()} ({got.dtype}, {tuple(got.shape)}), expected "
                             f"{ref.flatten()[:6].tolist()} ({ref.dtype}, {tuple(ref.shape)})")


# ---------------------------------------------------------------- workers


def train(soak: Soak, name: str) -> None:
    ref = batchnorm_mlp(16, 64, 4)
    ours = xnf.to_xla(copy.deepcopy(ref))
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.01, momentum=0.9)
    opt = torch.optim.SGD(ours.parameters(), lr=0.01, momentum=0.9)
    ref_step, step = training_step(ref, ref_opt), xnf.compile(training_step(ours, opt))
    g = torch.Generator().manual_seed(1)
    i = 0
    while soak.running():
        x, y = torch.randn(32, 16, generator=g), torch.randint(0, 4, (32,), generator=g)
        close(step(xnf.to_xla(x), xnf.to_xla(y)), ref_step(x, y), f"loss of step {i}", atol=1e-4, rtol=1e-3)
        if i % 20 == 0:
            for (k, p), q in zip(ours.state_dict().items(), ref.state_dict().values()):
                close(p, q, f"{k} after step {i}", atol=1e-3, rtol=1e-3)
            # Two float32 implementations drift apart over thousands of steps (rounding
            # differences compound through momentum): start each stretch of 20 steps from
            # PyTorch's state, so every comparison covers 20 steps, not the whole run.
            with torch.no_grad():
                for p, q in zip(ours.state_dict().values(), ref.state_dict().values()):
                    p.copy_(q)
                for p, q in zip(ours.parameters(), ref.parameters()):
                    if "momentum_buffer" in ref_opt.state[q]:
                        opt.state[p]["momentum_buffer"].copy_(ref_opt.state[q]["momentum_buffer"])
        i += 1
        soak.count(name)


def shapes(soak: Soak, name: str) -> None:
    n = 1
    while soak.running():
        n += 1
        x = torch.linspace(-2, 2, 3 * n).reshape(n, 3)
        ours = xnf.to_xla(x)
        close(torch.tanh(ours * 2 + 1).sum(0), torch.tanh(x * 2 + 1).sum(0), f"tanh-sum of {n}x3")
        close(ours.t() @ ours, x.t() @ x, f"gram of {n}x3", atol=1e-3, rtol=1e-4)
        soak.count(name)


def shared(numel: int):
    def run(soak: Soak, name: str) -> None:
        writers, per_round = 3, 50
        x = xnf.to_xla(torch.zeros(numel))
        total = 0
        while soak.running():
            barrier = threading.Barrier(writers + 1)
            errors: list[BaseException] = []
            done = threading.Event()

            def write():
                try:
                    barrier.wait(60)
                    for _ in range(per_round):
                        x.add_(1)
                except BaseException as e:  # noqa: BLE001
                    errors.append(e)

            def read():
                try:
                    barrier.wait(60)
                    while not done.is_set():
                        v = xnf.to_torch(x[:: max(1, numel // 64)] * 1)
                        if not torch.equal(v, torch.full_like(v, v[0].item())):
                            raise AssertionError(f"a read saw part of a write: {v[:8].tolist()}")
                except BaseException as e:  # noqa: BLE001
                    errors.append(e)

            ts = [threading.Thread(target=write, daemon=True) for _ in range(writers)]
            reader = threading.Thread(target=read, daemon=True)
            for t in ts + [reader]:
                t.start()
            for t in ts:
                t.join(300)
            done.set()
            reader.join(300)
            if any(t.is_alive() for t in ts + [reader]):
                raise AssertionError("a thread did not finish in 300 s: deadlock")
            if errors:
                raise errors[0]
            total += writers * per_round
            close(x, torch.full((numel,), float(total)), f"{numel}-element tensor after {total} concurrent add_(1)")
            soak.count(name)

    return run


def generator(soak: Soak, name: str) -> None:
    rng = random.Random(0)
    with tempfile.TemporaryDirectory(prefix="soak-generate-") as tmp:
        out = Path(tmp) / "xla_native_functions"
        cmd = [sys.executable, "-m", "codegen.generate", "--out", str(out)]
        # how long a full run takes here: kills land before its end
        start = time.monotonic()
        first = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
        if first.returncode:
            raise AssertionError(f"the generator failed on its first run: {first.stderr[-2000:]}")
        full = time.monotonic() - start
        while soak.running():
            # its own process group: the generator's own children die with it
            child = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
            time.sleep(rng.uniform(0, full))
            try:
                os.killpg(child.pid, signal.SIGKILL)
            except ProcessLookupError:  # it had finished
                pass
            child.wait()
            again = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
            if again.returncode:
                raise AssertionError(
                    f"after a SIGKILL the next run failed ({again.returncode}): {again.stderr[-2000:]}"
                )
            check = subprocess.run(cmd + ["--check"], cwd=REPO, capture_output=True, text=True, timeout=600)
            if check.returncode:
                raise AssertionError(
                    f"the rerun's output is stale or damaged: {check.stdout[-1000:]}{check.stderr[-1000:]}"
                )
            soak.count(name)


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--eager-cache-mb", type=float, default=128,
                        help="config.eager_cache_bytes for the run, in MB (default 128)")
    parser.add_argument("--rss-growth-mb", type=float, default=512,
                        help="RSS growth allowed after warm-up, in MB (default 512)")
    parser.add_argument("--maps-growth", type=int, default=4000,
                        help="memory mappings the process may gain after warm-up (default 4000)")
    parser.add_argument("--no-generator", action="store_true", help="leave out the generator worker")
    args = parser.parse_args(argv)

    xnf.config.eager_cache_bytes = int(args.eager_cache_mb * 2**20)
    seconds = args.minutes * 60
    start = time.monotonic()
    soak = Soak(start + seconds)
    workers = {"train": train, "shapes": shapes, "shared-small": shared(3), "shared-large": shared(512 * 1024)}
    if not args.no_generator:
        workers["generator"] = generator
    threads = [soak.worker(name, body) for name, body in workers.items()]
    warm_up = min(seconds / 4, 120)
    baseline = None
    worst = (0.0, 0)

    def report(now: float) -> None:
        counts = ", ".join(f"{k} {v}" for k, v in soak.counts.items())
        print(
            f"[{now - start:7.1f}s] RSS {rss_mb():8.1f} MB, mappings {mappings():6d}, eager executables "
            f"{eager_executables.cached()} held, {eager_executables.evicted_executables} evicted | {counts}",
            flush=True,
        )

    next_report = start
    while soak.running():
        now = time.monotonic()
        if now >= next_report:
            report(now)
            next_report = now + 10
        if baseline is None and now - start >= warm_up:
            baseline = (rss_mb(), mappings())
            print(
                f"baseline after {warm_up:.0f}s warm-up: RSS {baseline[0]:.1f} MB, mappings {baseline[1]}", flush=True
            )
        if baseline is not None:
            growth = (rss_mb() - baseline[0], mappings() - baseline[1])
            worst = (max(worst[0], growth[0]), max(worst[1], growth[1]))
            if growth[0] > args.rss_growth_mb:
                soak.fail("memory", f"RSS grew {growth[0]:.1f} MB since warm-up (budget {args.rss_growth_mb} MB)")
            if growth[1] > args.maps_growth:
                soak.fail("memory", f"{growth[1]} more memory mappings since warm-up (budget {args.maps_growth})")
        time.sleep(0.5)
    soak.stop.set()
    for t in threads:
        t.join(600)
        if t.is_alive():
            soak.fail(t.name, "did not stop within 600 s of the end: deadlock")
    report(time.monotonic())
    print(f"largest growth after warm-up: RSS {worst[0]:.1f} MB, mappings {worst[1]}")
    idle = [k for k, v in soak.counts.items() if v == 0]
    if idle and not soak.failures:
        soak.fail("soak", f"workers that completed no round: {', '.join(idle)}")
    if soak.failures:
        print("FAILED")
        for f in soak.failures:
            print(f"  {f}")
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
