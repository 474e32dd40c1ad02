"""Run a model of the zoo (scripts/zoo) on PyTorch CPU and on xla_native_functions with
the same weights and inputs, and report numerics, timings, compiles and CPU fallbacks.

    python scripts/run_model.py bert                          # eager inference
    python scripts/run_model.py resnet --mode compiled --train --optimizer adamw
    python scripts/run_model.py --all                         # sweep -> docs/reports/models.md, .json
    python scripts/run_model.py --all --shard 1/3 --resume    # a third, keeping earlier results
    python scripts/run_model.py --report [--size medium]      # rewrite the Markdown from the JSON twin

Modes: `eager` (each op at once), `compiled` (the whole step, forward, backward and
optimizer step, through xla_native_functions.compile), `dynamo` (torch.compile with
the backend named DYNAMO_BACKEND; reported as unavailable until it is registered).

Unlisted ops run on PyTorch CPU (config.allow_cpu_fallback) so a model runs end to end
while its ops are being added; the report names every op that fell back.
Timings are medians of steady-state steps; the ratio against PyTorch CPU eager is the
median over turns of the two step times measured in the same turn, so load on the
machine shows up in both. First-call times are cold starts: the persistent compilation
cache is off here (XLA_NATIVE_FUNCTIONS_NO_COMPILATION_CACHE=0 turns it on; Note
[Persistent compilation cache] in runtime/platform/backend.py).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import json
import os
import statistics
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

import torch
import torch._dynamo
from torch.utils._pytree import tree_map

if __name__ == "__main__":  # cold first calls (docstring); the tests import this module
    os.environ.setdefault("XLA_NATIVE_FUNCTIONS_NO_COMPILATION_CACHE", "1")
import xla_native_functions as xnf  # noqa: E402
from xla_native_functions.runtime.platform.metrics import fold_replayed_ops, metrics  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from zoo import ADAMW_LR, MODELS, SGD_LR, SIZES  # noqa: E402

# The comparisons test our lowerings: no first call is answered by PyTorch's own kernel
# (config.first_calls_on_cpu; Note [First calls on PyTorch CPU] in runtime/exec/first_call.py).
xnf.config.first_calls_on_cpu = False

# The torch.compile backend this project registers (an entry point: needs the package installed); runs in
# --mode dynamo report "backend not available" until torch._dynamo lists it.
DYNAMO_BACKEND = "xla_native"

MODES = ("eager", "compiled", "dynamo")
TASKS = ("inference", "train-sgd", "train-adamw")
REPORTS = Path(__file__).resolve().parent.parent / "docs" / "reports"
# A timed turn lasts about TURN_SECONDS, in calls of the step's fastest of CALIBRATION_CALLS
# single calls before the turns,
# and is at least MIN_CALLS_PER_TURN calls: the first calls after a pause run slower
# (XLA's and PyTorch's worker threads asleep, caches cold), and a training loop runs its
# steps back to back. Turns of 20 ms put the medium MLP's compiled SGD step at 1.00x and
# 1.14x of PyTorch, turns of 100 ms at 0.77x and 0.91x.
TURN_SECONDS = 0.1
MIN_CALLS_PER_TURN = 2
MAX_CALLS_PER_TURN = 1000
CALIBRATION_CALLS = 3  # single calls timed to size the turns, the fastest taken
WARMUP_CALLS = 4  # calls before the steady state: the first traces and compiles; AdamW's
# first step also creates its state, so its second step is a different graph; compile()
# replays a call once two consecutive traces agree (Note [Replay] in runtime/frontends/replay.py).


# ---------------------------------------------------------------- helpers


def _tensors(obj: Any) -> list[torch.Tensor]:
    """The tensors of a model output (tensors, tuples, dicts, ModelOutput), in order."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in _tensors(v)]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in _tensors(v)]
    return []


def _as_cpu(t: torch.Tensor) -> torch.Tensor:
    return xnf.to_torch(t).detach()


# Note [AdamW weight check]
# AdamW's step is about lr * sign(grad) for a gradient near zero (Note [Zoo tolerances]
# in scripts/zoo/__init__.py), so wherever an element's gradient is near zero in some
# step, a last-bit difference in it moves that weight by up to 2 * lr, in any
# implementation. Two cases occur in the zoo:
# - A few elements: PyTorch's own float32 training of the medium ResNet ends 9.8e-6
#   from its float64 training in a convolution weight, 2e-7 in most tensors. A tensor
#   passes with at most OUTLIER_FRACTION of its elements (at least one) beyond the
#   float32 tolerance, each within 2 * lr per step; a wrong update moves every element.
# - A whole tensor: the gradient of an attention layer's key bias is zero in exact
#   arithmetic (softmax ignores a shift shared by all of a query's scores), so its
#   float32 gradient is rounding noise, and AdamW moves it by noise / (|noise| + eps) *
#   lr per step. Such a tensor passes if it is no farther from PyTorch's float64
#   training (same initial weights, inputs and steps) than F64_FACTOR times PyTorch's
#   float32 result is, plus atol: as close to exact arithmetic as PyTorch itself.
# - Rows of a tensor: a ReLU input near zero in exact arithmetic lands on either side
#   after rounding, which switches that unit's whole gradient row on or off, and AdamW
#   turns the difference into steps of up to lr. PyTorch's float32 training is then
#   only one of the equally good results: in the medium T5's compiled AdamW row, 422
#   elements in 17 rows of a decoder FFN weight differ from PyTorch beyond tolerance,
#   1.5e-3 from float64 where PyTorch is 4.1e-4; PyTorch's own float32 training started
#   from weights one ulp apart differs from it in 368 elements, in 15 of those 17 rows,
#   also 1.5e-3 from float64. So the float64 bound above is the larger of the two
#   PyTorch float32 trainings' distances, the second one computed only when needed.
# - Elements whose exact gradient is zero, when the float64 bound is missed anyway: the
#   key bias above is a random walk of up to lr per step, and the small zoo
#   transformer's dynamo AdamW row ends 1.8e-3 from float64 in a decoder key bias where
#   PyTorch's float32 is 8.2e-4 (its 12 elements beyond tolerance all in the key slice,
#   the query and value biases within 1e-8 of PyTorch). A tensor passes when every
#   element beyond the tolerance is one that PyTorch's float64 training leaves in place
#   (moved by at most STILL_FRACTION of 2 * lr * steps from the initial weights: weight
#   decay alone) and is within 2 * lr per step of PyTorch; a real gradient moves an
#   element by about lr per step.
OUTLIER_FRACTION = 1e-3
F64_FACTOR = 2.0
STILL_FRACTION = 0.02


