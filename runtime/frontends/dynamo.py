"""The `torch.compile` backend: `torch.compile(model, backend="xla_native")`.

Dynamo captures a graph and guards it; AOTAutograd turns it into ATen-level forward
and backward graphs (functionalized, decomposed to the ops we lower). Each ATen graph
becomes one `jax.jit` function: the graph is interpreted once per input signature,
at JAX trace time, on XlaTensors whose storages hold JAX tracers, so every node goes
through the same dispatch stubs, lowerings, view and in-place handling as eager mode
(Note [Tracer-backed tensors]). Later calls replay the compiled executable without
running Python per op.

Graphs with ops we do not lower are partitioned: maximal supported regions become
jitted functions, the remaining nodes run on PyTorch CPU, and `dynamo_report()`
names the ops that caused each split.

Note [Tracer-backed tensors]
An XlaTensor's storage may hold a JAX tracer instead of a concrete array. Eager
dispatch then calls each op's cached `jax.jit` executable with tracers, which JAX
inlines into the enclosing trace (jit inside jit, grad or vmap), so a torch program
run on such tensors *is* a JAX function. Anything that needs a concrete value
(`.item()`, `nonzero`, printing) raises JAX's concretization error instead.
"""

from __future__ import annotations

import collections
import contextlib
import operator
import time
import warnings
import weakref
from typing import Any, Callable

import jax
import numpy as np
import torch
import torch.fx
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.utils._pytree import tree_flatten, tree_unflatten

from ...shape_fns.rnn import lstm_runs_whole_layers
from ..core.context import untraced
from ..core.convert import (X64, cpu_to_jax, handover_copies, jax_to_cpu_handover, numpy_view, shared_array,
                            uncommitted)
from ..core.inference import composite_implicit
from ..core.tensor import DEVICE, XlaTensor, contiguous_strides, from_array
from ..core.views import non_overlapping_and_dense
from ..exec.custom_ops import register_loaded_library_ops
from ..exec import channels_last
from ..exec.eager import value
from ..exec.graph import dump_graph
from ..exec.keys import graph_seed, keys_from
from ..exec.layouts import memory_order
from ..exec.registry import DEVICE_KERNEL_CODES, REGISTRY, SECTIONS, policy
from ..exec.sharding import InputLayouts, constrain_array, input_layouts, place_input
from ..platform.backend import executions_run_inline, graph_compiler_options
from ..platform.config import config
from ..platform.metrics import ReplayedOps, metrics
from .dispatch import _AutogradEngine, device_kernel_codes, dispatch
from .env import Environment
from .moved_models import watch_graph_breaks

BACKEND_NAME = "xla_native"

_aten = torch.ops.aten

# Random ops draw from a per-call seed operand, so each replay gets new numbers
# without recompiling (runtime/supported/random.py draws its key on the host, which
# inside a trace would freeze one key into the executable).


