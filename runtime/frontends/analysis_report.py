"""The analysis report (frontends/analyze.py): `result.json` built from an analysed run,
its JSON Schema (`SCHEMA`, documented in docs/analyze.md) with a small validator, and
the summary printed at the end of a run.

The JSON has sorted keys, no timestamps, sorted lists, and paths relative to the
current directory where they are inside it, so two reports of the same program diff
cleanly; only the `time` section (and `support.time`) varies from run to run.
"""

from __future__ import annotations

import json
import linecache
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

import jax
import torch
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from ...shape_fns.common import TORCH_TO_NUMPY
from ..core.context import untraced
from ..core.convert import X64
from ..core.tensor import XlaTensor, from_array
from ..exec.eager import value
from .distributed.report import COLLECTIVES as COLLECTIVE_KINDS
from .distributed.report import describe as describe_collectives
from .op_counters import section_of

SCHEMA_VERSION = 1
RESULT_FILE = "result.json"
# Call sites and signatures shown per op in the printed summary.
SUMMARY_SITES = 3


# ---------------------------------------------------------------- building


def relative_path(file: str) -> str:
    """`file` relative to the current directory when it is inside it."""
    if not os.path.isabs(file):
        return file
    try:
        rel = os.path.relpath(file)
    except ValueError:  # another drive
        return file
    return file if rel.startswith("..") else rel


def _site(site: Any) -> dict:
    source = linecache.getline(site.file, site.line).strip() if site.line else ""
    return {
        "file": relative_path(site.file),
        "line": site.line,
        "function": site.function,
        "source": source,
        "module": site.module,
        "backward_of": site.backward_of,
    }


def _site_key(d: dict) -> tuple:
    return (d["file"], d["line"], d["module"], d["backward_of"], d.get("reason", ""))


def _percent(part: float, total: float) -> float:
    return round(100.0 * part / total, 2) if total else 100.0


def scaffold_command(name: str) -> str:
    """The command that adds an operator to the manifest (`python -m codegen.scaffold`),
    named by the overload it derives from, as the runtime's own error message does."""
    if not name.startswith("aten::"):
        return f"python -m codegen.scaffold {name}"
    base, dot, overload = name.removeprefix("aten::").partition(".")
    if base.endswith("_") and not base.endswith("__"):  # in-place forms derive from the functional op
        base = base[:-1]
    return f"python -m codegen.scaffold aten::{base}{dot}{overload}"


