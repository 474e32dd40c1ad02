"""Counters behind metrics_report(): what ran, what fell back, what compiled and why."""

from __future__ import annotations

import collections
import weakref
from dataclasses import dataclass, field
from typing import Any

from .backend import (
    allocator_description,
    compilation_cache_description,
    compiled_code_guard,
    cpu_dispatch_description,
    schedule_description,
)
from .config import config
from .device_guard import guard_description, hooks_missing
from .executable_cache import EXECUTABLE_BYTES, eager_executables


@dataclass
class Metrics:
    # Per-op call counts are kept by id(op): hashing an OpOverload runs Python code,
    # and the count is taken on every op (runtime/frontends/dispatch.py `dispatch`).
    calls_by_id: dict[int, int] = field(default_factory=dict)
    ops_by_id: dict[int, Any] = field(default_factory=dict)
    fallback_calls: collections.Counter = field(default_factory=collections.Counter)
    compile_count: int = 0
    compile_seconds: float = 0.0
    cache_hits: int = 0
    cache_misses: int = 0
    execute_count: int = 0
    execute_seconds: float = 0.0
    recompile_reasons: list[str] = field(default_factory=list)
    # compiled graphs' parameter updates applied as scatters (Note [Sparse updates])
    sparse_updates_folded: int = 0
    # compile(): calls replayed without running their Python, and why a function is not
    replays: int = 0
    replay_notes: list[str] = field(default_factory=list)
    # config.debug_accuracy_for_each_op: ops compared with PyTorch CPU, differences
    # reported, and ops not compared because JAX traced their values (op name: calls)
    accuracy_checked: int = 0
    accuracy_differences: int = 0
    accuracy_skipped: collections.Counter = field(default_factory=collections.Counter)

    @property
    def op_calls(self) -> collections.Counter:
        """Calls per aten overload (replayed graphs' ops included)."""
        fold_replayed_ops()
        return collections.Counter({self.ops_by_id[k]: n for k, n in self.calls_by_id.items()})


metrics = Metrics()


# Note [Counting replayed ops]
# An op is counted where it enters the runtime (frontends/dispatch.py, by id(op)). A
# call that runs no Python per op (a replayed compile() step, a torch.compile graph
# after its first call, the CPU partition of such a graph) counts the ops its graph
# was traced from, once per run, as if it had been traced again: the graph keeps a
# `ReplayedOps` of its op counts and its run only increments `runs`, and the counts are
# added into `calls_by_id` when someone reads them (`fold_replayed_ops`), or when the
# graph is dropped.
_REPLAYED: "weakref.WeakSet[ReplayedOps]" = weakref.WeakSet()


class ReplayedOps:
    """The op counts of one graph run without tracing: `counts` (id(op), n) pairs added
    to the per-op counts `runs` times at the next fold; `cpu` (op name as
    `fallback_calls` keys it, n) pairs counted as CPU fallbacks too."""

    __slots__ = ("counts", "cpu", "runs", "__weakref__")

    def __init__(self, counts: tuple[tuple[int, int], ...], cpu: tuple[tuple[str, int], ...] = ()):
        self.counts = counts
        self.cpu = cpu
        self.runs = 0
        _REPLAYED.add(self)

    def fold(self) -> None:
        runs = self.runs
        if runs:
            self.runs = 0
            calls = metrics.calls_by_id
            for key, n in self.counts:
                calls[key] = calls.get(key, 0) + n * runs
            for name, n in self.cpu:
                metrics.fallback_calls[name] += n * runs

    def __del__(self) -> None:
        try:
            self.fold()
        except Exception:  # at interpreter exit the module may be half torn down
            pass


def fold_replayed_ops() -> None:
    """Add the runs of graphs replayed since the last fold into the per-op counts."""
    for counts in list(_REPLAYED):
        counts.fold()


def reset_metrics() -> None:
    # In place: the per-op path holds the counters' dict.
    for counts in list(_REPLAYED):
        counts.runs = 0
    metrics.calls_by_id.clear()
    metrics.__dict__.update({k: v for k, v in Metrics().__dict__.items() if k not in ("calls_by_id", "ops_by_id")})
    for reset in REPORT_RESETS:
        reset()


# Functions returning more lines for metrics_report(), from the layers above (the
# collectives of sharded programs: runtime/frontends/distributed/report.py).
REPORT_SECTIONS: list[Any] = []
REPORT_RESETS: list[Any] = []  # and what reset_metrics() clears of theirs


def _hooks_description() -> str:
    missing = hooks_missing()
    return "available (Note [Generators of our device])" if missing is None else f"unavailable: {missing}"


def metrics_report() -> str:
    m = metrics
    lines = [
        "xla_native_functions metrics",
        f"  compiled graphs: {m.compile_count} ({m.compile_seconds:.3f}s compiling)",
        f"  graph cache: {m.cache_hits} hits, {m.cache_misses} misses",
        f"  graph executions: {m.execute_count} ({m.execute_seconds:.3f}s)",
        f"  compile() calls replayed without tracing: {m.replays}",
        f"  sparse updates applied as scatters when compiling: {m.sparse_updates_folded}",
        f"  JAX CPU executions: {cpu_dispatch_description()}",
        f"  XLA CPU schedule: {schedule_description()}",
        f"  host allocator: {allocator_description()}",
        f"  device guard: {guard_description()}",
        f"  device generators and pinned memory: {_hooks_description()}",
        f"  persistent compilation cache: {compilation_cache_description()}",
    ]
    cache = eager_executables
    budget = "unbounded" if config.eager_cache_bytes is None else f"budget {config.eager_cache_bytes / 2**20:.0f} MB"
    lines.append(
        f"  eager executables: {cache.cached()} held, about {cache.cached() * EXECUTABLE_BYTES / 2**20:.0f} MB "
        f"({budget}); {cache.evicted_executables} dropped from {cache.evicted_functions} op caches to stay "
        "within it"
    )
    if compiled_code_guard.clears:
        lines.append(
            f"  JAX caches cleared {compiled_code_guard.clears} times near the process's limit of memory mappings "
            f"(vm.max_map_count={compiled_code_guard.cap}): inputs of many different shapes compile many "
            "executables; pad or bucket them"
        )
    if m.replay_notes:
        lines.append("  compile() functions traced on every call:")
        lines += [f"    - {r}" for r in m.replay_notes[-20:]]
    if m.recompile_reasons:
        lines.append("  recompilation reasons:")
        lines += [f"    - {r}" for r in m.recompile_reasons[-20:]]
    if m.accuracy_checked or m.accuracy_skipped:
        lines.append(f"  accuracy check: {m.accuracy_checked} op calls compared with PyTorch CPU, "
                     f"{m.accuracy_differences} beyond the tolerances")
    if m.accuracy_skipped:
        lines.append("  accuracy check skipped, values traced by JAX (op: calls):")
        lines += [f"    {op}: {n}" for op, n in sorted(m.accuracy_skipped.items())]
    for section in REPORT_SECTIONS:
        lines += section()
    op_calls = m.op_calls  # folds replayed graphs' ops, CPU fallbacks among them
    if m.fallback_calls:
        lines.append("  CPU fallbacks (op: calls):")
        lines += [f"    {op}: {n}" for op, n in sorted(m.fallback_calls.items())]
    else:
        lines.append("  CPU fallbacks: none")
    if op_calls:
        lines.append("  op calls (op: calls):")
        lines += [f"    {op}: {n}" for op, n in sorted((str(k), v) for k, v in op_calls.items())]
    return "\n".join(lines)
