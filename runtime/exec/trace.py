"""Traced execution: while a `Trace` is this thread's current trace (Note [Per-thread
trace] in core/context.py), ops record IR nodes instead of running; a sync lowers the
pending graph to one jax.jit function, cached by the graph's structure, and runs it.

compile() traces a call and syncs at its end (frontends/replay.py then replays stable
calls without tracing them); lazy mode (frontends/lazy.py) syncs at `mark_step()` and
whenever a value is needed on the host (`.item()`, printing), like PyTorch/XLA's lazy
tensors. Tensors that existed before the trace enter the graph as inputs; tensors it
mutates or creates and that are still alive are its outputs, written back to their
storages.

Note [Trace observers]
compile() learns how to replay a call by watching its trace (frontends/replay.py's
Probe). The trace tells its `observer` (None when nobody watches):
  - note_owner(store, tensor, value): a storage that existed before the trace is read
    (value: its graph input) or written (value None) for the first time;
  - note_key(store): a storage holding a random key drawn for the trace;
  - note_graph(pending, inputs, scalars, key, fn): a graph ran, computing `pending`
    storages from `inputs`;
  - note_read(value, store, array): a value was read on the host (an input value, or a
    storage a graph just computed);
  - fail(reason): the call does something a replay could not reproduce.

Note [Failed traces]
When the traced code raises, what it recorded before the error still runs, so its
tensors are left as eager mode would have left them: the writes made before the error
landed, the tensors it made hold their values. Only if that run fails too (or the
error is not an Exception, like KeyboardInterrupt) is nothing written: every storage
keeps the array it had before the trace, and a tensor the trace made raises a clear
error when read.
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from typing import Any

import jax
import numpy as np
import torch

from ...shape_fns.common import NUMPY_TO_TORCH, TensorMeta
from ...shape_fns.storage_size import check_result_sizes
from ..core.context import context
from ..core.convert import X64, current_array
from ..core.ir import ATTR_LIST, OPT_TENSOR, SCALAR, TENSOR, TENSOR_LIST, Node, ScalarInput, SpecialScalar, Value, \
    is_special_scalar
from ..core.placement import pending_storage, state as placement_state
from ..core.sharing import WRITE_LOCK
from ..core.tensor import Storage, XlaTensor
from ..platform.metrics import metrics
from .eager import check_in_place_result, foreign_value, scalar_operand
from .graph import lower_graph
from .registry import node
from .sharding import constrain_roots


def _meta_of(a: Any) -> TensorMeta:
    return TensorMeta(tuple(a.shape), NUMPY_TO_TORCH[np.dtype(a.dtype)])


def _emit(node: Node, metas: Any) -> Any:
    if metas.__class__ is TensorMeta:
        return Value(node, 0, metas)
    multi = isinstance(metas, (tuple, list))
    outs = tuple(None if m is None else Value(node, i, m) for i, m in enumerate(metas if multi else (metas,)))
    return outs if multi else outs[0]


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


def _memory_as(v: Value, dtype: torch.dtype) -> Value:
    cls = node("memory_as")
    return _emit(cls((v, dtype)), cls.output_shape(v.meta, dtype))


def record_strided_read(base: Value, dtype: torch.dtype, size, stride, offset) -> Value:
    return _emit(node("strided_read")((base, size, stride, offset)), TensorMeta(tuple(size), dtype))


# Note [Reads of another thread's storages]
# Threads may run traced calls over the same tensors: a compile()d model serving
# requests from a thread pool reads its parameters in every call. A storage belongs to
# at most one trace (its `pending` value is a value of that trace's graph), so a trace
# that meets a storage held by another thread's trace reads it as an eager read in this
# thread does (`current_array`: the array from before that trace, or, while that trace
# runs, the array it writes) without claiming it. The value read is a graph input,
# which later reads before this trace's next run reuse. Writing it is refused: the
# other trace's run would overwrite the write, or has read the value the write replaces.
_SHARED_MESSAGE = (
    "a tensor is used by two traced calls at once (compile() or lazy_mode() in two threads): its value is pending "
    "in the other thread's trace; synchronize the threads or give each its own tensors"
)


class Trace:
    """The IR recorded by one thread since its last sync."""

    def __init__(self, observer: Any = None):
        self.observer = observer  # Note [Trace observers]
        self.active = True
        self.thread = threading.get_ident()
        # held while a graph runs and the storages it writes have no array (Note
        # [Threads and storages] in core/sharing.py)
        self.running = threading.Lock()
        self.segment = 0  # graphs run so far by this trace
        self.storages: list[weakref.ref[Storage]] = []  # made, read or written since the last sync
        # graph inputs holding a storage's value when it was written: id -> Value
        self.overwritten: dict[int, Value] = {}
        # called after each sync, when the values kept with `keep` are concrete
        self.after_sync: list[Any] = []
        # storages another thread's trace holds, read by this one: id -> (weakref, the
        # graph input of the value read), one input per storage (Note [Reads of another
        # thread's storages])
        self.read_elsewhere: dict[int, tuple] = {}

    # -- values

    def input(self, array: Any) -> Value:
        """A graph input holding a concrete array (or a Python scalar)."""
        return Value(None, 0, _meta_of(array), data=array)

    def _enter(self, store: Storage, t: XlaTensor, writing: bool = False) -> Value:
        """A storage this trace meets for the first time: its array becomes a graph input.
        Claimed under WRITE_LOCK: no write of another thread is replacing the array read,
        and none lands after the claim (Note [Threads and storages]). A storage that a
        trace of another thread holds is read, not claimed (Note [Reads of another
        thread's storages])."""
        if not writing:
            seen = self.read_elsewhere.get(id(store))
            if seen is not None and seen[0]() is store:
                return seen[1]
        with WRITE_LOCK:
            owner = store.owner
            held_elsewhere = owner is not None and owner is not self and owner.active
            if not held_elsewhere:
                array = store.array
                if array is None:
                    array = current_array(store)  # raises: no value to read
                v = store.pending = self.input(array)
                store.owner = self
        if held_elsewhere:
            if writing:
                raise RuntimeError(_SHARED_MESSAGE)
            v = self.input(current_array(store))  # outside the lock: it may wait for that trace's run
            self.read_elsewhere[id(store)] = (weakref.ref(store), v)
        else:
            self.storages.append(weakref.ref(store))
        if self.observer is not None:
            self.observer.note_owner(store, t, v)
        return v

    def value_of(self, t: Any) -> Any:
        """The IR value of a tensor argument (a Python number: a scalar operand)."""
        if t.__class__ is XlaTensor:
            store = t._store
            v = store.pending
            if v is None or store.owner is not self:
                v = self._enter(store, t)
            if t._whole:
                return v
            if t._reinterprets:
                v = _memory_as(v, t.dtype)
            return record_strided_read(v, t.dtype, tuple(t.shape), tuple(t.stride()), t.storage_offset())
        if isinstance(t, torch.Tensor):
            return self.input(foreign_value(t))
        if isinstance(t, (bool, int, float, complex)):
            return ScalarInput(t)
        raise TypeError(f"unexpected tensor argument {t!r}")

    def host_value(self, t: XlaTensor) -> Any:
        """The concrete value of a tensor, read on the host: runs what it depends on."""
        return self.materialize_value(self.value_of(t))

    # -- recording

    def record(self, cls: type[Node], args: tuple[Any, ...]) -> Any:
        """Record one op; returns XlaTensors whose storages hold the node's outputs."""
        node_args = []
        for kind, a in zip(cls.arg_kinds, args):
            if a is None:
                node_args.append(None)
            elif kind == TENSOR or kind == OPT_TENSOR:
                node_args.append(self.value_of(a))
            elif kind == TENSOR_LIST:
                node_args.append([None if x is None else self.value_of(x) for x in a])
            elif kind == SCALAR:
                node_args.append(SpecialScalar(a) if is_special_scalar(a) else ScalarInput(a))
            elif kind == ATTR_LIST:
                node_args.append(tuple(a))
            else:
                node_args.append(a)
        metas = cls.output_shape(*[_arg_meta(k, a) for k, a in zip(cls.arg_kinds, node_args)])
        check_result_sizes(metas)  # Note [Overflowing sizes]
        node = cls(tuple(node_args))
        outs = _emit(node, metas)
        # results live where the op's operands do (Note [Placed storage] in core/placement.py)
        operands = args if placement_state.active else None
        if isinstance(outs, tuple):
            return tuple(None if o is None else self._new_tensor(o, operands) for o in outs)
        return self._new_tensor(outs, operands)

    def _new_tensor(self, v: Value, operands: tuple | None = None) -> XlaTensor:
        store = Storage(None) if operands is None else pending_storage(operands)
        store.pending, store.owner = v, self
        self.storages.append(weakref.ref(store))
        return XlaTensor(store, v.meta.shape, v.meta.dtype)

    def write(self, t: XlaTensor, new: Value, check_cast: bool = True) -> None:
        """Record writing `new` into `t`, through its view if it is one."""
        check_in_place_result(tuple(t.shape), t.dtype, tuple(new.meta.shape), new.meta.dtype, check_cast)
        store = t._store
        mine = store.pending is not None and store.owner is self
        if not mine and self.observer is not None:
            self.observer.note_owner(store, t, None)
        if new.meta.dtype != t.dtype:
            new = _emit(node("cast_to")((new, t.dtype)), TensorMeta(new.meta.shape, t.dtype))
        old = store.pending if mine else None
        if t._whole:
            if not mine:
                self._enter_written(store)
            store.pending = new
        else:
            base = old if mine else self._enter(store, t, writing=True)
            old = base
            layout = (tuple(t.shape), tuple(t.stride()), t.storage_offset())
            if t._reinterprets:  # through the storage's memory as t's dtype (Note [Views and mutation])
                store.pending = _emit(node("memory_write")((base, new, t.dtype) + layout), base.meta)
            else:
                store.pending = _emit(node("strided_write")((base, new) + layout), base.meta)
        if old is not None and old.node is None:
            self.overwritten[id(old)] = old
        store.version += 1
        t._cache = None

    def _enter_written(self, store: Storage) -> None:
        """A storage this trace writes whole before reading it."""
        with WRITE_LOCK:
            owner = store.owner
            if owner is not None and owner is not self and owner.active:
                raise RuntimeError(_SHARED_MESSAGE)
            store.owner = self
        self.storages.append(weakref.ref(store))

    # -- replay's observer

    def refuse_replay(self, why: str) -> None:
        """The traced call does something a replay could not reproduce."""
        if self.observer is not None:
            self.observer.fail(why)

    def note_key(self, store: Storage) -> None:
        if self.observer is not None:
            self.observer.note_key(store)

    def _note_read(self, v: Value | None, store: Storage | None, array: Any) -> None:
        if self.observer is not None:
            self.observer.note_read(v, store, array)

    # -- running

    def materialize(self, store: Storage) -> Any:
        """The concrete value of a storage this trace holds: runs what it recorded."""
        v = store.pending
        if v is not None and v.node is None:
            self._note_read(v, None, v.data)
            return v.data
        self.sync()
        self._note_read(None, store, store.array)
        return store.array

    def keep(self, v: Value) -> Storage:
        """A storage no tensor holds that receives `v`'s value at the next sync: a root of
        the graph, so that an intermediate value becomes concrete with the others."""
        holder = Storage(None)
        holder.pending, holder.owner = v, self
        self.storages.append(weakref.ref(holder))
        return holder

    def materialize_value(self, v: Value) -> Any:
        """The concrete value of an IR value: makes it a temporary root of the trace."""
        if v.node is None:
            self._note_read(v, None, v.data)
            return v.data
        holder = self.keep(v)
        self.sync()
        self._note_read(None, holder, holder.array)
        return holder.array

    def _live_storages(self) -> list[Storage]:
        stores = []
        seen: set[int] = set()
        for ref in self.storages:
            s = ref()
            if s is not None and id(s) not in seen and s.owner is self and s.pending is not None:
                seen.add(id(s))
                stores.append(s)
        return stores

    def sync(self) -> None:
        """Run everything recorded so far and write the results into their storages."""
        self._run_graph()
        for callback in self.after_sync:
            callback()

    def _run_graph(self) -> None:
        stores = self._live_storages()
        self.storages = []
        self.read_elsewhere = {}
        overwritten, self.overwritten = self.overwritten, {}
        pending = [s for s in stores if s.pending.node is not None]
        read_only: set[int] = set()  # ids of the input values no root replaces
        for s in stores:
            if s.pending.node is None:  # an input read but not computed: its array is the value
                # (a storage the trace made and wrote whole with a concrete value,
                # torch.tensor(data, device=...)'s copy, has no array until now)
                s.array = s.pending.data
                read_only.add(id(s.pending))
                s.pending = s.owner = None
        if not pending:
            return
        if placement_state.active:
            constrain_roots(pending)  # Note [Placed storage] in core/placement.py
        previous: list[Any] = []
        self.running.acquire()
        try:
            roots = [s.pending for s in pending]
            inputs_by_array = {id(v.data): v for v in overwritten.values()}
            written = {id(inputs_by_array[id(s.array)]): s.pending for s in pending if id(s.array) in inputs_by_array}
            fn, inputs, scalars, key, compiling = lower_graph(roots, written, read_only, self.segment)
            self.segment += 1
            if self.observer is not None:
                self.observer.note_graph(pending, inputs, scalars, key, fn)
            # The storages written give up their old arrays, which the graph may take
            # over (Note [Donated graph inputs] in exec/graph.py); a failed run puts them
            # back, from the graph input holding each where there is one, so that
            # nothing else holds a reference that would stop the donation.
            for s in pending:
                previous.append(inputs_by_array.get(id(s.array), s.array))
                s.array = None
            arrays = [v.data for v in inputs]
            start = time.perf_counter()
            with X64:
                # numbers as cached JAX scalars: jit would convert each Python number per call;
                # compile() learning a replay plan keeps the inputs it saw (no donation)
                outs = fn(arrays, [scalar_operand(s.value) for s in scalars], self.observer is None)
                del arrays
                if compiling:
                    jax.block_until_ready(outs)
        except BaseException:
            # Nothing of this graph is written: every storage keeps its array
            # (Note [Failed traces]).
            for s, old in zip(pending, previous):
                s.array = old.data if old.__class__ is Value else old
            for s in pending:
                s.pending = s.owner = None
            self.running.release()
            raise
        for s, out in zip(pending, outs):
            s.array = out
            s.pending = s.owner = None
            s.version += 1
        self.running.release()
        elapsed = time.perf_counter() - start
        if compiling:
            metrics.compile_count += 1
            metrics.compile_seconds += elapsed
        else:
            metrics.execute_count += 1
            metrics.execute_seconds += elapsed

    def abandon(self) -> None:
        """Drop what was recorded and not run: every storage keeps its array from before
        the trace (Note [Failed traces])."""
        for s in self._live_storages():
            s.pending = s.owner = None
        self.storages = []
        self.read_elsewhere = {}
        self.overwritten = {}


# The traces recording now, in every thread: id -> Trace. A compile() replay checks the
# storages it uses against them only when there is one (frontends/replay.py).
active_traces: dict[int, Trace] = {}


@contextlib.contextmanager
def tracing(observer: Any = None):
    """Record this thread's ops into a new trace; sync and return to the outer mode at
    the end (Note [Failed traces] when the block raises). Inside a trace of this thread
    (a compiled function called in lazy mode or by another compiled function) the block
    joins it: its ops become part of the outer trace, which runs them with its own, as
    a function inlined into its caller (two traces of one thread would each claim the
    storages both use)."""
    outer = context.trace
    if outer is not None and observer is None:
        yield outer
        return
    trace = context.trace = Trace(observer)
    active_traces[id(trace)] = trace
    try:
        yield trace
        trace.sync()
    except Exception:
        settle_failed(trace)
        raise
    except BaseException:
        trace.abandon()
        raise
    finally:
        trace.active = False
        active_traces.pop(id(trace), None)
        context.trace = outer


def settle_failed(trace: Trace) -> None:
    """After the traced code raised: run what it recorded, or drop it if that fails."""
    try:
        trace.sync()
    except BaseException:
        trace.abandon()