def _draws_random(target: Any) -> bool:
    """Whether an op draws random numbers: their keys come from the graph's seed operand
    (`context.keys`), so that every call of the graph draws new ones."""
    return isinstance(target, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in target.tags

# Ops run as other ops inside our graphs. AOT graphs are functionalized, so a view's
# aliasing is never observed: `view` may run as a reshape. It has to where the graph
# relied on a layout we do not reproduce (a tensor from a PyTorch CPU partition arrives
# contiguous in its logical shape, so a permute followed by a view can be invalid on
# our side though valid on the original). `lift_fresh_copy` copies a constant the model
# made (`torch.tensor([...])` in its forward) into the graph; here the constant is
# already a graph value, so the copy is a clone.
_SUBSTITUTES = {_aten.view.default: _aten._unsafe_view.default, _aten.lift_fresh_copy.default: _aten.clone.default}

# Custom ops that libraries register so that torch.compile leaves their Python alone,
# and whose results are those of ops we lower; named by their qualified names, so the
# libraries need not be imported. transformers' mixture-of-experts layers call their
# grouped-product fallback under torch.compile (weights not in bfloat16): a loop of
# `mm`s over each expert's rows, zeros elsewhere, which is `_grouped_mm`.


def _transformers_grouped_mm(input: Any, weight: Any, offs: Any) -> Any:
    return torch._grouped_mm(input, weight, offs=offs.to(torch.int32))


def _transformers_grouped_mm_backward(input: Any, weight: Any, offs: Any, grad_output: Any) -> Any:
    offs = offs.to(torch.int32)
    return (torch._grouped_mm(grad_output, weight.transpose(1, 2), offs=offs),
            torch._grouped_mm(input.t(), grad_output, offs=offs))


def _fused_multiply_add(a: Any, b: Any, c: Any) -> Any:
    return a * b + c  # the prim's own definition; XLA contracts it to one fused op where it can


# inductor's `prims::fma`, which compiled optimizers' graphs contain (AdamW's foreach
# update, once torch._inductor is loaded), is one too.
_LIBRARY_OPS: dict[str, Callable] = {
    "transformers::grouped_mm_fallback": _transformers_grouped_mm,
    "transformers::grouped_mm_fallback_backward": _transformers_grouped_mm_backward,
    "prims::fma": _fused_multiply_add,
}

# Note [as_strided in AOT graphs]
# as_strided (and its copy and scatter forms) addresses its input's storage, so its
# result depends on the layout PyTorch gave the input: Longformer cuts overlapping
# chunks out of a transposed tensor that way. Here views run as reshapes and results
# are contiguous, so the input's storage order can differ from PyTorch's. The graph
# records PyTorch's layout of every value (node.meta["val"]); the input is first laid
# out as PyTorch laid it out (its values in PyTorch's memory order, one flat storage),
# and the op then addresses that storage relative to the input's first element. A
# layout with gaps or overlaps, or an address outside the input's own elements, has
# no such storage and raises. An input laid out as in PyTorch (a view of a graph
# input, say) is addressed as it is.
_STORAGE_ADDRESSED = {_aten.as_strided.default, _aten.as_strided_copy.default, _aten.as_strided_scatter.default}
# Python-level functions FX graphs use on sizes (symbolic ints are concrete while we
# trace, so these just compute).
_SIZE_OPS = {_aten.sym_size.int, _aten.sym_stride.int, _aten.sym_numel.default, _aten.sym_storage_offset.default}


# ---------------------------------------------------------------- statistics


class DynamoStats:
    """What the backend did: graphs received, partitions, JAX traces and calls."""

    def __init__(self):
        self.graphs = 0
        self.partitioned_graphs = 0
        self.jax_partitions = 0
        self.traces = 0
        self.calls = 0
        self.trace_seconds = 0.0
        self.split_ops: collections.Counter = collections.Counter()
        self.input_conversions = 0
        self.input_cache_hits = 0


stats = DynamoStats()


def reset_dynamo_stats() -> None:
    stats.__dict__.update(DynamoStats().__dict__)


def dynamo_report() -> str:
    """A summary of the torch.compile backend's work, including which ops split graphs."""
    s = stats
    lines = [
        f"xla_native_functions torch.compile backend ({BACKEND_NAME!r})",
        f"  ATen graphs compiled: {s.graphs} ({s.partitioned_graphs} partitioned, {s.jax_partitions} JAX functions)",
        f"  JAX traces: {s.traces} ({s.trace_seconds:.3f}s tracing and compiling)",
        f"  calls: {s.calls}; inputs converted: {s.input_conversions}, reused from the cache: {s.input_cache_hits}",
    ]
    if s.split_ops:
        lines.append("  ops run on PyTorch CPU, splitting graphs (op: nodes):")
        lines += [f"    {op}: {n}" for op, n in sorted(s.split_ops.items())]
    else:
        lines.append("  graph splits: none")
    return "\n".join(lines)


# ---------------------------------------------------------------- what we lower


def _op_name(target: Any) -> str:
    if isinstance(target, torch._ops.OpOverload):
        name = target._schema.name.removeprefix("aten::")
        return name if target._overloadname == "default" else f"{name}.{target._overloadname}"
    return getattr(target, "__name__", str(target))


def is_supported(target: Any) -> bool:
    """Whether an FX node's target can run inside a jitted graph."""
    if isinstance(target, torch._ops.OpOverload):
        if target in _SIZE_OPS or target in _SUBSTITUTES:
            return True
        if target._schema.name in _LIBRARY_OPS:
            return True
        if target not in REGISTRY or _op_name(target).replace(".", "_") in policy("host_only"):
            return False  # host_only: results on the host (Python numbers, data-dependent shapes)
        return SECTIONS.get(_op_name(target)) != "fallback"
    return target is operator.getitem or getattr(target, "__module__", None) in ("_operator", "math")


# Functions that, given an ATen graph's node, return what runs it between the jitted
# partitions instead of inside them (a callable taking the node's arguments, on PyTorch
# CPU tensors), or None: torch.distributed's collectives between processes run eagerly
# (frontends/distributed/process_group.py).
HOST_NODES: list[Callable[[torch.fx.Node], Callable | None]] = []


def _host_runner(node: torch.fx.Node) -> Callable | None:
    for find in HOST_NODES:
        run = find(node)
        if run is not None:
            return run
    return None


def _runs_in_jax(node: torch.fx.Node) -> bool:
    # A node that binds new unbacked sizes (`x[mask]`, `nonzero`, `unique` where Dynamo
    # captures ops with data-dependent output shapes) needs its inputs' values to know
    # its result's shape, which a jitted graph cannot give it: it runs between the
    # partitions, and the ops after it in a partition traced per concrete shape.
    if node.meta.get("unbacked_bindings"):
        return False
    return is_supported(node.target) and (not HOST_NODES or _host_runner(node) is None)


def decompositions() -> dict[Any, Callable]:
    """PyTorch's core ATen decompositions, minus the ops we lower as they are. (Those
    include the CPU flash-attention forward, whose decomposition in torch 2.13 returns a
    logsumexp that the backward kernel AOTAutograd still calls does not expect.)"""
    from torch._decomp import core_aten_decompositions

    # Composite operators in the registry (nn.LSTM's and nn.GRU's, which eager mode runs
    # as whole layers: runtime/supported/rnn.py) keep PyTorch's decompositions here.
    table = {op: fn for op, fn in core_aten_decompositions().items() if op not in REGISTRY or composite_implicit(op)}
    return {**table, **_DECOMPOSITIONS}


def _cholesky(self: torch.Tensor, upper: bool = False) -> torch.Tensor:
    # Eager mode's cholesky reads its error code on the host (runtime/supported/linalg.py),
    # which a jitted graph cannot: here the check is its own node, which runs between the
    # jitted partitions and raises PyTorch's error for a matrix that is not
    # positive-definite, as linalg.cholesky's does.
    factor, info = torch.ops.aten.linalg_cholesky_ex.default(self, upper=upper)
    torch.ops.aten._linalg_check_errors.default(info, "cholesky", is_matrix=self.dim() == 2)
    return factor


# Ops whose eager implementation reads the host, as ops the graphs can hold.
_DECOMPOSITIONS: dict[Any, Callable] = {torch.ops.aten.cholesky.default: _cholesky}


class _InputCache:
    """One slot per graph input position: what was passed for the CPU tensor seen
    there last, reused while it is the same tensor on the same memory with the same
    shape, strides and dtype. What is passed is never a copy: it reads the tensor's
    memory as it is at the call, so in-place writes need no reconversion, and writes
    through `.data` (`p.data.add_(...)`, as EMA updates and old optimizers do), which
    bump no version counter, are seen too. A tensor seen for the first time goes in as
    a NumPy view of its memory; seen again, as a JAX array sharing that memory, which
    a jitted call takes 1 to 3 us faster: parameters are shared once, at their second
    call, in inference and in training alike. Like the NumPy view, the shared array is
    not committed to its device, so the executable compiled at the first call serves
    the later ones (`convert.uncommitted`). Tensors NumPy cannot show are copied on
    every call. A slot is one tuple (tensor reference, key, what was passed), replaced
    whole, so threads calling the graph at once never pair one tensor's key with
    another's array."""

    __slots__ = ("slots",)

    def __init__(self, n: int):
        self.slots: list[tuple | None] = [None] * n

    def get(self, i: int, t: torch.Tensor) -> Any:
        if isinstance(t, XlaTensor):
            return value(t)
        slot = self.slots[i]
        key = (t.data_ptr(), t.shape, t.stride(), t.dtype)
        if slot is not None:
            ref, seen_key, arr = slot
            if ref() is t and seen_key == key:
                stats.input_cache_hits += 1
                if type(arr) is np.ndarray:  # seen twice: share it, once
                    shared = shared_array(t)
                    arr = _Unshareable(arr) if shared is None else uncommitted(shared)
                    self.slots[i] = (ref, key, arr)
                return arr.view if type(arr) is _Unshareable else arr
        stats.input_conversions += 1
        arr = numpy_view(t)
        if arr is None:
            self.slots[i] = None
            return cpu_to_jax(t)
        self.slots[i] = (weakref.ref(t), key, arr)
        return arr


class _Unshareable:
    """A NumPy view whose memory XLA could not take in place: passed as it is."""

    __slots__ = ("view",)

    def __init__(self, view: np.ndarray):
        self.view = view


# ---------------------------------------------------------------- one graph as one jax.jit

# Functions called with (graph, dynamic, statics) for every call of a JaxGraph's jitted
# function: `xla_native_functions.hlo(..., mode="dynamo")` listens here.
GRAPH_WATCHERS: list[Callable] = []

_TENSOR, _DYNAMIC, _STATIC = 0, 1, 2

# Note [Graph outputs]
# How each output of a traced graph reaches the caller is settled once per trace, from
# the output's kind, dtype and size, so that a call runs one short loop over the
# outputs: _KEEP wraps the JAX array as our tensor (saved activations that only the
# backward graph reads), _COPY copies a small result through NumPy, _SHARE hands a
# larger one to torch through DLPack without a copy (convert.jax_to_cpu_handover's
# rule), _INPUT returns an input unchanged (the same tensor object), _SAME an earlier
# output again, _CONST a Python value.
_KEEP, _COPY, _SHARE, _INPUT, _SAME, _CONST = range(6)


def _handover(dtype: Any, size: int) -> int:
    return _COPY if handover_copies(dtype, size) else _SHARE


class JaxGraph:
    """An FX graph (ATen ops we lower) as one jitted JAX function, called with and
    returning PyTorch CPU tensors."""

    def __init__(self, gm: torch.fx.GraphModule, keep_on_jax: frozenset[int] = frozenset()):
        self.gm = gm
        self.graph = gm.graph
        self.placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.has_random = any(n.op == "call_function" and _draws_random(n.target) for n in gm.graph.nodes)
        self.constants = {}
        # AOTAutograd calls its compilers under its fake-tensor mode; constants are real.
        # They are copied (nothing outside the graph writes them), in x64 mode.
        with unset_fake_temporarily():
            for n in gm.graph.nodes:
                if n.op == "get_attr":
                    obj = _fetch_attr(gm, n.target)
                    self.constants[n.target] = cpu_to_jax(obj) if isinstance(obj, torch.Tensor) else obj
        self.kinds: tuple[int, ...] | None = None
        self.strides = _expected_strides(gm)
        # Outputs only the backward graph reads (saved activations) stay JAX arrays,
        # wrapped as our tensors: no transfer to torch and back. A backward graph
        # partitioned around a CPU op gets them in the layout PyTorch gave them
        # (`_Partitioned`), whatever layout the forward promised.
        self.keep_on_jax = keep_on_jax
        self.cache = _InputCache(len(self.placeholders))
        # How each trace's flat array results map back to the graph's outputs.
        self.layout: dict[Any, tuple] = {}
        # the ops each trace ran, counted again by every later call (Note [Counting
        # replayed ops] in platform/metrics.py), by the trace's static arguments
        self.op_counts: dict[Any, ReplayedOps] = {}
        # XLA options chosen by the graph's ops, as compile() chooses them (Note [XLA CPU
        # library fusions]).
        ops = collections.Counter(_op_name(n.target).split(".")[0] for n in gm.graph.nodes if n.op == "call_function")
        self.jitted = jax.jit(channels_last.for_graph(self._trace, ops, static_argnums=(1,)), static_argnums=(1,),
                              compiler_options=graph_compiler_options(ops))

    # -- trace time

    def _trace(self, dynamic: tuple, statics: tuple):
        started = time.perf_counter()
        stats.traces += 1
        calls = metrics.calls_by_id
        calls_before = dict(calls)
        try:
            with untraced(), torch.no_grad():
                result = self._interpret(dynamic, statics)
        finally:
            stats.trace_seconds += time.perf_counter() - started
        self.op_counts[statics] = ReplayedOps(
            tuple((k, n - calls_before.get(k, 0)) for k, n in calls.items() if n > calls_before.get(k, 0)))
        return result

    def _interpret(self, dynamic: tuple, statics: tuple):
        dyn = iter(dynamic[1:] if self.has_random else dynamic)
        stat = iter(statics)
        seed = dynamic[0] if self.has_random else None
        env: dict[torch.fx.Node, Any] = {}
        inputs: list[Any] = []
        layouts = statics[-1] if statics and statics[-1].__class__ is InputLayouts else None
        for i, (node, kind) in enumerate(zip(self.placeholders, self.kinds)):
            if kind == _TENSOR:
                arr = next(dyn)
                if layouts is not None and arr is not None:
                    arr = constrain_array(arr, layouts[i])  # Note [Layouts of CPU tensors] in exec/sharding.py
                v = None if arr is None else from_array(arr)
            elif kind == _DYNAMIC:
                v = next(dyn)
            else:
                v = next(stat)
            env[node] = v
            inputs.append(v)
        versions = [x._store.version if isinstance(x, XlaTensor) else None for x in inputs]
        with keys_from(seed) if seed is not None else contextlib.nullcontext():
            out_node = self._run_nodes(env)
        flat, spec = tree_flatten(out_node.args[0])
        flat = [env[x] if isinstance(x, torch.fx.Node) else x for x in flat]
        arrays: list[Any] = []
        plan: list[tuple] = []  # per output: (how, what, strides), Note [Graph outputs]
        seen: dict[int, int] = {}
        input_pos = {id(x): i for i, x in enumerate(inputs) if isinstance(x, XlaTensor)}
        for j, o in enumerate(flat):
            if isinstance(o, XlaTensor):
                if id(o) in seen:
                    plan.append((_SAME, seen[id(o)], None))
                elif id(o) in input_pos and o._store.version == versions[input_pos[id(o)]]:
                    plan.append((_INPUT, input_pos[id(o)], None))
                else:
                    array = value(o)
                    how = _KEEP if j in self.keep_on_jax else _handover(array.dtype, array.size)
                    plan.append((how, len(arrays), self.strides.get(j) if how != _KEEP else None))
                    arrays.append(array)
                seen[id(o)] = j
            elif isinstance(o, torch.Tensor):
                raise TypeError(f"graph output {j} is a {type(o).__name__}, not a tensor of this backend")
            else:
                plan.append((_CONST, o, None))
        # Inputs written in place: their new values are extra outputs, copied into
        # the caller's tensors after the call.
        mutated = []
        for i, x in enumerate(inputs):
            if isinstance(x, XlaTensor) and x._store.version != versions[i]:
                mutated.append((i, len(arrays)))
                arrays.append(x._store.array)
        # Python numbers among the outputs come from sizes, which AOT graphs take as
        # (static) int inputs: the statics identify them. A flat list of outputs (as
        # AOT graphs return) needs no unflattening.
        unnested = spec.type in (list, tuple) and all(c.is_leaf() for c in spec.children())
        self.layout[statics] = (tuple(plan), spec.type if unnested else spec, tuple(mutated))
        return arrays

    def _run_nodes(self, env: dict) -> torch.fx.Node:
        """Run the graph's nodes after its placeholders, in `env`; its output node."""
        for node in self.graph.nodes:
            op = node.op
            if op == "placeholder":
                continue
            if op == "output":
                return node
            if op == "get_attr":
                c = self.constants[node.target]
                env[node] = from_array(c) if isinstance(c, jax.Array) else c
                continue
            if op != "call_function":
                raise NotImplementedError(
                    f"{op} nodes are not supported by the {BACKEND_NAME} backend ({node.format_node()})"
                )
            args = torch.fx.node.map_arg(node.args, env.__getitem__)
            kwargs = torch.fx.node.map_arg(node.kwargs, env.__getitem__)
            target = node.target
            target = _SUBSTITUTES.get(target, target)
            if target in _STORAGE_ADDRESSED:
                env[node] = _with_pytorch_layout(target, node, args, kwargs)
            elif isinstance(target, torch._ops.OpOverload) and target._schema.name in _LIBRARY_OPS:
                env[node] = _LIBRARY_OPS[target._schema.name](*args, **kwargs)
            elif isinstance(target, torch._ops.OpOverload):
                if "device" in kwargs and kwargs["device"] is not None:
                    kwargs = dict(kwargs, device=DEVICE)  # AOT graphs name the CPU device of the fake inputs
                if target in _SIZE_OPS:
                    env[node] = target(*args, **kwargs)
                else:
                    env[node] = dispatch(target, args, kwargs)
            else:
                env[node] = target(*args, **kwargs)
        raise AssertionError("an FX graph ends with its output node")

    # -- call time

    def _classify(self, args: tuple) -> tuple[int, ...]:
        kinds = []
        for a in args:
            if isinstance(a, torch.Tensor) or a is None:
                kinds.append(_TENSOR)
            elif isinstance(a, float):
                kinds.append(_DYNAMIC)
            else:
                kinds.append(_STATIC)
        return tuple(kinds)

    # AOTAutograd's boxed convention (one list, which we may clear to free inputs
    # early) where it asks for it; its backward wrapper calls with plain arguments.
    _boxed_call = True

    def __call__(self, *args) -> Any:
        if len(args) == 1 and type(args[0]) is list:
            flat = tuple(args[0])
            args[0].clear()
            return self.run(*flat)
        return self.run(*args)

    def run(self, *args):
        stats.calls += 1
        kinds = self.kinds
        if kinds is None:
            kinds = self.kinds = self._classify(args)
        dynamic: list[Any] = []
        statics: list[Any] = []
        if self.has_random:
            dynamic.append(graph_seed())
        cache = self.cache
        layouts = input_layouts(args)  # Note [Layouts of CPU tensors] in exec/sharding.py
        with X64:
            for i, (a, kind) in enumerate(zip(args, kinds)):
                if kind == _TENSOR:
                    dynamic.append(None if a is None else cache.get(i, a) if layouts is None or layouts[i] is None
                                   else place_input(cache.get(i, a), layouts[i]))
                elif kind == _DYNAMIC:
                    dynamic.append(a)
                else:
                    statics.append(_static(a))
            if layouts is not None:
                statics.append(layouts)
            statics_t = tuple(statics)
            traces = stats.traces
            outs = self.jitted(tuple(dynamic), statics_t)
            if not executions_run_inline():  # inline, they are computed already (37 us for 77 outputs)
                jax.block_until_ready(outs)
            if stats.traces == traces:  # not traced now: count the ops as the trace did
                self.op_counts[statics_t].runs += 1
            elif config.debug_dump_graphs:
                dump_graph(self.jitted.lower(tuple(dynamic), statics_t).as_text(debug_info=True), "dynamo")
            for watch in GRAPH_WATCHERS:
                watch(self, tuple(dynamic), statics_t)
            plan, spec, mutated = self.layout[statics_t]
            results = []
            for how, x, stride in plan:
                if how == _COPY:
                    t = torch.from_numpy(np.array(outs[x]))
                elif how == _KEEP:
                    results.append(from_array(outs[x]))
                    continue
                elif how == _SHARE:
                    t = torch.from_dlpack(outs[x])
                elif how == _INPUT:
                    results.append(args[x])
                    continue
                elif how == _SAME:
                    results.append(results[x])
                    continue
                else:
                    results.append(x)
                    continue
                if stride is not None and t.stride() != stride:
                    t = torch.empty_strided(t.shape, stride, dtype=t.dtype).copy_(t)
                results.append(t)
            for i, k in mutated:
                with torch.no_grad():
                    args[i].copy_(jax_to_cpu_handover(outs[k]))
        if spec is list:
            return results
        return tuple(results) if spec is tuple else tree_unflatten(results, spec)


def _with_pytorch_layout(target: Any, node: torch.fx.Node, args: tuple, kwargs: dict) -> Any:
    """as_strided, as_strided_copy or as_strided_scatter of args[0] addressed as PyTorch
    stored it (Note [as_strided in AOT graphs])."""
    scatter = target is _aten.as_strided_scatter.default
    x, rest = args[0], dict(zip(("size", "stride", "storage_offset"), args[2:] if scatter else args[1:]), **kwargs)
    meta = node.args[0].meta.get("val") if isinstance(node.args[0], torch.fx.Node) else None
    if not isinstance(meta, torch.Tensor) or (tuple(x.stride()), x.storage_offset()) == (
        meta.stride(),
        meta.storage_offset(),
    ):
        return dispatch(target, args, kwargs)  # laid out as in PyTorch, on a storage made the same way
    shape, strides, first = tuple(meta.shape), tuple(meta.stride()), meta.storage_offset()
    order = memory_order(strides)
    size, stride = list(rest["size"]), list(rest["stride"])
    offset = (first if rest.get("storage_offset") is None else rest["storage_offset"]) - first
    last = offset + sum((n - 1) * st for n, st in zip(size, stride)) if all(n > 0 for n in size) else offset
    if (
        not non_overlapping_and_dense(shape, strides)
        or offset < 0
        or min(stride, default=0) < 0
        or last >= max(x.numel(), 1)
    ):
        raise NotImplementedError(
            f"{_op_name(target)} at {node.name}: its input's PyTorch layout (strides {list(strides)}) or the addresses "
            "it "
            f"reads (size {size}, stride {stride}) reach memory outside the input's elements, which the {BACKEND_NAME} "
            "backend cannot reproduce; run the model eagerly or with xla_native_functions.compile"
        )
    flat = x.permute(order).reshape(-1)  # x's values in PyTorch's memory order
    if not scatter:
        return dispatch(target, (flat, size, stride, offset), {})
    written = dispatch(target, (flat, args[1], size, stride, offset), {})
    inverse = sorted(range(len(order)), key=order.__getitem__)
    return written.reshape([shape[d] for d in order]).permute(inverse)


def _expected_strides(gm: torch.fx.GraphModule) -> dict[int, tuple[int, ...]]:
    """Strides of the graph's outputs as traced, where they are not contiguous. Our
    results come back contiguous; PyTorch kernels that later consume them (a CPU
    partition, the backward graph's saved activations) may depend on the layout the
    graph promised, as the CPU flash-attention backward does."""
    from torch._prims_common import is_non_overlapping_and_dense_or_false

    out = [n for n in gm.graph.nodes if n.op == "output"][0]
    flat, _ = tree_flatten(out.args[0])
    strides = {}
    for j, x in enumerate(flat):
        val = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
        if not isinstance(val, torch.Tensor):
            continue
        if any(isinstance(s, torch.SymInt) for s in (*val.shape, *val.stride())):
            # symbolic: the layout follows the call's sizes (int() of a size would
            # specialize it, which a dimension marked dynamic forbids)
            continue
        stride, shape = tuple(val.stride()), tuple(val.shape)
        if stride != contiguous_strides(shape) and is_non_overlapping_and_dense_or_false(val):
            strides[j] = stride
    return strides


def _static(a: Any) -> Any:
    if isinstance(a, torch.SymInt):
        return int(a)
    if isinstance(a, list):
        return tuple(a)
    return a


def _fetch_attr(gm: torch.nn.Module, target: str) -> Any:
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


# ---------------------------------------------------------------- partitioning


class _JaxSubgraph(torch.nn.Module):
    def __init__(self, fn: JaxGraph):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn.run(*args)


class _Partitioned:
    _boxed_call = True

    def __init__(self, gm: torch.fx.GraphModule):
        self.gm = gm
        self.placeholder_vals = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
        # the ops this graph runs on PyTorch CPU on every call, counted as op calls and
        # CPU fallbacks (Note [Counting replayed ops] in platform/metrics.py)
        cpu_ops = collections.Counter(n.target for n in gm.graph.nodes
                                      if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload))
        for op in cpu_ops:
            metrics.ops_by_id.setdefault(id(op), op)
        self.cpu_counts = ReplayedOps(tuple((id(op), n) for op, n in cpu_ops.items()),
                                      tuple((str(op), n) for op, n in cpu_ops.items()))

    def __call__(self, *args) -> Any:
        if len(args) == 1 and type(args[0]) is list:
            flat = list(args[0])
            args[0].clear()
        else:
            flat = list(args)
        for i, a in enumerate(flat):
            if isinstance(a, XlaTensor):  # a saved activation kept on the JAX side
                flat[i] = _to_cpu_like(a, self.placeholder_vals[i] if i < len(self.placeholder_vals) else None)
        self.cpu_counts.runs += 1
        return self.gm(*flat)