def compare(ours: list[torch.Tensor], ref: list[torch.Tensor], rtol: float, atol: float,
            names: list[str] | None = None, adamw: tuple[float, Any, Any] | None = None) -> dict:
    """max |ours - ref|, max |ours - ref| / (|ref| + atol), and whether every element is
    within atol + rtol * |ref| (torch.testing.assert_close's rule) with equal shapes and
    dtypes. `adamw` = (2 * lr * steps, functions giving PyTorch's float64 weights and its
    float32 weights trained from initial weights one ulp apart[, a function giving the
    initial weights]) admits the weights of Note [AdamW weight check]; `outliers` counts
    the elements admitted as few, `float64_checked` the tensors admitted against float64."""
    result = {"close": False, "max_abs": None, "max_rel": None, "outliers": 0, "float64_checked": []}
    if len(ours) != len(ref):
        return {**result, "why": f"{len(ours)} tensors, expected {len(ref)}"}
    max_abs = max_rel = 0.0
    why = None
    for k, (a, b) in enumerate(zip(ours, ref)):
        i = names[k] if names else k
        arbitrated = ""  # the float64 distances of a tensor the AdamW check did not admit
        a = _as_cpu(a)
        b = b.detach()
        if a.shape != b.shape or a.dtype != b.dtype:
            why = why or f"tensor {i}: {tuple(a.shape)} {a.dtype}, expected {tuple(b.shape)} {b.dtype}"
            continue
        if a.numel() == 0:
            continue
        if not b.is_floating_point():
            if not torch.equal(a, b):
                why = why or f"tensor {i}: integer values differ"
            continue
        a64, b64 = a.double(), b.double()
        diff = (a64 - b64).abs()
        nan_mismatch = a64.isnan() != b64.isnan()
        diff = torch.where(a64.isnan() & b64.isnan(), torch.zeros_like(diff), diff)
        max_abs = max(max_abs, diff.max().item())
        max_rel = max(max_rel, (diff / (b64.abs() + atol)).max().item())
        beyond = nan_mismatch | ~(diff <= atol + rtol * b64.abs())
        n = int(beyond.sum())
        if not n:
            continue
        if adamw is not None and not nan_mismatch.any():
            bound, float64_weights, nudged_weights, *initial_weights = adamw
            if n <= max(1, int(b.numel() * OUTLIER_FRACTION)) and diff[beyond].max().item() <= bound:
                result["outliers"] += n
                continue
            exact = float64_weights()[k]
            ours_err, torch_err = (a64 - exact).abs().max().item(), (b64 - exact).abs().max().item()
            if ours_err <= F64_FACTOR * torch_err + atol:
                result["float64_checked"].append(f"{i}: {ours_err:.1e} from float64, PyTorch float32 {torch_err:.1e}")
                continue
            nudged_err = (nudged_weights()[k].double() - exact).abs().max().item()
            if ours_err <= F64_FACTOR * max(torch_err, nudged_err) + atol:
                result["float64_checked"].append(f"{i}: {ours_err:.1e} from float64, PyTorch float32 {torch_err:.1e}, "
                                                 f"from weights one ulp apart {nudged_err:.1e}")
                continue
            if initial_weights:
                moved = (exact - initial_weights[0]()[k].double()).abs()
                if bool((moved[beyond] <= STILL_FRACTION * bound).all()) and diff[beyond].max().item() <= bound:
                    result["float64_checked"].append(
                        f"{i}: {n} elements beyond tolerance, each left in place by float64 training (a zero "
                        f"gradient in exact arithmetic) and within 2 * lr per step; {ours_err:.1e} from float64, "
                        f"PyTorch float32 {torch_err:.1e}")
                    continue
            arbitrated = (f" (ours {ours_err:.1e} from float64, PyTorch float32 {torch_err:.1e}, "
                          f"from weights one ulp apart {nudged_err:.1e})")
        why = why or (f"tensor {i} {tuple(b.shape)} beyond rtol={rtol} atol={atol} in {n} of {b.numel()} elements"
                      + arbitrated)
    return {**result, "close": why is None, "max_abs": max_abs, "max_rel": max_rel, "why": why}


