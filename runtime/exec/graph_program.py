"""A recorded graph's program run step by step: by its lowerings while JAX traces the
graph's executable (graph.py), or by eager executables while that executable compiles
(graph_first_call.py)."""

from __future__ import annotations

from typing import Any


def run_program(program: list, outputs: list, arrays: list, scalar_values: list) -> list:
    """The values of the references `outputs` after each step `(function, argument
    references)` of `program` ran. A reference is ("in", i) for arrays[i], ("node", k, j)
    for output j of step k, ("scalar", i), ("list", references) or ("const", value)."""
    # a module-level function: a nested one calling itself would be a reference cycle
    # holding every intermediate array until the garbage collector ran
    sources = (arrays, [], scalar_values)
    results = sources[1]
    for fn, refs in program:
        results.append(fn(*[_value(r, sources) for r in refs]))
    return [_value(r, sources) for r in outputs]


def _value(r: tuple, sources: tuple) -> Any:
    tag = r[0]
    if tag == "in":
        return sources[0][r[1]]
    if tag == "node":
        out = sources[1][r[1]]
        return out[r[2]] if isinstance(out, (tuple, list)) else out
    if tag == "scalar":
        return sources[2][r[1]]
    if tag == "list":
        return [None if x is None else _value(x, sources) for x in r[1]]
    return r[1]
