"""`xla_native_functions.hlo(fn, *args, **kwargs)`: the program text of what running
`fn(*args, **kwargs)` compiles, with the aten operator of every instruction in its
location (Note [Op names in programs] in exec/eager.py).

    print(xnf.hlo(step, x))                          # compile() / lazy mode graphs
    print(xnf.hlo(model, x, mode="dynamo"))          # torch.compile(backend="xla_native")
    print(xnf.hlo(step, x, dialect="optimized_hlo"))  # after XLA's passes, as it runs

`fn` runs once, for real (its writes to tensors happen). In the default mode it runs
traced, as one `compile()` call or one lazy-mode step would, and every graph it runs
is returned: one, or several when a host read (`.item()`, printing, a data-dependent
shape) cuts the trace. A `compile()`d function is traced afresh, whatever its replay
state. With mode="dynamo" it runs under `torch.compile(fn, backend="xla_native")` and
the graphs are the JAX functions of its ATen graphs that the call runs.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import torch

from ..core.convert import X64
from ..exec.eager import scalar_operand
from ..exec.graph import GRAPH_WATCHERS, input_spec
from ..exec.trace import tracing
from ..platform.metrics import metrics
from . import dynamo

MODES = ("compile", "lazy", "dynamo")
DIALECTS = ("stablehlo", "hlo", "optimized_hlo")


def hlo(fn: Callable, *args: Any, mode: str = "compile", dialect: str = "stablehlo", **kwargs: Any) -> str:
    """The text of the programs running `fn(*args, **kwargs)` compiles, each headed by
    a `// graph i of n` line. `mode`: "compile" (or its synonym "lazy": the same
    graphs) or "dynamo". `dialect`: "stablehlo" (with locations: `loc("...aten::abs/abs")`),
    "hlo" (XLA's HLO, `metadata={op_name=...}`) or "optimized_hlo" (after XLA's
    optimizations: the fusions that run). A keyword argument of `fn` named `mode` or
    `dialect` has to be bound first (functools.partial)."""
    if mode not in MODES:
        raise ValueError(f"hlo(): mode must be one of {', '.join(map(repr, MODES))}, not {mode!r}")
    if dialect not in DIALECTS:
        raise ValueError(f"hlo(): dialect must be one of {', '.join(map(repr, DIALECTS))}, not {dialect!r}")
    lowerings = _dynamo_programs(fn, args, kwargs) if mode == "dynamo" else _traced_programs(fn, args, kwargs)
    if not lowerings:
        raise ValueError(
            f"hlo(): running {getattr(fn, '__qualname__', fn)!r} compiled no program: it ran no op on a tensor of "
            "this backend" + (" in a torch.compile graph" if mode == "dynamo" else "")
            + " (move its inputs with xla_native_functions.to_xla)")
    texts = []
    for i, lower in enumerate(lowerings):
        # Lowering again reuses JAX's trace of the program; it must not count its ops.
        calls = dict(metrics.calls_by_id)
        try:
            with X64:
                lowered = lower()
                if dialect == "optimized_hlo":
                    text = _compile_with_metadata(lowered).as_text()
                else:
                    text = lowered.as_text(dialect=dialect, debug_info=True)
        finally:
            metrics.calls_by_id.clear()
            metrics.calls_by_id.update(calls)
        texts.append(f"// graph {i + 1} of {len(lowerings)}\n{text}")
    return "\n".join(texts)


def _compile_with_metadata(lowered: Any) -> Any:
    """XLA's executable of `lowered`, its metadata as lowered now. The executables the
    program ran with may come from the persistent compilation cache, which keys programs
    without their metadata: one compiled before a lowering changed (or before op names
    existed) has the old names. So this compiles anew, under a key of its own (an
    explicit default option) that includes the metadata."""
    setting = "jax_compilation_cache_include_metadata_in_key"
    before = getattr(jax.config, setting)
    jax.config.update(setting, True)
    try:
        return lowered.compile({"xla_embed_ir_in_executable": False})
    finally:
        jax.config.update(setting, before)


def _traced_programs(fn: Callable, args: tuple, kwargs: dict) -> list[Callable]:
    if hasattr(fn, "signatures") and hasattr(fn, "__wrapped__"):  # a compile()d function: trace its body
        fn = fn.__wrapped__
    found: dict[int, Callable] = {}  # a graph run again (a loop in fn) is shown once

    def watch(graph: Any, inputs: list, scalars: list) -> None:
        specs = [input_spec(v) for v in inputs]
        values = [scalar_operand(s.value) for s in scalars]
        found.setdefault(id(graph), lambda: graph.lower(specs, values))

    GRAPH_WATCHERS.append(watch)
    try:
        with tracing():
            result = fn(*args, **kwargs)  # alive until the trace syncs, so its graph runs
        del result
    finally:
        GRAPH_WATCHERS.remove(watch)
    return list(found.values())


def _dynamo_programs(fn: Callable, args: tuple, kwargs: dict) -> list[Callable]:
    found: dict[Any, Callable] = {}

    def watch(graph: Any, dynamic: tuple, statics: tuple) -> None:
        key = (
            id(graph),
            statics,
            tuple(
                None if a is None else (getattr(a, "shape", None), str(getattr(a, "dtype", type(a)))) for a in dynamic
            ),
        )
        found.setdefault(key, lambda: graph.jitted.lower(dynamic, statics))

    dynamo.GRAPH_WATCHERS.append(watch)
    try:
        torch.compile(fn, backend=dynamo.BACKEND_NAME)(*args, **kwargs)
    finally:
        dynamo.GRAPH_WATCHERS.remove(watch)
    return list(found.values())