def _one_ulp_apart(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of `model` whose floating-point parameters each moved one ulp up or down
    (a fixed random choice per element)."""
    model = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point():
                up = torch.randint(0, 2, p.shape, generator=generator, dtype=torch.bool)
                p.copy_(torch.nextafter(p, torch.where(up, torch.inf, -torch.inf).to(p.dtype)))
    return model


def _as_float64(x: Any) -> Any:
    return x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x


def _eager_executable_compiles() -> int:
    """Executables compiled so far by the per-op eager path (every jax.jit the generated
    stubs and the view helpers own)."""
    import xla_native_functions.dispatch as stubs
    from xla_native_functions.runtime.core import views
    from xla_native_functions.runtime.exec import eager

    fns = [getattr(stubs, n) for n in dir(stubs) if n.startswith("_eager_")]
    fns += list(eager._EXECUTABLES.values()) + [views.strided_read_jit, views.strided_write_jit]
    return sum(f._cache_size() for f in fns if hasattr(f, "_cache_size"))


def _dynamo_stats() -> Any:
    from xla_native_functions.runtime.frontends import dynamo

    return dynamo.stats


def _compiles(mode: str) -> int:
    if mode == "dynamo":
        return _dynamo_stats().traces  # JAX functions traced and compiled by the backend
    return metrics.compile_count if mode == "compiled" else _eager_executable_compiles()


def _fallback_counts(mode: str) -> dict[str, int]:
    if mode == "dynamo":  # nodes the backend left to PyTorch CPU, splitting its graphs
        return {str(op): n for op, n in _dynamo_stats().split_ops.items()}
    # runs of graphs replayed before now count now, not when the garbage collector drops
    # those graphs inside the measured window (Note [Counting replayed ops])
    fold_replayed_ops()
    return {str(op).removeprefix("aten."): n for op, n in metrics.fallback_calls.items()}


def _fresh_caches() -> None:
    """Forget every compiled executable, so each run's first call and compile counts are
    its own even when a sweep runs many models in one process."""
    import jax

    from xla_native_functions.runtime.exec import graph

    jax.clear_caches()
    graph._GRAPH_CACHE.clear()
    graph._LAST_KEYS.clear()  # or the first compile reports a "recompile" against the last run


def dynamo_available() -> bool:
    import torch._dynamo

    return DYNAMO_BACKEND in torch._dynamo.list_backends(exclude_tags=())


def _short_error(e: BaseException) -> str:
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {msg[:300]}"


def _where(e: BaseException) -> str:
    """The innermost frame of the traceback outside torch internals, for the report."""
    frames = traceback.extract_tb(e.__traceback__)
    for f in reversed(frames):
        if "/torch/" not in f.filename or "/torch/nn/modules/" in f.filename:
            return f"{Path(f.filename).name}:{f.lineno} ({f.name})"
    return ""


# ---------------------------------------------------------------- one run


def zoo_step(case: Any, model: torch.nn.Module, inputs: tuple, task: str, capturable: bool = False) -> Any:
    """One step of `task` (TASKS) on `model` with `inputs` = (args, kwargs, target):
    inference under no_grad (inference_mode if the case asks for it), or a training step
    returning its loss."""
    args, kw, target = inputs
    if task == "inference":
        grad_mode = torch.inference_mode if case.inference_mode else torch.no_grad

        def infer():
            with grad_mode():
                return model(*args, **kw)
        return infer
    if task == "train-sgd":
        opt = torch.optim.SGD(model.parameters(), lr=SGD_LR)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=ADAMW_LR, weight_decay=0.01, capturable=capturable)

    def train_step():
        opt.zero_grad()
        loss = case.loss_fn(model(*args, **kw), target)
        loss.backward()
        opt.step()
        return loss.detach()
    return train_step


def run(
    name: str,
    mode: str = "eager",
    train: bool = False,
    optimizer: str = "sgd",
    batch: int | None = None,
    steps: int = 6,
    timed: int = 5,
    attn: str | None = None,
    seed: int = 0,
    allow_fallback: bool = True,
    inductor: bool = False,
    size: str = "small",
) -> dict:
    """One model, one mode, inference or `steps` training steps; returns the record the
    report prints (see `format_record`). `inductor`: in dynamo mode, also time
    torch.compile's default backend on the same model."""
    spec = MODELS[name]
    config = SIZES[size]
    batch = batch or config.batch
    task = f"train-{optimizer}" if train else "inference"
    rec: dict[str, Any] = {
        "model": name,
        "mode": mode,
        "task": task,
        "attn": attn,
        "size": size,
        "batch": batch,
        "steps": steps if train or mode == "compiled" else 1,
        "status": "ok",
        "fallbacks": {},
        "recompile_reasons": [],
    }
    if mode == "dynamo" and not dynamo_available():
        rec["status"] = "unavailable"
        rec["error"] = f"backend not available: torch.compile backend {DYNAMO_BACKEND!r} is not registered"
        return rec

    _fresh_caches()
    fallback_setting = xnf.config.allow_cpu_fallback
    xnf.config.allow_cpu_fallback = allow_fallback
    torch.manual_seed(seed)
    case = spec.build(batch, attn=attn, size=config) if spec.hf else spec.build(batch, size=config)
    ref_model = case.model
    ref_model.train(train)
    initial_model = copy.deepcopy(ref_model) if train and optimizer == "adamw" else None
    kwargs = case.kwargs or {}
    ref_in = (case.inputs, kwargs, case.target)
    inductor_step = None
    dynamo_settings = contextlib.ExitStack()
    if mode == "dynamo":
        # The backend takes CPU modules and tensors, like inductor, which is timed
        # alongside as the baseline torch.compile users know.
        torch._dynamo.reset()
        # Dynamo leaves nn.RNN/LSTM/GRU out of its graphs (they run eagerly, on the CPU)
        # unless told to trace them.
        dynamo_settings.enter_context(torch._dynamo.config.patch(allow_rnn=True))
        ours_model = copy.deepcopy(ref_model)
        ours_in = copy.deepcopy(ref_in)
        inductor_model, inductor_in = copy.deepcopy(ref_model), copy.deepcopy(ref_in)
    else:
        ours_model = xnf.to_xla(copy.deepcopy(ref_model))
        ours_in = xnf.to_xla(ref_in)
    tol = spec.tolerance

    def make_step(model, inputs, capturable=False):
        return zoo_step(case, model, inputs, task, capturable)

    ref_step = make_step(ref_model, ref_in)
    ours_model_for_step = ours_model
    if mode == "dynamo":
        ours_model_for_step = torch.compile(ours_model, backend=DYNAMO_BACKEND)
    # Default AdamW keeps its step counter on the CPU and reads it with .item() every step,
    # so compile() would trace every call; capturable=True keeps it on our device.
    ours_step = make_step(ours_model_for_step, ours_in, capturable=mode == "compiled")
    if mode == "compiled":
        ours_step = xnf.compile(ours_step)
    if mode == "dynamo" and inductor:
        inductor_step = make_step(torch.compile(inductor_model), inductor_in)

    def sync(out):
        # Forces the result on the host, so a timing includes the work.
        return [_as_cpu(t) for t in _tensors(out)]

    def kinds(out):
        # Inference tensors or normal ones (torch.inference_mode() makes the former), before
        # sync's copies to the CPU, which are normal tensors.
        return [t.is_inference() for t in _tensors(out)]

    fallbacks_before = _fallback_counts(mode)
    notes_before = len(metrics.replay_notes)
    reasons_before = len(metrics.recompile_reasons)
    compiles_before = _compiles(mode)
    # compile() replays a step from its fourth call on (Note [Replay]): compare replayed
    # calls too, inference included.
    n_calls = steps if train or mode == "compiled" else 1
    replays_before = metrics.replays
    phase = "first call"
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*not lowered to JAX.*")
            warnings.filterwarnings("ignore", message=".*Torch was not compiled with flash attention.*")
            start = time.perf_counter()
            out = ours_step()
            ours_outs = [sync(out)]
            rec["first_call_s"] = time.perf_counter() - start
            rec["compiles_first_call"] = _compiles(mode) - compiles_before
            ours_kinds = [kinds(out)]
            phase = "steps"
            for _ in range(n_calls - 1):
                out = ours_step()
                ours_outs.append(sync(out))
                ours_kinds.append(kinds(out))
            ref_outs, ref_kinds = [], []
            for _ in range(n_calls):
                out = ref_step()
                ref_outs.append(sync(out))
                ref_kinds.append(kinds(out))
            out = None
            if not train:
                rec["grad_mode"] = "inference_mode" if case.inference_mode else "no_grad"
            if mode == "compiled":
                rec["replayed_compared"] = f"{metrics.replays - replays_before}/{n_calls}"

            phase = "compare"
            if train:
                ref_state = ref_model.state_dict()
                ours_state = ours_model.state_dict()
                adamw = losses_adamw = None
                if optimizer == "adamw":
                    def trained(model, inputs):  # (the losses, the weights) after the compared steps
                        step = make_step(model, inputs)
                        losses = [step() for _ in range(n_calls)]
                        return losses, [model.state_dict()[k] for k in ref_state]

                    float64_run = functools.cache(
                        lambda: trained(copy.deepcopy(initial_model).double(), tree_map(_as_float64, ref_in)))
                    nudged_run = functools.cache(lambda: trained(_one_ulp_apart(initial_model), ref_in))
                    initial = [initial_model.state_dict()[k] for k in ref_state]
                    adamw = (2 * ADAMW_LR * n_calls, lambda: float64_run()[1], lambda: nudged_run()[1],
                             lambda: initial)
                    # Weights that AdamW moved apart (Note [AdamW weight check]) give later losses
                    # that differ as much: those are held to float64 in the same way.
                    losses_adamw = (0.0, lambda: float64_run()[0], lambda: nudged_run()[0])
                rtol, atol = tol.loss
                rec["loss"] = compare([t for o in ours_outs for t in o], [t for o in ref_outs for t in o], rtol, atol,
                                      adamw=losses_adamw)
                rec["losses"] = [o[0].item() for o in ref_outs]
                rtol, atol = tol.weights_sgd if optimizer == "sgd" else tol.weights_adamw
                rec["weights"] = compare([ours_state[k] for k in ref_state], list(ref_state.values()), rtol, atol,
                                         names=list(ref_state), adamw=adamw)
                checks = [rec["loss"], rec["weights"]]
            else:
                rtol, atol = tol.output
                rec["output"] = compare([t for o in ours_outs for t in o], [t for o in ref_outs for t in o], rtol, atol)
                checks = [rec["output"]]
            # every call returns what PyTorch CPU returns: inference tensors under inference_mode
            wrong_kind = [i for i, (a, b) in enumerate(zip(ours_kinds, ref_kinds)) if a != b]
            checks.append({"close": not wrong_kind, "why": wrong_kind and (
                f"call {wrong_kind[0] + 1}: inference tensors {ours_kinds[wrong_kind[0]]}, "
                f"PyTorch CPU {ref_kinds[wrong_kind[0]]}")})
            rec["max_abs"] = max((c.get("max_abs") or 0.0) for c in checks)
            rec["max_rel"] = max((c.get("max_rel") or 0.0) for c in checks)
            if not all(c["close"] for c in checks):
                rec["status"] = "mismatch"
                rec["error"] = "; ".join(c["why"] for c in checks if c["why"])

            phase = "timing"
            # Eager first calls ran on PyTorch CPU while their executables compiled in the
            # background (config.first_calls_on_cpu): time the steady state once they are in,
            # after one call that takes them (and refills JAX's dispatch caches).
            xnf.wait_for_background_compiles()
            if mode == "eager":
                sync(ours_step())
            for _ in range(max(0, WARMUP_CALLS - n_calls)):
                sync(ours_step())
            if inductor_step is not None:
                for _ in range(WARMUP_CALLS):
                    sync(inductor_step())
            # Ours and PyTorch's steps take turns, so both see the same machine load. Each
            # turn starts after a pause and one untimed call (PyTorch's OpenMP workers keep
            # spinning after its last op and slow whatever runs next) and times enough calls
            # to last about TURN_SECONDS.
            turns = {"ours": ours_step, "torch": ref_step}
            if inductor_step is not None:
                turns["inductor"] = inductor_step
            steady_before = _compiles(mode)
            replays_before = metrics.replays
            calls = {}
            for name, step in turns.items():
                # the fastest of a few calls: the first after the comparison may pay once
                # for what the comparison left (copies of donated buffers it read, their
                # executables compiled), which would leave turns of two calls
                once = []
                for _ in range(CALIBRATION_CALLS):
                    start = time.perf_counter()
                    sync(step())
                    once.append(time.perf_counter() - start)
                calls[name] = max(MIN_CALLS_PER_TURN, min(MAX_CALLS_PER_TURN, int(TURN_SECONDS / min(once))))
            per_call: dict[str, list[float]] = {name: [] for name in turns}
            for _ in range(timed):
                for name, step in turns.items():
                    time.sleep(0.02)
                    sync(step())
                    start = time.perf_counter()
                    for _ in range(calls[name]):
                        sync(step())
                    per_call[name].append((time.perf_counter() - start) / calls[name])
            rec["compiles_steady"] = _compiles(mode) - steady_before
            if mode == "compiled":
                ours_calls = CALIBRATION_CALLS + timed * (1 + calls["ours"])
                rec["replayed_steps"] = f"{metrics.replays - replays_before}/{ours_calls}"
            rec["step_ms"] = statistics.median(per_call["ours"]) * 1e3
            rec["torch_step_ms"] = statistics.median(per_call["torch"]) * 1e3
            rec["ratio"] = statistics.median(a / b for a, b in zip(per_call["ours"], per_call["torch"]))
            inductor_times = per_call.get("inductor")
            if inductor_times:
                rec["inductor_step_ms"] = statistics.median(inductor_times) * 1e3
    except Exception as e:  # noqa: BLE001 - every failure is a result to report
        rec["status"] = "error"
        rec["error"] = f"{phase}: {_short_error(e)}"
        rec["where"] = _where(e)
    finally:
        xnf.config.allow_cpu_fallback = fallback_setting
        dynamo_settings.close()
    rec["compiles"] = _compiles(mode) - compiles_before
    rec["fallbacks"] = {
        op: n - fallbacks_before.get(op, 0)
        for op, n in sorted(_fallback_counts(mode).items())
        if n != fallbacks_before.get(op, 0)
    }
    rec["recompile_reasons"] = metrics.recompile_reasons[reasons_before:][:10]
    if mode == "compiled":
        rec["replay_notes"] = [n.split(": ", 1)[-1] for n in metrics.replay_notes[notes_before:]]
    lost = [op for op in rec["fallbacks"] if _mutates(op)]
    if lost:
        rec["note"] = ("ops that write into their arguments fell back to CPU and their writes were lost "
                       f"(runtime bug): {', '.join(lost)}")
    return rec


def _mutates(op: str) -> bool:
    """Whether an aten op (as metrics name it, `addcdiv_.default`) writes into an argument."""
    name, _, overload = op.partition(".")
    try:
        schema = getattr(getattr(torch.ops.aten, name), overload or "default")._schema
    except (AttributeError, RuntimeError):
        return False
    if name in _UNANNOTATED_WRITES:
        return True
    return any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)


