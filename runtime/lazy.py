"""Tracing mode: ops record IR nodes instead of running; a sync lowers the pending
graph to one jax.jit function, cached by the graph's structure, and runs it.

`compile(fn)` traces a call of fn and syncs at its end (runtime/replay.py then replays
stable calls without tracing them); the lazy mode
(`mark_step()`) syncs when the user asks, and whenever a value is needed on the host
(`.item()`, printing), like PyTorch/XLA's lazy tensors. Tensors that existed before
the trace enter the graph as inputs; tensors it mutates or creates and that are still
alive are its outputs, written back to their storages.
"""

from __future__ import annotations

import contextlib
import sys
import time
import weakref
from collections import Counter
from typing import Any, Callable

import jax
import numpy as np
import torch

from ..shape_fns.common import NUMPY_TO_TORCH, TORCH_TO_NUMPY, TensorMeta
from . import state
from .backend import graph_compiler_options
from .ir import (ATTR, ATTR_LIST, OPT_TENSOR, SCALAR, TENSOR, TENSOR_LIST, Node, ScalarInput, SpecialScalar, Value,
                 is_special_scalar)
from .metrics import metrics
from .sparse_updates import fold_sparse_updates
from .tensor import Storage, XlaTensor
from .views import strided_read, strided_write


class StridedRead(Node):
    """Reads a view of a storage (Note [Views and mutation])."""

    __slots__ = ()
    op = name = "strided_read"
    arg_kinds = (TENSOR, ATTR, ATTR, ATTR)

    @staticmethod
    def lower(base, size, stride, offset):
        return strided_read(base, size, stride, offset)

    @staticmethod
    def output_shape(base, size, stride, offset):
        return TensorMeta(tuple(size), base.dtype)


class StridedWrite(Node):
    """Writes a view of a storage, giving the storage's new value."""

    __slots__ = ()
    op = name = "strided_write"
    arg_kinds = (TENSOR, TENSOR, ATTR, ATTR, ATTR)

    @staticmethod
    def lower(base, src, size, stride, offset):
        return strided_write(base, src, size, stride, offset)

    @staticmethod
    def output_shape(base, src, size, stride, offset):
        return base


class Convert(Node):
    """Casts to a dtype (the write of an in-place op into a tensor of another dtype)."""

    __slots__ = ()
    op = name = "convert"
    arg_kinds = (TENSOR, ATTR)

    @staticmethod
    def lower(x, dtype):
        return x.astype(TORCH_TO_NUMPY[dtype])

    @staticmethod
    def output_shape(x, dtype):
        return TensorMeta(x.shape, dtype)


class Trace:
    def __init__(self):
        self.storages: list[weakref.ref[Storage]] = []  # created or mutated while tracing
        self.segment = 0  # graphs run so far by this trace
        self.probe = None  # a runtime.replay.Probe while compile() learns a replay plan
        # graph inputs holding a storage's value when it was written: id -> Value
        self.overwritten: dict[int, Value] = {}

    def track(self, store: Storage) -> None:
        self.storages.append(weakref.ref(store))


def _meta_of(a: Any) -> TensorMeta:
    return TensorMeta(tuple(a.shape), NUMPY_TO_TORCH[np.dtype(a.dtype)])


def _input(array: Any) -> Value:
    return Value(None, 0, _meta_of(array), data=array)


def traced_value(t: Any) -> Any:
    """The IR value of a tensor argument while tracing."""
    if t.__class__ is XlaTensor:
        store = t._store
        v = store.value
        if v.__class__ is not Value:
            v = store.value = _input(v)
            trace = state.trace
            trace.track(store)
            if trace.probe is not None:
                trace.probe.note_owner(store, t, v)
        if t._whole:
            return v
        return record_strided_read(v, t.dtype, tuple(t.shape), tuple(t.stride()), t.storage_offset())
    if isinstance(t, torch.Tensor):
        from .dispatch import foreign_value

        return _input(foreign_value(t))
    if isinstance(t, (bool, int, float, complex)):
        return ScalarInput(t)
    raise TypeError(f"unexpected tensor argument {t!r}")


