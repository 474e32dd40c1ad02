"""`xla_native_functions.analyze`: one run of a program that finds out everything about
how it maps onto this backend, written as a JSON report (docs/analyze.md).

    python -m xla_native_functions.analyze train.py --lr 0.1          # the script, unmodified
    python -m xla_native_functions.analyze --mode compiled --steps 3 train.py
    report = xnf.analyze(model, x)                                    # a callable, in-process

Note [Analysis]
The program runs once, for real, in one of three modes:
  - eager (default): `default_env()` makes the program's factories (`torch.randn`,
    `torch.tensor`, the parameters an `nn.Module` creates) land on our device, and a
    parameter or buffer registered from a CPU tensor is moved when it is registered. A
    dispatch mode on top of everything (`_OpWatch`) sees every aten op the program
    issues: it counts it by overload, records its input signatures, times its eager
    execution, and when the op is not lowered, or its lowering or shape function
    raises, runs it on PyTorch CPU (exec/fallback.py) and records why, with the call
    site, so the program goes on and every missing op shows in one run. An op that
    has no CPU kernel either ends the run there (`AnalysisStopped`), report written.
    A `.to("cpu")`/`.cpu()` written in the program keeps its tensor on our device
    (a script moves its model "to the device"); the runtime's own host copies
    (printing, `.numpy()`, `.tolist()`) still reach the CPU.
  - compiled: the same, with the program's ops recorded into a trace (exec/trace.py)
    and run as compiled graphs, as `compile()` and lazy mode run them. A step ends at
    each `optimizer.step()`, or, for a program without an optimizer, at the end of
    each inference call of a top-level module (eval mode or grad off): the graph so far
    runs there, as PyTorch/XLA's `mark_step()` would. Every graph is recorded with why
    it compiled (the input whose shape or dtype changed, the host read that cut the
    trace, with its call site). Each new op signature is first lowered abstractly
    (`jax.eval_shape`), so an op whose lowering raises runs on the CPU at once instead
    of failing a whole graph later.
  - dynamo: each call of a top-level module goes through
    `torch.compile(backend="xla_native")`; the program's tensors stay on the CPU, as
    that backend expects. Dynamo's graph breaks and recompilations are recorded with
    their reasons, and the ops each ATen graph could not lower (run on PyTorch CPU in
    its CPU partitions) with the user's line from the graph's stack traces.

Where an op came from: the innermost frame outside torch, JAX, this package and the
standard library (platform/call_site.py; a library's modeling code counts), and the
module path (`model.encoder.layer.1.attention`) from a stack kept by global forward
pre/post hooks. Ops of a backward pass are attributed to the forward call that made
their autograd node: a torch-function mode (`_FunctionWatch`) tags each new autograd
node with its forward call site. The same mode notes the torch functions PyTorch
decomposes before they reach us (CompositeImplicitAutograd: `aten::linear` into
`aten::t` and `aten::addmm`).

Steps: `--steps N` stops the program after N optimizer steps (when the next step
starts: the next call of a top-level module, a module called while no other module
runs, or the next optimizer step, so the program's code after `optimizer.step()`, its
logging, still runs), or, for a program that steps no optimizer, before the N+1th call
of a top-level module, by raising `AnalysisStopped` (a BaseException, so the program's
own `except Exception` does not swallow it); the report is written as for a finished
run.
"""

from __future__ import annotations

import argparse
import copy
import importlib.metadata
import os
import platform
import re
import runpy
import sys
import time
import traceback
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, NamedTuple

import jax
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from ... import lowerings as _lowerings_package
from ... import shape_fns as _shape_fns_package
from ...shape_fns.common import TORCH_TO_NUMPY
from ..core.context import context, untraced
from ..core.convert import X64, cpu_to_jax
from ..core.ir import Value
from ..core.tensor import DEVICE, XlaTensor, from_array
from ..exec import graph as graph_module
from ..exec.custom_ops import register_loaded_library_ops
from ..exec.eager import scalar_operand, scope_name, value
from ..exec.fallback import fallback
from ..exec.graph import input_spec
from ..exec.registry import HANDLERS, OperatorNotFound, policy
from ..exec.trace import Trace, settle_failed
from ..platform.call_site import user_frame, user_frame_object
from ..platform.config import config
from ..platform.metrics import fold_replayed_ops, metrics
from . import analysis_report, dynamo
from .distributed import report as sharded_report
from .debug import check_after_sync, cpu_reference, differences
from .dispatch import take_backward_error
from .env import LIFT_FRESH, creates_on_jax, is_factory
from .op_counters import UNLISTED, canonical_name, section_of

MODES = ("eager", "compiled", "dynamo")
DEFAULT_OUTPUT = "xnf_analysis"
# Input signatures kept per op (all are counted); call sites kept per unsupported op.
SIGNATURES_KEPT = 8
SITES_KEPT = 32
# The metadata key of an autograd node's forward call site (Note [Analysis]).
_SITE_TAG = "xla_native_functions.analyze.site"
_LOWERINGS = str(Path(_lowerings_package.__file__).parent) + os.sep
_SHAPE_FNS = str(Path(_shape_fns_package.__file__).parent) + os.sep
_THIS_FILE = __file__
_TORCH_DIR = str(Path(torch.__file__).parent) + os.sep
_aten = torch.ops.aten
_TO_COPY = _aten._to_copy.default
# Ops whose results differ from PyTorch's by design: random numbers (our own
# generator), uninitialised memory.
_NOT_COMPARED_NAMES = {"aten::empty.memory_format", "aten::empty_like", "aten::empty_strided", "aten::new_empty",
                       "aten::new_empty_strided", "aten::empty_permuted"}


class AnalysisStopped(BaseException):
    """Ends the analysed program early: `--steps` reached, or (`failed`) an op that runs
    neither here nor on PyTorch CPU, or a compiled graph that failed. A BaseException, so
    the program's own `except Exception` lets it through; the report is written as for a
    finished run."""

    def __init__(self, message: str, failed: bool = False):
        super().__init__(message)
        self.failed = failed


@dataclass
class Options:
    mode: str = "eager"
    verbosity: int = 0
    steps: int | None = None
    accuracy: bool = False

    def check(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"analyze: mode must be one of {', '.join(map(repr, MODES))}, not {self.mode!r}")
        if self.verbosity not in (0, 1, 2):
            raise ValueError(f"analyze: verbosity must be 0, 1 or 2, not {self.verbosity!r}")
        if self.steps is not None and (not isinstance(self.steps, int) or self.steps < 1):
            raise ValueError(f"analyze: steps must be a positive number of steps, not {self.steps!r}")
        if self.accuracy and self.mode == "dynamo":
            raise ValueError("analyze: the accuracy check needs each op's values, which the torch.compile "
                             "backend traces with JAX and never holds: use mode 'eager' or 'compiled' with "
                             "accuracy, not 'dynamo'")


# ---------------------------------------------------------------- what one op did


def _op_name(func: Any) -> str:
    name = getattr(func, "name", None)
    return canonical_name(name() if callable(name) else str(func))