# Ops that update an argument although their schema does not mark it as written.
_UNANNOTATED_WRITES = {"native_batch_norm"}  # running_mean / running_var in training


# ---------------------------------------------------------------- printing


def _fmt(x: Any, spec: str) -> str:
    return "-" if x is None else format(x, spec)


_COMPILE_UNIT = {"eager": "per-op executables", "compiled": "graphs", "dynamo": "JAX functions of the backend"}


def format_record(rec: dict) -> str:
    lines = [
        f"{rec['model']} [{rec['mode']}, {rec['task']}{', attn=' + rec['attn'] if rec.get('attn') else ''}, "
        f"batch {rec['batch']}, {rec['steps']} step(s)]",
        f"  status:            {rec['status']}" + (f" ({rec['error']})" if rec.get("error") else ""),
    ]
    if rec.get("where"):
        lines.append(f"  raised at:         {rec['where']}")
    if rec.get("note"):
        lines.append(f"  note:              {rec['note']}")
    if rec["status"] == "unavailable":
        return "\n".join(lines)
    what = "losses and updated weights/buffers" if rec["task"] != "inference" else "outputs"
    if rec.get("grad_mode"):
        what += f", under torch.{rec['grad_mode']}()"
    weights = rec.get("weights") or {}
    if weights.get("outliers"):
        what += f"; {weights['outliers']} weight elements beyond the tolerance, within 2 * lr per step"
    if weights.get("float64_checked"):
        what += "; checked against float64: " + ", ".join(weights["float64_checked"])
    lines += [
        f"  max abs / rel diff: {_fmt(rec.get('max_abs'), '.2e')} / {_fmt(rec.get('max_rel'), '.2e')} ({what})",
        f"  first call:        {_fmt(rec.get('first_call_s'), '.2f')} s (tracing and compiling included)",
        f"  steady step:       {_fmt(rec.get('step_ms'), '.2f')} ms vs torch CPU eager "
        f"{_fmt(rec.get('torch_step_ms'), '.2f')} ms "
        f"-> {_fmt(rec.get('ratio'), '.2f')}x"
        + (f"; inductor {_fmt(rec['inductor_step_ms'], '.2f')} ms" if rec.get("inductor_step_ms") else ""),
        f"  compiles:          {rec.get('compiles')} ({_COMPILE_UNIT[rec['mode']]}; "
        f"first call {rec.get('compiles_first_call', '-')}, steady state {rec.get('compiles_steady', '-')})",
    ]
    if rec.get("replayed_steps"):
        lines.append(f"  replayed:          {rec.get('replayed_compared', '-')} compared and {rec['replayed_steps']} "
                     "steady-state steps ran without tracing"
                     + (f" ({'; '.join(rec['replay_notes'])})" if rec.get("replay_notes") else ""))
    if rec["recompile_reasons"]:
        lines.append("  recompile reasons: " + "; ".join(rec["recompile_reasons"][:5]))
    fb = rec["fallbacks"]
    lines.append("  CPU fallbacks:     " + (", ".join(f"{op} x{n}" for op, n in fb.items()) if fb else "none"))
    return "\n".join(lines)