def build(analysis: Any, versions: dict[str, str]) -> dict:
    """The report of a finished analysis, as the dict written to result.json."""
    options = analysis.options
    dynamo_mode = options.mode == "dynamo"
    supported: dict[str, dict] = {}
    unsupported: dict[str, dict] = {}
    by_operator_seconds: dict[str, float] = {}
    first_seconds = 0.0
    dynamo_counts = analysis.op_counts_since_start() if dynamo_mode else {}

    if dynamo_mode:
        for name, (total, cpu) in sorted(dynamo_counts.items()):
            if total - cpu > 0 and section_of(name) != "fallback":
                supported[name] = {"count": total - cpu, "section": section_of(name)}
    for rec in sorted(analysis.ops.values(), key=lambda r: r.name):
        count = rec.count
        if count <= 0 or dynamo_mode:
            continue
        if rec.section == "fallback":
            continue  # ran on PyTorch CPU: listed under unsupported_operators
        section = rec.section
        if rec.decomposed_into:
            section = "decomposed into " + ", ".join(sorted(rec.decomposed_into))
        entry: dict[str, Any] = {"count": count, "section": section}
        if not dynamo_mode:
            sigs = [{"inputs": analysis_signature(sig), "count": n} for sig, n in rec.signatures.items()]
            entry["signatures"] = sorted(sigs, key=lambda s: (-s["count"], s["inputs"]))
            entry["more_signatures"] = max(len(rec.seen) - len(rec.signatures), 0)
            by_operator_seconds[rec.name] = round(rec.seconds, 6)
            first_seconds += rec.first_seconds
        supported[rec.name] = entry
    for name, into in sorted(analysis.decomposed.items()):
        if name in supported:
            continue
        supported[name] = {
            "count": analysis.decomposed_calls[name],
            "section": "decomposed into " + ", ".join(sorted(into)),
            "decomposed": True,
        }

    for name, u in sorted(analysis.unsupported.items()):
        sites = []
        for (site, reason), n in u.sites.items():
            d = _site(site)
            d["reason"] = reason
            d["count"] = n
            sites.append(d)
        sites.sort(key=_site_key)
        count = u.count
        if dynamo_mode:
            count = dynamo_counts.get(name, (0, 0))[1]
        reason = u.reasons.most_common(1)[0][0] if u.reasons else "unknown"
        unsupported[name] = {
            "count": count,
            "reason": reason,
            "reasons": sorted(u.reasons),
            "call_sites": sites,
            "scaffold": scaffold_command(name),
        }
        by_operator_seconds[name] = round(by_operator_seconds.get(name, 0.0) + u.seconds, 6)

    # occurrences: every call, supported or not (decomposed torch functions are counted
    # through the ops they became)
    sup_occ = sum(e["count"] for e in supported.values() if not e.get("decomposed"))
    unsup_occ = sum(e["count"] for e in unsupported.values())
    sup_ovl = sum(1 for n, e in supported.items() if not e.get("decomposed") and n not in unsupported)
    unsup_ovl = len(unsupported)
    timed = options.mode == "eager"
    sup_time = sum(by_operator_seconds.get(n, 0.0) for n, e in supported.items() if not e.get("decomposed"))
    unsup_time = sum(u.seconds for u in analysis.unsupported.values())
    occ_percent = _percent(sup_occ, sup_occ + unsup_occ)
    report: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "program": {
            "name": relative_path(analysis.program),
            "mode": options.mode,
            "verbosity": options.verbosity,
            "steps_option": options.steps,
            "accuracy_option": options.accuracy,
            "optimizer_steps": analysis.optimizer_steps,
            "top_level_calls": analysis.top_calls,
            "stopped": analysis.stopped,
            "error": analysis.error,
            "exit_status": analysis.exit_status,
        },
        "versions": dict(sorted(versions.items())),
        "support_percentage": f"{occ_percent:.2f}%",
        "support": {
            "occurrences": {"supported": sup_occ, "unsupported": unsup_occ, "total": sup_occ + unsup_occ,
                            "percent": occ_percent},
            "overloads": {"supported": sup_ovl, "unsupported": unsup_ovl, "total": sup_ovl + unsup_ovl,
                          "percent": _percent(sup_ovl, sup_ovl + unsup_ovl)},
            "time": {"measured": timed, "percent": _percent(sup_time, sup_time + unsup_time) if timed else None},
        },
        "supported_operators": supported,
        "unsupported_operators": unsupported,
        "graphs": _graphs(analysis) if options.mode != "eager" else None,
        "accuracy": _accuracy(analysis) if options.accuracy else None,
        "collectives": _collectives(analysis),
        "time": {
            "measured": timed,
            "supported_seconds": round(sup_time, 6) if timed else None,
            "unsupported_seconds": round(unsup_time, 6) if timed else None,
            "first_call_seconds": round(first_seconds, 6) if timed else None,
            "wall_seconds": round(analysis.wall_seconds, 3),
            "by_operator": by_operator_seconds if timed else {},
        },
    }
    if options.verbosity >= 1 and not dynamo_mode:
        lowered = lowered_operations(analysis)
        for name, ops in lowered.items():
            if name in supported:
                supported[name]["stablehlo"] = ops
    return report


def analysis_signature(sig: tuple) -> str:
    def one(x: Any) -> str:
        if x is None:
            return "_"
        if isinstance(x[0], torch.dtype):
            return f"{str(x[0]).removeprefix('torch.')}{list(x[1])}"
        return "[" + ", ".join(one(y) for y in x) + "]"

    return "(" + ", ".join(one(x) for x in sig) + ")"


def _accuracy(analysis: Any) -> list[dict]:
    out = []
    for (name, site), (calls, max_abs, max_rel) in analysis.accuracy.items():
        out.append({"op": name, "calls": calls, "max_abs_diff": float(f"{max_abs:.6g}"),
                    "max_rel_diff": float(f"{max_rel:.6g}"), "call_site": _site(site)})
    out.sort(key=lambda d: (d["op"],) + _site_key(d["call_site"]))
    return out


