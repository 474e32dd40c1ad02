"""The first calls of a compiled graph, answered by running its nodes one by one with
eager mode's executables while the graph's own executable compiles in a background
thread.

Note [First calls of compiled graphs]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
compile() runs a traced step as one XLA program (runtime/exec/graph.py). The first call
of a new graph traces its jaxpr, lowers it, and compiles it (or reads it from the
persistent compilation cache) before anything runs: an EfficientNet-B0-sized training
step took 11.9 s with an empty cache and 2.8 s with a warm one, where eager mode's first
step, answering each new op signature on PyTorch CPU (Note [First calls on PyTorch CPU]
in first_call.py), took 0.8 s.

So, with `config.first_calls_on_cpu` on, a graph built in this process answers its
calls by interpretation until its executable is ready: its recorded program (node
classes and positions of their operands, as the graph function closes over them) runs
node by node through eager executables of the node classes, the tiered ones of
first_call.py, whose first calls of each signature run PyTorch's CPU kernel (the
tracer's strided reads of views included). Nodes PyTorch does not answer (strided
writes, casts, random nodes given the graph's key, the other internal nodes) run their
eager executable, compiled at once for their signature as eager mode does; a random
node draws the same bits from the same key as the compiled graph. The interpretation returns what the graph
function returns, the list of its outputs in order with the same shapes and dtypes, so
what the caller does with them (writing storages, replay plans) is unchanged. It
donates nothing: the buffers the executable would have taken over stay valid (they are
dropped with their storages' old values) and no input is copied or transposed for it.
Each intermediate array is dropped after its last reader, as eager mode drops it: four
Linear(4096, 4096) layers under momentum SGD peaked at 2.65 GB in their interpreted
calls while every intermediate was held to the end, 2.02-2.13 GB since (the compiled
step: 1.51 GB; compile() keeps the inputs of the calls it learns its replay plan from).

When the first call's interpretation is done (inside a compile()d call, when that call
returns: `compiles_held`), the graph's executable is handed to one daemon thread at the
lowest CPU priority (a forked child starts without it and hands
its graphs in flight over again), which lowers and compiles it for the call's abstract inputs (shapes,
dtypes, weak types and the shardings of committed arrays, as the call passes them:
donated buffers, transposed weights, scalars) without running it. JAX keeps the trace,
the lowering and the executable, so the graph's next call after that runs the
executable with no new trace or compile, and from then on takes JAX's C++ path as
before. Calls made while the compile is in flight are interpreted too. The hot path
gains one test: `graph._build`'s call reads a closure cell that is None once the graph
is compiled, as it is from the start when the setting is off.

While a graph is interpreted, the eager signatures it meets are answered on PyTorch
without being handed to first_call.py's background thread: compiling them would take
the two cores from the graph's own compile, which makes every later call fast, while
they would serve only the calls made until then.

Fallbacks, all to the compile as before (the call waits for it): a graph with nodes of
custom operators (`xnf.register_lowering`, collectives) or sharding constraints, an
input that is a tracer (a graph inside a JAX transformation), not a single-device CPU
array, an interpretation that raises (the executable then raises its own error, or
computes what the eager path could not), and a failed background compile (the call
compiles and raises in the caller's thread).

Measured (scripts/bench_first_call.py, 2 cores, load 0.6-1.1, the same sitting):
the EfficientNet-sized step's first call went from 12.6 to 0.83 s cold and from 2.7 to
0.79 s warm, the zoo ResNet's from 1.23 to 0.08 s and 0.24 to 0.07 s; the replayed
steps after the compile are unchanged (0.030 against 0.032 s, 0.5 ms). The graph is
compiled about when it was before (12.8 s cold, 3.9 s warm against 12.9 and 3.0 s):
the first interpretation (0.8 s) runs before the compile starts, because the compile's
tracing and lowering are Python and would take the GIL from it at every kernel that
releases the GIL; calls made while the compile runs share the GIL with it and take
longer than the first (0.6 to 2.6 s for the second EfficientNet step). With the eager
signatures handed to first_call.py's thread as well, the graph was compiled after 35 s
cold and 7.1 s warm instead of about 20 and 4.0 s (load 1.6-2): hence `quiet()`.
Before the strided reads were answered on PyTorch too, their eager compiles took 0.5 s
of a cold first call. After the background compile, the graph's next call traces and
compiles nothing in the caller's thread (JAX's compile events, tests/
test_compile_first_calls.py).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import queue
import threading
import weakref
from typing import Any

import jax

from ..core.convert import X64
from ..core.ir import Node
from ..core.placement import local_devices
from ..platform.config import config
from . import first_call
from .eager import eager_executable
from .graph_program import last_reads, run_program

_PENDING, _READY, _FAILED = "pending", "ready", "failed"

# Node sections an interpretation runs: generated aten ops and the runtime's own nodes,
# but for a sharding constraint, which means devices beyond one.
_SECTIONS = ("full_codegen", "internal")
_REFUSED_NODES = ("shard_as",)

_EXECUTABLES: dict[type, Any] = {}  # node class -> its eager executable for interpretation


def _executable(cls: type[Node]) -> Any:
    exe = _EXECUTABLES.get(cls)
    if exe is None:
        exe = first_call.tiered_executable(cls) if first_call.answerable(cls) else eager_executable(cls)
        _EXECUTABLES[cls] = exe
    return exe


def interpretable(classes: Any) -> bool:
    """Whether every node class of a graph may run through eager executables."""
    return all(c.section in _SECTIONS and c.name not in _REFUSED_NODES for c in classes)


class FirstCalls:
    """A graph's state until its executable is compiled in the background: the program
    to interpret and the compile's progress (`state`)."""

    __slots__ = ("program", "outputs", "release", "lower", "state", "__weakref__")

    def __init__(self, program: list, outputs: list, lower: Any):
        self.program = program  # [(node class, operand references)], as graph._build's
        self.outputs = outputs
        # each intermediate array is dropped after its last reader, as eager mode drops it
        self.release = last_reads(program, outputs)
        self.lower = lower  # graph._build's lower(arrays or specs, scalar values)
        self.state = None

    def run(self, arrays: list, scalar_values: list) -> Any:
        """The graph's outputs by interpretation, or None when the executable should run:
        compiled, failed, or not eligible (Note [First calls of compiled graphs])."""
        state = self.state
        if state is _READY or state is _FAILED or not config.first_calls_on_cpu:
            return None
        if state is None:
            specs = _specs(arrays)
            scalar_specs = None if specs is None else _specs(scalar_values)
            if scalar_specs is None:
                return None
        try:
            out = self.interpret(arrays, scalar_values)
        except Exception:
            return None  # the executable computes it, or raises its own error
        first_call.stats.graphs_interpreted += 1
        if state is None:
            # after the first interpretation: the compile's tracing would take the GIL
            # from it at every kernel that releases the GIL
            self.state = _PENDING
            _in_flight.add(self)
            if _held.depth:
                _held.graphs.append((self, specs, scalar_specs))
            elif not _worker.submit(self, specs, scalar_specs):
                self.state = None
        return out

    def interpret(self, arrays: list, scalar_values: list) -> list:
        with first_call.quiet(), X64:
            program = [(_executable(cls), refs) for cls, refs in self.program]
            return run_program(program, self.outputs, arrays, scalar_values, self.release)


