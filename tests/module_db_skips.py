"""The one table of skips, special treatments and expected failures of the module_db
sweep (tests/module_harness.py, scripts/module_report.py, tests/test_module_db.py),
each with its reason.

Entries are (module, dtype, setting, mode, action, reason); module is the ModuleInfo's
name as module_db spells it (`nn.LazyConv1d`), and None for dtype, setting or mode
means "every one". Per action, the most specific entry for a unit wins. Actions:

- "skip": the unit is not run (counted as skipped in the report);
- "lazy": a lazy module. It is moved with to_xla before its first forward, as a user
  would, and that forward materializes its parameters on each side; as each side
  draws their initial values from its own generator (ours is JAX's), the CPU module's
  values are then copied into ours, and the compared step runs after that;
- "random": the module draws random numbers, whose stream on our side is JAX's, not
  PyTorch's: only the shapes and dtypes of outputs and gradients are compared (no
  module of this torch's module_db needs it: the random ones, Dropout and RReLU, have no
  ModuleInfo, FractionalMaxPool's samples pass their `_random_samples`, and the
  Transformer samples set dropout=0.0);
- "xfail": a known failure. The sweep runs and counts it as usual; for
  tests/test_module_db.py it is a strict expected failure, so a fix that makes it pass
  fails the test until the entry is removed. Its reason names the failure: the aten
  operator, or the start of the failure class as the report spells it.
"""

from __future__ import annotations

ACTIONS = ("skip", "lazy", "random", "xfail")

_LAZY = (
    "lazy module: materialized by its first forward after to_xla; each side draws the "
    "initial values from its own generator, so the CPU module's values are copied into ours before the compared step"
)
# (module, dtype, setting, mode, action, reason)
TABLE: list[tuple[str, str | None, str | None, str | None, str, str]] = [
    *(
        (f"nn.Lazy{m}", None, None, None, "lazy", _LAZY)
        for m in ("Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d")
    ),
]


def _matches(entry: tuple, unit: tuple) -> bool:
    return all(k is None or k == u for k, u in zip(entry[:4], unit))


def lookup(module: str, dtype: str, setting: str, mode: str, action: str) -> str | None:
    """The reason of the most specific entry of `action` for the unit, or None."""
    unit = (module, dtype, setting, mode)
    best = None
    for entry in TABLE:
        if entry[4] != action or not _matches(entry, unit):
            continue
        rank = sum(k is not None for k in entry[:4])
        if best is None or rank > best[0]:
            best = (rank, entry[5])
    return None if best is None else best[1]


def treatment(module: str, dtype: str, setting: str, mode: str) -> tuple[str, str] | None:
    """How the unit is run: ("skip" | "lazy" | "random", reason) or None (compared value
    for value with PyTorch CPU)."""
    for action in ("skip", "lazy", "random"):
        reason = lookup(module, dtype, setting, mode, action)
        if reason is not None:
            return action, reason
    return None


def xfail_reason(module: str, dtype: str, setting: str, mode: str) -> str | None:
    return lookup(module, dtype, setting, mode, "xfail")


def known_failure(reason: str, problem: dict) -> bool:
    """Whether a unit's first problem is the one its xfail reason describes: the reason
    names its aten operator, or quotes the start of its failure class."""
    return bool(problem["aten_op"] and problem["aten_op"] in reason) or problem["class"][:60] in reason