def _to_cpu_like(t: XlaTensor, val: Any) -> torch.Tensor:
    with X64:
        out = jax_to_cpu_handover(value(t))
    try:
        stride = tuple(int(s) for s in val.stride())
    except Exception:
        return out
    from torch._prims_common import is_non_overlapping_and_dense_or_false

    if stride != out.stride() and is_non_overlapping_and_dense_or_false(val):
        out = torch.empty_strided(out.shape, stride, dtype=out.dtype).copy_(out)
    return out


def compile_aten_graph(gm: torch.fx.GraphModule, example_inputs: Any = None) -> Callable:
    """Compile one ATen-level FX graph: one jitted function if we lower all its ops,
    otherwise supported regions as jitted functions and the rest on PyTorch CPU."""
    stats.graphs += 1
    unsupported = [n for n in gm.graph.nodes if n.op == "call_function" and not _runs_in_jax(n)]
    if not unsupported:
        stats.jax_partitions += 1
        return JaxGraph(gm)
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupport

    class Support(OperatorSupport):
        def is_node_supported(self, submodules, node):
            return node.op == "call_function" and _runs_in_jax(node)

    stats.partitioned_graphs += 1
    for n in unsupported:
        stats.split_ops[_op_name(n.target)] += 1
    partitioner = CapabilityBasedPartitioner(gm, Support(), allows_single_node_partition=True)
    partitions = partitioner.propose_partitions()
    fused = partitioner.fuse_partitions(partitions)
    for node in list(fused.graph.nodes):
        if node.op == "call_module" and node.target.startswith("fused_"):
            sub = getattr(fused, node.target)
            if not any(n.op == "call_function" and n.target is not operator.getitem for n in sub.graph.nodes):
                continue
            stats.jax_partitions += 1
            setattr(fused, node.target, _JaxSubgraph(JaxGraph(sub)))
        elif node.op == "call_function":
            node.target = _host_runner(node) or node.target
    fused.recompile()
    return _Partitioned(fused)