def _emit(node: Node, metas: Any) -> Any:
    if metas.__class__ is TensorMeta:
        v = Value(node, 0, metas)
        node.outputs = (v,)
        return v
    multi = isinstance(metas, (tuple, list))
    outs = tuple(None if m is None else Value(node, i, m) for i, m in enumerate(metas if multi else (metas,)))
    node.outputs = outs
    return outs if multi else outs[0]


def record_strided_read(base: Value, dtype: torch.dtype, size, stride, offset) -> Value:
    if base.__class__ is not Value:
        base = _input(base)
    node = StridedRead((base, size, stride, offset))
    return _emit(node, TensorMeta(tuple(size), dtype))


def _arg_meta(kind: str, a: Any) -> Any:
    if a is None:
        return None
    if kind == SCALAR or (kind in (TENSOR, OPT_TENSOR) and a.__class__ is ScalarInput):
        return a.value
    if kind == TENSOR_LIST:
        return [None if x is None else x.meta for x in a]
    if kind in (TENSOR, OPT_TENSOR):
        return a.meta
    return a


def record(cls: type[Node], args: tuple[Any, ...]) -> Any:
    """Record one op; returns XlaTensors whose storages hold the node's outputs."""
    node_args = []
    for kind, a in zip(cls.arg_kinds, args):
        if a is None:
            node_args.append(None)
        elif kind == TENSOR or kind == OPT_TENSOR:
            node_args.append(traced_value(a))
        elif kind == TENSOR_LIST:
            node_args.append([None if x is None else traced_value(x) for x in a])
        elif kind == SCALAR:
            node_args.append(SpecialScalar(a) if is_special_scalar(a) else ScalarInput(a))
        elif kind == ATTR_LIST:
            node_args.append(tuple(a))
        else:
            node_args.append(a)
    metas = cls.output_shape(*[_arg_meta(k, a) for k, a in zip(cls.arg_kinds, node_args)])
    node = cls(tuple(node_args))
    outs = _emit(node, metas)
    if isinstance(outs, tuple):
        return tuple(None if o is None else _new_tensor(o) for o in outs)
    return _new_tensor(outs)


def _new_tensor(v: Value) -> XlaTensor:
    store = Storage(v)
    state.trace.track(store)
    return XlaTensor(store, v.meta.shape, v.meta.dtype)


def record_write(t: XlaTensor, new: Value) -> None:
    store = t._store
    probe = state.trace.probe
    if probe is not None and store.value.__class__ is not Value:
        probe.note_owner(store, t, None)
    if new.meta.dtype != t.dtype:
        new = _emit(Convert((new, t.dtype)), TensorMeta(new.meta.shape, t.dtype))
    old = store.value
    if t._whole:
        store.value = new
    else:
        base = store.value
        if base.__class__ is not Value:
            base = old = store.value = _input(base)
            if probe is not None:
                probe.note_owner(store, t, base)
        layout = (tuple(t.shape), tuple(t.stride()), t.storage_offset())
        store.value = _emit(StridedWrite((base, new) + layout), base.meta)
    if old.__class__ is Value and old.node is None:
        state.trace.overwritten[id(old)] = old
    state.trace.track(store)
    store.version += 1
    t._cache = None


# ---------------------------------------------------------------- lowering a graph

_GRAPH_CACHE: dict[Any, Callable] = {}
# The key of the graph last run at each position within a trace: a trace cut by host
# reads (.item()) runs several graphs per step, each compared with its own predecessor.
_LAST_KEYS: dict[int, Any] = {}


def _collect(roots: list[Value]) -> tuple[list[Node], list[Value], list[ScalarInput]]:
    """Nodes in topological order, and the graph's array and scalar inputs."""
    order: list[Node] = []
    seen: set[int] = set()
    inputs: list[Value] = []
    scalars: list[ScalarInput] = []
    seen_inputs: set[int] = set()

    def visit_arg(a: Any) -> None:
        if a.__class__ is Value:
            visit_value(a)
        elif a.__class__ is ScalarInput:
            if id(a) not in seen_inputs:
                seen_inputs.add(id(a))
                scalars.append(a)
        elif a.__class__ is list:
            for x in a:
                if x is not None:
                    visit_arg(x)

    def visit_value(v: Value) -> None:
        if v.node is None:
            if id(v) not in seen_inputs:
                seen_inputs.add(id(v))
                inputs.append(v)
            return
        stack = [(v.node, False)]
        while stack:
            node, done = stack.pop()
            if done:
                order.append(node)
                continue
            if id(node) in seen:
                continue
            seen.add(id(node))
            stack.append((node, True))
            for a in reversed(node.args):
                if a.__class__ is Value and a.node is not None:
                    if id(a.node) not in seen:
                        stack.append((a.node, False))
                else:
                    if a.__class__ is list:
                        for x in a:
                            if x is not None and x.__class__ is Value and x.node is not None and id(x.node) not in seen:
                                stack.append((x.node, False))
                            elif x is not None:
                                visit_arg(x)
                    elif a.__class__ is Value or a.__class__ is ScalarInput:
                        visit_arg(a)

    for r in roots:
        visit_value(r)
    return order, inputs, scalars


