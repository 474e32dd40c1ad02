"""Eager checks of argument values that PyTorch CPU raises on and XLA cannot.

A compiled computation cannot raise, so an out-of-range index reads a fill value and an
integer division by zero returns a number. In eager mode the ops the manifest's policy
`eager_value_checks` names (by base name: in-place and out= forms included) look at
their values first and raise PyTorch's error; the checks themselves live in
index_checks.py and division_checks.py (the negative integer power, which reads only a
Python number, here), and this module owns their names.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from . import division_checks, index_checks

INTEGER_DIVISION = "integer_division"
NEGATIVE_INTEGER_POWER = "negative_integer_power"
CHECK_NAMES = frozenset(index_checks.CHECKS) | {INTEGER_DIVISION, NEGATIVE_INTEGER_POWER}


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
    if check == NEGATIVE_INTEGER_POWER:
        return _negative_integer_power(handler)
    return index_checks.wrap(op, handler, check, registry)


def _negative_integer_power(handler: Callable[..., Any]) -> Callable[..., Any]:
    """An integer tensor to a negative Python integer power: PyTorch refuses it (the
    exponent's value is not part of the op's executable, which takes any number)."""

    def run(self, exponent, *args, **kwargs):
        if (type(exponent) is int and exponent < 0 and isinstance(self, torch.Tensor) and not self.is_floating_point()
                and not self.is_complex()):
            raise RuntimeError("Integers to negative integer powers are not allowed.")
        return handler(self, exponent, *args, **kwargs)

    run.__wrapped__ = handler
    return run
