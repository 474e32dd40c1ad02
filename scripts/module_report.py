"""Run PyTorch's nn.Module test database (module_db) through the backend and write
docs/reports/modules.{md,json}.

    python scripts/module_report.py                         # everything (long)
    python scripts/module_report.py --dtypes float32 --modes eager --shard 0/4
    python scripts/module_report.py --modules nn.Linear,nn.LSTM --settings train
    python scripts/module_report.py --report-only           # rebuild the docs from results

Every ModuleInfo of module_db, in float32 and float64, in four settings (train, eval,
no_grad, inference_mode) and two modes (eager, compiled; `--modes dynamo` adds
torch.compile with the backend, on the CPU module): each sample's module is built
on the CPU under a fixed seed, a deep copy moved with xnf.to_xla, and the same step
(forward; in train and eval also the backward of a fixed random projection of the
outputs) run on both sides; outputs, parameter and input gradients and buffers are
compared (tests/module_harness.py describes the step and the comparison).

Tolerances: the ModuleInfo's test_cpu_gpu_parity overrides, else assert_close's
defaults per dtype (the OpInfo harness's table). Float64 arbitration: where a float32
result differs from PyTorch CPU's float32 result, PyTorch CPU computes the same step
again in float64 and ours is accepted if it is within the float32 tolerance of that;
such samples count as passed and are listed as `cpu_wrong` in the JSON and the report
(with whether PyTorch's float32 result is itself outside the tolerance of float64, or
both only round differently). A float32 failure that stands says how far each float32
result is from float64, and its class whether ours is the closer. The rounding rule:
ours passes if no further from float64 than PyTorch's own float32 result, or within a few
float32 steps of each tensor's largest float64 value and of the order of PyTorch's
float32 error; listed with both distances. A sample whose PyTorch CPU step made the same aten calls
(operators, arguments, tensor metadata) as an earlier sample of the unit is a duplicate,
not run on our side nor counted. Example: PyTorch CPU's BatchNorm2d backward returns a
wrong input gradient for a (1, C, H, W) grad_output with channels-last strides and
batch stride C (which autograd produces through flatten(2).transpose(1, 2) at batch 1).

Skips and special treatments (lazy modules, random modules) and the expected failures
of tests/test_module_db.py are one table, tests/module_db_skips.py, each with its reason.

Results of every unit (module, dtype, setting, mode) go to a JSON file per shard under
--results-dir as they finish; a rerun skips the units already there (--rerun to redo
them), so an interrupted sweep resumes, and the report is built from every results
file there. Units run one at a time in a worker subprocess with a time limit each
(samples past it are not run and the unit is marked truncated); a hang or a process
abort is recorded and the sweep goes on; a worker whose memory has grown past
--worker-max-rss-mb is replaced by a fresh one. Compiled executables are kept in the
runtime's persistent compilation cache. When every eager sample of a (module, dtype,
setting) stops at OperatorNotFound, its compiled unit would stop at the same operator:
it is recorded as not lowered ("inferred") without running.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

import module_db_skips as skips  # noqa: E402
import module_harness as mh  # noqa: E402
import opinfo_harness as h  # noqa: E402
import sweeps  # noqa: E402  (sys.path[0] is this directory)

COUNT_KEYS = ("passed", "failed", "errored", "skipped", "duplicate", "not_found")
REPORT_COMMAND = "python scripts/module_report.py --report-only"
# `dynamo` (torch.compile with the backend) runs when asked for with --modes
ALL_MODES = mh.MODES + mh.EXTRA_MODES


def _default_results_dir() -> str:
    from codegen.schemas import cache_dir

    return str(cache_dir() / "module-results")


def _split(value: str, allowed, what: str) -> list[str]:
    items = [x.strip() for x in value.split(",") if x.strip()]
    bad = [x for x in items if x not in allowed]
    if bad:
        sys.exit(f"unknown {what}: {', '.join(bad)} (from {', '.join(allowed)})")
    return items


def _parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sweeps.add_shard_argument(p, "ModuleInfos")
    p.add_argument("--modules", default="", help="comma-separated ModuleInfo names (nn.Linear,...)")
    p.add_argument("--dtypes", default=",".join(mh.DTYPES), help=f"from {','.join(mh.DTYPES)}")
    p.add_argument("--settings", default=",".join(mh.SETTINGS), help=f"from {','.join(mh.SETTINGS)}")
    p.add_argument("--modes", default=",".join(mh.MODES), help=f"from {','.join(ALL_MODES)}")
    p.add_argument(
        "--time-limit",
        type=float,
        default=300.0,
        help="seconds per unit; later samples are not run (hard kill at 1.5x+30s)",
    )
    sweeps.add_results_arguments(p, "modules", _default_results_dir(), ROOT / "docs" / "reports")
    p.add_argument(
        "--worker-max-rss-mb",
        type=float,
        default=1500.0,
        help="start a fresh worker once the worker's resident memory exceeds this",
    )
    return p.parse_args(argv)


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def run_sweep(args) -> None:
    infos = mh.module_infos()
    names = _split(args.modules, list(infos), "ModuleInfo") if args.modules else list(infos)
    dtypes = _split(args.dtypes, mh.DTYPES, "dtype")
    settings = _split(args.settings, mh.SETTINGS, "setting")
    modes = _split(args.modes, ALL_MODES, "mode")
    i, n = sweeps.shard(args.shard)
    names = names[i::n]
    results = sweeps.ShardResults(args.results_dir, args.shard)
    units = mh.plan_units(names, dtypes, settings, modes)
    # eager first within each (module, dtype, setting), so compiled can be inferred
    units.sort(key=lambda u: (names.index(u[0]), mh.DTYPES.index(u[1]), mh.SETTINGS.index(u[2]), ALL_MODES.index(u[3])))
    todo = [u for u in units if args.rerun or mh.unit_id(*u) not in results.units]
    results.start(len(units), len(todo))
    pool = (
        None if args.in_process else h.WorkerPool(runner="module_harness:run_unit", warm="module_harness:worker_ready")
    )
    if args.in_process:
        h._setup_worker()
        mh.worker_ready()
    started = time.perf_counter()
    restarts = 0
    try:
        for u in todo:
            name, dt, setting, mode = u
            base = results.units.get(mh.unit_id(name, dt, setting, "eager"))
            if mode == "compiled" and sweeps.stopped_at_missing_operators(base):
                res = {k: base[k] for k in COUNT_KEYS}
                res.update(
                    total=base["total"],
                    missing=base["missing"],
                    classes=base.get("classes", {}),
                    status="inferred",
                    seconds=0.0,
                )
            elif pool is None:
                res = mh.run_unit(*u, time_limit=args.time_limit)
            else:
                res = pool.call((*u, args.time_limit), args.time_limit)
            if pool is not None and pool.proc is not None and _rss_mb(pool.proc.pid) > args.worker_max_rss_mb:
                # A worker that compiled thousands of programs holds their executables and
                # traces, and the replay's garbage collection passes over all of it on every
                # traced call: compiled units slow down many times over. A fresh one does not.
                pool.stop()
                restarts += 1
            results.record(
                mh.unit_id(*u), res,
                f"{name} {dt} {setting} {mode}: {res.get('passed', 0)}p {res.get('failed', 0)}f "
                f"{res.get('errored', 0)}e {res.get('status')}",
            )
    finally:
        results.close_progress()
        if pool is not None:
            pool.stop()
        results.finish(
            wall_seconds=round(time.perf_counter() - started, 1), worker_restarts_for_memory=restarts
        )


# ----------------------------------------------------------------- report


def _counted(c: dict) -> int:
    return c.get("passed", 0) + c.get("failed", 0) + c.get("errored", 0)


def _rate(c: dict) -> float | None:
    n = _counted(c)
    return None if n == 0 else round(c.get("passed", 0) / n, 4)


def _all_pass(res: dict) -> bool:
    return (
        res.get("status") == "done"
        and not res.get("truncated")
        and res.get("failed", 0) == 0
        and res.get("errored", 0) == 0
        and res.get("passed", 0) > 0
    )


def _settings_phrase(units: list[tuple[str, str, str]]) -> str:
    """`float32+float64; all settings; eager+compiled` for the (dtype, setting, mode) triples a
    class shows up in."""
    dts = sorted({u[0] for u in units}, key=mh.DTYPES.index)
    sts = sorted({u[1] for u in units}, key=mh.SETTINGS.index)
    mds = sorted({u[2] for u in units}, key=ALL_MODES.index)
    return "; ".join(
        [
            "+".join(dts),
            "all settings" if len(sts) == len(mh.SETTINGS) else "+".join(sts),
            "+".join(mds),
        ]
    )


def build_report(results_dir: str, out_dir: str) -> dict:
    units, runs = sweeps.read_all(results_dir, every_run=True)
    infos = mh.module_infos()
    modes = [m for m in ALL_MODES if any(uid.endswith(f"|{m}") for uid in units)] or list(mh.MODES)
    planned = mh.plan_units(list(infos), modes=modes)
    planned_ids = {mh.unit_id(*u) for u in planned}
    units = {uid: res for uid, res in units.items() if uid in planned_ids}

    totals: dict[tuple[str, str, str], Counter] = defaultdict(Counter)
    per_module: dict[str, dict] = defaultdict(dict)
    classes: dict[str, dict] = {}
    cpu_wrong, incomplete = [], []
    seconds: dict[str, float] = defaultdict(float)
    samples_run: dict[str, int] = defaultdict(int)
    replay: dict[str, Counter] = defaultdict(Counter)
    no_replay: dict[str, set] = defaultdict(set)
    slow = []
    for uid, res in units.items():
        name, dt, setting, mode = uid.split("|")
        key = (dt, setting, mode)
        c = {k: res.get(k, 0) for k in COUNT_KEYS}
        total = res.get("total", 0)
        c["total"] = total
        c["not_run"] = (
            max(total - c["passed"] - c["failed"] - c["errored"] - c["skipped"] - c["duplicate"], 0)
            if res.get("status") != "skip"
            else 0
        )
        totals[key].update(c)
        per_module[name][uid] = {
            **c,
            "status": res.get("status"),
            "truncated": res.get("truncated", False),
            "first_problem": res.get("first_problem"),
            "outcomes": res.get("outcomes", ""),
            "cpu_wrong": res.get("cpu_wrong", []),
            "replayed": res.get("replayed", 0),
            "compared": res.get("compared", 0),
            "seconds": res.get("seconds", 0.0),
        }
        if res.get("status") in ("timeout", "aborted", "harness_error") or res.get("truncated"):
            incomplete.append({"unit": uid, "status": res.get("status"), "truncated": res.get("truncated", False),
                               "messages": res.get("messages", [])[:2], "not_run": c["not_run"]})
        for cls, info in (res.get("classes") or {}).items():
            e = classes.setdefault(
                cls,
                {
                    "samples": 0,
                    "units": [],
                    "modules": defaultdict(int),
                    "example": info.get("example"),
                    "aten_op": info.get("aten_op"),
                },
            )
            e["samples"] += info["samples"]
            e["units"].append(uid)
            e["modules"][name] += info["samples"]
        for cw in res.get("cpu_wrong", []):
            cpu_wrong.append({"unit": uid, **cw})
        if res.get("status") != "inferred":
            seconds[mode] += res.get("seconds", 0.0)
            samples_run[mode] += _counted(c) + c["skipped"]
            slow.append((res.get("seconds", 0.0), uid))
        if mode == "compiled" and res.get("compared"):
            replay[setting]["compared"] += res["compared"]
            replay[setting]["replayed"] += res.get("replayed", 0)
            if res.get("replayed", 0) == 0 and _all_pass(res):
                no_replay[setting].add(name)

    # modules passing: every planned unit present and all-pass
    by_module_units: dict[str, list] = defaultdict(list)
    for u in planned:
        by_module_units[u[0]].append(mh.unit_id(*u))
    everywhere = sorted(
        m for m, ids in by_module_units.items() if all(uid in units and _all_pass(units[uid]) for uid in ids)
    )
    passing_by_key: dict[tuple, list] = defaultdict(list)
    for (dt, setting, mode) in totals:
        for m, ids in by_module_units.items():
            uid = mh.unit_id(m, dt, setting, mode)
            if uid in units and _all_pass(units[uid]):
                passing_by_key[(dt, setting, mode)].append(m)
    modules_seen = sorted({uid.split("|")[0] for uid in units}, key=list(infos).index)
    # per (dtype, mode): modules all of whose samples pass in every setting
    every_setting = {}
    for dt in mh.DTYPES:
        for mode in modes:
            ids = {m: [mh.unit_id(m, dt, st, mode) for st in mh.SETTINGS] for m in by_module_units}
            if any(uid in units for v in ids.values() for uid in v):
                every_setting[f"{dt}|{mode}"] = sorted(
                    m for m, v in ids.items() if all(uid in units and _all_pass(units[uid]) for uid in v)
                )

    summary = {
        "modes": modes,
        "units": len(units),
        "units_planned": len(planned),
        "modules": len(modules_seen),
        "modules_total": len(infos),
        "by_dtype_setting_mode": {
            "|".join(k): {**dict(c), "pass_rate": _rate(c), "modules_all_passing": len(passing_by_key.get(k, []))}
            for k, c in sorted(
                totals.items(),
                key=lambda kv: (mh.DTYPES.index(kv[0][0]), ALL_MODES.index(kv[0][2]), mh.SETTINGS.index(kv[0][1])),
            )
        },
        "modules_passing_everywhere": everywhere,
        "modules_passing_every_setting": every_setting,
        "seconds_by_mode": {m: round(s, 1) for m, s in seconds.items()},
        "samples_run_by_mode": dict(samples_run),
        "seconds_per_sample_by_mode": {m: round(seconds[m] / samples_run[m], 3) for m in seconds if samples_run[m]},
        "replay_by_setting": {s: dict(c) for s, c in replay.items()},
        "compiled_all_passing_never_replayed": {s: sorted(v) for s, v in no_replay.items()},
        "slowest_units": [[round(s, 1), u] for s, u in sorted(slow, reverse=True)[:15]],
        "incomplete_units": incomplete,
        "runs": runs,
    }
    class_list = sorted(
        ({"class": k, "samples": v["samples"], "units": len(v["units"]), "modules": dict(sorted(v["modules"].items())),
          "example": v["example"], "aten_op": v["aten_op"],
          "where": _settings_phrase([tuple(u.split("|")[1:]) for u in v["units"]])} for k, v in classes.items()),
        key=lambda e: (-len(e["modules"]), -e["samples"], e["class"]),
    )
    doc = {
        "generated_by": REPORT_COMMAND,
        "summary": summary,
        "failure_classes": class_list,
        "cpu_wrong": cpu_wrong,
        "table": [dict(zip(("module", "dtype", "setting", "mode", "action", "reason"), e)) for e in skips.TABLE],
        "units": {uid: units[uid] for uid in sorted(units)},
    }
    sweeps.write_report(out_dir, "modules", doc, lambda: _markdown(doc, per_module, modules_seen, passing_by_key))
    return doc


def _cell(c: dict | None) -> str:
    if not c:
        return ""
    n = _counted(c)
    s = f"{c['passed']}/{n}"
    if c.get("status") in ("timeout", "aborted", "harness_error"):
        s += f" **{c['status']}**"
    elif c.get("truncated"):
        s += f" (+{c['not_run']} not run)"
    elif c.get("status") == "inferred":
        s += " (inf)"
    elif c.get("status") == "skip":
        s = "skip"
    if n and c["passed"] == n and not c.get("truncated"):
        s = "✓ " + s
    return s


def _markdown(doc, per_module, modules_seen, passing_by_key) -> str:
    s = doc["summary"]
    L = []
    L.append(
        f"Generated by `{REPORT_COMMAND}` from the sweep's results (`python scripts/module_report.py` runs the "
        "sweep; see its `--help`); do not edit.\n"
    )
    L.append("# nn.Module database (module_db) through the backend\n")
    L.append(
        "Every ModuleInfo of PyTorch's `module_db` in float32 and float64, each sample's module built on the CPU "
        "under a fixed seed and a deep copy moved with `xnf.to_xla`; both run the same step and are compared with "
        "PyTorch CPU (tests/module_harness.py):\n"
    )
    L.append(
        "- settings: `train` (module.train(); forward, then backward of a fixed random projection of the floating "
        "outputs; outputs, parameter gradients, input gradients and buffers compared), `eval` (module.eval(), grad "
        "enabled, the same), `no_grad` and `inference_mode` (module.eval() under the context; outputs and buffers);"
    )
    L.append(
        f"- modes: `eager` (the step called once) and `compiled` (the step, backward included, wrapped in "
        f"`xnf.compile` and called {mh.CALLS['compiled']} times: it is traced three times and replayed on the fourth; "
        "the last call is compared; PyTorch CPU runs as many calls)"
        + (
            f"; `dynamo`: the CPU module compiled by `torch.compile(module, backend=\"xla_native\")`, the step "
            f"called {mh.CALLS['dynamo']} times (a first call that compiles, a second that runs the cached graphs), "
            "the last call compared;"
            if "dynamo" in s["modes"]
            else ";"
        )
    )
    L.append(
        "- tolerances: the ModuleInfo's `test_cpu_gpu_parity` overrides, else assert_close's defaults (float32 rtol "
        "1.3e-6, atol 1e-5; float64 1e-7, 1e-7);"
    )
    L.append(
        "- float64 arbitration: where our float32 result differs from PyTorch CPU's float32 one, PyTorch CPU runs the "
        "same step in float64 and ours passes if it is within the float32 tolerance of that (listed under "
        "[PyTorch CPU arbitrated](#pytorch-cpu-arbitrated-by-float64)). The case that motivated it: PyTorch CPU's "
        "BatchNorm2d backward gives a wrong input gradient for a (1, C, H, W) grad_output with channels-last strides "
        "and batch stride C (autograd makes one through flatten(2).transpose(1, 2) at batch 1); called directly, "
        "`native_batch_norm_backward` with such a grad_output is wrong in float64 too, so there the rule can only "
        "help where the float64 path gets other strides;"
    )
    L.append(
        "- the rounding rule: a float32 failure that stands passes if ours is no further from float64 than PyTorch "
        f"CPU's float32 result, or within the tolerance plus {mh.ROUNDING_ULPS} float32 steps of each tensor's largest "
        f"float64 magnitude (long sums that cancel to near zero) and no further from float64 than "
        f"{mh.ROUNDING_CPU_FACTOR} times PyTorch CPU's float32 result is; listed with both distances under the same "
        "heading;"
    )
    L.append(
        "- a sample whose PyTorch CPU step made the same aten calls (operators, non-tensor arguments, tensor shapes, "
        "dtypes, strides, requires_grad) as an earlier sample of the unit is a duplicate: ours would run the same "
        "programs on other random values, so it is not run and not counted (column `duplicates`);"
    )
    L.append(
        "- a sample on which PyTorch CPU itself raises is skipped (not counted); skips and special treatments "
        "(lazy modules) and known failures are [one table](#skips-and-treatments) with their reasons.\n"
    )

    L.append("## Summary\n")
    L.append(
        f"{s['units']} of {s['units_planned']} units (module, dtype, setting, mode) over {s['modules']} of the "
        f"{s['modules_total']} ModuleInfos. Samples passed / compared (failed + errored + passed), and the modules "
        "all of whose samples pass in that column.\n"
    )
    L.append(
        "| dtype | mode | setting | passed / compared | pass rate | failed | errored | of which not lowered | skipped "
        "by CPU | duplicates | not run | modules all passing |"
    )
    L.append("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for key, c in s["by_dtype_setting_mode"].items():
        dt, setting, mode = key.split("|")
        L.append(
            f"| {dt} | {mode} | {setting} | {c['passed']}/{_counted(c)} | {sweeps.pct(c['pass_rate'])} | "
            f"{c['failed']} | {c['errored']} "
            f"| {c['not_found']} | {c['skipped']} | {c['duplicate']} | {c['not_run']} | {c['modules_all_passing']} |"
        )
    L.append("")
    L.append("Modules all of whose samples pass in all four settings, per dtype and mode:\n")
    L.append("| dtype | mode | modules passing every setting |")
    L.append("|---|---|---:|")
    for key, mods in s["modules_passing_every_setting"].items():
        dt, mode = key.split("|")
        L.append(f"| {dt} | {mode} | {len(mods)} of {s['modules_total']} |")
    L.append("")
    ev = s["modules_passing_everywhere"]
    L.append(
        f"Modules passing every sample in every unit (both dtypes, all settings, both modes): {len(ev)} of "
        f"{s['modules_total']}: "
        + (", ".join(f"`{m}`" for m in ev) or "none")
        + ".\n"
    )

    L.append("## Failure classes\n")
    L.append(
        "Each failed or errored sample has a class: for an exception, its type and first line with numbers "
        "blanked and the aten operator it was raised under (OperatorNotFound: the operator); for a wrong result, "
        "which tensors differ. Classes by number of modules, then samples; `where` lists the dtypes, settings and "
        "modes the class shows up in.\n"
    )
    L.append("| class | samples | modules (samples) | where | example |")
    L.append("|---|---:|---|---|---|")
    for e in doc["failure_classes"]:
        mods = ", ".join(f"{m} ({n})" for m, n in e["modules"].items())
        L.append(
            f"| {sweeps.md_escape(e['class'][:200])} | {e['samples']} | {mods} | {e['where']} | "
            f"{sweeps.md_escape((e['example'] or '')[:200])} |"
        )
    L.append("")

    L.append("## PyTorch CPU arbitrated by float64\n")
    if doc["cpu_wrong"]:
        L.append(
            "float32 samples where ours differs from PyTorch CPU's float32 result but is within tolerance of its "
            "float64 "
            "one, or passes by the rounding rule (both float32 results outside the tolerance of float64; the "
            "largest distance of each from float64 given).\n"
        )
        L.append("| unit | sample | tensors (CPU float32 outside tolerance of float64?) |")
        L.append("|---|---|---|")
        for cw in doc["cpu_wrong"]:
            def what(x):
                if x.get("float32_rounding"):
                    return (f"{x['what']} (rounding rule: ours off by {x['ours_max_error_vs_float64']:.2g}, "
                            f"PyTorch CPU float32 by {x['cpu_float32_max_error_vs_float64']:.2g})")
                return f"{x['what']} ({'yes' if x['cpu_float32_outside_tolerance_of_float64'] else 'no: rounding'})"
            t = ", ".join(what(x) for x in cw["tensors"])
            L.append(f"| `{cw['unit']}` | {cw['sample']} {sweeps.md_escape(cw['desc'])} | {t} |")
    else:
        L.append("None in this sweep.")
    L.append("")

    L.append("## Replay of compiled steps\n")
    L.append("Compiled samples whose last (fourth) call was replayed without tracing, of those compared:\n")
    for setting, c in sorted(s["replay_by_setting"].items(), key=lambda kv: mh.SETTINGS.index(kv[0])):
        never = s["compiled_all_passing_never_replayed"].get(setting, [])
        L.append(f"- {setting}: {c.get('replayed', 0)} of {c.get('compared', 0)}"
                 + (f"; modules passing but never replayed: {', '.join(f'`{m}`' for m in never)}" if never else ""))
    L.append("")

    L.append("## Cost\n")
    for r in s["runs"]:
        wall = f", {sweeps.fmt_time(r['wall_seconds'])} wall" if "wall_seconds" in r else ""
        if r.get("worker_restarts_for_memory"):
            wall += f", worker replaced {r['worker_restarts_for_memory']} times for memory"
        L.append(
            f"- `{r['file']}`: `module_report.py {r['argv']}` started {r['started']}, {r['todo']} of {r['units']} "
            f"units to run{wall}"
        )
    L.append("")
    L.append(
        "Seconds in units per mode: " + ", ".join(f"{m} {v}" for m, v in sorted(s["seconds_by_mode"].items()))
        + "; per sample run: " + ", ".join(f"{m} {v}" for m, v in sorted(s["seconds_per_sample_by_mode"].items()))
        + " (a compiled sample is four calls, three of them traced). Slowest units: "
        + ", ".join(f"`{u}` {t}s" for t, u in s["slowest_units"][:8]) + ".\n"
    )
    if s["incomplete_units"]:
        L.append("Units cut short (time limit, hang, abort, harness error):\n")
        for u in s["incomplete_units"]:
            why = u["status"] if u["status"] != "done" else "time limit"
            L.append(
                f"- `{u['unit']}`: {why}, {u['not_run']} samples not run"
                + (f" ({sweeps.md_escape(u['messages'][0][:150])})" if u["messages"] else "")
            )
        L.append("")

    L.append("## Per module\n")
    L.append(
        "Cells: samples passed/compared; ✓ all pass; (+n not run): cut by the time limit; (inf): not run, every eager "
        "sample stopped at a missing operator. First problem: the first failing sample of the module's first failing "
        "unit.\n"
    )
    cols = [(st, md) for md in doc["summary"]["modes"] for st in mh.SETTINGS]
    L.append("| module | dtype | " + " | ".join(f"{st} {md}" for st, md in cols) + " | first problem |")
    L.append("|---|---|" + "---|" * len(cols) + "---|")
    for name in modules_seen:
        for dt in mh.DTYPES:
            cells = [per_module[name].get(mh.unit_id(name, dt, st, md)) for st, md in cols]
            if not any(cells):
                continue
            first = next((c["first_problem"] for c in cells if c and c.get("first_problem")), None)
            fp = (
                sweeps.md_escape(f"{first['desc'] or 'sample ' + str(first['sample'])}: {first['message']}"[:160])
                if first
                else ""
            )
            L.append(f"| {name} | {dt} | " + " | ".join(_cell(c) for c in cells) + f" | {fp} |")
    L.append("")

    L.append("## Skips and treatments\n")
    L.append(
        "The one table (tests/module_db_skips.py); `xfail` entries are the strict expected failures of "
        "tests/test_module_db.py.\n"
    )
    L.append("| module | dtype | setting | mode | action | reason |")
    L.append("|---|---|---|---|---|---|")
    for t in doc["table"]:
        L.append(
            f"| {t['module']} | {t['dtype'] or 'all'} | {t['setting'] or 'all'} | {t['mode'] or 'all'} | {t['action']} "
            f"| {sweeps.md_escape(t['reason'])} |"
        )
    L.append("")
    return "\n".join(L)


def _summary(doc: dict, args) -> str:
    s = doc["summary"]
    return (
        f"{s['units']} units over {s['modules']} modules; {len(s['modules_passing_everywhere'])} modules pass "
        f"everywhere; report in {args.out}/modules.md"
    )


def main(argv=None) -> None:
    sweeps.main(argv, _parse_args, run_sweep, build_report, _summary)


if __name__ == "__main__":
    main()
