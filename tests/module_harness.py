"""PyTorch's nn.Module test database (`module_db`) run through this backend, compared
with PyTorch CPU.

The engine behind scripts/module_report.py (the full sweep) and
tests/test_module_db.py (a fast slice). One *unit* is (ModuleInfo, dtype, setting,
mode); its samples are the ModuleInfo's `module_inputs_func(module_info, device="cpu",
dtype=..., requires_grad=..., training=...)`.

Per sample: the module is built on the CPU from the constructor input under a fixed
seed and cast to the dtype; a deep copy (same weights) is moved with `xnf.to_xla`, the
forward inputs with the OpInfo harness's `to_ours` (requires_grad and aliasing kept).
Both sides then run the same `step`:

- settings: `train` (module.train(): clear the gradients, forward, backward of a fixed
  projection of the outputs -- the sum over every floating output that requires grad
  of (output * w).sum(), w drawn on the CPU from a fixed-seed generator -- and compare
  outputs, parameter gradients, input gradients and buffers), `eval` (module.eval(),
  grad enabled, the same comparison), `no_grad` (eval under torch.no_grad(): outputs
  and buffers), `inference_mode` (eval under torch.inference_mode(): the same);
- modes: `eager` (the step called once) and `compiled` (the step wrapped in
  `xnf.compile`, called CALLS["compiled"] times -- a step is replayed from its fourth
  call, after three traces -- the backward inside the compiled step; the last call's
  results are compared). PyTorch CPU runs the step as many times, so buffers that
  every call updates (BatchNorm's running statistics) compare too. On request,
  `dynamo`: the CPU module (not moved) compiled by `torch.compile(module,
  backend="xla_native")`, RNN modules traced (`allow_rnn`), the step called twice.

Outcomes: passed (every compared tensor equal within the tolerance, dtype and shape
included), failed (we returned something else), errored (we raised; `not_found`
counts OperatorNotFound and `missing` names the operators), skipped (PyTorch CPU
itself raised: not counted elsewhere), duplicate (PyTorch CPU's step made the same aten
calls -- operators, non-tensor arguments, tensor shapes, dtypes, strides and
requires_grad -- as an earlier sample of the unit: ours would run the same programs on
other random values, so it is not run and not counted; module_db's
LinearCrossEntropyLoss generates 857 samples per setting, 167 of them distinct).

Tolerances: the ModuleInfo's own overrides for test_cpu_gpu_parity, else
assert_close's defaults per dtype (the OpInfo harness's table: float32 rtol 1.3e-6,
atol 1e-5; float64 1e-7, 1e-7).

Float64 arbitration (the `cpu_wrong` rule): where a float32 sample differs from
PyTorch CPU in float32, the CPU reference is computed again in float64 (the same
weights, inputs and projection, cast) and our float32 result is accepted if it is
within the float32 tolerance of the float64 one. Such samples count as passed and are
listed as `cpu_wrong`, each saying which tensors differed and whether PyTorch's own
float32 result is outside that tolerance of float64 (CPU wrong) or inside it too (the
two float32 results only round differently). A float32 failure that stands notes how
far each float32 result is from float64, and its class says when PyTorch's float32
result is outside the tolerance of float64 too, and when ours is the closer of the
two (float32 rounding rather than a wrong result).

The rounding rule: a float32 failure that stands passes if ours is no further from
float64 than PyTorch CPU's float32 result (as accurate as PyTorch: CTCLoss's long
recursions in float32), or within the tolerance plus ROUNDING_ULPS float32 steps of each
tensor's largest float64 magnitude (a long sum that cancels to near zero carries the
rounding of its large terms) and no further from float64 than ROUNDING_CPU_FACTOR times
PyTorch CPU's float32 result is: another summation order, not another answer. Such
samples are listed with both distances (`float32_rounding`). Known case: PyTorch CPU's BatchNorm2d
backward returns a wrong input gradient for a (1, C, H, W) grad_output with
channels-last strides and batch stride C, which autograd produces through
flatten(2).transpose(1, 2) at batch 1.

Skips and special treatments (lazy modules, random modules) come from one table,
tests/module_db_skips.py, each with its reason.
"""