# ---------------------------------------------------------------- sweep


def _key(rec: dict) -> str:
    return f"{rec['model']}/{rec['mode']}/{rec['task']}/{rec.get('attn') or 'default'}"


def sweep_plan(size: str = "small") -> list[dict]:
    """Every model x mode x task; the small size also runs eager attention, and the
    medium one skips the Dynamo backend (inductor's compile time dominates there)."""
    attn_variants = size == "small"
    plan = []
    for name, spec in MODELS.items():
        for mode in MODES if size == "small" else ("eager", "compiled"):
            for task in TASKS:
                plan.append({"name": name, "mode": mode, "train": task != "inference",
                             "optimizer": task.removeprefix("train-") if task != "inference" else "sgd", "attn": None})
        if spec.hf and attn_variants:
            # The library default is sdpa; eager attention is the other choice users make.
            for mode in ("eager", "compiled"):
                for task in ("inference", "train-adamw"):
                    plan.append({"name": name, "mode": mode, "train": task != "inference",
                                 "optimizer": "adamw", "attn": "eager"})
    return plan


def _summary_rows(records: list[dict]) -> list[str]:
    rows = []
    for mode in MODES:
        ratios = sorted(r["ratio"] for r in records if r["mode"] == mode and r.get("ratio") and not r.get("attn"))
        if ratios:
            rows.append(f"| {mode} | {len(ratios)} | {ratios[0]:.2f}x to {ratios[-1]:.2f}x | "
                        f"{sum(x <= 1 for x in ratios)} | {sum(x <= 3 for x in ratios)} |")
    return rows