def _graph_key(order: list[Node], inputs: list[Value], scalars: list[ScalarInput], roots: list[Value]) -> tuple:
    ids: dict[int, Any] = {}
    for i, v in enumerate(inputs):
        ids[id(v)] = ("in", i)
    for i, s in enumerate(scalars):
        ids[id(s)] = ("s", i)
    node_index = {id(n): i for i, n in enumerate(order)}

    def ref(a: Any) -> Any:
        if a.__class__ is Value:
            return ids[id(a)] if a.node is None else (node_index[id(a.node)], a.index)
        if a.__class__ is ScalarInput:
            return ids[id(a)]
        if a.__class__ is list:
            return tuple(None if x is None else ref(x) for x in a)
        return a

    body = tuple(
        (n.static_key(), tuple(ref(a) for k, a in zip(n.arg_kinds, n.args) if k not in (ATTR, ATTR_LIST)))
        for n in order
    )
    signature = tuple((v.meta.shape, v.meta.dtype) for v in inputs) + tuple(type(s.value) for s in scalars)
    return body, signature, tuple(ref(r) for r in roots)


# Note [Transposed weights]
# nn.Linear multiplies by its weight's transpose (x @ W.t()), and XLA CPU's product
# kernel reads a transposed right operand slowly when the left one has few rows: on the
# 2-core machine of docs/performance.md, 16x1024 @ (1024x1024).t() took 0.31-0.35 ms
# and 0.21-0.24 ms with the weight stored transposed (PyTorch: 0.38-0.51 ms), 4x512 @
# (2048x512).t() 0.17 against 0.08 ms, 64 rows 0.92 against 0.75 ms. With one row, with
# 128 rows or more, or with weights of up to 512x256 elements, the two are about the
# same. So an input the graph reads only through that transpose, as the right operand
# of mm or addmm with 2 to 64 rows on the left, with at least 2**18 elements, and does
# not write, is given to the executable as a transposed copy. The copy is made once per
# array and kept while the array lives: once per parameter in inference, at the cost of
# its memory again (`config.transposed_weight_copies = False` turns this off). Training
# graphs also read the weight untransposed (the input's gradient), so they take their
# inputs as they are.
TRANSPOSED_WEIGHT_ROWS = range(2, 65)
TRANSPOSED_WEIGHT_MIN_ELEMENTS = 1 << 18
_PRODUCT_RIGHT_OPERAND = {"mm": (1, 0), "addmm": (2, 1)}  # op -> (right, left) positions


def _transposed_inputs(order: list[Node], in_pos: dict[int, int], read_only: set[int], roots: list[Value]) -> set[int]:
    """Positions of the inputs to pass transposed (Note [Transposed weights])."""
    reads: dict[int, int] = {}  # id(StridedRead node) -> position of the input it transposes
    for n in order:
        if n.__class__ is StridedRead:
            base, size, stride, offset = n.args
            shape = base.meta.shape
            if (id(base) in read_only and len(shape) == 2 and shape[0] * shape[1] >= TRANSPOSED_WEIGHT_MIN_ELEMENTS
                    and offset == 0 and tuple(size) == shape[::-1] and tuple(stride) == (1, shape[1])):
                reads[id(n)] = in_pos[id(base)]
    chosen = set(reads.values())

    def use(a: Any, node: Node | None, position: int) -> None:
        if a.__class__ is list:
            for x in a:
                use(x, None, -1)
        elif a.__class__ is Value:
            if a.node is None:
                if not (node.__class__ is StridedRead and id(node) in reads):
                    chosen.discard(in_pos.get(id(a)))
            elif id(a.node) in reads:
                right, left = _PRODUCT_RIGHT_OPERAND.get(getattr(node, "name", None), (None, None))
                if position != right or node.args[left].meta.shape[0] not in TRANSPOSED_WEIGHT_ROWS:
                    chosen.discard(reads[id(a.node)])

    for n in order:
        for i, a in enumerate(n.args):
            use(a, n, i)
    for r in roots:
        use(r, None, -1)
    return chosen