class _Held(threading.local):
    def __init__(self):
        self.depth = 0
        self.graphs: list = []


_held = _Held()


@contextlib.contextmanager
def compiles_held():
    """Graphs this thread interprets for the first time inside the block are handed to
    the background thread when the outermost block ends, not at once: a compile()d call
    still runs Python after its graph (its replay plan), which the compile's tracing
    and lowering would slow down by taking the GIL. The EfficientNet-sized step's first
    call took 2.4 s with the compile started inside it, 0.9 s with it started after
    (scripts/bench_first_call.py's step, one process each, load about 1)."""
    depth = _held.depth
    _held.depth = depth + 1
    try:
        yield
    finally:
        _held.depth = depth
        if not depth:
            graphs, _held.graphs = _held.graphs, []
            for first, specs, scalar_specs in graphs:
                if not _worker.submit(first, specs, scalar_specs):
                    first.state = None


def _specs(values: list) -> list | None:
    """The abstract values the graph's executable is compiled for, or None when one of
    `values` is not a concrete array on the default device (jax:0), where the eager
    executables' first calls put PyTorch's results."""
    out = []
    for a in values:
        if not isinstance(a, jax.Array) or isinstance(a, jax.core.Tracer):
            return None
        sharding = a.sharding
        devices = sharding.device_set
        if len(devices) != 1 or next(iter(devices)) != local_devices()[0]:
            return None
        out.append(jax.ShapeDtypeStruct(a.shape, a.dtype, weak_type=a.weak_type,
                                        sharding=sharding if a.committed else None))
    return out


def _compile(first: FirstCalls, specs: list, scalar_specs: list) -> None:
    """Lower and compile a graph's executable for these abstract inputs; JAX's caches
    keep what the graph's next call needs."""
    with X64:
        first_call._compiling(lambda: first.lower(specs, scalar_specs).compile())


class _Worker:
    """One daemon thread compiling graphs whose first calls are interpreted."""

    def __init__(self):
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.thread: threading.Thread | None = None
        self.stopping = False
        self.start_lock = threading.Lock()
        self.pending = 0
        self.count_lock = threading.Lock()

    def submit(self, first: FirstCalls, specs: list, scalar_specs: list) -> bool:
        if self.stopping:
            return False
        with self.count_lock:
            self.pending += 1
        self.queue.put((first, specs, scalar_specs))
        if self.thread is None:
            with self.start_lock:
                if self.thread is None:
                    self.thread = threading.Thread(target=self.run, name="xnf-graph-compiles", daemon=True)
                    self.thread.start()
        return True

    def run(self) -> None:
        first_call.lowest_priority()  # Note [First calls on PyTorch CPU]
        while True:
            item = self.queue.get()
            if item is None or self.stopping:
                return
            first, specs, scalar_specs = item
            del item
            state = _READY
            try:
                _compile(first, specs, scalar_specs)
                first_call.stats.graph_background_compiles += 1
            except BaseException:  # the caller compiles, and raises what the compile raises
                state = _FAILED
            first.state = state
            _in_flight.discard(first)
            del first, specs, scalar_specs
            with self.count_lock:
                self.pending -= 1

    def idle(self) -> bool:
        return self.pending == 0

    def stop(self) -> None:
        self.stopping = True
        thread = self.thread
        if thread is not None and thread.is_alive():
            self.queue.put(None)
            thread.join(timeout=30)


_worker = _Worker()
_in_flight: weakref.WeakSet = weakref.WeakSet()  # graphs whose compile is queued or running
atexit.register(lambda: _worker.stop())
first_call.IDLE_CHECKS.append(lambda: _worker.idle())


def _forget_in_child() -> None:
    """A forked child has no background thread: its graphs in flight start again."""
    global _worker
    _worker = _Worker()
    for first in list(_in_flight):
        first.state = None
    _in_flight.clear()


os.register_at_fork(after_in_child=_forget_in_child)
