"""What the analysis (`python -m xla_native_functions.analyze`, `xnf.analyze`) costs: the
training step of zoo models (scripts/zoo) in eager mode, timed plainly and under an
eager-mode analysis, interleaved turn by turn in one process; each ratio is the median
of the per-turn ratios of the two medians. Three clocks: the calling thread's CPU time
(eager ops are dispatched on it, and it is what the analysis adds to), the process's
CPU time (every thread: XLA's own included), both robust to other processes on a
shared machine, and wall time. Compilation is left out (warm-up steps run first, both
ways); the analysis's own first step (new signatures, decompositions) and building the
report are timed on their own.

    python scripts/bench_analyze.py                 # mlp and bert, small
    python scripts/bench_analyze.py --models mlp --size medium --turns 9
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

import xla_native_functions as xnf
from xla_native_functions.runtime.frontends import analysis_report
from xla_native_functions.runtime.frontends.analyze import Analysis, Options, _versions

sys.path.insert(0, str(Path(__file__).resolve().parent))
from zoo import MODELS, SGD_LR, SIZES  # noqa: E402


def training_step(name: str, size_name: str):
    torch.manual_seed(0)
    spec, size = MODELS[name], SIZES[size_name]
    case = spec.build(size.batch, size=size)
    model = xnf.to_xla(case.model)
    model.train()
    inputs, kwargs, target = xnf.to_xla((case.inputs, case.kwargs or {}, case.target))
    optimizer = torch.optim.SGD(model.parameters(), lr=SGD_LR)

    def step() -> float:
        optimizer.zero_grad()
        loss = case.loss_fn(model(*inputs, **kwargs), target)
        loss.backward()
        optimizer.step()
        return loss.item()  # the step's end: every op has run

    return step


def timed(step, calls: int) -> tuple[float, float, float]:
    """Median CPU time of the thread, of the process, and median wall time of one step."""
    cpu, process, wall = [], [], []
    for _ in range(calls):
        start, start_cpu, start_process = time.perf_counter(), time.thread_time(), time.process_time()
        step()
        cpu.append(time.thread_time() - start_cpu)
        process.append(time.process_time() - start_process)
        wall.append(time.perf_counter() - start)
    return statistics.median(cpu), statistics.median(process), statistics.median(wall)


def bench(name: str, size: str, turns: int, calls: int) -> dict:
    step = training_step(name, size)
    for _ in range(3):  # compile every executable of the step
        step()
    analysis = Analysis(Options(), name)
    analysis.start()
    try:
        first = timed(step, 1)  # the analysis's own first call (signatures, decompositions)
        step()
    finally:
        analysis.finish()
    cpu_ratios, process_ratios, wall_ratios = [], [], []
    eager_ms, analysed_ms, eager_wall, analysed_wall = [], [], [], []
    for _ in range(turns):
        plain = timed(step, calls)
        analysis.start()
        try:
            watched = timed(step, calls)
        finally:
            analysis.finish()
        eager_ms.append(plain[0] * 1e3)
        analysed_ms.append(watched[0] * 1e3)
        eager_wall.append(plain[2] * 1e3)
        analysed_wall.append(watched[2] * 1e3)
        cpu_ratios.append(watched[0] / plain[0])
        process_ratios.append(watched[1] / plain[1])
        wall_ratios.append(watched[2] / plain[2])
    start = time.perf_counter()
    report = analysis_report.build(analysis, _versions())
    report_s = time.perf_counter() - start
    return {
        "model": f"{name} ({size})",
        "ops per step": report["support"]["occurrences"]["total"] // max(analysis.optimizer_steps, 1),
        "eager ms": statistics.median(eager_ms),
        "analysed ms": statistics.median(analysed_ms),
        "eager wall ms": statistics.median(eager_wall),
        "analysed wall ms": statistics.median(analysed_wall),
        "cpu ratio": statistics.median(cpu_ratios),
        "process cpu ratio": statistics.median(process_ratios),
        "first analysed cpu ms": first[0] * 1e3,
        "wall ratio": statistics.median(wall_ratios),
        "report s": report_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="mlp,bert")
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--turns", type=int, default=7)
    parser.add_argument("--calls", type=int, default=5, help="steps per turn and way")
    args = parser.parse_args()
    rows = [bench(name, args.size, args.turns, args.calls) for name in args.models.split(",")]
    print("per step, medians: the thread's CPU time (cpu), the process's (process cpu) and wall time; ratios are "
          "analysed / eager, median over turns; first: the analysis's first step (thread cpu ms)")
    print("| model | ops/step | eager cpu ms | analysed cpu ms | cpu ratio | process cpu ratio | eager wall ms | "
          "analysed wall ms | wall ratio | first ms | report s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['model']} | {r['ops per step']} | {r['eager ms']:.2f} | {r['analysed ms']:.2f} | "
            f"{r['cpu ratio']:.2f} | "
            f"{r['process cpu ratio']:.2f} | {r['eager wall ms']:.2f} | {r['analysed wall ms']:.2f} | "
            f"{r['wall ratio']:.2f} | {r['first analysed cpu ms']:.1f} | {r['report s']:.3f} |"
        )


if __name__ == "__main__":
    main()
