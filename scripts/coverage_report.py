"""Run PyTorch's OpInfo database through the backend and write docs/reports/coverage.{md,json}.

    python scripts/coverage_report.py                       # everything (long)
    python scripts/coverage_report.py --modes eager --shard 0/4
    python scripts/coverage_report.py --ops add,mul,softmax --dtypes float32
    python scripts/coverage_report.py --report-only         # rebuild the report from saved results

Results of every unit (OpInfo, dtype, mode) go to a JSON file per shard under
--results-dir as they finish; a rerun skips the units already there (--rerun to redo
them), so an interrupted sweep resumes. The report is built from every results file
in that directory, so shards run in parallel (separate processes) merge by themselves.
Units run in a worker subprocess with a time limit each; a hang or a process abort is
recorded and the sweep goes on. JAX's persistent compilation cache is enabled.

When an OpInfo's eager samples in a dtype all stop at OperatorNotFound, its other
modes in that dtype would stop at the same operator: they are recorded as not lowered
("inferred") without running.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

import opinfo_harness as h  # noqa: E402
import sweeps  # noqa: E402  (sys.path[0] is this directory)

COUNT_KEYS = ("passed", "failed", "errored", "not_found", "skipped", "arbitrated")
# the dtypes the pass-rate targets count (error_inputs run once, under "any"), and the
# half-precision and complex ones reported on their own
DEFAULT_GROUP = (*h.DEFAULT_DTYPES, h.ANY_DTYPE)
LOW_PRECISION = ("bfloat16", "float16")
COMPLEX = ("complex64", "complex128")
GROUPS = (
    ("", DEFAULT_GROUP, "float32, float64, int64 and bool (error_inputs once, under `any`)"),
    ("_low_precision", LOW_PRECISION, "bfloat16 and float16, reported separately"),
    ("_complex", COMPLEX, "complex64 and complex128, reported separately"),
)


def _default_results_dir() -> str:
    from codegen.schemas import cache_dir

    return str(cache_dir() / "opinfo-results")


def _parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sweeps.add_shard_argument(p, "OpInfos")
    p.add_argument("--ops", default="", help="comma-separated OpInfo keys (name or name.variant)")
    p.add_argument("--dtypes", default=",".join(h.DEFAULT_DTYPES), help=f"from {','.join(h.DTYPE_NAMES)}")
    p.add_argument("--modes", default=",".join(h.MODES), help=f"from {','.join(h.MODES)}")
    p.add_argument(
        "--time-limit", type=float, default=90.0, help="seconds per unit before it is cut short (hard kill at 1.5x+30s)"
    )
    p.add_argument("--no-reference", action="store_true", help="sample_inputs only, not reference_inputs")
    sweeps.add_results_arguments(p, "coverage", _default_results_dir(), ROOT / "docs" / "reports")
    p.add_argument(
        "--report-name", default="coverage",
        help="the report's file name (docs/reports/coverage_complex.md holds the complex dtypes' sweep)",
    )
    return p.parse_args(argv)


def run_sweep(args) -> None:
    ops = h.opinfos()
    keys = list(ops)
    if args.ops:
        wanted = [k.strip() for k in args.ops.split(",") if k.strip()]
        unknown = [k for k in wanted if k not in ops]
        if unknown:
            sys.exit(f"unknown OpInfo keys: {', '.join(unknown)}")
        keys = wanted
    i, n = sweeps.shard(args.shard)
    keys = keys[i::n]
    dtypes = [d for d in args.dtypes.split(",") if d]
    modes = [m for m in args.modes.split(",") if m]
    for d in dtypes:
        if d not in h.DTYPE_NAMES:
            sys.exit(f"unknown dtype {d}")
    for m in modes:
        if m not in h.MODES:
            sys.exit(f"unknown mode {m}")
    results = sweeps.ShardResults(args.results_dir, args.shard)
    units = h.plan_units(keys, dtypes, modes)
    # eager first within each OpInfo and dtype, so the others can be inferred from it
    order = {m: j for j, m in enumerate(h.MODES)}
    units.sort(key=lambda u: (keys.index(u[0]), u[1], order[u[2]]))
    todo = [u for u in units if args.rerun or h.unit_id(*u) not in results.units]
    results.start(len(units), len(todo))
    os.environ.setdefault("XNF_JAX_CACHE_DIR", str(Path.home() / ".cache" / "xla_native_functions" / "jax"))
    pending = list(todo)

    def record(u, res):
        results.record(
            h.unit_id(*u), res,
            f"{u[0]} {u[1]} {u[2]}: {res['passed']}p {res['failed']}f {res['errored']}e {res.get('status')}",
        )

    def runnable():
        for u in pending:
            key, dt, mode = u
            if mode not in ("eager", "error_inputs"):
                base = results.units.get(h.unit_id(key, dt if mode != "grad" else "float64", "eager"))
                if sweeps.stopped_at_missing_operators(base):
                    res = {k: base[k] for k in COUNT_KEYS}
                    res.update(missing=base["missing"], messages=[], truncated=False, status="inferred", seconds=0.0)
                    record(u, res)
                    continue
            yield u

    try:
        h.run_units(
            runnable(), record, time_limit=args.time_limit, isolate=not args.in_process, reference=not args.no_reference
        )
    finally:
        results.close_progress()
        results.finish()


# ----------------------------------------------------------------- report


def _manifest_summary() -> dict:
    import xla_native_functions as xnf
    from codegen.manifest import load_manifest
    from codegen.schemas import load_schema_database

    manifest = load_manifest(ROOT / "native_functions.yaml")
    entries = Counter(e.section for e in manifest.entries)
    overloads = Counter(xnf.SECTIONS.values())
    db = load_schema_database()
    core = sorted((r.name, r.composite_implicit) for r in db.records.values() if "core" in r.tags)
    lowered = set(xnf.SECTIONS)
    return {
        "sections": {
            s: {"entries": entries.get(s, 0), "overloads": overloads.get(s, 0)}
            for s in sorted(set(entries) | set(overloads))
        },
        "core_total": len(core),
        "core_covered": [c for c, _ in core if c in lowered],
        # CompositeImplicitAutograd: PyTorch decomposes them above the backend (into ops
        # the manifest lists), so they cannot be manifest entries (tests/test_core_aten.py).
        "core_decomposed": [c for c, implicit in core if c not in lowered and implicit],
        "core_missing": [c for c, implicit in core if c not in lowered and not implicit],
        "lowered": lowered,
    }


# Options naming directories of the machine that ran the sweep: the report shows what
# ran, not where its files went, so it names no path outside the repository.
_LOCAL_PATH_OPTIONS = ("--results-dir", "--out")


def _short_argv(argv: str) -> str:
    """The command line with a long --ops list replaced by its length and the local
    directories left out (the JSON twin keeps it whole)."""
    words, kept = argv.split(), []
    skip_value = False
    for i, w in enumerate(words):
        if skip_value:
            skip_value = False
            continue
        if w in _LOCAL_PATH_OPTIONS:
            skip_value = True
            continue
        if w.partition("=")[0] in _LOCAL_PATH_OPTIONS:
            continue
        if i > 0 and words[i - 1] == "--ops" and w.count(",") > 5:
            w = f"<{w.count(',') + 1} OpInfos>"
        kept.append(w)
    return " ".join(kept)


def build_report(results_dir: str, out_dir: str, report: str = "coverage") -> dict:
    units, runs = sweeps.read_all(results_dir, every_run=False)
    # Units the current plan no longer has (an OpInfo since classed as random has no
    # grad unit) are left out.
    planned = {h.unit_id(*u) for u in h.plan_units(list(h.opinfos()), h.DTYPE_NAMES, h.MODES)}
    units = {uid: res for uid, res in units.items() if uid in planned}
    man = _manifest_summary()
    lowered = man.pop("lowered")
    per_op: dict[str, dict] = defaultdict(lambda: {"dtypes": defaultdict(dict), "aten_ops": set()})
    totals: dict[tuple[str, str], Counter] = defaultdict(Counter)
    missing: Counter = Counter()
    missing_ops_by_opinfo: dict[str, set] = defaultdict(set)
    aborts, timeouts, seconds = [], [], defaultdict(float)
    slow: list[tuple[float, str]] = []
    for uid, res in units.items():
        key, dt, mode = uid.split("|")
        cell = {k: res.get(k, 0) for k in COUNT_KEYS}
        cell["status"] = res.get("status")
        if res.get("messages"):
            cell["messages"] = res["messages"]
        if res.get("missing"):
            cell["missing"] = res["missing"]
            missing_ops_by_opinfo[key].update(res["missing"])
        per_op[key]["dtypes"][dt][mode] = cell
        per_op[key]["aten_ops"].update(res.get("aten_ops") or ())
        totals[(dt, mode)].update(cell if False else {k: res.get(k, 0) for k in COUNT_KEYS})
        if mode == "eager":
            missing.update(res.get("missing") or {})
        if res.get("status") == "aborted":
            aborts.append(uid)
        if res.get("status") == "timeout":
            timeouts.append(uid)
        seconds[mode] += res.get("seconds", 0.0)
        slow.append((res.get("seconds", 0.0), uid))
    fully = sorted(k for k, v in per_op.items() if v["aten_ops"] and all(o in lowered for o in v["aten_ops"]))
    totals_fully: dict[tuple[str, str], Counter] = defaultdict(Counter)
    for uid, res in units.items():
        key, dt, mode = uid.split("|")
        if key in set(fully):
            totals_fully[(dt, mode)].update({k: res.get(k, 0) for k in COUNT_KEYS})

    def rate(c):
        n = c["passed"] + c["failed"] + c["errored"]
        return None if n == 0 else round(c["passed"] / n, 4)

    summary = {
        "units": len(units),
        "opinfos": len(per_op),
        "fully_lowered_opinfos": fully,
        "by_dtype_mode": {f"{dt}|{m}": {**dict(c), "pass_rate": rate(c)} for (dt, m), c in sorted(totals.items())},
        "by_dtype_mode_fully_lowered": {
            f"{dt}|{m}": {**dict(c), "pass_rate": rate(c)} for (dt, m), c in sorted(totals_fully.items())
        },
        "top_missing": missing.most_common(60),
        "aborted": sorted(aborts),
        "timeouts": sorted(timeouts),
        "seconds_by_mode": {m: round(s, 1) for m, s in sorted(seconds.items())},
        "slowest_units": [[round(s, 1), u] for s, u in sorted(slow, reverse=True)[:25]],
    }
    # what a full sweep (every OpInfo, default dtypes, every mode) would cost at the
    # measured seconds per unit; inferred units cost nothing
    planned = Counter(u[2] for u in h.plan_units(list(h.opinfos()), h.DEFAULT_DTYPES, h.MODES))
    measured = defaultdict(list)
    for uid, res in units.items():
        if res.get("status") != "inferred":
            measured[uid.split("|")[2]].append(res.get("seconds", 0.0))
    summary["runs"] = runs
    summary["planned_units_full_sweep"] = dict(planned)
    summary["opinfos_total"] = len(h.opinfos())
    summary["mean_seconds_per_unit"] = {m: round(sum(v) / len(v), 2) for m, v in measured.items() if v}
    # the half-precision and complex dtypes are reported on their own, as the target
    # counts the default dtypes
    for name, group, _ in GROUPS:
        for suffix, tots in (("", totals), ("_fully_lowered", totals_fully)):
            c = Counter()
            for (dt, _), cc in tots.items():
                if dt in group:
                    c.update(cc)
            summary[f"overall{name}{suffix}"] = {**dict(c), "pass_rate": rate(c)}
        summary[f"by_mode{name}"] = {}
        for m in h.MODES:
            c, cf = Counter(), Counter()
            for (dt, mm), cc in totals.items():
                if mm == m and dt in group:
                    c.update(cc)
                    cf.update(totals_fully.get((dt, mm), Counter()))
            if c:
                summary[f"by_mode{name}"][m] = {**dict(c), "pass_rate": rate(c), "pass_rate_fully_lowered": rate(cf)}
    doc = {
        "manifest": man,
        "summary": summary,
        "opinfos": {
            k: {"aten_ops": sorted(v["aten_ops"]), "dtypes": {d: dict(m) for d, m in sorted(v["dtypes"].items())}}
            for k, v in sorted(per_op.items())
        },
    }
    sweeps.write_report(out_dir, report, doc, lambda: _markdown(doc, per_op, lowered, missing_ops_by_opinfo, report))
    return doc


def _cell(c: dict | None) -> str:
    if not c:
        return ""
    s = f"{c['passed']}/{c['failed']}/{c['errored']}"
    if c.get("status") in ("aborted", "timeout", "harness_error"):
        s += f" **{c['status']}**"
    elif c.get("status") == "inferred":
        s += " (inf)"
    return s


def _total_row(mode, dtype, c, rate_fully, bold=False) -> str:
    b = "**" if bold else ""
    return (
        f"| {mode} | {dtype} | {c.get('passed', 0)} | {c.get('failed', 0)} | {c.get('errored', 0)} | "
        f"{c.get('not_found', 0)} "
        f"| {b}{sweeps.pct(c['pass_rate'])}{b} | {b}{sweeps.pct(rate_fully)}{b} |"
    )


def _markdown(doc, per_op, lowered, missing_by_op, report="coverage") -> str:
    s, man = doc["summary"], doc["manifest"]
    L = []
    named = "" if report == "coverage" else f" --report-name {report}"
    L.append(
        "Generated by `python scripts/coverage_report.py` (see its `--help`; rebuild from saved results: "
        f"`python scripts/coverage_report.py --report-only{named}`); do not edit.\n"
    )
    L.append("# OpInfo coverage\n")
    L.append(
        "Every OpInfo of PyTorch's `op_db` runs through the backend and is compared with PyTorch CPU at the OpInfo's "
        "own "
        "tolerances (tests/opinfo_harness.py). Cells are samples passed/failed/errored; a sample on which "
        "PyTorch CPU itself raises is not counted. `(inf)`: not run, because every eager sample of that "
        "OpInfo and dtype stopped at a missing operator (OperatorNotFound), which the other modes hit too.\n"
    )
    L.append("## What ran\n")
    for r in s["runs"]:
        L.append(
            f"- `{r['file']}`: holds {r['done']} units; last run `coverage_report.py {_short_argv(r['argv'])}`, "
            f"started {r['started']}, planned {r['units']}"
        )
    L.append("")
    L.append(
        f"This report covers {s['units']} units (OpInfo, dtype, mode) over {s['opinfos']} of the "
        f"{s['opinfos_total']} OpInfos in op_db. A full sweep in the default dtypes is "
        + ", ".join(f"{n} {m}" for m, n in sorted(s["planned_units_full_sweep"].items()))
        + " units; measured mean seconds per unit: "
        + ", ".join(f"{m} {v}" for m, v in sorted(s["mean_seconds_per_unit"].items()))
        + ".\n"
    )
    L.append("## Totals\n")
    for name, group, title in GROUPS:
        if not s[f"by_mode{name}"]:
            continue
        L.append(f"### {title}\n")
        L.append(
            "| mode | dtype | passed | failed | errored | of which not lowered | pass rate | pass rate, fully lowered "
            "OpInfos |"
        )
        L.append("|---|---|---:|---:|---:|---:|---:|---:|")
        for m in h.MODES:
            rows = [dt for dt in group if f"{dt}|{m}" in s["by_dtype_mode"]]
            for dt in rows:
                f = s["by_dtype_mode_fully_lowered"].get(f"{dt}|{m}")
                L.append(_total_row(m, dt, s["by_dtype_mode"][f"{dt}|{m}"], f["pass_rate"] if f else None))
            if len(rows) > 1:
                c = s[f"by_mode{name}"][m]
                L.append(_total_row(f"**{m}**", "all", c, c["pass_rate_fully_lowered"], bold=True))
        o, of = s[f"overall{name}"], s[f"overall{name}_fully_lowered"]
        L.append(_total_row("**all modes**", "", o, of["pass_rate"], bold=True) + "\n")
        if name == "_complex":
            L.append(
                f"Of the complex samples passed, {o.get('arbitrated', 0)} differ from PyTorch CPU's complex64 result "
                "beyond the tolerance but are at least as close as it to PyTorch CPU's complex128 result on the same "
                "inputs (complex products and powers round differently; tests/opinfo_harness.py "
                "`_closer_to_complex128`). A complex value with a NaN part equals any other such value "
                "(torch.testing's rule).\n"
            )
    L.append(
        f"Fully lowered OpInfos (every aten overload their eager forward samples reach on PyTorch CPU is in "
        f"the manifest; their backward may still reach missing ones, hence the grad rate): "
        f"{len(s['fully_lowered_opinfos'])}: {', '.join(s['fully_lowered_opinfos'])}. Rows of different modes may "
        f"come from different shards (see What ran), so compare rates within a row.\n"
    )
    L.append("## Manifest\n")
    L.append("| section | manifest entries | registered overloads (incl. derived in-place/out=) |")
    L.append("|---|---:|---:|")
    for sec, c in man["sections"].items():
        L.append(f"| {sec} | {c['entries']} | {c['overloads']} |")
    L.append("")
    L.append(
        f"Core aten ops (torchgen `core` tag): {len(man['core_covered']) + len(man['core_decomposed'])} of "
        f"{man['core_total']} covered: {len(man['core_covered'])} lowered (manifest entries), "
        f"{len(man['core_decomposed'])} CompositeImplicitAutograd ops that PyTorch decomposes before a backend "
        f"sees them, into ops the manifest lists ({', '.join(f'`{c}`' for c in man['core_decomposed'])}). "
        f"Not covered: {', '.join(f'`{c}`' for c in man['core_missing']) or 'none'}.\n"
    )
    L.append("## Top missing aten operators\n")
    L.append("By number of eager samples (all dtypes) that stop at them.\n")
    L.append("| aten operator | samples blocked |")
    L.append("|---|---:|")
    for name, n in s["top_missing"]:
        L.append(f"| `{name}` | {n} |")
    L.append("")
    L.append("## Aborts and timeouts\n")
    L.append(
        "Aborted (the worker process died; recorded as errored): "
        f"{', '.join(f'`{u}`' for u in s['aborted']) or 'none'}.\n"
    )
    L.append(f"Timed out: {', '.join(f'`{u}`' for u in s['timeouts']) or 'none'}.\n")
    L.append("## Time\n")
    L.append("Seconds per mode: " + ", ".join(f"{m} {v}" for m, v in s["seconds_by_mode"].items()) + ".\n")
    L.append("Slowest units: " + ", ".join(f"`{u}` {t}s" for t, u in s["slowest_units"][:10]) + ".\n")
    L.append("## Per OpInfo\n")
    L.append("OpInfos that reach the backend (at least one sample not stopped by a missing operator). "
             "Columns: passed/failed/errored per mode; error_inputs are listed under dtype `any`.\n")
    L.append("| OpInfo | dtype | " + " | ".join(h.MODES) + " |")
    L.append("|---|---|" + "---|" * len(h.MODES))
    reached, unreached = [], []
    for key in sorted(per_op):
        cells = [c for d in per_op[key]["dtypes"].values() for c in d.values()]
        if any(c["passed"] + c["failed"] + (c["errored"] - c["not_found"]) for c in cells):
            reached.append(key)
        else:
            unreached.append(key)
    for key in reached:
        for dt, modes in sorted(per_op[key]["dtypes"].items()):
            L.append(f"| {key} | {dt} | " + " | ".join(_cell(modes.get(m)) for m in h.MODES) + " |")
    L.append("")
    L.append("## Not lowered\n")
    L.append("OpInfos none of whose samples get past a missing operator, with the operators they stop at.\n")
    for key in unreached:
        ms = sorted(missing_by_op.get(key, ()))
        L.append(f"- {key}: {', '.join(f'`{m}`' for m in ms) or 'no counted samples'}")
    L.append("")
    return "\n".join(L)


def _summary(doc: dict, args) -> str:
    counts = Counter()
    for name, _, _ in GROUPS:
        counts.update({k: v for k, v in doc["summary"][f"overall{name}"].items() if k in COUNT_KEYS})
    return (
        f"{doc['summary']['units']} units; samples passed {counts['passed']}, failed {counts['failed']}, "
        f"errored {counts['errored']} ({counts['not_found']} not lowered); report in {args.out}/{args.report_name}.md"
    )


def main(argv=None) -> None:
    sweeps.main(argv, _parse_args, run_sweep, build_report, _summary)


if __name__ == "__main__":
    main()