def _collectives(analysis: Any) -> list[dict]:
    """Per compiled program laid out over several devices (docs/distributed.md), the
    collectives XLA inserted and the bytes each moves per device and run."""
    out = []
    for program, kind, devices, found in analysis.sharded_collectives():
        entry: dict[str, Any] = {"program": program, "kind": kind, "devices": devices}
        if isinstance(found, str):
            entry.update(collectives=[], bytes=0, error=found)
        else:
            entry["collectives"] = [{"kind": k, "buffers": n, "bytes": size} for k, n, size in found]
            entry["bytes"] = sum(size for _, _, size in found)
        out.append(entry)
    return out


def _graphs(analysis: Any) -> dict:
    programs = []
    for g in analysis.graphs:
        compiles = []
        for c in g.compiles:
            compiles.append({"reason": c["reason"], "at_run": c["run"], "ended_by": c["ended_by"],
                             "call_site": _site(c["site"]) if c["site"].line else None})
        ended = []
        for (cause, site), n in sorted(g.ended_by.items(), key=lambda kv: (kv[0][0], kv[0][1].file, kv[0][1].line)):
            ended.append({"cause": cause, "count": n, "call_site": _site(site) if site.line else None})
        entry: dict[str, Any] = {
            "index": g.index,
            "kind": g.kind,
            "op_count": sum(g.ops.values()),
            "ops": dict(sorted(g.ops.items())),
            "runs": g.runs,
            "compilations": compiles,
            "ended_by": ended,
        }
        if g.lower is not None:
            entry["hlo"] = annotated_hlo(g.lower, g.site_of or (lambda parts: None))
        programs.append(entry)
    syncs = []
    for (op, site), n in analysis.host_syncs.items():
        syncs.append({"op": op, "count": n, "call_site": _site(site)})
    syncs.sort(key=lambda d: (d["op"],) + _site_key(d["call_site"]))
    breaks = []
    for (reason, site), n in analysis.graph_breaks.items():
        breaks.append({"reason": reason, "count": n, "call_site": _site(site) if site.line else None})
    breaks.sort(key=lambda d: (d["reason"], d["call_site"]["file"] if d["call_site"] else "",
                               d["call_site"]["line"] if d["call_site"] else 0))
    recompiles = []
    for r in analysis.recompiles:
        recompiles.append({"graph": r["graph"], "reason": r["reason"],
                           "call_site": _site(r["site"]) if r["site"].line else None})
    return {
        "count": len(programs),
        "compilations": sum(len(p["compilations"]) for p in programs),
        "recompilations": recompiles,
        "host_syncs": syncs,
        "graph_breaks": breaks,
        "programs": programs,
    }


# ---------------------------------------------------------------- lowerings (verbosity 1 and 2)

# an operation at the start of a statement, after its results: `%0 = stablehlo.add ...`,
# `%1:2 = "stablehlo.sort"(...)`, `stablehlo.return ...`
_OPERATION = re.compile(r'^\s*(?:%[^=]*=\s*)?"?((?:stablehlo|chlo)\.[a-z_0-9]+)')


def stablehlo_operations(text: str) -> dict[str, int]:
    """The StableHLO (and CHLO) operations in a module's text, with their counts."""
    found: Counter = Counter()
    for line in text.splitlines():
        match = _OPERATION.match(line)
        if match and match.group(1) != "stablehlo.return":
            found[match.group(1)] += 1
    return dict(sorted(found.items()))


class Abstract:
    """A tensor argument kept for lowering an op again (verbosity >= 1): its shape and dtype."""

    __slots__ = ("shape", "dtype")

    def __init__(self, t: torch.Tensor):
        self.shape, self.dtype = tuple(t.shape), t.dtype


def abstract_arguments(args: tuple, kwargs: dict) -> tuple:
    return tree_map(lambda x: Abstract(x) if isinstance(x, torch.Tensor) else x, (args, kwargs))