_TRANSPOSED_COPIES: dict[int, tuple[weakref.ref, Any]] = {}  # id(array) -> (weak reference to it, its transpose)
_transpose = jax.jit(jax.numpy.transpose)


def _transposed_copy(a: Any) -> Any:
    """`a`'s transpose, made once for as long as `a` lives (Note [Transposed weights])."""
    entry = _TRANSPOSED_COPIES.get(id(a))
    if entry is not None and entry[0]() is a:
        return entry[1]
    out = _transpose(a)
    if isinstance(a, jax.core.Tracer):
        return out
    key = id(a)
    _TRANSPOSED_COPIES[key] = (weakref.ref(a, lambda _: _TRANSPOSED_COPIES.pop(key, None)), out)
    return out


# Note [Donated graph inputs]
# A compiled training step writes its parameters and optimizer state back into their
# storages. Given as plain inputs, each is read and written to a new buffer every step:
# for an embedding table updated in a few rows (Note [Sparse updates]) that is two
# passes over the table where the update touches a few rows. So a graph takes over
# (jax.jit's donation) the buffers of the inputs whose storages it writes, from
# config.donate_min_bytes (1 MB) up, and XLA updates them in place: the medium zoo
# DLRM's compiled SGD step went from 3.5-4.0 to 1.9-2.0 ms (PyTorch: 4.0-5.4 ms).
# Below that size donation costs more than it saves (docs/performance.md).
# A donated array must have no other owner: the storage (or, while tracing, the graph
# input) and the argument list hold it, nothing else, which the executable checks by
# reference count before each run; an array also held elsewhere (handed out by to_jax,
# shared by another storage, kept by compile() while it learns a replay plan) is
# donated as a copy instead. A replay donates only arrays of storages it writes back
# from that graph, and only when no guard can fail after the graph ran (one graph, no
# values read back): a failed guard traces the call again from the storages as they
# were.


def _build(order: list[Node], inputs: list[Value], scalars: list[ScalarInput], roots: list[Value],
           read_only: set[int], donated: tuple[int, ...]) -> Callable:
    """The graph as a function of its inputs' arrays and its scalars. `read_only`: the
    ids of the inputs whose storages the graph does not write; `donated`: the positions
    of the inputs whose buffers it takes over (Note [Donated graph inputs])."""
    from .config import config
    from .dispatch import scalar_operand

    # The function closes over the recorded nodes' structure only through positions, so
    # a cached executable is valid for any graph with the same key.
    in_pos = {id(v): i for i, v in enumerate(inputs)}
    transposed = _transposed_inputs(order, in_pos, read_only, roots) if config.transposed_weight_copies else set()
    sc_pos = {id(s): i for i, s in enumerate(scalars)}
    node_pos = {id(n): i for i, n in enumerate(order)}

    def ref(a: Any) -> Any:
        if a.__class__ is Value:
            return ("in", in_pos[id(a)]) if a.node is None else ("node", node_pos[id(a.node)], a.index)
        if a.__class__ is ScalarInput:
            return ("scalar", sc_pos[id(a)])
        if a.__class__ is SpecialScalar:
            return ("const", scalar_operand(a.value))  # a constant of the program
        if a.__class__ is list:
            return ("list", [None if x is None else ref(x) for x in a])
        return ("const", a)

    def step(n: Node) -> tuple:
        if n.__class__ is StridedRead and in_pos.get(id(n.args[0])) in transposed:
            return _same, [ref(n.args[0])]  # the input arrives transposed
        return type(n).lower, [ref(a) for a in n.args]

    program = [step(n) for n in order]
    outputs = [ref(r) for r in roots]
    kept = tuple(i for i in range(len(inputs)) if i not in donated)

    def run(donated_arrays, kept_arrays, scalar_values):
        arrays = [None] * (len(donated_arrays) + len(kept_arrays))
        for i, a in zip(donated, donated_arrays):
            arrays[i] = a
        for i, a in zip(kept, kept_arrays):
            arrays[i] = a
        results: list[Any] = []

        def get(r):
            tag = r[0]
            if tag == "in":
                return arrays[r[1]]
            if tag == "node":
                out = results[r[1]]
                return out[r[2]] if isinstance(out, (tuple, list)) else out
            if tag == "scalar":
                return scalar_values[r[1]]
            if tag == "list":
                return [None if x is None else get(x) for x in r[1]]
            return r[1]

        for lower, refs in program:
            results.append(lower(*[get(r) for r in refs]))
        return [get(r) for r in outputs]

    executable = jax.jit(fold_sparse_updates(run), donate_argnums=0 if donated else (),
                         compiler_options=graph_compiler_options(Counter(type(n).name for n in order)))
    transposed_kept = tuple(k for k, i in enumerate(kept) if i in transposed)

    def call(arrays: list, scalar_values: list, donate: bool = True) -> Any:
        """Run the graph on `arrays`, a list the caller made for this call, each donated
        one held besides only by its storage or graph input (Note [Donated graph inputs])."""
        if not donated and not transposed_kept:
            return executable([], arrays, scalar_values)
        given = []
        for i in donated:
            # references: `arrays`, the storage or input Value, getrefcount's argument
            if not donate or sys.getrefcount(arrays[i]) > 3:
                given.append(copy_array(arrays[i]))
            else:
                given.append(arrays[i])
        rest = [arrays[i] for i in kept]
        for k in transposed_kept:
            rest[k] = _transposed_copy(rest[k])
        return executable(given, rest, scalar_values)

    call.donated = donated
    return call


