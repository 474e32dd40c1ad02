"""User settings: `xla_native_functions.config.<name> = value`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Config:
    # Print each op with its input shapes as it runs.
    debug_print_each_op: bool = False
    # Re-run each eager op on PyTorch CPU and report results beyond the tolerances below.
    debug_accuracy_for_each_op: bool = False
    accuracy_atol: float = 1e-5
    accuracy_rtol: float = 1.3e-6
    # A directory to write the StableHLO of every program compiled for compile(), lazy
    # mode and torch.compile into (op names in its locations), or None.
    debug_dump_graphs: str | None = None
    # Run ops listed in no manifest section through PyTorch CPU (counted and warned once
    # per op) instead of raising OperatorNotFound.
    allow_cpu_fallback: bool = False
    # Eager mode checks index values (gather, scatter, index_*, take, embedding,
    # nll_loss) and raises as PyTorch does, at one read to the host per such op
    # (runtime/exec/index_checks.py). Compiled programs cannot raise.
    check_index_values: bool = True
    # Eager in-place ops on a tensor of at least this many bytes write into its own
    # buffer when nothing else can see the old value (Note [Donated in-place updates]
    # in runtime/exec/mutation.py); below it a fresh buffer costs no more.
    donate_min_bytes: int = 1 << 20
    # Memory that eager mode's compiled executables may hold, in bytes (None: unbounded).
    # Past it, the ops compiled least recently drop their executables and compile again
    # when next used (Note [Memory of eager executables] in
    # runtime/platform/executable_cache.py). The default, 1 GiB, is about 850 executables.
    eager_cache_bytes: int | None = 1 << 30
    # Compiled graphs take a weight that they multiply only transposed, by a few rows, as
    # a transposed copy kept per weight (Note [Transposed weights] in runtime/exec/graph.py):
    # faster products in small-batch inference, at the cost of those weights' memory.
    transposed_weight_copies: bool = True


config = Config()