def _lower_one(func: Any, example: Any) -> Any:
    """`func`'s program for arguments like `example` (tensors given by shape and dtype):
    the op run on tensors whose storages hold JAX tracers, under jax.jit(...).lower."""
    args, kwargs = example
    flat, spec = tree_flatten((args, kwargs))
    positions = [i for i, x in enumerate(flat) if isinstance(x, Abstract)]
    shapes = [jax.ShapeDtypeStruct(flat[i].shape, TORCH_TO_NUMPY[flat[i].dtype]) for i in positions]

    def run(*arrays: Any) -> Any:
        new = list(flat)
        for i, a in zip(positions, arrays):
            new[i] = from_array(a)
        a, k = tree_unflatten(new, spec)
        out = func(*a, **k)
        # the results, and the arguments after the op (the writes of in-place and out= forms)
        return ([value(t) for t in tree_flatten(out)[0] if isinstance(t, XlaTensor)],
                [value(new[i]) for i in positions])

    with untraced(), X64:
        return jax.jit(run).lower(*shapes)


def lowered_operations(analysis: Any) -> dict[str, Any]:
    """Verbosity 1: per op, the StableHLO operations its lowering produced for its first
    recorded input signature (or the error lowering it raised)."""
    out: dict[str, Any] = {}
    for rec in analysis.ops.values():
        if not rec.examples or rec.name in analysis.unsupported:
            continue
        sig, example = next(iter(rec.examples.items()))
        try:
            text = _lower_one(rec.func, example).as_text(debug_info=False)
            out[rec.name] = {"inputs": analysis_signature(sig), "operations": stablehlo_operations(text)}
        except (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError,
                jax.errors.TracerBoolConversionError, jax.errors.TracerIntegerConversionError):
            out[rec.name] = {"inputs": analysis_signature(sig), "operations": {},
                             "error": "reads values on the host: no program of its own"}
        except Exception as error:  # a report detail: the op ran, only lowering it alone failed
            message = str(error).strip().splitlines()[0] if str(error).strip() else ""
            out[rec.name] = {"inputs": analysis_signature(sig), "operations": {},
                             "error": f"{type(error).__name__}: {message}"}
    return out


_INSTRUCTION = re.compile(r'^(\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*.*?),\s*metadata=\{([^}]*)\}(.*)$')
# the tables of source locations that HLO text with debug information starts with
_DEBUG_TABLES = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
_OP_NAME_META = re.compile(r'op_name="([^"]*)"')


def annotated_hlo(lower: Any, site_of: Any) -> dict:
    """Verbosity 2: a compiled graph's HLO text, each instruction's metadata replaced by
    the aten op and call site it came from (its named scopes: the op's own, Note [Op
    names in programs] in exec/eager.py, and the label of its node, Note [Labelled
    nodes] in exec/graph.py), and the instructions counted by aten op. `site_of(scope
    names)`: the call site, or None."""
    try:
        with X64:
            text = lower().as_text(dialect="hlo", debug_info=True)
    except Exception as error:
        return {"error": f"{type(error).__name__}: {error}", "text": "", "instructions_by_op": {}}
    lines = []
    by_op: Counter = Counter()
    in_table = False
    for line in text.splitlines():
        if line.strip() in _DEBUG_TABLES:
            in_table = True
            continue
        if in_table:
            if line.strip():
                continue
            in_table = False
            continue
        match = _INSTRUCTION.match(line)
        if not match:
            lines.append(line)
            continue
        head, meta, tail = match.groups()
        op_name = _OP_NAME_META.search(meta or "")
        parts = op_name.group(1).split("/") if op_name else []
        aten = next((p for p in parts if "::" in p), "")
        if not aten:  # a parameter, or an instruction of a helper function JAX called
            lines.append(f"{head}{tail}")
            continue
        note = aten
        s = site_of(parts)
        if s is not None:
            note += f" at {relative_path(s.file)}:{s.line}" + (f" ({s.module})" if s.module else "")
        by_op[aten] += 1
        lines.append(f"{head}{tail}  // {note}")
    return {"text": "\n".join(lines), "instructions_by_op": dict(sorted(by_op.items()))}


# ---------------------------------------------------------------- writing and the summary