def report_paths(size: str) -> tuple[Path, Path]:
    stem = "models" if size == "small" else f"models-{size}"
    return REPORTS / f"{stem}.json", REPORTS / f"{stem}.md"


def write_docs(records: list[dict], size: str = "small") -> None:
    from zoo import MODELS as models

    json_path, md_path = report_paths(size)
    REPORTS.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(records, indent=1, sort_keys=True) + "\n")
    config = SIZES[size]
    size_flag = "" if size == "small" else f" --size {size}"
    out = [
        f"Generated by `python scripts/run_model.py --all{size_flag}` (rebuild from the JSON twin: "
        f"`python scripts/run_model.py --report{size_flag}`); do not edit.",
        "",
        "# Model zoo" + ("" if size == "small" else f", {size} configurations"),
        "",
        f"Configurations (`--size {size}`, `scripts/zoo/common.py`): hidden size {config.width}, {config.layers} "
        "layers, "
        f"{config.heads} heads, {config.seq} tokens, {config.image}x{config.image} images, batch {config.batch}."
        + (
            " Medium configurations, closer to real work: `docs/reports/models-medium.md`."
            if size == "small"
            else " The small configurations, which CI runs and which measure per-op overhead: `docs/reports/models.md`."
            " Tolerances are the small configurations'."
        ),
        "",
        "Models: `scripts/zoo/`. Every run builds",
        "the model with a fixed seed and runs it on PyTorch CPU and on xla_native_functions",
        "with the same weights and inputs (float32). Inference compares outputs; training",
        "compares the loss of every step and all weights and buffers after the steps.",
        "`ratio` is our steady-state step time over PyTorch CPU eager's, measured in the same",
        "run on a shared 2-core machine (orders of magnitude, not benchmarks): the two take",
        f"turns, each turn at least two steps and about {TURN_SECONDS * 1e3:.0f} ms after a pause and an untimed step, "
        "and",
        "the ratio is the median over turns of the two times measured in the same turn.",
        "`compiles`: graphs compiled in compiled mode, per-op executables in eager mode, the",
        "backend's JAX functions in dynamo mode (`torch.compile(backend=\"xla_native\")` on the CPU",
        "model; its fallback ops are the nodes it left to PyTorch CPU, splitting graphs)",
        "(total / in the steady state after warm-up); every run starts with empty caches.",
        "Ops that are not lowered yet ran on PyTorch CPU (`allow_cpu_fallback`) and are",
        "listed with their call counts; in compiled mode each one ends the traced graph, so",
        "a step is several graphs until the ops are lowered.",
        "",
        "Steady-state step time over PyTorch CPU eager's, default attention rows (targets: compiled",
        "mode at or below 1x, eager mode within 3x):",
        "",
        "| mode | rows | ratio range | at or below 1x | at or below 3x |",
        "|---|---:|---|---:|---:|",
        *_summary_rows(records),
        "",
        "What any `__torch_dispatch__` backend costs on these steps, measured with a pass-through",
        "tensor subclass, and so how close eager mode can get to PyTorch:",
        "`python scripts/bench_eager_floor.py` (`docs/performance.md`, \"What eager mode can reach\").",
        "",
        "| model | mode | task | attn | status | max abs | max rel | first call s | step ms | torch ms | ratio | "
        "compiles | fallback ops |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        fb = ", ".join(f"{op} ({n})" for op, n in r["fallbacks"].items()) or "none"
        status = r["status"] if r["status"] == "ok" else f"**{r['status']}**"
        out.append(
            f"| {r['model']} | {r['mode']} | {r['task']} | {r.get('attn') or 'default'} | {status} | "
            f"{_fmt(r.get('max_abs'), '.1e')} | {_fmt(r.get('max_rel'), '.1e')} | {_fmt(r.get('first_call_s'), '.1f')} "
            "| "
            f"{_fmt(r.get('step_ms'), '.1f')} | {_fmt(r.get('torch_step_ms'), '.1f')} | {_fmt(r.get('ratio'), '.1f')} "
            "| "
            f"{r.get('compiles', '-')} / {r.get('compiles_steady', '-')} | {fb} |"
        )
    admitted = [
        r
        for r in records
        if (r.get("weights") or {}).get("outliers") or (r.get("weights") or {}).get("float64_checked")
    ]
    if admitted:
        out += ["", "## AdamW weights beyond the float32 tolerance", "",
                "AdamW moves a weight whose gradient is near zero by about lr * sign(grad), so a last-bit",
                "difference in that gradient moves it by up to 2 * lr per step, in PyTorch's float32 run as in",
                f"ours. AdamW rows admit a tensor with at most {OUTLIER_FRACTION:.1%} of its elements (at least",
                "one) beyond the float32 tolerance, each within 2 * lr per step, or one no farther from",
                f"PyTorch's float64 training than {F64_FACTOR:g}x PyTorch's float32 result (a gradient that is zero in",
                "exact arithmetic, such as an attention key bias's, is rounding noise that AdamW amplifies) or",
                "than its float32 training from initial weights one ulp apart (a ReLU input near zero switches",
                "a unit's gradient row on or off), or one whose elements beyond the tolerance are all left in",
                "place by PyTorch's float64 training (a zero gradient in exact arithmetic: their float32 values",
                "random-walk by up to lr per step) and within 2 * lr per step; Note [AdamW weight check] in",
                "`scripts/run_model.py`. Rows with such tensors:", ""]
        for r in admitted:
            weights = r["weights"]
            parts = [f"{weights['outliers']} elements beyond the tolerance"] if weights.get("outliers") else []
            parts += [f"`{c}`" for c in weights.get("float64_checked") or []]
            out.append(f"- `{_key(r)}`: " + "; ".join(parts))
    errors = [r for r in records if r["status"] in ("error", "mismatch")]
    if errors:
        out += ["", "## Errors and mismatches", ""]
        for r in errors:
            out.append(f"- `{_key(r)}`: {r.get('error')}" + (f" at {r['where']}" if r.get("where") else "")
                       + (f". Note: {r['note']}" if r.get("note") else ""))
    compiled = [r for r in records if r["mode"] == "compiled" and r.get("replayed_steps")]
    if compiled:
        full = [r for r in compiled if r["replayed_steps"].split("/")[0] == r["replayed_steps"].split("/")[1]]
        out += ["", "## compile(): replayed steps", "",
                "`xla_native_functions.compile` traces the first calls of a step and then replays the",
                "compiled program without running the step's Python while its guards hold (Note [Replay] in",
                "`runtime/frontends/replay.py`). Training rows build AdamW with `capturable=True` on our side: default",
                "AdamW keeps its step counter on the CPU and reads it with `.item()` every step, which makes",
                "`compile()` trace every call.",
                "", f"Every timed step was replayed in {len(full)} of {len(compiled)} compiled rows."]
        for r in compiled:
            if r not in full:
                out.append(f"- `{_key(r)}`: {r['replayed_steps']} replayed; "
                           + ("; ".join(r.get("replay_notes") or []) or "-"))
    recompiles = [r for r in records if r["mode"] == "compiled" and r.get("compiles_steady")]
    if recompiles:
        out += ["", "## Recompiles in the steady state", ""]
        for r in recompiles:
            out.append(
                f"- `{_key(r)}`: {r['compiles_steady']} compiles; reasons: "
                f"{'; '.join(r['recompile_reasons'][:3]) or '-'}"
            )
    backend_rows = [r for r in records if r["mode"] == "dynamo" and r.get("step_ms")]
    if backend_rows:
        by_key = {(r["model"], r["mode"], r["task"], r.get("attn")): r for r in records}
        out += [
            "",
            "## The torch.compile backend against our compiled mode and inductor",
            "",
            "Steady-state ms per step. `xla_native`: `torch.compile(model, backend=\"xla_native\")` on the",
            "CPU model (the optimizer step runs on PyTorch CPU); compiled mode: `xla_native_functions.compile`",
            "of the whole step on a model moved with `to_xla` (its row above, another run);",
            "inductor: `torch.compile(model)` on the CPU model, timed in turns with `xla_native` and",
            "PyTorch eager in the same run.",
            "",
            "| model | task | xla_native ms | compiled mode ms | xla_native / compiled mode | inductor ms | xla_native "
            "/ inductor | torch eager ms |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in backend_rows:
            c = by_key.get((r["model"], "compiled", r["task"], r.get("attn")), {})
            ind = r.get("inductor_step_ms")
            out.append(
                f"| {r['model']} | {r['task']} | {_fmt(r['step_ms'], '.2f')} | {_fmt(c.get('step_ms'), '.2f')} | "
                f"{_fmt(r['step_ms'] / c['step_ms'] if c.get('step_ms') else None, '.2f')} | {_fmt(ind, '.2f')} | "
                f"{_fmt(r['step_ms'] / ind if ind else None, '.2f')} | {_fmt(r.get('torch_step_ms'), '.2f')} |"
            )
    hf = [name for name, spec in models.items() if spec.hf]
    attn_rows = [r for r in records if r["model"] in hf and r["mode"] != "dynamo"
                 and any(q["model"] == r["model"] and q["mode"] == r["mode"] and q["task"] == r["task"]
                         and (q.get("attn") or "default") != (r.get("attn") or "default") for q in records)]
    if attn_rows:
        out += ["", "## Attention implementations", "",
                "transformers 5 defaults to `attn_implementation=\"sdpa\"`. On our device SDPA takes PyTorch's",
                "math path (`_scaled_dot_product_attention_math`, decomposed before it reaches us), whose softmax",
                "is `_safe_softmax`; `\"eager\"` attention is plain matmul + softmax. Same model, mode and task:", "",
                "| model | mode | task | attn | status | max abs | fallback ops |", "|---|---|---|---|---|---|---|"]
        for r in sorted(attn_rows, key=lambda r: (r["model"], r["mode"], r["task"], r.get("attn") or "")):
            fb = ", ".join(r["fallbacks"]) or "none"
            out.append(f"| {r['model']} | {r['mode']} | {r['task']} | {r.get('attn') or 'default (sdpa)'} | "
                       f"{r['status']} | {_fmt(r.get('max_abs'), '.1e')} | {fb} |")
    out += ["", "## Ops that fell back to PyTorch CPU, per model", "",
            "Union over every mode and task (and both attention implementations); metrics' names, so an",
            "in-place form (`addcdiv_.default`) is listed in the manifest as its functional op (`addcdiv`).", ""]
    for name in models:
        ops = sorted({op for r in records if r["model"] == name for op in r["fallbacks"]})
        out.append(f"- **{name}**: " + (", ".join(f"`{op}`" for op in ops) if ops else "none"))
    out += [
        "",
        "## Tolerances (float32; see Note [Zoo tolerances] in scripts/zoo/__init__.py)",
        "",
        "| model | outputs rtol, atol | loss | weights after SGD | weights after AdamW | why |",
        "|---|---|---|---|---|---|",
    ]
    for name, spec in models.items():
        t = spec.tolerance
        out.append(f"| {name} | {t.output} | {t.loss} | {t.weights_sgd} | {t.weights_adamw} | {t.reason} |")
    md_path.write_text("\n".join(out) + "\n")


def sweep(args: argparse.Namespace) -> None:
    plan = sweep_plan(args.size)
    if args.shard:
        i, n = (int(x) for x in args.shard.split("/"))
        plan = plan[i - 1::n]
    json_path = report_paths(args.size)[0]
    done: dict[str, dict] = {}
    if args.resume and json_path.exists():
        done = {_key(r): r for r in json.loads(json_path.read_text())}
    for k, p in enumerate(plan):
        probe = {"model": p["name"], "mode": p["mode"], "attn": p["attn"],
                 "task": f"train-{p['optimizer']}" if p["train"] else "inference"}
        if _key(probe) in done:
            continue
        print(f"[{k + 1}/{len(plan)}] {_key(probe)} ...", file=sys.stderr, flush=True)
        rec = run(p["name"], p["mode"], p["train"], p["optimizer"], batch=args.batch, steps=args.steps,
                  timed=args.timed, attn=p["attn"], inductor=True, size=args.size)
        print(
            f"    {rec['status']}" + (f" ({rec.get('error')})" if rec.get("error") else ""), file=sys.stderr, flush=True
        )
        done[_key(rec)] = rec
        order = {_key({"model": q["name"], "mode": q["mode"], "attn": q["attn"],
                       "task": f"train-{q['optimizer']}" if q["train"] else "inference"}): i
                 for i, q in enumerate(sweep_plan(args.size))}
        write_docs(sorted(done.values(), key=lambda r: order.get(_key(r), 1 << 30)), args.size)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name", nargs="?", choices=sorted(MODELS))
    parser.add_argument("--mode", choices=MODES, default="eager")
    parser.add_argument("--train", action="store_true")
    parser.add_argument("--optimizer", choices=("sgd", "adamw"), default="sgd")
    parser.add_argument("--batch", type=int, default=None, help="default: the size's batch")
    parser.add_argument(
        "--size",
        choices=sorted(SIZES),
        default="small",
        help="model configurations (scripts/zoo/common.py); --all writes docs/reports/models.md for small, "
        "docs/reports/models-<size>.md otherwise",
    )
    parser.add_argument("--steps", type=int, default=6, help="steps compared with PyTorch CPU (training; "
                        "inference in compiled mode, whose calls from the fourth on are replayed)")
    parser.add_argument(
        "--timed",
        type=int,
        default=5,
        help=f"timed turns after the comparison, each about {TURN_SECONDS * 1000:.0f} ms and at least "
        f"{MIN_CALLS_PER_TURN} steady-state steps (median per step reported)",
    )
    parser.add_argument("--attn", choices=("eager", "sdpa"), default=None,
                        help="attn_implementation of transformers models (default: the library's)")
    parser.add_argument("--no-fallback", action="store_true", help="raise on ops that are not lowered")
    parser.add_argument("--inductor", action="store_true",
                        help="with --mode dynamo: also time torch.compile's default backend (--all always does)")
    parser.add_argument(
        "--all", action="store_true", help="sweep every model x mode x task, write docs/reports/models.md"
    )
    parser.add_argument("--shard", help="with --all: run part i of n (i/n)")
    parser.add_argument(
        "--resume", action="store_true", help="with --all: keep results already in docs/reports/models.json"
    )
    parser.add_argument("--json", action="store_true", help="print the record as JSON")
    parser.add_argument(
        "--report", action="store_true", help="rewrite docs/reports/models.md from docs/reports/models.json only"
    )
    args = parser.parse_args(argv)
    if args.report:
        write_docs(json.loads(report_paths(args.size)[0].read_text()), args.size)
        return 0
    if args.all:
        sweep(args)
        return 0
    if not args.name:
        parser.error("a model name or --all is required")
    if args.attn and not MODELS[args.name].hf:
        parser.error(f"--attn applies to transformers models only, not {args.name}")
    rec = run(args.name, args.mode, args.train, args.optimizer, batch=args.batch, steps=args.steps,
              timed=args.timed, attn=args.attn, allow_fallback=not args.no_fallback, inductor=args.inductor,
              size=args.size)
    print(json.dumps(rec, indent=1) if args.json else format_record(rec))
    return 0 if rec["status"] in ("ok", "unavailable") else 1


if __name__ == "__main__":
    sys.exit(main())