def _donated_inputs(inputs: list[Value], overwritten: dict[int, Value], read_only: set[int]) -> tuple[int, ...]:
    """Positions of the inputs whose buffers a graph takes over: the values of storages
    it writes, when large enough (Note [Donated graph inputs]). `overwritten`: inputs
    that held a storage's value when the trace wrote it; `read_only`: inputs a storage
    still holds."""
    from .config import config

    return tuple(
        i for i, v in enumerate(inputs)
        if id(v) in overwritten and id(v) not in read_only and not isinstance(v.data, jax.core.Tracer)
        and v.data.nbytes >= config.donate_min_bytes
    )


copy_array = jax.jit(lambda a: jax.numpy.array(a, copy=True))


def _same(x: Any) -> Any:
    return x


def sync() -> None:
    """Run everything recorded so far and write the results into their storages."""
    trace = state.trace
    if trace is None:
        return
    stores = []
    seen: set[int] = set()
    for ref in trace.storages:
        s = ref()
        if s is not None and id(s) not in seen and s.value.__class__ is Value:
            seen.add(id(s))
            stores.append(s)
    trace.storages = []
    overwritten, trace.overwritten = trace.overwritten, {}
    pending = [s for s in stores if s.value.node is not None]
    read_only: set[int] = set()  # ids of the input values no root replaces
    for s in stores:
        if s.value.node is None:  # an input that was read but never written
            read_only.add(id(s.value))
            s.value = s.value.data
    if not pending:
        return
    roots = [s.value for s in pending]
    order, inputs, scalars = _collect(roots)
    donated = _donated_inputs(inputs, overwritten, read_only)
    key = _graph_key(order, inputs, scalars, roots) + (donated,)
    fn = _GRAPH_CACHE.get(key)
    if fn is None:
        metrics.cache_misses += 1
        previous = _LAST_KEYS.get(trace.segment)
        if previous is not None:
            metrics.recompile_reasons.append(_why(previous, key))
        elif trace.segment:
            metrics.recompile_reasons.append(
                f"graph {trace.segment + 1} of one trace: a host read (.item(), printing, a data-dependent "
                "shape) ran the graph recorded so far, and the trace continued in a new graph"
            )
        fn = _build(order, inputs, scalars, roots, read_only, donated)
        _GRAPH_CACHE[key] = fn
        compiling = True
    else:
        metrics.cache_hits += 1
        compiling = False
    _LAST_KEYS[trace.segment] = key
    trace.segment += 1
    if trace.probe is not None:
        trace.probe.note_graph(pending, inputs, scalars, key, fn)
    from .dispatch import X64, scalar_operand

    start = time.perf_counter()
    with X64:
        # numbers as cached JAX scalars: jit would convert each Python number per call
        # compile() learning a replay plan keeps the inputs it saw (Note [Donated graph inputs])
        outs = fn([v.data for v in inputs], [scalar_operand(s.value) for s in scalars], trace.probe is None)
        if compiling:
            jax.block_until_ready(outs)
    elapsed = time.perf_counter() - start
    if compiling:
        metrics.compile_count += 1
        metrics.compile_seconds += elapsed
    else:
        metrics.execute_count += 1
        metrics.execute_seconds += elapsed
    for s, out in zip(pending, outs):
        s.value = out
        s.version += 1


