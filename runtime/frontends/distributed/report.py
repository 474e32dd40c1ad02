"""What metrics_report() says about sharded programs: per compiled graph laid out over
several devices, the collectives XLA's partitioner inserted and how many bytes each
moves, read from the optimized HLO of the graph as XLA compiled it.

A collective's bytes are the size of the buffer it works on, per device and per run:
an all-reduce's operand (a ring all-reduce sends about twice that over the group), an
all-gather's result, a reduce-scatter's operand (its result times the group size), an
all-to-all's and a collective-permute's operand. Eager ops on sharded tensors are
partitioned too, each in its own executable, and are not listed."""

from __future__ import annotations

import re
from typing import Any, Callable

from ...core.convert import X64
from ...core.placement import spans_devices
from ...exec.eager import scalar_operand
from ...exec.graph import GRAPH_WATCHERS, input_spec
from ...exec.sharding import InputLayouts
from ...platform.metrics import REPORT_RESETS, REPORT_SECTIONS
from .. import dynamo

COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4,
          "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16}
_SHAPE = re.compile(r"\b(pred|[suf]\d+|bf16|c64|c128)\[([0-9,]*)\]")
_INSTRUCTION = re.compile(r"=\s*(.*?)\s+(" + "|".join(COLLECTIVES) + r")(-start)?\(")
_GROUPS_LIST = re.compile(r"replica_groups=\{\{([0-9,]*)\}")
_GROUPS_IOTA = re.compile(r"replica_groups=\[([0-9,]+)\]<=")
MAX_GRAPHS = 64


def _size(type_text: str) -> int:
    total = 0
    for dtype, dims in _SHAPE.findall(type_text):
        n = 1
        for d in filter(None, dims.split(",")):
            n *= int(d)
        total += n * _BYTES.get(dtype, 4)
    return total


def _group_size(line: str) -> int:
    listed = _GROUPS_LIST.search(line)
    if listed:
        return len([x for x in listed.group(1).split(",") if x])
    iota = _GROUPS_IOTA.search(line)
    if iota:
        return int(iota.group(1).split(",")[-1])
    return 1


def collectives(hlo_text: str) -> list[tuple[str, int, int]]:
    """(kind, operand count, bytes) of every collective instruction of an HLO module's
    text (the -start of an asynchronous one; its -done is not counted)."""
    found = []
    for line in hlo_text.splitlines():
        m = _INSTRUCTION.search(line)
        if m is None:
            continue
        result, kind = m.group(1), m.group(2)
        operands = max(1, len(_SHAPE.findall(result))) if result.startswith("(") else 1
        size = _size(result)
        if kind == "reduce-scatter":
            size *= _group_size(line)
        if m.group(3) and result.startswith("("):  # an async start's tuple holds operands and results
            size //= 2
            operands = max(1, operands // 2)
        found.append((kind, operands, size))
    return found


class _Graph:
    __slots__ = ("kind", "devices", "lower", "found")

    def __init__(self, kind: str, devices: int, lower: Callable[[], Any]):
        self.kind, self.devices, self.lower, self.found = kind, devices, lower, None

    def collectives(self) -> list[tuple[str, int, int]]:
        if self.found is None:
            with X64:
                self.found = collectives(self.lower().compile().as_text())
            self.lower = None
        return self.found


_GRAPHS: dict[Any, _Graph] = {}
_PLAIN: set[Any] = set()  # graphs seen on one device


def _devices(arrays: Any) -> int:
    most = 1
    for a in arrays:
        sharding = getattr(a, "sharding", None)
        if sharding is not None and spans_devices(sharding):
            most = max(most, len(sharding.device_set))
    return most


def _remember(key: Any, graph: _Graph) -> None:
    if len(_GRAPHS) >= MAX_GRAPHS:
        _GRAPHS.pop(next(iter(_GRAPHS)))
    _GRAPHS[key] = graph


def traced_graph(fn: Any, inputs: list, scalars: list) -> _Graph | None:
    """The sharded graph of a trace's compiled function (exec/graph.py's watchers'
    arguments), to read its collectives from; None when it runs on one device."""
    devices = _devices(v.data for v in inputs)
    if devices == 1:
        return None
    specs = [input_spec(v) for v in inputs]
    values = [scalar_operand(s.value) for s in scalars]
    return _Graph("compile()", devices, lambda: fn.lower(specs, values))


def dynamo_graph(graph: Any, dynamic: tuple, statics: tuple) -> _Graph | None:
    """The same for one of the torch.compile backend's jitted ATen graphs."""
    devices = _devices(dynamic)
    if statics and statics[-1].__class__ is InputLayouts:
        devices = max(devices, max((len(s.device_set) for s in statics[-1] if s is not None), default=1))
    if devices == 1:
        return None
    return _Graph("torch.compile", devices, lambda: graph.jitted.lower(dynamic, statics))


def _watch_traced(fn: Any, inputs: list, scalars: list) -> None:
    key = id(fn)
    if key in _GRAPHS or key in _PLAIN:
        return
    graph = traced_graph(fn, inputs, scalars)
    if graph is None:
        _PLAIN.add(key)
    else:
        _remember(key, graph)


def _watch_dynamo(graph: Any, dynamic: tuple, statics: tuple) -> None:
    key = (id(graph), statics)
    if key in _GRAPHS or key in _PLAIN:
        return
    found = dynamo_graph(graph, dynamic, statics)
    if found is None:
        _PLAIN.add(key)
    else:
        _remember(key, found)


def graph_collectives() -> list[tuple[str, int, list[tuple[str, int, int]]]]:
    """(kind of program, devices, its collectives) of each sharded graph compiled so far."""
    return [(g.kind, g.devices, g.collectives()) for g in _GRAPHS.values()]


def compiled_collectives() -> list[dict]:
    """Per sharded graph compiled so far (the last 64): {"program": "compile()" or
    "torch.compile", "devices": n, "collectives": [{"kind", "buffers", "bytes"}, ...],
    "bytes": total}, read from XLA's optimized HLO (what metrics_report() lists)."""
    out = []
    for kind, devices, found in graph_collectives():
        out.append({"program": kind, "devices": devices, "bytes": sum(size for _, _, size in found),
                    "collectives": [{"kind": k, "buffers": n, "bytes": size} for k, n, size in found]})
    return out


def describe(found: list[tuple[str, int, int]]) -> str:
    """One graph's collectives in a line: `4 collectives, 27,888 B: all-reduce of 7
    buffers (27,692 B), ...` (or `none`)."""
    if not found:
        return "none"
    total = sum(size for _, _, size in found)
    parts = ", ".join(f"{k} of {n} buffer{'s' if n != 1 else ''} ({size:,} B)" for k, n, size in found)
    return f"{len(found)} collectives, {total:,} B: {parts}"


def _report() -> list[str]:
    if not _GRAPHS:
        return []
    lines = ["  collectives of sharded programs (XLA's optimized HLO; bytes per device and run):"]
    for i, (kind, devices, found) in enumerate(graph_collectives()):
        lines.append(f"    graph {i + 1} ({kind}, {devices} devices): {describe(found)}")
    return lines


def _reset() -> None:
    _GRAPHS.clear()
    _PLAIN.clear()


def install() -> None:
    if _watch_traced not in GRAPH_WATCHERS:
        GRAPH_WATCHERS.append(_watch_traced)
        dynamo.GRAPH_WATCHERS.append(_watch_dynamo)
        REPORT_SECTIONS.append(_report)
        REPORT_RESETS.append(_reset)