class _Op:
    """What the analysis knows of one operator overload."""

    __slots__ = ("func", "name", "section", "count", "seconds", "first_seconds", "signatures", "seen", "examples",
                 "decomposed_into", "compared", "checked", "factory")

    def __init__(self, func: Any):
        self.func = func
        self.name = _op_name(func)
        self.section = section_of(self.name)
        self.count = 0  # calls that ran here (lowered, or by the runtime's rules for unlisted ops)
        self.seconds = 0.0  # eager time of those calls, their first call per signature aside
        self.first_seconds = 0.0  # first calls per signature: mostly compilation
        self.signatures: Counter = Counter()  # the first SIGNATURES_KEPT signatures -> calls
        self.seen: set = set()  # every signature met (bounded), to tell first calls
        self.examples: dict[Any, Any] = {}  # signature -> abstract arguments, for verbosity >= 1
        self.decomposed_into: Counter | None = None  # unlisted ops run by PyTorch's decomposition
        self.compared = not (torch.Tag.nondeterministic_seeded in getattr(func, "tags", ())
                             or self.name in _NOT_COMPARED_NAMES)
        self.checked: set = set()  # signatures whose lowering was checked (compiled mode)
        self.factory = isinstance(func, torch._ops.OpOverload) and is_factory(func)


# what an op's tensor arguments are: ours, CPU tensors with elements (not 0-dim), both
OURS, CPU = 1, 2


def _signature(args: tuple, kwargs: dict) -> tuple[tuple, int]:
    """The dtypes and shapes of an op's tensor arguments (None for other arguments),
    and whose tensors they are (OURS | CPU)."""
    sig = []
    where = 0
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            sig.append((a.dtype, tuple(a.shape)))
            where |= OURS if a.__class__ is XlaTensor else (CPU if a.dim() else 0)
        elif a.__class__ in (list, tuple) and a and isinstance(a[0], torch.Tensor):
            sig.append(tuple((t.dtype, tuple(t.shape)) if isinstance(t, torch.Tensor) else None for t in a))
            for t in a:
                if isinstance(t, torch.Tensor):
                    where |= OURS if t.__class__ is XlaTensor else (CPU if t.dim() else 0)
        else:
            sig.append(None)
    return tuple(sig), where