def _why(old: tuple, new: tuple) -> str:
    old_body, old_sig, _, old_donated = old
    new_body, new_sig, _, new_donated = new
    if old_sig != new_sig:
        for i, (a, b) in enumerate(zip(old_sig, new_sig)):
            if a != b:
                return f"graph input {i} changed from {a} to {b}"
        return f"the graph has {len(new_sig)} inputs instead of {len(old_sig)}"
    if len(old_body) != len(new_body):
        return f"the graph has {len(new_body)} ops instead of {len(old_body)}"
    for i, (a, b) in enumerate(zip(old_body, new_body)):
        if a != b:
            return f"op {i} ({b[0][0].op}) changed: {a[0][1:]} -> {b[0][1:]}"
    if old_donated != new_donated:
        return f"the graph writes other inputs: it takes over inputs {list(new_donated)} instead of {list(old_donated)}"
    return "the graph's outputs changed"


def _note_read(v: Value | None, store: Storage | None, array: Any) -> None:
    trace = state.trace
    if trace is not None and trace.probe is not None:
        trace.probe.note_read(v, store, array)


def materialize(store: Storage) -> Any:
    """The concrete value of a storage whose value is still pending: runs the trace."""
    if store.value.__class__ is Value and store.value.node is None:
        _note_read(store.value, None, store.value.data)
        return store.value.data
    sync()
    if store.value.__class__ is Value:  # created by a trace that has ended
        raise RuntimeError("a lazy tensor outlived its trace without being computed")
    _note_read(None, store, store.value)
    return store.value


def materialize_value(v: Value) -> Any:
    """The concrete value of an IR value: makes it a temporary root of the trace."""
    if v.node is None:
        _note_read(v, None, v.data)
        return v.data
    holder = Storage(v)
    state.trace.track(holder)
    sync()
    _note_read(None, holder, holder.value)
    return holder.value


@contextlib.contextmanager
def tracing():
    """Record ops into a new trace; sync and leave tracing at the end."""
    outer = (state.tracing, state.trace)
    state.tracing, state.trace = True, Trace()
    try:
        yield state.trace
    except BaseException:
        # What was recorded before the error takes effect, as it would have eagerly
        # (PyTorch refuses an in-place write to an inference tensor after its kernel
        # wrote: Note [Inference mode]); tensors it wrote stay readable.
        try:
            sync()
        except Exception:  # noqa: BLE001 - the original error is the one to raise
            pass
        raise
    else:
        sync()
    finally:
        state.tracing, state.trace = outer


_lazy_scope: list[Any] = []


def mark_step() -> None:
    """Lazy mode (PyTorch/XLA style): the first call starts recording; every call runs
    what was recorded since the last one. Ops outside a `lazy_mode()` block stay lazy
    for the rest of the process, as on PyTorch/XLA."""
    if not _lazy_scope:
        cm = tracing()
        cm.__enter__()
        _lazy_scope.append(cm)
        return
    sync()
    state.trace.segment = 0  # a step boundary: the next graph is compared with this step's first


@contextlib.contextmanager
def lazy_mode():
    """Record ops lazily inside the block: `mark_step()` runs what was recorded so far,
    the end of the block runs the rest and returns to eager execution."""
    if _lazy_scope:
        raise RuntimeError("lazy_mode() cannot be entered while lazy mode is already on")
    cm = tracing()
    cm.__enter__()
    _lazy_scope.append(cm)
    try:
        yield
    except BaseException as error:
        _lazy_scope.pop()
        if not cm.__exit__(type(error), error, error.__traceback__):
            raise
    else:
        _lazy_scope.pop()
        cm.__exit__(None, None, None)