from __future__ import annotations

import copy
import functools
import math
import re
import time
import traceback
import warnings
from contextlib import nullcontext
from typing import Any

import opinfo_harness as h

SETTINGS = ("train", "eval", "no_grad", "inference_mode")
MODES = ("eager", "compiled")
# `dynamo`: the CPU module compiled by `torch.compile(module, backend="xla_native")`,
# called twice (a first call that compiles, a second that runs the cached graphs); not
# in the default sweep
EXTRA_MODES = ("dynamo",)
DTYPES = ("float32", "float64")
# calls of the step per sample: a compile()d step traces its first three calls and
# replays from the fourth (two equal consecutive plans after a first trace)
CALLS = {"eager": 1, "compiled": 4, "dynamo": 2}
SEED = 0
PROJECTION_SEED = 0
BACKWARD_SETTINGS = ("train", "eval")
# per-sample details kept for the report, per unit
MAX_PROBLEMS = 40

_ATEN_RE = re.compile(r"\baten(?:::|\.)([A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)?)")
_NUMBER_RE = re.compile(r"\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def unit_id(name: str, dtype: str, setting: str, mode: str) -> str:
    return f"{name}|{dtype}|{setting}|{mode}"


_MODULE_INFOS: dict[str, Any] | None = None


def module_infos() -> dict[str, Any]:
    """Every ModuleInfo of PyTorch's module_db, by name, in module_db order."""
    global _MODULE_INFOS
    if _MODULE_INFOS is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from torch.testing._internal.common_modules import module_db
        _MODULE_INFOS = {}
        for mi in module_db:
            _MODULE_INFOS.setdefault(mi.name, mi)
    return _MODULE_INFOS


def plan_units(names, dtypes=DTYPES, settings=SETTINGS, modes=MODES) -> list[tuple[str, str, str, str]]:
    """The units that apply: dtypes the ModuleInfo supports on the CPU."""
    infos = module_infos()
    units = []
    for name in names:
        supported = {str(d).removeprefix("torch.") for d in infos[name].supported_dtypes("cpu")}
        for dt in dtypes:
            if dt not in supported:
                continue
            for setting in settings:
                for mode in modes:
                    units.append((name, dt, setting, mode))
    return units


def tolerance(module_info, dtype: str) -> tuple[float, float]:
    """(rtol, atol): the ModuleInfo's override for test_cpu_gpu_parity if it has one,
    else assert_close's default for the dtype."""
    import torch
    from torch.testing._internal.common_device_type import precisionOverride, toleranceOverride
    from torch.testing._internal.opinfo.core import DecorateInfo

    tdtype = getattr(torch, dtype)
    best = h._DEFAULT_TOL[dtype]
    for info in module_info.decorators:
        if not isinstance(info, DecorateInfo) or info.test_name not in (None, "test_cpu_gpu_parity"):
            continue
        if info.dtypes is not None and tdtype not in info.dtypes:
            continue
        for dec in info.decorators:
            if isinstance(dec, toleranceOverride) and tdtype in dec.d:
                cand = (dec.d[tdtype].rtol, dec.d[tdtype].atol)
            elif isinstance(dec, precisionOverride) and tdtype in dec.d:
                cand = (best[0], dec.d[tdtype])
            else:
                continue
            best = (max(best[0], cand[0]), max(best[1], cand[1]))
    return best


# ----------------------------------------------------------------- errors


def aten_op_of(exc: BaseException) -> str | None:
    """The aten operator an exception names or was raised under: OperatorNotFound's
    message, else the innermost frame dispatching an OpOverload (a local `func`), else
    an `aten.x` / `aten::x` in the message or its notes."""
    import torch

    m = h._MISSING_RE.search(str(exc))
    if m:
        return m.group(1)
    op = None
    for frame, _ in traceback.walk_tb(exc.__traceback__):
        func = frame.f_locals.get("func")
        if isinstance(func, torch._ops.OpOverload):
            op = h.overload_name(func)
    if op:
        return op
    text = " ".join([str(exc), *getattr(exc, "__notes__", ())])
    m = _ATEN_RE.search(text)
    return m.group(1) if m else None


def _first_line(text: str, limit: int = 240) -> str:
    for line in text.strip().splitlines():
        if line.strip():
            return line.strip()[:limit]
    return ""


def error_class(exc: BaseException, op: str | None) -> str:
    """A failure class for grouping: the exception type and its first line with numbers
    blanked (OperatorNotFound: the operator only), plus the aten operator."""
    import xla_native_functions as xnf

    if isinstance(exc, xnf.OperatorNotFound):
        return f"OperatorNotFound: aten operator '{op}' is not supported"
    line = _first_line(str(exc)).split(", called from ")[0]
    line = _NUMBER_RE.sub("N", line)
    return f"{type(exc).__name__}: {line}" + (f" [in {op}]" if op else "")


# ----------------------------------------------------------------- one sample


class DifferentiableOutputs(Exception):
    """Our step produced another number of outputs that require grad than PyTorch's
    (a failure of ours, not an error)."""


def _tensor_leaves(tree) -> list:
    import torch

    return [x for x in h._leaves(tree) if isinstance(x, torch.Tensor)]


def _grad_leaves(tree) -> list:
    return [x for x in _tensor_leaves(tree) if x.requires_grad]


def step(module, args, kwargs, weights):
    """One call, as a user writes a step. With `weights` (the gradient settings): clear
    the gradients, forward, backward of sum((output * w).sum()) over the floating outputs
    that require grad; without: the forward alone."""
    if weights is not None:
        module.zero_grad(set_to_none=True)
        for x in _grad_leaves((args, kwargs)):
            x.grad = None
    out = module(*args, **kwargs)
    if weights is not None:
        outs = h._diff_outputs(out)
        if len(outs) != len(weights):
            raise DifferentiableOutputs(f"{len(outs)} outputs require grad, expected {len(weights)}")
        if outs:
            sum((o * w).sum() for o, w in zip(outs, weights)).backward()
    return out


def _context(setting: str):
    import torch

    return {"no_grad": torch.no_grad, "inference_mode": torch.inference_mode}.get(setting, nullcontext)()


def _run(fn, module, args, kwargs, weights, setting: str, calls: int, on_last=None) -> dict:
    """Call fn `calls` times and collect what is compared after the last call."""
    out = None
    for k in range(calls):
        if on_last is not None and k == calls - 1:
            on_last()
        with _context(setting):
            out = fn(module, args, kwargs, weights)
    grads = weights is not None
    return {
        "output": out,
        "param_grads": {n: p.grad for n, p in module.named_parameters()} if grads else {},
        "input_grads": [x.grad for x in _grad_leaves((args, kwargs))] if grads else [],
        "buffers": dict(module.named_buffers()),
    }


def _condense(msg: str) -> str:
    lines = [ln.strip() for ln in msg.splitlines() if ln.strip()]
    if not lines:
        return ""
    detail = [
        ln
        for ln in lines[1:]
        if ln.startswith(("Mismatched elements", "Greatest absolute", "Greatest relative", "The failure occurred"))
    ]
    return "; ".join([lines[0], *detail])[:400]


def _to_float32(tree):
    import torch

    return h._tree_map(
        lambda x: x.detach().float() if isinstance(x, torch.Tensor) and x.dtype == torch.float64 else x, tree
    )


# the phrases of compare()'s messages about a tensor present on one side only
_STRUCTURAL = ("expected None", "expected a tensor", "missing on our module", "require grad, expected")


def compare(got: dict, expected: dict, tol, random: bool = False) -> list[tuple[str, str]]:
    """(what, message) for every compared tensor that differs: outputs, parameter and
    input gradients, buffers. `random`: shapes and dtypes only."""
    import torch

    def one(a, e):
        if random:
            return h._compare_meta(a, e)
        return h._compare(a, e, tol)

    problems = []
    msg = one(
        got["output"], h._tree_map(lambda x: x.detach() if isinstance(x, torch.Tensor) else x, expected["output"])
    )
    if msg:
        problems.append(("output", _condense(msg)))
    for kind, key in (("parameter grad", "param_grads"), ("buffer", "buffers")):
        for name, e in expected[key].items():
            a = got[key].get(name, "missing")
            if isinstance(a, str):
                problems.append((kind, f"{name}: missing on our module"))
            elif (a is None) != (e is None):
                problems.append(
                    (
                        kind,
                        f"{name}: {'None' if a is None else 'a tensor'}, expected "
                        f"{'None' if e is None else 'a tensor'}",
                    )
                )
            elif e is not None:
                msg = one(a, e)
                if msg:
                    problems.append((kind, f"{name}: {_condense(msg)}"))
    if len(got["input_grads"]) != len(expected["input_grads"]):
        problems.append(
            ("input grad", f"{len(got['input_grads'])} inputs require grad, expected {len(expected['input_grads'])}")
        )
    else:
        for i, (a, e) in enumerate(zip(got["input_grads"], expected["input_grads"])):
            if (a is None) != (e is None):
                problems.append(
                    (
                        "input grad",
                        f"input {i}: {'None' if a is None else 'a tensor'}, expected "
                        f"{'None' if e is None else 'a tensor'}",
                    )
                )
            elif e is not None:
                msg = one(a, e)
                if msg:
                    problems.append(("input grad", f"input {i}: {_condense(msg)}"))
    return problems


def _max_error(a: dict, ref: dict) -> float:
    """The largest absolute difference between matching floating tensors of two results."""
    import torch

    worst = 0.0
    for x, y in zip(h._leaves(a), h._leaves(ref)):
        if (
            isinstance(x, torch.Tensor)
            and isinstance(y, torch.Tensor)
            and x.is_floating_point()
            and x.shape == y.shape
            and x.numel()
        ):
            x, y = x.detach().double(), y.detach().double()
            # NaN where the other has a number is infinitely far; NaN on both sides agrees
            d = torch.where(x.isnan() & y.isnan(), 0.0, (x - y).abs()).nan_to_num(nan=math.inf)
            worst = max(worst, d.max().item())
    return worst


def arbitrate(got: dict, expected: dict, ref64: dict, problems: list, tol) -> tuple[list, list | None, dict | None]:
    """The float64 rule: our float32 results `got` differ from PyTorch CPU's float32
    `expected` (`problems`); `ref64` is PyTorch CPU's result in float64. If every one
    of ours is within the float32 tolerance of float64, ours is accepted: returns no
    problems and the cpu_wrong records (what differed, and whether PyTorch's float32
    result is itself outside that tolerance of float64). Else the problems stand, with
    a note of how far each float32 result is from float64 (both outside the tolerance
    is float32 rounding more often than a bug)."""
    if any(marker in msg for _, msg in problems for marker in _STRUCTURAL):
        return problems, None, None  # a tensor missing or extra is no rounding question
    ref = _to_float32(ref64)
    cpu_vs_64 = {what for what, _ in compare(expected, ref, tol)}
    ours_vs_64 = {what for what, _ in compare(got, ref, tol)}
    if ours_vs_64:
        note = {
            "ours_max_error_vs_float64": _max_error(got, ref64),
            "cpu_float32_max_error_vs_float64": _max_error(expected, ref64),
            "cpu_float32_also_outside_tolerance": bool(cpu_vs_64 & {what for what, _ in problems}),
        }
        ours_err, cpu_err = note["ours_max_error_vs_float64"], note["cpu_float32_max_error_vs_float64"]
        if ours_err <= cpu_err or (ours_err <= ROUNDING_CPU_FACTOR * cpu_err and _within_rounding(got, ref64, tol)):
            # ours is at least as close to the exact result as PyTorch's own float32 one, or
            # within a few float32 steps of each tensor's largest value of it and of the
            # order of PyTorch's float32 error: another summation order, not another
            # answer. Accepted as rounding, and listed
            return (
                [],
                [
                    {
                        "what": what,
                        "float32_rounding": True,
                        "cpu_float32_outside_tolerance_of_float64": what in cpu_vs_64,
                        "ours_max_error_vs_float64": note["ours_max_error_vs_float64"],
                        "cpu_float32_max_error_vs_float64": note["cpu_float32_max_error_vs_float64"],
                        "message": msg[:300],
                    }
                    for what, msg in problems
                ],
                None,
            )
        return problems, None, note
    return (
        [],
        [
            {"what": what, "cpu_float32_outside_tolerance_of_float64": what in cpu_vs_64, "message": msg[:300]}
            for what, msg in problems
        ],
        None,
    )


# float32 steps of a tensor's largest magnitude allowed beyond the tolerance by the
# rounding rule: a long float32 sum is off by a few steps of the magnitude of its
# terms, which a result near zero (a cancelling sum) does not bound
ROUNDING_ULPS = 16
# and ours no further from float64 than this many times PyTorch CPU float32's distance
ROUNDING_CPU_FACTOR = 4


def _within_rounding(got: dict, ref64: dict, tol) -> bool:
    """Every floating tensor of ours within tol + ROUNDING_ULPS float32 steps of the
    largest magnitude of the matching float64 tensor."""
    import torch

    eps = torch.finfo(torch.float32).eps
    for x, y in zip(h._leaves(got), h._leaves(ref64)):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.is_floating_point() and x.numel():
            if x.shape != y.shape:
                return False
            x, y = x.detach().double(), y.detach().double()
            finite = y.isfinite()
            if not torch.equal(x.isnan(), y.isnan()) or not torch.equal(
                x[~finite & ~y.isnan()], y[~finite & ~y.isnan()]
            ):
                return False
            scale = y[finite].abs().max().item() if finite.any() else 0.0
            bound = tol[1] + tol[0] * y.abs() + ROUNDING_ULPS * eps * scale
            if ((x - y).abs()[finite] > bound[finite]).any():
                return False
    return True


def _as_leaves(tree):
    """The sample's inputs as a user passes them to a step: tensors that require grad
    become leaves (some samples make theirs with an op, `x.log()`). Our side gets
    leaves from to_xla, and a step called more than once would otherwise backward
    through the sample's own graph again."""
    import torch

    memo: dict[int, Any] = {}

    def leaf(x):
        if isinstance(x, torch.Tensor) and x.requires_grad and x.grad_fn is not None:
            if id(x) not in memo:
                memo[id(x)] = x.detach().requires_grad_(True)
            return memo[id(x)]
        return x

    return h._tree_map(leaf, tree)


def _copy_inputs(tree):
    """A copy of the forward inputs made before anything runs (a module may write into
    its inputs); deepcopy keeps tensors that share memory sharing it."""
    import torch

    try:
        return copy.deepcopy(tree)
    except RuntimeError:  # a non-leaf tensor: copied one by one
        return h._tree_map(
            lambda x: x.detach().clone().requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor) else x, tree
        )