def _move_cpu_arguments(func: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """An op mixing our tensors with CPU tensors the analysis did not see made (from
    NumPy, loaded from a file): the CPU tensors it only reads, moved to our device as
    the environment would have made them. Ones it writes stay (their writes must land)."""
    written = {i for i, a in enumerate(func._schema.arguments) if a.alias_info is not None and a.alias_info.is_write}
    names = [a.name for a in func._schema.arguments]

    def move(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.__class__ is not XlaTensor and x.dim() and x.device.type == "cpu" \
                and x.layout == torch.strided:
            moved = from_array(cpu_to_jax(x))
            return moved.requires_grad_(True) if x.requires_grad else moved
        if x.__class__ in (list, tuple):
            return type(x)(move(y) for y in x)
        return x

    args = tuple(a if i in written else move(a) for i, a in enumerate(args))
    kwargs = {k: v if k in names and names.index(k) in written else move(v) for k, v in kwargs.items()}
    return args, kwargs


def _failure_reason(error: BaseException) -> str:
    """Why the runtime could not run an op, from where its error was raised: its shape
    function (shape_fns/) or anything else of its implementation (the lowering)."""
    message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if isinstance(error, OperatorNotFound):
        return "not in the manifest"
    innermost = None
    tb = error.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if filename.startswith(_SHAPE_FNS):
            innermost = "shape"
        elif filename.startswith(_LOWERINGS):
            innermost = "lowering"
        tb = tb.tb_next
    if innermost == "shape":
        return f"shape function raised: {type(error).__name__}: {message}"
    return f"lowering raised: {type(error).__name__}: {message}"


def _no_cpu_kernel(error: BaseException) -> bool:
    text = str(error)
    return isinstance(error, NotImplementedError) and "Could not run" in text and "'CPU' backend" in text


# ---------------------------------------------------------------- where an op came from


class Site(NamedTuple):
    """A call site: the user's frame, the module path, and for an op of a backward pass,
    the autograd node it ran for."""

    file: str
    line: int
    function: str
    module: str
    backward_of: str = ""


_NO_SITE = Site("<unknown>", 0, "", "")


@dataclass
class _Unsupported:
    reasons: Counter = field(default_factory=Counter)  # reason -> calls
    sites: Counter = field(default_factory=Counter)  # (Site, reason) -> calls
    count: int = 0
    seconds: float = 0.0  # on PyTorch CPU, copies included


@dataclass
class _Graph:
    """One compiled program (compiled and dynamo modes)."""

    index: int
    kind: str  # "trace" (compiled mode) or "dynamo"
    ops: Counter
    runs: int = 0
    compiles: list[dict] = field(default_factory=list)  # when it was built, and why
    ended_by: Counter = field(default_factory=Counter)  # (cause, Site) -> times
    lower: Callable[[], Any] | None = None  # its jax Lowered, for verbosity 2
    site_of: Callable[[list[str]], Site | None] | None = None  # an instruction's call site from its scopes


class _Module:
    __slots__ = ("module", "path")

    def __init__(self, module: torch.nn.Module, path: str):
        self.module = module
        self.path = path


# ---------------------------------------------------------------- the analysis


class Analysis:
    """State of one analysed run; `start()` installs the watches, `finish()` removes them."""

    def __init__(self, options: Options, program: str):
        options.check()
        self.options = options
        self.program = program
        self.ops: dict[int, _Op] = {}
        self.unsupported: dict[str, _Unsupported] = {}
        self.decomposed: dict[str, dict[str, int]] = {}  # torch function's aten op -> its products' calls
        self.decomposed_calls: dict[str, int] = {}
        self.accuracy: dict[tuple[str, Site], list] = {}  # (op, site) -> [calls, max abs, max rel]
        self.sites: dict[Site, int] = {}
        self._site_cache: dict[tuple, int] = {}  # (code, line, module path) -> site index
        self.site_list: list[Site] = []
        self.module_stack: list[_Module] = []
        self.roots: dict[int, tuple[Any, str, dict[int, str]]] = {}  # id(root) -> (root, name, {id(sub): path})
        self.param_names: dict[int, str] = {}
        self.optimizer_steps = 0
        self.top_calls = 0
        self.stopped: str | None = None
        self.stop_pending: str | None = None  # --steps reached: stop when the next step starts
        self.stop_failed = False
        self.error: dict | None = None
        self.exit_status: int | None = None
        self.function_products: list | None = None
        self.current_op: str | None = None
        self.graphs: list[_Graph] = []
        self.graph_by_key: dict[Any, _Graph] = {}
        self.host_syncs: Counter = Counter()  # (op, Site) -> times
        self.graph_breaks: Counter = Counter()  # (reason, Site) -> times
        self.recompiles: list[dict] = []
        self.boundary: tuple[str, Site] | None = None
        self.in_steps = options.mode != "compiled"  # compiled mode: past the program's setup
        self._compiled_positions: set[int] = set()  # positions in a step where a graph ran
        self.trace: Trace | None = None
        self.wall_seconds = 0.0
        self._undo: list[Callable[[], None]] = []
        self._misses = 0
        self._reasons = 0
        self._input_names: dict[int, str] = {}
        self._dynamo_root = ""  # the name of the top-level module being compiled
        self._aten_programs: dict[tuple, _Graph] = {}
        self._dynamo_failures: dict[Any, int] = {}
        self._metrics_before: dict[int, int] = {}
        self._fallbacks_before: Counter = Counter()
        self._label_graphs = options.verbosity >= 2 and options.mode == "compiled"
        # programs laid out over several devices, by graph key: [their graph for
        # reading collectives (distributed/report.py), the index of their program here]
        self.sharded: dict[Any, list] = {}
        self._one_device: set[Any] = set()

    # -- sites

    def site_index(self, site: Site) -> int:
        i = self.sites.get(site)
        if i is None:
            i = self.sites[site] = len(self.site_list)
            self.site_list.append(site)
        return i

    def current_site(self, depth: int = 1) -> Site:
        """Where the op running now was called: the user's frame and module path, or for
        an op of a backward pass the forward call that made its autograd node."""
        if torch._C._current_graph_task_id() != -1:
            node = torch._C._current_autograd_node()
            if node is not None:
                tag = node.metadata.get(_SITE_TAG)
                name = node.name()
                if tag is not None:
                    s = self.site_list[tag]
                    return Site(s.file, s.line, s.function, s.module, name)
                frame = user_frame(depth)
                if frame is not None:
                    return Site(frame.filename, frame.lineno, frame.function, "", name)
                return Site("<unknown>", 0, "", "", name)
        frame = user_frame(depth)
        module = self.module_stack[-1].path if self.module_stack else ""
        if frame is None:
            return Site("<unknown>", 0, "", module)
        return Site(frame.filename, frame.lineno, frame.function, module)

    def forward_site_index(self) -> int:
        """The index of the current forward call site (user frame and module path),
        without making a Site when it is known."""
        frame = user_frame_object(1)
        module = self.module_stack[-1].path if self.module_stack else ""
        key = (None, 0, module) if frame is None else (frame.f_code, frame.f_lineno, module)
        i = self._site_cache.get(key)
        if i is None:
            if frame is None:
                site = Site("<unknown>", 0, "", module)
            else:
                site = Site(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name, module)
            i = self._site_cache[key] = self.site_index(site)
        return i

    def tag_autograd(self, out: Any) -> None:
        """Tag the autograd nodes a torch function made with its call site."""
        if isinstance(out, torch.Tensor):
            tensors = (out,)
        elif isinstance(out, (tuple, list)):  # torch.return_types too
            tensors = [x for x in out if isinstance(x, torch.Tensor)]
        else:
            return
        tag = None
        for t in tensors:
            fn = t.grad_fn
            if fn is None or _SITE_TAG in fn.metadata:
                continue
            if tag is None:
                tag = self.forward_site_index()
            todo = [fn]
            while todo:
                f = todo.pop()
                md = f.metadata
                if _SITE_TAG in md:
                    continue
                md[_SITE_TAG] = tag
                for nxt, _ in f.next_functions:
                    if nxt is not None and type(nxt).__name__ != "AccumulateGrad" and _SITE_TAG not in nxt.metadata:
                        todo.append(nxt)

    # -- ops (eager and compiled modes)

    def run_op(self, func: Any, args: tuple, kwargs: dict) -> Any:
        key = id(func)
        rec = self.ops.get(key)
        if rec is None:
            if getattr(func, "namespace", None) == "profiler":  # record_function markers: not computation
                return func(*args, **kwargs)
            rec = self.ops[key] = _Op(func)
        if func is _TO_COPY:
            kwargs = self._keep_on_device(args, kwargs)
        sig, where = _signature(args, kwargs)
        if func is LIFT_FRESH and args[0].__class__ is not XlaTensor and args[0].device.type == "cpu":
            rec.count += 1
            return from_array(cpu_to_jax(args[0]))  # torch.tensor(data): moved, as the environment does
        if where == CPU or (not where and not rec.factory and any(sig)):
            return func(*args, **kwargs)  # CPU tensors only: PyTorch's op, not this backend's
        if self.function_products is not None:
            self.function_products.append(rec.name)
        if where == OURS | CPU:
            args, kwargs = _move_cpu_arguments(func, args, kwargs)
        elif rec.factory and not any(sig) and creates_on_jax(kwargs):
            kwargs = {**kwargs, "device": DEVICE}  # the environment's rule (frontends/env.py)
        first = sig not in rec.seen
        if first:
            if len(rec.seen) < 4096:
                rec.seen.add(sig)
            if len(rec.signatures) < SIGNATURES_KEPT and self.options.verbosity >= 1:
                rec.examples[sig] = analysis_report.abstract_arguments(args, kwargs)
        if len(rec.signatures) < SIGNATURES_KEPT or sig in rec.signatures:
            rec.signatures[sig] += 1
        if self.trace is not None and first and sig not in rec.checked:
            rec.checked.add(sig)
            reason = _check_lowering(func, args, kwargs)
            if reason is not None:
                return self._run_on_cpu(rec, func, args, kwargs, reason, None)
        compared = self.options.accuracy and rec.compared
        reference = cpu_reference(func, args, kwargs) if compared and self.trace is None else None
        unlisted = HANDLERS.get(key) is None
        calls_before = dict(metrics.calls_by_id) if unlisted and rec.decomposed_into is None else None
        backward = torch._C._current_graph_task_id() != -1
        self.current_op = rec.name
        start = time.perf_counter()
        try:
            if compared and self.trace is not None:  # recorded: compared after the sync that computes it
                out = check_after_sync(self.trace, func, func, args, kwargs, (rec.name, self.current_site()),
                                       self._compare_after_sync)
            else:
                out = func(*args, **kwargs)
        except AnalysisStopped:
            raise
        except Exception as error:
            return self._run_on_cpu(rec, func, args, kwargs, _failure_reason(error), error)
        if backward:
            error = take_backward_error()  # kept by the runtime for backward() to raise
            if error is not None:
                return self._run_on_cpu(rec, func, args, kwargs, _failure_reason(error), error)
        elapsed = time.perf_counter() - start
        rec.count += 1
        if first:
            rec.first_seconds += elapsed
        else:
            rec.seconds += elapsed
        if rec.section == "fallback":
            self._note_unsupported(rec, "listed as fallback", elapsed)
        if calls_before is not None:
            rec.decomposed_into = Counter({
                _op_name(metrics.ops_by_id[k]): n - calls_before.get(k, 0)
                for k, n in metrics.calls_by_id.items() if k != key and n > calls_before.get(k, 0)
                and k in metrics.ops_by_id})
        if reference is not None:
            self._note_differences(rec.name, self.current_site(), out, reference)
        if self._label_graphs:
            self._label_nodes(out)
        return out

    def _note_differences(self, name: str, site: Site, out: Any, reference: Any) -> None:
        try:
            found = differences(out, reference)
        except Exception:  # a result PyTorch's cannot be compared with (another layout, say)
            found = []
        if found:
            entry = self.accuracy.setdefault((name, site), [0, 0.0, 0.0])
            entry[0] += 1
            entry[1] = max(entry[1], max(a for a, _ in found))
            entry[2] = max(entry[2], max(r for _, r in found))

    def _compare_after_sync(self, func: Any, out: Any, reference: Any, name_and_site: tuple[str, Site]) -> None:
        self._note_differences(*name_and_site, out, reference)

    def _run_on_cpu(
        self, rec: _Op, func: Any, args: tuple, kwargs: dict, reason: str, error: BaseException | None
    ) -> Any:
        start = time.perf_counter()
        try:
            out = fallback(func, args, kwargs)
        except AnalysisStopped:
            raise
        except Exception as cpu_error:
            if _no_cpu_kernel(cpu_error):
                self._note_unsupported(rec, "no CPU kernel", 0.0, detail=reason)
                raise AnalysisStopped(
                    f"{rec.name} is not lowered ({reason}) and has no CPU kernel either: the program cannot go on",
                    failed=True) from None
            if error is not None and not isinstance(error, OperatorNotFound):
                raise error  # PyTorch raises too: an error of the program, not of this backend
            if error is not None:
                self._note_unsupported(rec, reason, 0.0)
            raise
        self._note_unsupported(rec, reason, time.perf_counter() - start)
        return out

    def _note_unsupported(self, rec: _Op, reason: str, seconds: float, detail: str | None = None) -> None:
        entry = self.unsupported.get(rec.name)
        if entry is None:
            entry = self.unsupported[rec.name] = _Unsupported()
        entry.count += 1
        entry.seconds += seconds
        entry.reasons[reason] += 1
        site = self.current_site()
        if len(entry.sites) < SITES_KEPT or (site, reason) in entry.sites:
            entry.sites[(site, reason)] += 1

    def _keep_on_device(self, args: tuple, kwargs: dict) -> dict:
        """`.to("cpu")`/`.cpu()` of one of our tensors, written in the program: stays on
        our device (Note [Analysis]). The runtime's own host copies go to the CPU."""
        device = kwargs.get("device")
        if device is None or torch.device(device).type != "cpu" or not isinstance(args[0], XlaTensor):
            return kwargs
        frame = sys._getframe(1)
        while frame is not None:
            filename = frame.f_code.co_filename
            if not (filename.startswith(_TORCH_DIR) or filename == _THIS_FILE):
                break
            frame = frame.f_back
        if frame is None or _is_ours(frame.f_code.co_filename):
            return kwargs
        return {**kwargs, "device": DEVICE}

    def _label_nodes(self, out: Any) -> None:
        """Label the nodes an op just recorded with its call site (Note [Labelled nodes] in
        exec/graph.py)."""
        labels = graph_module.NODE_LABELS
        label = None
        todo = []
        for t in tree_flatten(out)[0]:
            if isinstance(t, XlaTensor):
                v = t._store.pending
                if v is not None and v.node is not None and id(v.node) not in labels:
                    todo.append(v.node)
        while todo:
            n = todo.pop()
            if id(n) in labels:
                continue
            if label is None:
                label = f"site{self.site_index(self.current_site())}"
            labels[id(n)] = label
            for a in n.args:
                for x in (a if a.__class__ is list else (a,)):
                    if x.__class__ is Value and x.node is not None and id(x.node) not in labels:
                        todo.append(x.node)

    # -- torch functions PyTorch decomposes

    def note_decomposition(self, name: str, products: list) -> None:
        if not products or (len(products) == 1 and products[0] == name):
            return
        self.decomposed_calls[name] = self.decomposed_calls.get(name, 0) + 1
        into = self.decomposed.get(name)
        if into is None:
            into = self.decomposed[name] = {}
        for p in products:
            into[p] = into.get(p, 0) + 1

    # -- modules and steps

    def module_pre_hook(self, module: torch.nn.Module, args: Any) -> None:
        stack = self.module_stack
        if not stack:
            if self.stop_pending is not None:
                raise AnalysisStopped(self.stop_pending)
            if self.options.steps is not None and self.optimizer_steps == 0 and self.top_calls >= self.options.steps:
                raise AnalysisStopped(f"--steps {self.options.steps}: stopped before call {self.top_calls + 1} of a "
                                      "top-level module (the program steps no optimizer)")
            name = self._root(module)[1]
            if self.top_calls == 0 and self.trace is not None:
                # the program's setup (initialising parameters, making inputs) is a graph of its own
                self.end_step(f"start of the first call of {name}")
                self.in_steps = True
            self.top_calls += 1
            stack.append(_Module(module, name))
            return
        parent = stack[-1]
        path = None
        for root, name, paths in self.roots.values():
            sub = paths.get(id(module))
            if sub is not None and (parent.path == name or parent.path.startswith(name + ".")):
                path = f"{name}.{sub}" if sub else name
                break
        if path is None:
            path = f"{parent.path}.{type(module).__name__}"
        stack.append(_Module(module, path))

    def module_post_hook(self, module: torch.nn.Module, args: Any, out: Any) -> None:
        stack = self.module_stack
        while stack:
            entry = stack.pop()
            if entry.module is module:
                break
        if not stack and self.trace is not None and self.optimizer_steps == 0 and (
                not module.training or not torch.is_grad_enabled()):
            self.end_step(f"end of the call of {self._root(module)[1]}")

    def name_root(self, module: torch.nn.Module, name: str) -> None:
        """Call a top-level module `name` in module paths."""
        self.roots.pop(id(module), None)
        self._root(module, name)

    def _root(self, module: torch.nn.Module, name: str | None = None) -> tuple[Any, str, dict[int, str]]:
        entry = self.roots.get(id(module))
        if entry is None or entry[0] is not module:
            name = name or _variable_name(module) or type(module).__name__
            paths = {id(m): sub for sub, m in module.named_modules()}
            entry = self.roots[id(module)] = (module, name, paths)
            for sub, p in module.named_parameters():
                self.param_names.setdefault(id(p), f"{name}.{sub}")
            for sub, b in module.named_buffers():
                self.param_names.setdefault(id(b), f"{name}.{sub}")
        return entry

    def optimizer_post_hook(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.optimizer_steps += 1
        if self.trace is not None:
            self.end_step(f"{type(optimizer).__name__}.step()")
            self.in_steps = True
        if self.options.steps is not None and self.optimizer_steps >= self.options.steps:
            # raised when the next step starts, so that the program ends this one (its logging)
            plural = "s" if self.optimizer_steps != 1 else ""
            self.stop_pending = (f"--steps {self.options.steps}: stopped after {self.optimizer_steps} "
                                 f"optimizer step{plural}")

    def optimizer_pre_hook(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self.stop_pending is not None:
            raise AnalysisStopped(self.stop_pending)

    # -- compiled mode: graphs

    def end_step(self, cause: str) -> None:
        """A step boundary of compiled mode: run the graph recorded so far."""
        trace = self.trace
        if trace is None or context.trace is not trace:
            return
        self.boundary = (cause, self.current_site())
        try:
            trace.sync()
        except Exception as error:
            raise AnalysisStopped(f"a compiled graph failed at {cause}: {type(error).__name__}: {error}",
                                  failed=True) from error
        finally:
            self.boundary = None
        trace.segment = 0

    def note_graph(self, pending: list, inputs: list, scalars: list, key: Any, fn: Any) -> None:
        built = metrics.cache_misses > self._misses
        self._misses = metrics.cache_misses
        new_reasons = metrics.recompile_reasons[self._reasons:]
        self._reasons = len(metrics.recompile_reasons)
        g = self.graph_by_key.get(key)
        if g is None:
            ops = Counter(scope_name(entry[0][0]) for entry in key[0])
            g = self.graph_by_key[key] = _Graph(len(self.graphs), "trace", ops)
            self.graphs.append(g)
            if id(fn) in self.sharded:
                self.sharded[id(fn)][1] = g.index
            if self.options.verbosity >= 2:
                specs = [input_spec(v) for v in inputs]
                values = [scalar_operand(s.value) for s in scalars]
                g.lower = lambda fn=fn, specs=specs, values=values: fn.lower(specs, values)
                g.site_of = self._labelled_site
        g.runs += 1
        if self.boundary is not None:
            cause, site = self.boundary
        else:
            site = self.current_site()
            cause = f"host read by {self.current_op}" if self.current_op else "host read"
            self.host_syncs[(self.current_op or "", site)] += 1
        g.ended_by[(cause, site)] += 1
        position = self.trace.segment - 1 if self.trace is not None else 0
        if built:
            if position in self._compiled_positions:
                why = self._name_inputs(new_reasons[-1], inputs) if new_reasons else "the graph changed"
                self.recompiles.append({"graph": g.index, "reason": why, "site": site})
            else:
                why = (
                    "first compilation"
                    if self.in_steps
                    else "first compilation (the program's setup, before its first step)"
                )
            g.compiles.append({"reason": why, "run": g.runs, "ended_by": cause, "site": site})
        if self.in_steps:
            self._compiled_positions.add(position)
        if self._label_graphs:
            graph_module.NODE_LABELS.clear()

    def _labelled_site(self, scopes: list[str]) -> Site | None:
        for scope in scopes:
            if scope.startswith("site") and scope[4:].isdigit() and int(scope[4:]) < len(self.site_list):
                return self.site_list[int(scope[4:])]
        return None

    def watch_jax_graph(self, graph: Any, dynamic: tuple, statics: tuple) -> None:
        """Dynamo mode: every call of one of the backend's jitted ATen graphs (or of a
        JAX partition of one), recorded as a program of its own."""
        key = (id(graph), statics)
        g = self._aten_programs.get(key)
        if g is None:
            ops = Counter(_op_name(n.target) for n in graph.graph.nodes
                          if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload))
            g = self._aten_programs[key] = _Graph(len(self.graphs), "aten", ops)
            self.graphs.append(g)
            if key in self.sharded:
                self.sharded[key][1] = g.index
            g.compiles.append({"reason": "first trace of this ATen graph for these inputs", "run": 1, "ended_by": "",
                               "site": _NO_SITE})
            if self.options.verbosity >= 2:
                # Each op runs as a call of its own eager executable inside these
                # programs, whose instructions name their aten op but not the FX node
                # (the call instructions carry no metadata): no call sites here.
                def lower(graph: Any = graph, dynamic: tuple = dynamic, statics: tuple = statics) -> Any:
                    calls = dict(metrics.calls_by_id)  # tracing again must not count its ops
                    try:
                        return graph.jitted.lower(dynamic, statics)
                    finally:
                        metrics.calls_by_id.clear()
                        metrics.calls_by_id.update(calls)

                g.lower = lower
        g.runs += 1

    def watch_sharded_trace(self, fn: Any, inputs: list, scalars: list) -> None:
        """Every graph a trace runs (compiled mode's, the program's own compile()): one
        laid out over several devices is kept, to list its collectives."""
        key = id(fn)
        if key in self.sharded or key in self._one_device:
            return
        graph = sharded_report.traced_graph(fn, inputs, scalars)
        if graph is None:
            self._one_device.add(key)
        else:
            self.sharded[key] = [graph, None]

    def watch_sharded_dynamo(self, graph: Any, dynamic: tuple, statics: tuple) -> None:
        """The same for the torch.compile backend's jitted ATen graphs."""
        key = (id(graph), statics)
        if key in self.sharded or key in self._one_device:
            return
        found = sharded_report.dynamo_graph(graph, dynamic, statics)
        if found is None:
            self._one_device.add(key)
        else:
            self.sharded[key] = [found, None]

    def sharded_collectives(self) -> list[tuple]:
        """(program index or None, kind of program, devices, collectives or the error
        that stopped reading them) of each program laid out over several devices, read
        from XLA's optimized HLO (compiling each once more)."""
        out = []
        calls = dict(metrics.calls_by_id)  # lowering a graph again must not count its ops
        try:
            for graph, program in self.sharded.values():
                try:
                    found: Any = graph.collectives()
                except Exception as error:
                    found = f"{type(error).__name__}: {error}"[:400]
                out.append((program, graph.kind, graph.devices, found))
        finally:
            metrics.calls_by_id.clear()
            metrics.calls_by_id.update(calls)
        return out

    def _name_inputs(self, reason: str, inputs: list) -> str:
        match = re.match(r"graph input (\d+) changed", reason)
        if match and int(match.group(1)) < len(inputs):
            name = self._input_names.get(id(inputs[int(match.group(1))]))
            if name:
                return f"{reason} ({name})"
        return reason

    # the rest of a trace's observer (Note [Trace observers] in exec/trace.py)

    def note_key(self, store: Any) -> None:
        pass

    def note_read(self, v: Any, store: Any, array: Any) -> None:
        pass

    def fail(self, why: str) -> None:
        pass

    def note_owner(self, store: Any, t: Any, v: Any) -> None:
        if v is not None:
            name = self.param_names.get(id(t))
            if name is not None:
                self._input_names[id(v)] = name

    # -- dynamo mode

    def dynamo_backend(self, gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        """The analysis's torch.compile backend: the `xla_native` backend, with each ATen
        graph's unsupported nodes recorded at their user lines."""
        from torch._dynamo.backends.common import aot_autograd

        register_loaded_library_ops()  # Note [Library operators] in exec/custom_ops.py
        reason = self._dynamo_reason(gm)
        g = _Graph(len(self.graphs), "dynamo", Counter(
            str(n.target) if not callable(n.target) else getattr(n.target, "__name__", str(n.target))
            for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")))
        self.graphs.append(g)
        g.compiles.append({"reason": reason, "run": 0, "ended_by": "", "site": self.current_site()})

        root = self._dynamo_root

        def watch(compiler: Callable, backward: bool = False) -> Callable:
            def compile_graph(aten_gm: torch.fx.GraphModule, inputs: Any = None) -> Callable:
                self._note_aten_graph(aten_gm, root, backward)
                return compiler(aten_gm, inputs)

            for attr in ("_is_wrapped_bw_compiler",):
                if hasattr(compiler, attr):
                    setattr(compile_graph, attr, getattr(compiler, attr))
            return compile_graph

        inner = aot_autograd(
            fw_compiler=watch(dynamo._compile_forward_graph),
            bw_compiler=watch(dynamo._compile_backward_graph, True),
            inference_compiler=watch(dynamo.compile_aten_graph),
            decompositions=dynamo.decompositions(),
        )
        compiled = inner(gm, example_inputs)

        def run(*args: Any) -> Any:
            g.runs += 1
            return compiled(*args)

        return run

    def _dynamo_reason(self, gm: torch.fx.GraphModule) -> str:
        from torch._dynamo.utils import guard_failures

        reasons = []
        for code, failures in guard_failures.items():
            seen = self._dynamo_failures.get(code, 0)
            if len(failures) > seen:
                where = (
                    ""
                    if code.co_filename.startswith(_TORCH_DIR)
                    else f" in {code.co_name} ({code.co_filename}:{code.co_firstlineno})"
                )
                reasons += [f"guard failed{where}: {re.sub(r'^[0-9/]+: ', '', r)}" for r in failures[seen:]]
                self._dynamo_failures[code] = len(failures)
        site = self.current_site()
        for r in reasons:
            self.recompiles.append({"graph": len(self.graphs), "reason": r, "site": site})
        return "; ".join(reasons) if reasons else "first compilation"

    def _note_aten_graph(self, gm: torch.fx.GraphModule, root: str, backward: bool) -> None:
        for n in gm.graph.nodes:
            if n.op != "call_function" or not isinstance(n.target, torch._ops.OpOverload):
                continue
            if dynamo.is_supported(n.target):
                continue
            rec = self.ops.get(id(n.target))
            if rec is None:
                rec = self.ops[id(n.target)] = _Op(n.target)
            entry = self.unsupported.setdefault(rec.name, _Unsupported())
            reason = "listed as fallback" if rec.section == "fallback" else (
                "not in the manifest" if rec.section == UNLISTED else "needs values on the host inside a graph")
            entry.reasons[reason] += 1
            entry.sites[(_fx_site(n, root, backward), reason)] += 1  # graph nodes there: the calls are counted per op

    def note_graph_break(self, message: str) -> None:
        match = re.search(r"in user code at (.+):(\d+)", message)
        site = Site(match.group(1), int(match.group(2)), "", "") if match else _NO_SITE
        reason_lines = [
            line.strip() for line in message.split("Graph Break Reason:", 1)[-1].splitlines() if line.strip()
        ]
        reason = " ".join(line for line in reason_lines[:3] if not line.startswith("Hint"))
        self.graph_breaks[(reason[:400], site)] += 1

    # -- installation

    def start(self) -> None:
        from torch.nn.modules import module as nn_module
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        self._metrics_before = dict(metrics.calls_by_id)
        self._fallbacks_before = Counter(metrics.fallback_calls)
        self._misses = metrics.cache_misses
        self._reasons = len(metrics.recompile_reasons)
        saved_fallback = config.allow_cpu_fallback
        config.allow_cpu_fallback = False  # unlisted ops raise, and are recorded, instead of warning once
        self._undo.append(lambda: setattr(config, "allow_cpu_fallback", saved_fallback))
        # our lowerings are what the analysis runs and checks, never PyTorch's kernels
        # answering first calls (Note [First calls on PyTorch CPU])
        saved_first_calls = config.first_calls_on_cpu
        config.first_calls_on_cpu = False
        self._undo.append(lambda: setattr(config, "first_calls_on_cpu", saved_first_calls))
        graph_module.GRAPH_WATCHERS.append(self.watch_sharded_trace)
        self._undo.append(lambda: graph_module.GRAPH_WATCHERS.remove(self.watch_sharded_trace))
        dynamo.GRAPH_WATCHERS.append(self.watch_sharded_dynamo)
        self._undo.append(lambda: dynamo.GRAPH_WATCHERS.remove(self.watch_sharded_dynamo))
        mode = self.options.mode
        if mode != "dynamo":
            pre = nn_module.register_module_forward_pre_hook(self.module_pre_hook)
            post = nn_module.register_module_forward_hook(self.module_post_hook, always_call=True)
            self._undo += [pre.remove, post.remove]
        opt = register_optimizer_step_post_hook(self.optimizer_post_hook)
        opt_pre = register_optimizer_step_pre_hook(self.optimizer_pre_hook)
        self._undo += [opt.remove, opt_pre.remove]
        if mode == "dynamo":
            self._start_dynamo()
            return
        param_hook = nn_module.register_module_parameter_registration_hook(_parameter_to_device)
        buffer_hook = nn_module.register_module_buffer_registration_hook(_buffer_to_device)
        self._undo += [param_hook.remove, buffer_hook.remove]
        ops = _OpWatch(self)
        functions = _FunctionWatch(self)
        if mode == "compiled":
            self.trace = Trace(self)
            outer = context.trace
            context.trace = self.trace
            self._undo.append(lambda: setattr(context, "trace", outer))
        ops.__enter__()
        self._undo.append(lambda: ops.__exit__(None, None, None))
        functions.__enter__()
        self._undo.append(lambda: functions.__exit__(None, None, None))

    def _start_dynamo(self) -> None:
        import logging

        import torch._dynamo

        analysis = self

        class BreakLog(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                try:
                    analysis.note_graph_break(record.getMessage())
                except Exception:  # a report detail: never break the program
                    pass

        logger = logging.getLogger("torch._dynamo.symbolic_convert.__graph_breaks")
        handler = BreakLog()
        level, propagate = logger.level, logger.propagate
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
        logger.addHandler(handler)

        def undo_log() -> None:
            logger.removeHandler(handler)
            logger.setLevel(level)
            logger.propagate = propagate

        self._undo.append(undo_log)
        dynamo.GRAPH_WATCHERS.append(self.watch_jax_graph)
        self._undo.append(lambda: dynamo.GRAPH_WATCHERS.remove(self.watch_jax_graph))
        from torch._dynamo.utils import guard_failures

        self._dynamo_failures = {code: len(f) for code, f in guard_failures.items()}
        original_call = torch.nn.Module.__call__
        compiled: dict[int, Any] = {}
        depth = [0]

        def call(module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
            if (depth[0] or isinstance(module, (torch._dynamo.eval_frame.OptimizedModule, torch.fx.GraphModule))
                    or torch.compiler.is_compiling() or _is_library_caller(sys._getframe(1))):
                return original_call(module, *args, **kwargs)  # not a call of the program's own
            if self.stop_pending is not None:
                raise AnalysisStopped(self.stop_pending)
            if self.options.steps is not None and self.optimizer_steps == 0 and self.top_calls >= self.options.steps:
                raise AnalysisStopped(f"--steps {self.options.steps}: stopped before call {self.top_calls + 1} of a "
                                      "top-level module (the program steps no optimizer)")
            self.top_calls += 1
            fn = compiled.get(id(module))
            if fn is None or fn[0] is not module:
                fn = compiled[id(module)] = (module, torch.compile(module, backend=self.dynamo_backend),
                                             _variable_name(module) or type(module).__name__)
            self._dynamo_root = fn[2]
            depth[0] += 1
            try:
                return fn[1](*args, **kwargs)
            finally:
                depth[0] -= 1

        torch.nn.Module.__call__ = call
        self._undo.append(lambda: setattr(torch.nn.Module, "__call__", original_call))

    def finish(self) -> None:
        if self.trace is not None and context.trace is self.trace:
            self.boundary = ("end of the program", _NO_SITE)
            try:
                self.trace.sync()
            except Exception:
                settle_failed(self.trace)
            self.boundary = None
            self.trace.active = False
        while self._undo:
            undo = self._undo.pop()
            try:
                undo()
            except Exception:
                pass
        graph_module.NODE_LABELS.clear()
        fold_replayed_ops()

    def op_counts_since_start(self) -> dict[str, tuple[int, int]]:
        """Dynamo mode: calls per op since the start (the metrics count ops of compiled
        graphs as they run), and how many ran on PyTorch CPU."""
        fold_replayed_ops()
        out: dict[str, list[int]] = {}
        for k, n in metrics.calls_by_id.items():
            n -= self._metrics_before.get(k, 0)
            op = metrics.ops_by_id.get(k)
            if n > 0 and op is not None:
                out.setdefault(_op_name(op), [0, 0])[0] += n
        for name, n in metrics.fallback_calls.items():
            n -= self._fallbacks_before.get(name, 0)
            if n > 0:
                out.setdefault(canonical_name(name), [0, 0])[1] += n
        return {k: (v[0], v[1]) for k, v in out.items()}


def _fx_site(node: torch.fx.Node, root: str, backward: bool) -> Site:
    """The call site of an ATen graph's node, from the stack trace and module stack
    Dynamo recorded (a backward graph's nodes carry their forward op's stack trace)."""
    trace = node.meta.get("stack_trace") or ""
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', trace)
    stack = node.meta.get("nn_module_stack") or {}
    module = root if stack or not backward else ""
    if stack:
        path = list(stack.values())[-1]
        path = path[0] if isinstance(path, tuple) else str(path)
        path = re.sub(r"^L\['[^']*'\]\.?", "", path)
        module = f"{root}.{path}" if path and root else (path or root)
    backward_of = "backward graph" if backward else ""
    if not frames:
        return Site("<unknown>", 0, "", module, backward_of)
    file, line, function = frames[-1]
    return Site(file, int(line), function, module, backward_of)


def _is_library_caller(frame: Any) -> bool:
    """Whether a frame is torch's, this package's, or code that torch.fx generated."""
    filename = frame.f_code.co_filename
    return filename.startswith(_TORCH_DIR) or filename.startswith("<eval_with_key") or _is_ours(filename)


def _is_ours(filename: str) -> bool:
    return any(filename.startswith(d) for d in _our_dirs())


_OUR_DIRS: list[tuple[str, ...]] = []


def _our_dirs() -> tuple[str, ...]:
    if not _OUR_DIRS:
        runtime = str(Path(__file__).resolve().parents[1]) + os.sep
        generated = sys.modules.get("xla_native_functions")
        dirs = [runtime, _LOWERINGS, _SHAPE_FNS]
        if generated is not None and getattr(generated, "__file__", None):
            dirs.append(str(Path(generated.__file__).parent) + os.sep)
        _OUR_DIRS.append(tuple(dirs))
    return _OUR_DIRS[0]


def _variable_name(module: torch.nn.Module) -> str | None:
    """The name the program calls a top-level module by: a variable of the calling
    frame, or an attribute of its `self`."""
    frame = user_frame_object(2)
    if frame is None:
        return None
    for name, v in frame.f_locals.items():
        if v is module and not name.startswith("_"):
            return name
    owner = frame.f_locals.get("self")
    if owner is not None and owner is not module:
        for name, v in vars(owner).items() if hasattr(owner, "__dict__") else ():
            if v is module:
                return f"self.{name}"
        if isinstance(owner, torch.nn.Module):
            for name, v in owner.named_children():
                if v is module:
                    return f"self.{name}"
    if frame.f_globals is not frame.f_locals:
        for name, v in frame.f_globals.items():
            if v is module and not name.startswith("_"):
                return name
    return None


def _to_device(t: Any) -> Any:
    if (
        isinstance(t, torch.Tensor)
        and not isinstance(t, XlaTensor)
        and t.device.type == "cpu"
        and t.layout == torch.strided
    ):
        return from_array(cpu_to_jax(t.detach()))
    return None


def _parameter_to_device(module: torch.nn.Module, name: str, param: Any) -> Any:
    moved = _to_device(param) if param is not None else None
    if moved is None:
        return None
    return torch.nn.Parameter(moved, requires_grad=param.requires_grad)


def _buffer_to_device(module: torch.nn.Module, name: str, buffer: Any) -> Any:
    return _to_device(buffer) if buffer is not None else None


def _check_lowering(func: Any, args: tuple, kwargs: dict) -> str | None:
    """Compiled mode: the reason the op cannot be lowered for these arguments, found by
    lowering it abstractly on stand-ins of their shapes and dtypes (jax.eval_shape), or
    None. Ops that need values on the host are not checked this way."""
    if HANDLERS.get(id(func)) is None:
        return None  # unlisted: raises when recorded, and is handled there
    name = _op_name(func).removeprefix("aten::").replace(".", "_")
    if name in policy("host_only"):
        return None
    flat, spec = tree_flatten((args, kwargs))
    positions = [i for i, x in enumerate(flat) if isinstance(x, XlaTensor)]
    if not positions:
        return None
    specs = [jax.ShapeDtypeStruct(tuple(flat[i].shape), TORCH_TO_NUMPY[flat[i].dtype]) for i in positions]

    def run(*arrays: Any) -> Any:
        new = list(flat)
        for i, a in zip(positions, arrays):
            new[i] = from_array(a)
        a, k = tree_unflatten(new, spec)
        out = func(*a, **k)
        return [value(t) for t in tree_flatten(out)[0] if isinstance(t, XlaTensor)]

    try:
        with untraced(), X64:
            jax.eval_shape(run, *specs)
    except (
        jax.errors.ConcretizationTypeError,
        jax.errors.TracerArrayConversionError,
        jax.errors.TracerBoolConversionError,
        jax.errors.TracerIntegerConversionError,
    ):
        return None  # needs values: checked when it runs
    except AnalysisStopped:
        raise
    except Exception as error:
        reason = _failure_reason(error)
        if reason.startswith("shape function raised"):
            return None  # PyTorch's error for these arguments: raised again when the op is recorded
        return reason
    return None


class _OpWatch(TorchDispatchMode):
    """Every aten op the program issues, first (Note [Analysis]); it also does the
    environment's work (frontends/env.py: factories and lifted CPU data on our device),
    which as a second dispatch mode would cost another Python call per op."""

    def __init__(self, analysis: Analysis):
        super().__init__()
        self.analysis = analysis

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # PyTorch wraps a mode's __torch_dispatch__ to keep Dynamo out of it, at about
        # 10 us per op; analysed programs run no Dynamo through this mode (dynamo mode
        # uses no dispatch mode).
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return self.analysis.run_op(func, args, kwargs or {})


_COMPOSITE: dict[Any, tuple[str, frozenset[str], bool] | None] = {}


def _composite_packet(func: Any) -> tuple[str, frozenset[str], bool] | None:
    """The aten operator named like a torch function (`linear` -> `aten::linear`), if
    some overload of it is CompositeImplicitAutograd (PyTorch decomposes it above the
    backend): (its name, those overloads, whether they are all its overloads)."""
    try:
        return _COMPOSITE[func]
    except KeyError:
        pass
    except TypeError:  # unhashable
        return None
    name = getattr(func, "__name__", "")
    found = None
    if name and not name.startswith("_"):
        try:
            packet = getattr(_aten, name)
        except (AttributeError, RuntimeError):
            packet = None
        if packet is not None:
            composite, others = [], 0
            for ov in packet.overloads():
                try:
                    op = getattr(packet, ov)
                    if torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd"):
                        composite.append(ov)
                    else:
                        others += 1
                except Exception:  # TorchScript-only overloads
                    continue
            if composite:
                found = (f"aten::{name}", frozenset(composite), not others)
    _COMPOSITE[func] = found
    return found


def _composite_name(func: Any, args: tuple, kwargs: dict) -> str | None:
    """The CompositeImplicitAutograd overload this call of a torch function is, if it is one."""
    packet = _composite_packet(func)
    if packet is None:
        return None
    name, overloads, all_composite = packet
    try:
        overload = torch._C._jit_resolve_packet(name, *args, **kwargs)
    except Exception:  # a Python signature unlike the schema's
        return name if all_composite else None
    if overload not in overloads:
        return None
    return name if overload == "default" else f"{name}.{overload}"


class _FunctionWatch(TorchFunctionMode):
    """Torch functions: tags the autograd nodes each makes with its call site, and notes
    what PyTorch decomposed (Note [Analysis])."""

    def __init__(self, analysis: Analysis):
        super().__init__()
        self.analysis = analysis

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        a = self.analysis
        name = _composite_name(func, args, kwargs)
        if name is None:
            out = func(*args, **kwargs)
        else:
            outer = a.function_products
            a.function_products = products = []
            try:
                out = func(*args, **kwargs)
            finally:
                a.function_products = outer
            a.note_decomposition(name, products)
        if torch.is_grad_enabled():
            a.tag_autograd(out)
        return out


# ---------------------------------------------------------------- entry points


def _versions() -> dict[str, str]:
    def version(dist: str) -> str:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return "unknown"

    device = jax.devices()[0]
    return {
        "xla_native_functions": version("xla-native-functions"),
        "torch": torch.__version__,
        "jax": jax.__version__,
        "jaxlib": version("jaxlib"),
        "python": platform.python_version(),
        "platform": f"{platform.system()}-{platform.machine()}",
        "device": f"{DEVICE} on JAX {device.platform} ({device.device_kind})",
    }


def _describe_error(error: BaseException) -> dict:
    """The program's exception: where in its code it was raised, and its traceback
    from the program's first frame (the analysis's and runpy's frames left out)."""
    frames = traceback.extract_tb(error.__traceback__)
    while frames and (frames[0].filename.startswith(_our_dirs()) or "runpy" in frames[0].filename):
        frames = frames[1:]
    user = [f for f in frames if not f.filename.startswith(_our_dirs()) and not f.filename.startswith(_TORCH_DIR)]
    where = user[-1] if user else (frames[-1] if frames else None)
    text = "".join(["Traceback (most recent call last):\n", *traceback.format_list(frames[-12:]),
                    *traceback.format_exception_only(type(error), error)])
    return {
        "type": type(error).__name__,
        "message": str(error).strip()[:2000],
        "file": analysis_report.relative_path(where.filename) if where else "",
        "line": where.lineno if where else 0,
        "traceback": text,
    }


def run(analysis: Analysis, body: Callable[[], Any]) -> Any:
    """Run `body` under the analysis; errors of the program are recorded, and re-raised
    unless they end the run on purpose."""
    started = time.perf_counter()
    analysis.start()
    result = None
    try:
        result = body()
    except AnalysisStopped as stop:
        analysis.stopped = str(stop)
        analysis.stop_failed = stop.failed
    except SystemExit as exit_:
        code = exit_.code
        analysis.exit_status = code if isinstance(code, int) else (0 if code is None else 1)
    except KeyboardInterrupt:
        analysis.stopped = "interrupted (KeyboardInterrupt)"
        analysis.stop_failed = True
    except Exception as error:
        analysis.error = _describe_error(error)
    finally:
        analysis.finish()
        analysis.wall_seconds = time.perf_counter() - started
    return result


def analyze(fn: Callable, *args: Any, mode: str = "eager", verbosity: int = 0, accuracy: bool = False,
            output: str | os.PathLike | None = None, **kwargs: Any) -> dict:
    """Run `fn(*args, **kwargs)` once under the analysis and return its report as a dict
    (the `result.json` schema of docs/analyze.md; written to `output`/result.json too when
    given). A module is analysed on a copy (its parameters moved to this backend in
    eager and compiled modes; left on the CPU in dynamo mode), tensor arguments are
    moved likewise; factories inside `fn` create tensors on this backend. An error
    raised by `fn` is recorded in the report (`program.error`), not raised. A keyword
    argument of `fn` named like an option here has to be bound first (functools.partial)."""
    options = Options(mode=mode, verbosity=verbosity, accuracy=accuracy)
    options.check()
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    analysis = Analysis(options, name)
    if mode != "dynamo":
        if isinstance(fn, torch.nn.Module):
            fn = _moved(copy.deepcopy(fn))
            analysis.name_root(fn, "model")
        args, kwargs = tree_map(lambda x: _moved_tensor(x), (args, kwargs))
    if mode == "dynamo":
        analysis._dynamo_root = "model" if isinstance(fn, torch.nn.Module) else ""

        def body() -> Any:
            analysis.top_calls += 1
            return torch.compile(fn, backend=analysis.dynamo_backend)(*args, **kwargs)
    else:
        def body() -> Any:
            out = fn(*args, **kwargs)
            return out

    run(analysis, body)
    report = analysis_report.build(analysis, _versions())
    if output is not None:
        analysis_report.write(report, Path(output))
    return report


def _moved_tensor(x: Any) -> Any:
    if isinstance(x, torch.Tensor) and not isinstance(x, XlaTensor):
        moved = from_array(cpu_to_jax(x.detach()))
        if x.requires_grad:
            moved.requires_grad_(True)
        return moved
    return x


def _moved(module: torch.nn.Module) -> torch.nn.Module:
    for m in module.modules():
        for name, p in list(m._parameters.items()):
            if p is not None and not isinstance(p, XlaTensor):
                m._parameters[name] = torch.nn.Parameter(_moved_tensor(p.detach()), requires_grad=p.requires_grad)
        for name, b in list(m._buffers.items()):
            if b is not None and not isinstance(b, XlaTensor):
                m._buffers[name] = _moved_tensor(b)
    return module


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m xla_native_functions.analyze",
        description="Run a PyTorch script unmodified on xla_native_functions and report how it maps onto the backend: "
                    "supported and missing aten ops with their call sites, compiled graphs and why they recompiled "
                    "(docs/analyze.md).")
    parser.add_argument(
        "--output", default=DEFAULT_OUTPUT, help=f"directory of result.json (default ./{DEFAULT_OUTPUT})"
    )
    parser.add_argument("--verbosity", type=int, choices=(0, 1, 2), default=0,
                        help="1: the StableHLO operations of each aten op's lowering; 2: also the text of every "
                             "compiled graph, each instruction attributed to its aten op and call site")
    parser.add_argument("--mode", choices=MODES, default="eager",
                        help="eager (default): each op at once; compiled: the ops of each step as compiled graphs; "
                             "dynamo: top-level modules through torch.compile(backend='xla_native')")
    parser.add_argument(
        "--steps",
        type=int,
        default=None,
        help="stop after N optimizer steps (or N calls of a top-level module if the script steps no optimizer)",
    )
    parser.add_argument("--accuracy", action="store_true",
                        help="compare every op with PyTorch CPU (eager and compiled modes)")
    parser.add_argument("--fail-under", type=float, default=None, metavar="PCT",
                        help="exit with status 1 when the support percentage is below PCT")
    parser.add_argument("script", help="the Python script to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    return parser


def main(argv: list[str] | None = None) -> int:
    """`python -m xla_native_functions.analyze`: returns the exit status."""
    parser = _parser()
    ns = parser.parse_args(sys.argv[1:] if argv is None else argv)
    script = Path(ns.script)
    if not script.is_file():
        parser.error(f"{ns.script}: no such script")
    if ns.steps is not None and ns.steps < 1:
        parser.error(f"--steps must be at least 1, not {ns.steps}")
    options = Options(mode=ns.mode, verbosity=ns.verbosity, steps=ns.steps, accuracy=ns.accuracy)
    try:
        options.check()
    except ValueError as e:
        parser.error(str(e).removeprefix("analyze: "))
    output = Path(ns.output)
    analysis = Analysis(options, str(script))
    saved_argv, saved_path0 = sys.argv[:], sys.path[0] if sys.path else None
    sys.argv = [str(script), *ns.args]
    script_dir = str(script.resolve().parent)
    if sys.path:
        sys.path[0] = script_dir
    else:
        sys.path.insert(0, script_dir)

    def body() -> Any:
        runpy.run_path(str(script), run_name="__main__")

    try:
        with warnings.catch_warnings():
            run(analysis, body)
    finally:
        sys.argv = saved_argv
        if saved_path0 is not None:
            sys.path[0] = saved_path0
    report = analysis_report.build(analysis, _versions())
    existed = analysis_report.write(report, output)
    sys.stdout.flush()
    print(analysis_report.summary(report, output / "result.json", overwritten=existed), file=sys.stderr)
    status = 0
    if analysis.error is not None or analysis.stop_failed:
        status = 1
    elif analysis.exit_status:
        status = analysis.exit_status
    if ns.fail_under is not None and report["support"]["occurrences"]["percent"] < ns.fail_under:
        print(
            f"analyze: support {report['support_percentage']} is below --fail-under {ns.fail_under:g}%", file=sys.stderr
        )
        status = 1
    return status
