"""How close eager mode can get to PyTorch at all: the zoo's steps (scripts/zoo) timed
on PyTorch CPU, on a pass-through tensor subclass and on our eager mode, in one run.

    python scripts/bench_eager_floor.py                    # every model, small size
    python scripts/bench_eager_floor.py bert gpt2 --size medium

The pass-through subclass is the cheapest backend `__torch_dispatch__` allows: each op
unwraps its CPU tensors, runs PyTorch's own CPU kernel and wraps the result, with no
views, checks or state of its own. Whatever a Python tensor subclass does per op (ours
calls one cached XLA executable), it pays at least this: PyTorch's trip into Python,
one wrapper tensor per result, and the nn.Module and autograd code PyTorch runs anyway.
It lives on the CPU device, so the autograd engine takes its CPU paths (no device
guard), which if anything makes the floor lower than any accelerator device's.

Each ratio is the median over turns of two times measured in the same turn (each turn
at least two steps and about 0.1 s, after an untimed step), as in scripts/run_model.py.
The pass-through model's results are checked against PyTorch's before timing.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch
from torch.optim import optimizer as torch_optimizer
from torch.utils._pytree import tree_map

import xla_native_functions as xnf

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_model import TASKS, _tensors, zoo_step  # noqa: E402
from zoo import MODELS, SIZES  # noqa: E402

# Steady-state eager timings: every op signature compiled before its first call returns,
# not answered by PyTorch CPU while it compiles (first calls: scripts/bench_first_call.py).
xnf.config.first_calls_on_cpu = False

_make_wrapper_subclass = torch.Tensor._make_wrapper_subclass


class PassThroughTensor(torch.Tensor):
    """A CPU tensor behind `__torch_dispatch__`, doing nothing but unwrap and wrap."""

    elem: torch.Tensor
    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        unwrapped = [_unwrap_list(a) if a.__class__ is list else _unwrap(a) for a in args]
        out = func(*unwrapped, **{k: _unwrap(v) for k, v in kwargs.items()}) if kwargs else func(*unwrapped)
        if out.__class__ is torch.Tensor:
            return pass_through(out)
        if out.__class__ in (tuple, list):
            return out.__class__(pass_through(o) if o.__class__ is torch.Tensor else o for o in out)
        return out


def _unwrap(a: Any) -> Any:
    return a.elem if a.__class__ is PassThroughTensor else a


def _unwrap_list(a: list) -> list:
    return [_unwrap(x) for x in a]


def pass_through(elem: torch.Tensor) -> PassThroughTensor:
    r = _make_wrapper_subclass(
        PassThroughTensor,
        elem.shape,
        strides=elem.stride(),
        storage_offset=elem.storage_offset(),
        dtype=elem.dtype,
        device=elem.device,
    )
    r.elem = elem
    return r


# torch.optim takes its multi-tensor path only for the tensor types it lists, as for ours
# (Note [Foreach ops] in runtime/supported/foreach.py).
if PassThroughTensor not in torch_optimizer._foreach_supported_types:
    torch_optimizer._foreach_supported_types.append(PassThroughTensor)


def pass_through_module(module: torch.nn.Module) -> torch.nn.Module:
    for m in module.modules():
        for name, p in list(m._parameters.items()):
            if p is not None:
                m._parameters[name] = torch.nn.Parameter(pass_through(p.detach()), requires_grad=p.requires_grad)
        for name, b in list(m._buffers.items()):
            if b is not None:
                m._buffers[name] = pass_through(b)
    return module


def _turn(step: Callable[[], Any], seconds: float) -> float:
    step()
    calls, start = 0, time.perf_counter()
    while True:
        step()
        calls += 1
        elapsed = time.perf_counter() - start
        if calls >= 2 and elapsed >= seconds:
            return elapsed / calls


def measure(name: str, task: str, size: str = "small", turns: int = 7, seconds: float = 0.1) -> dict:
    """Step times of PyTorch CPU, the pass-through subclass and our eager mode on one
    zoo model, as ratios to PyTorch's; raises if the pass-through model's first result
    is not a PassThroughTensor or differs from PyTorch's."""
    spec, config = MODELS[name], SIZES[size]
    torch.manual_seed(0)
    case = spec.build(config.batch, attn=None, size=config) if spec.hf else spec.build(config.batch, size=config)
    case.model.train(task != "inference")
    inputs = (case.inputs, case.kwargs or {}, case.target)
    wrap = lambda t: pass_through(t) if isinstance(t, torch.Tensor) else t  # noqa: E731
    thin_model = pass_through_module(copy.deepcopy(case.model))
    thin = zoo_step(case, thin_model, tree_map(wrap, inputs), task)
    ours_step = zoo_step(case, xnf.to_xla(copy.deepcopy(case.model)), xnf.to_xla(inputs), task)
    ours = lambda: xnf.to_torch(_tensors(ours_step())[0])  # noqa: E731  (waits for the result)
    torch_step = zoo_step(case, case.model, inputs, task)

    expected, got = _tensors(torch_step())[0], _tensors(thin())[0]
    if not isinstance(got, PassThroughTensor):  # the step ran on plain tensors: no floor measured
        raise TypeError(f"{name} {task}: the pass-through model returned a {type(got).__name__}")
    torch.testing.assert_close(got.elem, expected, rtol=1e-5, atol=1e-6)
    for step in (torch_step, thin, ours):
        for _ in range(2):
            step()
    ratios_thin, ratios_ours, torch_times = [], [], []
    for _ in range(turns):
        time.sleep(0.02)  # PyTorch's OpenMP workers spin after its last op (docs/performance.md)
        t_torch, t_thin, t_ours = _turn(torch_step, seconds), _turn(thin, seconds), _turn(ours, seconds)
        ratios_thin.append(t_thin / t_torch)
        ratios_ours.append(t_ours / t_torch)
        torch_times.append(t_torch)
    return {"model": name, "task": task, "size": size, "torch_ms": statistics.median(torch_times) * 1e3,
            "pass_through": statistics.median(ratios_thin), "ours": statistics.median(ratios_ours)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", default=list(MODELS), help=f"from {', '.join(MODELS)}")
    parser.add_argument("--size", default="small", choices=list(SIZES))
    parser.add_argument("--tasks", default=",".join(TASKS), help=f"comma-separated, from {','.join(TASKS)}")
    parser.add_argument("--turns", type=int, default=7)
    args = parser.parse_args(argv)
    unknown = [m for m in args.models if m not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    tasks = args.tasks.split(",")
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        parser.error(f"unknown task(s) {', '.join(unknown)}; choose from {', '.join(TASKS)}")
    print(f"torch {torch.__version__}, {args.size} zoo configurations; step time over PyTorch CPU eager's")
    print("| model | task | torch ms | pass-through subclass | ours, eager | ours over pass-through |")
    print("|---|---|---:|---:|---:|---:|")
    rows = []
    for name in args.models:
        for task in tasks:
            r = measure(name, task, args.size, args.turns)
            rows.append(r)
            print(f"| {name} | {task} | {r['torch_ms']:.2f} | {r['pass_through']:.2f}x | {r['ours']:.2f}x | "
                  f"{r['ours'] / r['pass_through']:.2f}x |", flush=True)
    within = sum(r["pass_through"] <= 3 for r in rows)
    print(f"pass-through subclass: {min(r['pass_through'] for r in rows):.2f}x to "
          f"{max(r['pass_through'] for r in rows):.2f}x, {within} of {len(rows)} within 3x; "
          f"ours: {min(r['ours'] for r in rows):.2f}x to {max(r['ours'] for r in rows):.2f}x, "
          f"{sum(r['ours'] <= 3 for r in rows)} of {len(rows)} within 3x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