def write(report: dict, directory: Path) -> bool:
    """Write `directory`/result.json; True when it replaced an existing report."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / RESULT_FILE
    existed = path.exists()
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(report, indent=2, sort_keys=True, default=str) + "\n")
    os.replace(tmp, path)
    return existed


def summary(report: dict, path: Path, overwritten: bool = False) -> str:
    """The readable end of a run: the percentage, the unsupported ops with their call
    sites, the graphs and recompilations, and where the JSON is."""
    prog = report["program"]
    sup = report["support"]
    occ, ovl, tm = sup["occurrences"], sup["overloads"], sup["time"]
    lines = [f"xla_native_functions analysis of {prog['name']} ({prog['mode']} mode)"]
    line = (f"  support: {report['support_percentage']} of {occ['total']} aten op calls, "
            f"{ovl['supported']} of {ovl['total']} overloads")
    if tm["measured"]:
        line += f", {tm['percent']:.2f}% of eager op time"
    lines.append(line)
    unsupported = report["unsupported_operators"]
    if unsupported:
        lines.append(f"  unsupported operators ({len(unsupported)}):")
        width = max(len(n) for n in unsupported)
        for name, u in sorted(unsupported.items(), key=lambda kv: (-kv[1]["count"], kv[0])):
            lines.append(f"    {name:<{width}}  {u['count']:>5} calls  {u['reason']}")
            for s in u["call_sites"][:SUMMARY_SITES]:
                where = f"{s['file']}:{s['line']}"
                extra = "  ".join(
                    x
                    for x in (s["module"], f"backward of {s['backward_of']}" if s["backward_of"] else "", s["source"])
                    if x
                )
                lines.append(f"        {where}  {extra}")
            if len(u["call_sites"]) > SUMMARY_SITES:
                lines.append(f"        ... {len(u['call_sites']) - SUMMARY_SITES} more call sites in the report")
            lines.append(f"        add it: {u['scaffold']}")
    else:
        lines.append("  unsupported operators: none")
    graphs = report["graphs"]
    if graphs is not None:
        line = (f"  graphs: {graphs['count']} compiled programs, {graphs['compilations']} compilations, "
                f"{len(graphs['recompilations'])} recompilations")
        if graphs["host_syncs"]:
            line += f", {sum(s['count'] for s in graphs['host_syncs'])} host syncs"
        if graphs["graph_breaks"]:
            line += f", {sum(b['count'] for b in graphs['graph_breaks'])} graph breaks"
        lines.append(line)
        for r in graphs["recompilations"][:5]:
            lines.append(f"    recompiled graph {r['graph']}: {r['reason']}")
        for s in graphs["host_syncs"][:5]:
            c = s["call_site"]
            lines.append(f"    host sync by {s['op']} at {c['file']}:{c['line']} ({s['count']}x)  {c['source']}")
        for b in graphs["graph_breaks"][:5]:
            c = b["call_site"]
            lines.append(f"    graph break at {c['file']}:{c['line'] if c else '?'}: {b['reason'][:160]}" if c else
                         f"    graph break: {b['reason'][:160]}")
    if report["collectives"]:
        lines.append("  collectives of programs laid out over several devices (XLA's optimized HLO; bytes per device "
                     "and run):")
        for c in report["collectives"]:
            name = f"program {c['program']}" if c["program"] is not None else "a graph"
            found = [(x["kind"], x["buffers"], x["bytes"]) for x in c["collectives"]]
            text = f"not read: {c['error']}" if "error" in c else describe_collectives(found)
            lines.append(f"    {name} ({c['kind']}, {c['devices']} devices): {text}")
    if report["accuracy"]:
        lines.append(f"  ops that differ from PyTorch CPU beyond tolerance ({len(report['accuracy'])}):")
        for a in report["accuracy"][:10]:
            c = a["call_site"]
            lines.append(f"    {a['op']}: max abs {a['max_abs_diff']:.3g}, max rel {a['max_rel_diff']:.3g} at "
                         f"{c['file']}:{c['line']}")
    elif report["accuracy"] is not None:
        lines.append("  accuracy: every compared op matches PyTorch CPU within tolerance")
    if prog["stopped"]:
        lines.append(f"  stopped: {prog['stopped']}")
    if prog["error"]:
        e = prog["error"]
        lines.append(f"  the program raised {e['type']} at {e['file']}:{e['line']}: {e['message'][:300]}")
    lines.append(f"  report: {path}" + (" (replaced the previous report)" if overwritten else ""))
    return "\n".join(lines)


# ---------------------------------------------------------------- the schema


def _rows(properties: dict, optional: tuple[str, ...] = ()) -> dict:
    """A table in the report: an array of objects with exactly `properties`, each
    required but the `optional` ones."""
    return {
        "type": "array",
        "items": {
            "type": "object",
            "required": [key for key in properties if key not in optional],
            "additionalProperties": False,
            "properties": properties,
        },
    }


_SITE = {
    "type": "object",
    "required": ["file", "line", "function", "source", "module", "backward_of"],
    "additionalProperties": False,
    "properties": {
        "file": {"type": "string"}, "line": {"type": "integer", "minimum": 0}, "function": {"type": "string"},
        "source": {"type": "string"}, "module": {"type": "string"}, "backward_of": {"type": "string"},
    },
}
_SITE_OR_NULL = {"anyOf": [_SITE, {"type": "null"}]}
_MEASURE = {
    "type": "object",
    "required": ["supported", "unsupported", "total", "percent"],
    "additionalProperties": False,
    "properties": {
        "supported": {"type": "integer", "minimum": 0},
        "unsupported": {"type": "integer", "minimum": 0},
        "total": {"type": "integer", "minimum": 0},
        "percent": {"type": "number", "minimum": 0, "maximum": 100},
    },
}
_STABLEHLO = {
    "type": "object",
    "required": ["inputs", "operations"],
    "properties": {
        "inputs": {"type": "string"},
        "operations": {"type": "object", "additionalProperties": {"type": "integer"}},
        "error": {"type": "string"},
    },
    "additionalProperties": False,
}
SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "xla_native_functions analysis report (result.json)",
    "type": "object",
    "required": [
        "schema_version",
        "program",
        "versions",
        "support_percentage",
        "support",
        "supported_operators",
        "unsupported_operators",
        "graphs",
        "accuracy",
        "collectives",
        "time",
    ],
    "additionalProperties": False,
    "properties": {
        "schema_version": {"const": SCHEMA_VERSION},
        "program": {
            "type": "object",
            "required": [
                "name",
                "mode",
                "verbosity",
                "steps_option",
                "accuracy_option",
                "optimizer_steps",
                "top_level_calls",
                "stopped",
                "error",
                "exit_status",
            ],
            "additionalProperties": False,
            "properties": {
                "name": {"type": "string"},
                "mode": {"enum": ["eager", "compiled", "dynamo"]},
                "verbosity": {"enum": [0, 1, 2]},
                "steps_option": {"type": ["integer", "null"]},
                "accuracy_option": {"type": "boolean"},
                "optimizer_steps": {"type": "integer", "minimum": 0},
                "top_level_calls": {"type": "integer", "minimum": 0},
                "stopped": {"type": ["string", "null"]},
                "error": {
                    "anyOf": [
                        {"type": "null"},
                        {
                            "type": "object",
                            "required": ["type", "message", "file", "line"],
                            "properties": {
                                "type": {"type": "string"},
                                "message": {"type": "string"},
                                "file": {"type": "string"},
                                "line": {"type": "integer"},
                                "traceback": {"type": "string"},
                            },
                            "additionalProperties": False,
                        },
                    ]
                },
                "exit_status": {"type": ["integer", "null"]},
            },
        },
        "versions": {
            "type": "object",
            "required": ["xla_native_functions", "torch", "jax", "jaxlib", "python", "platform", "device"],
            "additionalProperties": {"type": "string"},
        },
        "support_percentage": {"type": "string", "pattern": r"^\d{1,3}\.\d\d%$"},
        "support": {
            "type": "object",
            "required": ["occurrences", "overloads", "time"],
            "additionalProperties": False,
            "properties": {
                "occurrences": _MEASURE,
                "overloads": _MEASURE,
                "time": {
                    "type": "object",
                    "required": ["measured", "percent"],
                    "additionalProperties": False,
                    "properties": {
                        "measured": {"type": "boolean"},
                        "percent": {"type": ["number", "null"], "minimum": 0, "maximum": 100},
                    },
                },
            },
        },
        "supported_operators": {
            "type": "object",
            "propertyNames": {"pattern": r"^[\w.]+::[\w.]+$"},
            "additionalProperties": {
                "type": "object",
                "required": ["count", "section"],
                "additionalProperties": False,
                "properties": {
                    "count": {"type": "integer", "minimum": 0},
                    "section": {"type": "string"},
                    "decomposed": {"const": True},
                    "signatures": _rows({"inputs": {"type": "string"}, "count": {"type": "integer", "minimum": 1}}),
                    "more_signatures": {"type": "integer", "minimum": 0},
                    "stablehlo": _STABLEHLO,
                },
            },
        },
        "unsupported_operators": {
            "type": "object",
            "propertyNames": {"pattern": r"^[\w.]+::[\w.]+$"},
            "additionalProperties": {
                "type": "object",
                "required": ["count", "reason", "reasons", "call_sites", "scaffold"],
                "additionalProperties": False,
                "properties": {
                    "count": {"type": "integer", "minimum": 0},
                    "reason": {"type": "string"},
                    "reasons": {"type": "array", "items": {"type": "string"}},
                    "call_sites": _rows({
                        **_SITE["properties"],
                        "reason": {"type": "string"},
                        "count": {"type": "integer", "minimum": 0},
                    }),
                    "scaffold": {"type": "string", "pattern": r"^python -m codegen\.scaffold \S+$"},
                },
            },
        },
        "graphs": {
            "anyOf": [
                {"type": "null"},
                {
                    "type": "object",
                    "required": ["count", "compilations", "recompilations", "host_syncs", "graph_breaks", "programs"],
                    "additionalProperties": False,
                    "properties": {
                        "count": {"type": "integer", "minimum": 0},
                        "compilations": {"type": "integer", "minimum": 0},
                        "recompilations": _rows({
                            "graph": {"type": "integer"},
                            "reason": {"type": "string"},
                            "call_site": _SITE_OR_NULL,
                        }),
                        "host_syncs": _rows({
                            "op": {"type": "string"},
                            "count": {"type": "integer"},
                            "call_site": _SITE,
                        }),
                        "graph_breaks": _rows({
                            "reason": {"type": "string"},
                            "count": {"type": "integer"},
                            "call_site": _SITE_OR_NULL,
                        }),
                        "programs": _rows({
                            "index": {"type": "integer"},
                            "kind": {"enum": ["trace", "dynamo", "aten"]},
                            "op_count": {"type": "integer", "minimum": 0},
                            "ops": {"type": "object", "additionalProperties": {"type": "integer"}},
                            "runs": {"type": "integer", "minimum": 0},
                            "compilations": _rows({
                                "reason": {"type": "string"},
                                "at_run": {"type": "integer"},
                                "ended_by": {"type": "string"},
                                "call_site": _SITE_OR_NULL,
                            }),
                            "ended_by": _rows({
                                "cause": {"type": "string"},
                                "count": {"type": "integer"},
                                "call_site": _SITE_OR_NULL,
                            }),
                            "hlo": {
                                "type": "object",
                                "required": ["text", "instructions_by_op"],
                                "properties": {
                                    "text": {"type": "string"},
                                    "error": {"type": "string"},
                                    "instructions_by_op": {
                                        "type": "object",
                                        "additionalProperties": {"type": "integer"},
                                    },
                                },
                                "additionalProperties": False,
                            },
                        }, optional=("hlo",)),
                    },
                },
            ]
        },
        "collectives": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["program", "kind", "devices", "collectives", "bytes"],
                "additionalProperties": False,
                "properties": {
                    "program": {"type": ["integer", "null"]},
                    "kind": {"enum": ["compile()", "torch.compile"]},
                    "devices": {"type": "integer", "minimum": 2},
                    "collectives": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["kind", "buffers", "bytes"],
                            "additionalProperties": False,
                            "properties": {
                                "kind": {"enum": list(COLLECTIVE_KINDS)},
                                "buffers": {"type": "integer", "minimum": 1},
                                "bytes": {"type": "integer", "minimum": 0},
                            },
                        },
                    },
                    "bytes": {"type": "integer", "minimum": 0},
                    "error": {"type": "string"},
                },
            },
        },
        "accuracy": {
            "anyOf": [
                {"type": "null"},
                _rows({
                    "op": {"type": "string"},
                    "calls": {"type": "integer", "minimum": 1},
                    "max_abs_diff": {"type": "number"},
                    "max_rel_diff": {"type": "number"},
                    "call_site": _SITE,
                }),
            ]
        },
        "time": {
            "type": "object",
            "required": [
                "measured",
                "supported_seconds",
                "unsupported_seconds",
                "first_call_seconds",
                "wall_seconds",
                "by_operator",
            ],
            "additionalProperties": False,
            "properties": {
                "measured": {"type": "boolean"},
                "supported_seconds": {"type": ["number", "null"]},
                "unsupported_seconds": {"type": ["number", "null"]},
                "first_call_seconds": {"type": ["number", "null"]},
                "wall_seconds": {"type": "number"},
                "by_operator": {"type": "object", "additionalProperties": {"type": "number"}},
            },
        },
    },
}


# ---------------------------------------------------------------- a small JSON Schema validator

_TYPES = {
    "object": lambda x: isinstance(x, dict),
    "array": lambda x: isinstance(x, list),
    "string": lambda x: isinstance(x, str),
    "integer": lambda x: isinstance(x, int) and not isinstance(x, bool),
    "number": lambda x: isinstance(x, (int, float)) and not isinstance(x, bool),
    "boolean": lambda x: isinstance(x, bool),
    "null": lambda x: x is None,
}


def validate(instance: Any, schema: dict = SCHEMA, where: str = "$") -> list[str]:
    """The places where `instance` breaks `schema`: the subset of JSON Schema `SCHEMA`
    uses (type, const, enum, pattern, minimum, maximum, properties, required,
    additionalProperties, propertyNames, items, anyOf). Empty when it conforms."""
    errors: list[str] = []
    if "anyOf" in schema:
        if all(validate(instance, s, where) for s in schema["anyOf"]):
            alternatives = [validate(instance, s, where) for s in schema["anyOf"]]
            errors.append(f"{where}: matches none of the alternatives ({'; '.join(a[0] for a in alternatives)})")
        return errors
    if "const" in schema and instance != schema["const"]:
        errors.append(f"{where}: must be {schema['const']!r}, not {instance!r}")
    if "enum" in schema and instance not in schema["enum"]:
        errors.append(f"{where}: must be one of {schema['enum']!r}, not {instance!r}")
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_TYPES[t](instance) for t in types):
            errors.append(f"{where}: must be of type {'/'.join(types)}, not {type(instance).__name__}")
            return errors
    if isinstance(instance, str) and "pattern" in schema and not re.search(schema["pattern"], instance):
        errors.append(f"{where}: {instance!r} does not match {schema['pattern']!r}")
    if _TYPES["number"](instance):
        if "minimum" in schema and instance < schema["minimum"]:
            errors.append(f"{where}: {instance} is below {schema['minimum']}")
        if "maximum" in schema and instance > schema["maximum"]:
            errors.append(f"{where}: {instance} is above {schema['maximum']}")
    if isinstance(instance, dict):
        props = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in instance:
                errors.append(f"{where}: lacks {key!r}")
        names = schema.get("propertyNames")
        for key, v in instance.items():
            if names is not None:
                errors += validate(key, names, f"{where} key {key!r}")
            if key in props:
                errors += validate(v, props[key], f"{where}.{key}")
            else:
                extra = schema.get("additionalProperties", True)
                if extra is False:
                    errors.append(f"{where}: unexpected key {key!r}")
                elif isinstance(extra, dict):
                    errors += validate(v, extra, f"{where}[{key!r}]")
    if isinstance(instance, list) and "items" in schema:
        for i, v in enumerate(instance):
            errors += validate(v, schema["items"], f"{where}[{i}]")
    return errors
