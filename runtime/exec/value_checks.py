"""Eager checks of argument values that PyTorch CPU raises on and XLA cannot.

A compiled computation cannot raise, so an out-of-range index reads a fill value and an
integer division by zero returns a number. In eager mode the ops the manifest's policy
`eager_value_checks` names (by base name: in-place and out= forms included) look at
their values first and raise PyTorch's error; the checks themselves live in
index_checks.py and division_checks.py, and this module owns their names.
"""

from __future__ import annotations

from typing import Any, Callable

from . import division_checks, index_checks

INTEGER_DIVISION = "integer_division"
CHECK_NAMES = frozenset(index_checks.CHECKS) | {INTEGER_DIVISION}


def install(registry: dict[Any, Any], checks: dict[str, tuple[str, ...]]) -> dict[Any, Any]:
    """The registry with the handler of each op that `checks` (base name -> (check
    name,)) names wrapped by its check."""
    unknown = sorted({name for (name,) in checks.values()} - CHECK_NAMES)
    if unknown:
        raise RuntimeError(f"the manifest's policy 'eager_value_checks' names unknown check(s) {', '.join(unknown)}; "
                           f"the checks are {', '.join(sorted(CHECK_NAMES))} (runtime/exec/value_checks.py)")
    out = dict(registry)
    for op, handler in registry.items():
        entry = checks.get(op._schema.name.removeprefix("aten::").rstrip("_"))
        if entry is not None:
            out[op] = _wrap(op, handler, entry[0], registry)
    return out


def _wrap(op: Any, handler: Callable[..., Any], check: str, registry: dict[Any, Any]) -> Callable[..., Any]:
    if check == INTEGER_DIVISION:
        return division_checks.wrap(op, handler)
    return index_checks.wrap(op, handler, check, registry)