def _compile_forward_graph(gm: torch.fx.GraphModule, example_inputs: Any = None) -> Callable:
    keep: frozenset[int] = frozenset()
    context = torch._guards.TracingContext.try_get()
    saved = getattr(getattr(context, "fw_metadata", None), "tensors_saved_for_backwards_slice", None)
    # Compiled autograd traces the backward into a graph of its own, which Dynamo hands
    # us with the saved activations as inputs: they must be PyTorch CPU tensors there.
    if (isinstance(saved, slice) and not torch._dynamo.config.compiled_autograd
            and all(_runs_in_jax(n) for n in gm.graph.nodes if n.op == "call_function")):
        n_outputs = len(tree_flatten([n for n in gm.graph.nodes if n.op == "output"][0].args[0])[0])
        keep = frozenset(range(*saved.indices(n_outputs)))
        stats.graphs += 1
        stats.jax_partitions += 1
        return JaxGraph(gm, keep)
    return compile_aten_graph(gm, example_inputs)


def _compile_backward_graph(gm: torch.fx.GraphModule, example_inputs: Any = None) -> Callable:
    # Dynamo must not trace the compiler or the backward it returns. AOTAutograd's own
    # wrapper for that hides the boxed calling convention, so it is done here.
    compiled = torch._dynamo.disable(compile_aten_graph, reason="backward compiler")(gm, example_inputs)
    wrapped = torch._dynamo.disable(compiled, reason="compiled backward graph")
    wrapped._boxed_call = True
    return wrapped


