"""A recorded graph's program run step by step: by its lowerings while JAX traces the
graph's executable (graph.py), or by eager executables while that executable compiles
(graph_first_call.py)."""

from __future__ import annotations

from typing import Any


def run_program(program: list, outputs: list, arrays: list, scalar_values: list,
                release: list | None = None) -> list:
    """The values of the references `outputs` after each step `(function, argument
    references)` of `program` ran. A reference is ("in", i) for arrays[i], ("node", k, j)
    for output j of step k, ("scalar", i), ("list", references) or ("const", value).
    `release` (last_reads): the steps whose results to drop after each step, so that
    computing with concrete arrays holds no intermediate past its last reader."""
    # a module-level function: a nested one calling itself would be a reference cycle
    # holding every intermediate array until the garbage collector ran
    sources = (arrays, [], scalar_values)
    results = sources[1]
    for k, (fn, refs) in enumerate(program):
        results.append(fn(*[_value(r, sources) for r in refs]))
        if release is not None:
            for j in release[k]:
                results[j] = None
    return [_value(r, sources) for r in outputs]


def last_reads(program: list, outputs: list) -> list[list[int]]:
    """For each step of `program`, the steps whose results no later step and no output
    reads (run_program's `release`)."""
    last: dict[int, int] = {}
    for k, (_, refs) in enumerate(program):
        for r in refs:
            _note_reads(r, k, last)
    for r in outputs:
        _note_reads(r, len(program), last)
    release: list[list[int]] = [[] for _ in program]
    for j in range(len(program)):
        k = last.get(j, j)  # a result nothing reads goes at once
        if k < len(program):
            release[k].append(j)
    return release


def _note_reads(r: tuple, k: int, last: dict[int, int]) -> None:
    if r[0] == "node":
        last[r[1]] = k
    elif r[0] == "list":
        for x in r[1]:
            if x is not None:
                _note_reads(x, k, last)


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
