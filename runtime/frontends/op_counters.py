"""Per-op counters, public as `xla_native_functions.metrics`, in the manner of
PyTorch/XLA's `torch_xla.debug.metrics`: how often each operator ran, in which manifest
section it is, and which ran on PyTorch CPU. Tests use them to prove where an op ran:

    xnf.metrics.reset()
    y = torch.abs(x)
    assert xnf.metrics.counter_value("aten::abs") == 1
    assert xnf.metrics.section_of("aten::abs") == "full_codegen"
    assert not xnf.metrics.executed_fallback_ops()

Names are the dispatcher's (`OpOverload.name()`): `aten::abs` for a default overload,
`aten::add.Tensor` otherwise, `mylib::op` for other namespaces. Every mode counts:
eager and traced ops where they enter the runtime, and a call that runs no Python per
op (a replayed `compile()` step, a `torch.compile` graph after its first call) counts
the ops of the call it was traced from, once per run (Note [Counting replayed ops] in
platform/metrics.py). The counting itself costs nothing per op beyond the one count the
runtime always took; these functions do the bookkeeping when asked.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ..exec.registry import SECTIONS
from ..platform.metrics import fold_replayed_ops, metrics, metrics_report, reset_metrics

__all__ = ["OpCount", "counter_value", "counters", "executed_fallback_ops", "reset", "report", "section_of"]

# The section of an operator that no manifest section lists: it ran by one of the rules
# for unlisted ops (PyTorch's decomposition, a foreach loop, a custom op's Python body,
# CPU fallback with `config.allow_cpu_fallback`, a CPU partition of a torch.compile graph).
UNLISTED = "unlisted"


class OpCount(NamedTuple):
    count: int
    section: str


def _name(op: Any) -> str:
    name = getattr(op, "name", None)
    return name() if callable(name) else str(op)


def canonical_name(name: str) -> str:
    """`aten::add.Tensor` for `aten::add.Tensor`, `add.Tensor` or `aten.add.Tensor`;
    `aten::abs` for `abs`, `aten::abs.default` or `aten.abs.default`."""
    if "::" not in name:
        parts = name.split(".")
        if len(parts) == 3:  # the OpOverload's str(): aten.add.Tensor
            name = f"{parts[0]}::{parts[1]}.{parts[2]}"
        else:
            name = "aten::" + name
    return name.removesuffix(".default")


def section_of(name: str) -> str:
    """The manifest section of an operator (`full_codegen`, `supported`, `fallback`),
    `registered` for one given a lowering with `register_lowering`, or `unlisted`. An
    in-place or out= overload has the section of the functional op it is derived from."""
    name = canonical_name(name)
    key = name.removeprefix("aten::")
    return SECTIONS.get(key, UNLISTED)


def counters(section: bool = False) -> dict[str, Any]:
    """Calls per operator since the last `reset()`: name -> count, or with `section`,
    name -> OpCount(count, section). Operators that did not run are absent."""
    fold_replayed_ops()
    out: dict[str, Any] = {}
    for key, n in metrics.calls_by_id.items():
        if not n:
            continue
        op = metrics.ops_by_id.get(key)
        name = canonical_name(_name(op)) if op is not None else f"<op {key}>"
        out[name] = out.get(name, 0) + n
    if section:
        return {name: OpCount(n, section_of(name)) for name, n in sorted(out.items())}
    return dict(sorted(out.items()))


def counter_value(name: str) -> int:
    """Calls of one operator since the last `reset()` (0 if it did not run):
    `counter_value("aten::abs")`, `counter_value("aten::add.Tensor")`."""
    return counters().get(canonical_name(name), 0)


def executed_fallback_ops() -> list[str]:
    """Operators that ran on PyTorch CPU since the last `reset()`: the manifest's
    `fallback` section, unlisted ops run with `config.allow_cpu_fallback`, and the CPU
    partitions of `torch.compile` graphs."""
    fold_replayed_ops()
    return sorted({canonical_name(name) for name, n in metrics.fallback_calls.items() if n})


def reset() -> None:
    """Zero every counter (op calls, fallbacks, compilations; `reset_metrics()`)."""
    reset_metrics()


def report() -> str:
    """The text of `metrics_report()`."""
    return metrics_report()