_compile_backward_graph._is_wrapped_bw_compiler = True


def _run_runtime_without_dynamo() -> None:
    """Dynamo cannot trace an XlaTensor (a Python subclass whose data is a JAX array):
    code that `torch.compile` wraps and that meets one breaks the graph and runs the op
    eagerly, which calls our `__torch_dispatch__`. Dynamo would then try to compile the
    runtime's own frames (and JAX's) and fail; this makes it run them, and everything
    they call, as plain Python, so such code gives eager mode's results."""
    from torch._dynamo.eval_frame import set_code_exec_strategy
    from torch._dynamo.types import FrameAction, FrameExecStrategy

    skip = FrameExecStrategy(FrameAction.SKIP, FrameAction.SKIP)
    for fn in (XlaTensor.__torch_dispatch__, Environment.__torch_dispatch__, _compile_backward_graph):
        set_code_exec_strategy(getattr(fn, "__func__", fn).__code__, skip)
    # factories on our device, copies to it (forward AD's zero tangents), ops' own kernels
    for code in (*device_kernel_codes(), *DEVICE_KERNEL_CODES):
        set_code_exec_strategy(code, skip)
    # The autograd engine's wrapper (Note [Backward on the calling thread] in
    # frontends/dispatch.py) stands where Dynamo expects PyTorch's C++ engine, at which
    # it breaks the graph: `loss.backward()` inside a compiled step made it try, and
    # fail, to compile the wrapper's frame at every new graph. Only that frame is left
    # alone: what the pass calls (hooks, say) is compiled as usual.
    set_code_exec_strategy(_AutogradEngine.run_backward.__code__, FrameExecStrategy(FrameAction.SKIP,
                                                                                     FrameAction.DEFAULT))