def _to_float64(tree):
    import torch

    def conv(x):
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            return x.detach().double().requires_grad_(x.requires_grad)
        return x

    return h._tree_map(conv, tree)


def _replays() -> int | None:
    from xla_native_functions.runtime.platform.metrics import metrics

    return metrics.replays


class Outcome:
    """One sample's result."""

    def __init__(self, kind: str, message: str = "", cls: str = "", aten_op: str | None = None):
        self.kind, self.message, self.cls, self.aten_op = kind, message, cls, aten_op
        self.cpu_wrong: list[dict] | None = None
        self.replayed: bool | None = None
        self.missing: str | None = None


def raised_at(exc: BaseException) -> str:
    """The innermost frame of an exception's traceback: `torch/nn/functional.py:6260
    (w_q, w_k, w_v = w.chunk(3))`, with paths from the package root."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    f = frames[-1]
    path = f.filename
    for root in ("site-packages/", "/runtime/", "/lowerings/", "/shape_fns/", "/generated/"):
        if root in path:
            path = (root.strip("/") + "/" if root != "site-packages/" else "") + path.split(root, 1)[1]
            break
    return f"{path}:{f.lineno} ({(f.line or '').strip()[:80]})"


def _errored(exc: BaseException) -> Outcome:
    import xla_native_functions as xnf

    op = aten_op_of(exc)
    # OperatorNotFound's call site is this harness, the same for every sample
    line = _first_line(str(exc)).split(", called from ")[0]
    where = "" if isinstance(exc, xnf.OperatorNotFound) else f" [raised at {raised_at(exc)}]"
    o = Outcome("errored", f"{type(exc).__name__}: {line}{where}", error_class(exc, op), op)
    if isinstance(exc, xnf.OperatorNotFound):
        o.missing = op
    return o


def _failed(problems: list[tuple[str, str]], note: dict | None = None) -> Outcome:
    kinds = sorted({what for what, _ in problems})
    cls = "values differ: " + ", ".join(kinds)
    msg = "; ".join(f"{w}: {m}" for w, m in problems[:3])[:600]
    if note is not None:
        msg = (f"[float64 check: ours off by up to {note['ours_max_error_vs_float64']:.2g}, PyTorch CPU float32 by "
               f"{note['cpu_float32_max_error_vs_float64']:.2g}] " + msg)
        if (
            note["cpu_float32_also_outside_tolerance"]
            and note["ours_max_error_vs_float64"] <= note["cpu_float32_max_error_vs_float64"]
        ):
            cls += " (ours is closer to float64 than PyTorch CPU float32; both outside the tolerance)"
        elif note["cpu_float32_also_outside_tolerance"]:
            cls += " (PyTorch CPU float32 outside the tolerance of float64 too)"
    return Outcome("failed", msg, cls)


def _call_meta(x):
    import torch

    if isinstance(x, torch.Tensor):
        try:
            return ("T", tuple(x.shape), x.dtype, x.stride(), x.requires_grad)
        except RuntimeError:  # a nested tensor has no strides
            return ("T", x.layout, x.dtype, x.dim(), x.requires_grad)
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, tuple(_call_meta(y) for y in x))
    if isinstance(x, dict):
        return ("dict", tuple((k, _call_meta(v)) for k, v in x.items()))
    return repr(x)


@functools.cache
def _aten_log_class():
    from torch.utils._python_dispatch import TorchDispatchMode

    class AtenLog(TorchDispatchMode):
        """Records the aten calls made under it: operator and argument metadata."""

        def __init__(self):
            super().__init__()
            self.calls: list = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            self.calls.append((str(func), _call_meta(args), _call_meta(kwargs)))
            return func(*args, **kwargs)

    return AtenLog


def run_sample(
    module_info, module_input, dtype: str, setting: str, mode: str, tol, action: str | None, seen: set | None = None
) -> Outcome:
    """Build, run and compare one ModuleInput (see the module docstring)."""
    import torch
    import xla_native_functions as xnf

    tdtype = getattr(torch, dtype)
    backward = setting in BACKWARD_SETTINGS
    calls = CALLS[mode]
    ctor, fwd = module_input.constructor_input, module_input.forward_input
    fargs, fkw = _as_leaves((tuple(fwd.args), dict(fwd.kwargs)))

    # --- PyTorch CPU: the reference, and pristine copies for our side and float64
    try:
        torch.manual_seed(SEED)
        cpu_mod = module_info.module_cls(*ctor.args, **ctor.kwargs).to(tdtype)
        cpu_mod.train(setting == "train")
        ours_src = copy.deepcopy(cpu_mod)
        inputs_src = _copy_inputs((fargs, fkw))
        if action == "lazy":
            torch.manual_seed(SEED)
            with torch.no_grad():
                cpu_mod(*_copy_inputs(fargs), **_copy_inputs(fkw))
            materialized = {k: v.detach().clone() for k, v in cpu_mod.state_dict().items()}
        pristine = copy.deepcopy(cpu_mod) if dtype == "float32" and action != "random" else None
        weights = None
        if backward:
            probe = copy.deepcopy(cpu_mod)
            a, k = _copy_inputs((fargs, fkw))
            weights = h._projection(h._diff_outputs(probe(*a, **k)), PROJECTION_SEED)
            del probe
        log = _aten_log_class()()
        with log:
            expected = _run(step, cpu_mod, fargs, fkw, weights, setting, calls)
    except Exception:
        return Outcome("skipped")
    if seen is not None:
        # a sample whose reference made the same aten calls (operators, non-tensor
        # arguments, tensor shapes, dtypes, strides) as an earlier one of the unit runs
        # the same programs on our side, on other random values: not run again
        key = (action, hash(tuple(log.calls)))
        if key in seen:
            return Outcome("duplicate")
        seen.add(key)

    # --- ours
    replays = [None]
    on_cpu = mode == "dynamo"  # the backend takes the CPU module and inputs as they are
    try:
        if on_cpu:
            ours_mod, oargs, okw = ours_src, *inputs_src
        else:
            ours_mod = xnf.to_xla(ours_src)
            _, oargs, okw = h.to_ours((None, *inputs_src))
        if action == "lazy":
            with torch.no_grad():
                ours_mod(*oargs, **okw)
                state = ours_mod.state_dict()
                for name, value in materialized.items():
                    if state[name].shape != value.shape or state[name].dtype != value.dtype:
                        return Outcome(
                            "failed",
                            f"materialized {name}: {tuple(state[name].shape)} {state[name].dtype}, "
                            f"expected {tuple(value.shape)} {value.dtype}",
                            "values differ: materialized parameters",
                        )
                    state[name].copy_(value if on_cpu else xnf.to_xla(value))
        oweights = weights if weights is None or on_cpu else xnf.to_xla(weights)
        if mode == "eager":
            fn = step
        elif mode == "compiled":
            fn = xnf.compile(step)
        else:
            torch._dynamo.reset()  # every sample compiles afresh: no recompile limit across samples
            compiled_mod = torch.compile(ours_mod, backend="xla_native")

            def fn(module, args, kwargs, weights):
                with torch._dynamo.config.patch(allow_rnn=True):  # Dynamo leaves RNN modules to eager otherwise
                    return step(compiled_mod, args, kwargs, weights)

        def before_last():
            replays[0] = _replays()

        got_live = _run(fn, ours_mod, oargs, okw, oweights, setting, calls, on_last=before_last)
        placement = None if on_cpu else h._check_placement(got_live["output"])
        got = got_live if on_cpu else xnf.to_torch(got_live)
    except DifferentiableOutputs as e:
        return Outcome("failed", str(e), "values differ: outputs that require grad")
    except Exception as e:
        return _errored(e)
    replayed = None
    if mode == "compiled" and replays[0] is not None:
        replayed = _replays() > replays[0]
    if placement:
        o = Outcome("failed", placement, "values differ: output placement")
        o.replayed = replayed
        return o

    problems = compare(got, expected, tol, random=action == "random")
    cpu_wrong = note = None
    if problems and pristine is not None:
        # float64 arbitration: the same step in float64 on PyTorch CPU
        try:
            a64, k64 = _to_float64(inputs_src)
            w64 = None if weights is None else [w.double() for w in weights]
            ref64 = _run(step, pristine.to(torch.float64), a64, k64, w64, setting, calls)
        except Exception:
            ref64 = None
        if ref64 is not None:
            problems, cpu_wrong, note = arbitrate(got, expected, ref64, problems, tol)
    o = Outcome("passed") if not problems else _failed(problems, note)
    o.cpu_wrong = cpu_wrong
    o.replayed = replayed
    return o


# ----------------------------------------------------------------- one unit


def samples(module_info, dtype: str, setting: str) -> list:
    """The ModuleInputs of a unit, generated on the CPU under a fixed seed."""
    import torch

    torch.manual_seed(SEED)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return list(
            module_info.module_inputs_func(
                module_info,
                device="cpu",
                dtype=getattr(torch, dtype),
                requires_grad=setting in BACKWARD_SETTINGS,
                training=setting == "train",
            )
        )


def run_unit(
    name: str, dtype: str, setting: str, mode: str, time_limit: float = 300.0, only: list[int] | None = None
) -> dict[str, Any]:
    """Run one unit in this process. `only`: the sample indices to run (all by default).
    Returns counts, the per-sample outcome string (p passed, c passed against float64
    (cpu_wrong), r passed as float32 rounding (the rounding rule), f failed, e errored, s
    skipped by PyTorch CPU, d a duplicate of an earlier sample (the same aten calls on the
    CPU; not run on our side), - not run), the first problem and up to MAX_PROBLEMS
    per-sample problems."""
    from module_db_skips import treatment

    start = time.perf_counter()
    entry = treatment(name, dtype, setting, mode)
    action = entry[0] if entry else None
    res: dict[str, Any] = {
        "passed": 0,
        "failed": 0,
        "errored": 0,
        "skipped": 0,
        "duplicate": 0,
        "not_found": 0,
        "missing": {},
        "total": 0,
        "outcomes": "",
        "problems": [],
        "classes": {},
        "cpu_wrong": [],
        "first_problem": None,
        "replayed": 0,
        "compared": 0,
        "treatment": action,
        "truncated": False,
        "messages": [],
    }
    if action == "skip":
        res.update(status="skip", reason=entry[1], seconds=0.0)
        return res
    mi = module_infos()[name]
    try:
        inputs = samples(mi, dtype, setting)
    except Exception as e:
        res.update(
            status="harness_error",
            seconds=round(time.perf_counter() - start, 3),
            messages=[f"sample generation: {type(e).__name__}: {e}"],
        )
        return res
    tol = tolerance(mi, dtype)
    res["total"] = len(inputs)
    res["tolerance"] = list(tol)
    deadline = start + time_limit
    outcomes = []
    seen: set = set()
    for i, mod_input in enumerate(inputs):
        if (only is not None and i not in only) or mod_input.forward_input is None:
            outcomes.append("-")
            continue
        if time.perf_counter() > deadline:
            res["truncated"] = True
            outcomes.append("-")
            continue
        o = run_sample(mi, mod_input, dtype, setting, mode, tol, action, seen)
        code = {"passed": "p", "failed": "f", "errored": "e", "skipped": "s", "duplicate": "d"}[o.kind]
        if o.kind == "passed" and o.cpu_wrong:
            code = "r" if any(t.get("float32_rounding") for t in o.cpu_wrong) else "c"
        outcomes.append(code)
        res[o.kind] += 1
        if o.replayed is not None:
            res["compared"] += 1
            res["replayed"] += int(o.replayed)
        if o.missing:
            res["not_found"] += 1
            res["missing"][o.missing] = res["missing"].get(o.missing, 0) + 1
        if o.cpu_wrong:
            res["cpu_wrong"].append({"sample": i, "desc": mod_input.desc, "tensors": o.cpu_wrong})
        if o.kind in ("failed", "errored"):
            p = {
                "sample": i,
                "desc": mod_input.desc,
                "outcome": o.kind,
                "class": o.cls,
                "message": o.message,
                "aten_op": o.aten_op,
            }
            if res["first_problem"] is None:
                res["first_problem"] = p
            c = res["classes"].setdefault(o.cls, {"samples": 0, "example": o.message, "aten_op": o.aten_op})
            c["samples"] += 1
            if len(res["problems"]) < MAX_PROBLEMS:
                res["problems"].append(p)
    res["outcomes"] = "".join(outcomes)
    res.update(status="done", seconds=round(time.perf_counter() - start, 3))
    return res


def worker_ready() -> None:
    """Warm-up of a worker process: build module_db before the first unit's clock, then
    freeze what the imports and module_db made out of the garbage collector's sight.
    A full collection over torch's import alone takes seconds here (about 2.5 s for
    170,000 objects on this machine), and a compiled step's trace runs one whenever it
    cannot account for every reference to a tensor it made (runtime/frontends/replay.py,
    _escaped): without the freeze, traced calls of compiled units spend most of their
    time in the collector."""
    import gc

    module_infos()
    gc.collect()
    gc.freeze()


def pass_rate(counts: dict) -> float | None:
    n = counts.get("passed", 0) + counts.get("failed", 0) + counts.get("errored", 0)
    return None if n == 0 else counts["passed"] / n