# Note [LSTM layers under torch.compile]
# PyTorch decomposes an nn.LSTM in AOTAutograd's trace one of two ways: each layer as
# one `mkldnn_rnn_layer` (oneDNN's kernel), or as its cells, one small product and a
# dozen pointwise ops per step. It takes the first only where the module's input needs
# no gradient (oneDNN's own constraint), so an LSTM after a trained embedding or layer
# came unrolled, every layer of it. XLA then fuses the cell state's
# gradient, a chain of pointwise ops through all steps, into every step's fusion: the
# zoo's medium LSTM LM (64 steps) ran fusions of 1000 ops, the backward's work growing
# with the square of the sequence. Our graphs lower a whole layer as scans over time
# (lowerings/rnn.py), its gradient included, so the backend asks for whole layers
# wherever our lowering takes them (float32 or bfloat16, no projections): that step
# went from 134 to 78 ms.
@contextlib.contextmanager
def _lstm_layers_whole() -> Any:
    """While AOTAutograd traces: LSTM layers decomposed to `mkldnn_rnn_layer` whether
    or not their input needs a gradient (Note [LSTM layers under torch.compile])."""
    from torch._decomp import decompositions as decomps

    select = getattr(decomps, "select_one_layer_lstm_function", None)
    whole = getattr(decomps, "mkldnn_one_layer_lstm", None)
    if select is None or whole is None:  # another PyTorch's decomposition: left as it is
        yield
        return

    def one_layer_lstm(input: Any, hx: Any, params: Any) -> Callable:
        if lstm_runs_whole_layers(input.dtype, hx[0].size(2), hx[1].size(2)):
            return whole
        return select(input, hx, params)

    decomps.select_one_layer_lstm_function = one_layer_lstm
    try:
        yield
    finally:
        decomps.select_one_layer_lstm_function = select


# torch.compile's modes: they choose inductor's autotuning and CUDA graphs.
_MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def _backend(gm: torch.fx.GraphModule, example_inputs: list[Any], *, options: dict | None = None,
             mode: str | None = None) -> Callable:
    """The `torch.compile` backend function (registered as "xla_native")."""
    if options:
        raise ValueError(f"the {BACKEND_NAME} backend takes no options (got {sorted(options)}): its settings are "
                         "xla_native_functions.config's (docs/configuration.md), set before the first call")
    if mode not in _MODES:
        raise ValueError(f"unknown torch.compile mode {mode!r}: torch.compile's modes are "
                         f"{', '.join(repr(m) for m in _MODES[1:])}")
    if mode not in (None, "default"):
        warnings.warn(f"torch.compile(mode={mode!r}) tunes inductor's kernels and CUDA graphs; the {BACKEND_NAME} "
                      "backend compiles every graph with XLA alike, so the mode changes nothing here", stacklevel=2)
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    register_loaded_library_ops()  # Note [Library operators] in runtime/exec/custom_ops.py
    # The min-cut partitioner (inductor's) recomputes views and cheap pointwise ops in
    # the backward instead of saving them. AOTAutograd's default saves `t(weight)` of
    # every linear layer, which our graphs return as a transposed copy: the forward of
    # an MLP 256-512-512-10 at batch 64 took 0.57 ms with those copies, 0.39 ms without.
    with _lstm_layers_whole():
        return aot_autograd(
            fw_compiler=_compile_forward_graph,
            bw_compiler=_compile_backward_graph,
            inference_compiler=compile_aten_graph,
            decompositions=decompositions(),
            partition_fn=min_cut_rematerialization_partition,
        )(gm, example_inputs)


def __getattr__(name: str) -> Any:
    # `backend` is what torch.compile looks up (through the entry point, or imported):
    # only then is torch._dynamo loaded, which keeps `import xla_native_functions` cheap.
    if name == "backend":
        _run_runtime_without_dynamo()
        watch_graph_breaks()  # Note [Moved models under torch.compile] in frontends/moved_models.py
        globals()["backend"] = _backend
        return _backend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
