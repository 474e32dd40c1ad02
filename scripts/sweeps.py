"""The bookkeeping the database sweeps share (scripts/coverage_report.py over OpInfos,
scripts/module_report.py over ModuleInfos): the command-line options for shards and
results, one results file per shard that a rerun resumes from, the log of runs kept in
it, the progress bar, and the report written as a JSON twin and a Markdown page.

A sweep's *units* are its smallest runs (an OpInfo in a dtype and mode, say), each with
an id; shard `i/n` runs the i-th of n interleaved slices of the items the units are
planned over, and keeps its results in `results-{i}of{n}.json` under the results
directory as {"units": {id: result}, "runs": [one entry per invocation]}. The report is
built from every results file in that directory, so shards run side by side merge.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

# a results file is written at most this often while units finish (and always at the end)
SAVE_EVERY_SECONDS = 10


# ---------------------------------------------------------------- options


def add_shard_argument(parser: argparse.ArgumentParser, items: str) -> None:
    parser.add_argument("--shard", default="0/1", help=f"i/n: run the i-th of n interleaved slices of the {items}")


def add_results_arguments(parser: argparse.ArgumentParser, report: str, results_dir: str, out_dir: Path) -> None:
    """--results-dir, --rerun, --report-only, --out and --in-process, for a report named
    `report` (`report`.md and `report`.json under docs/reports)."""
    parser.add_argument("--results-dir", default=results_dir, help="where per-shard results are kept")
    parser.add_argument("--rerun", action="store_true", help="run units again even if results exist")
    parser.add_argument(
        "--report-only", action="store_true", help=f"only rebuild docs/reports/{report}.{{md,json}}"
    )
    parser.add_argument("--out", default=str(out_dir), help=f"where {report}.md and {report}.json go")
    parser.add_argument(
        "--in-process", action="store_true", help="no worker subprocess (debugging; an abort ends the sweep)"
    )


def shard(text: str) -> tuple[int, int]:
    """`i/n` as (i, n)."""
    i, n = (int(x) for x in text.split("/"))
    return i, n


# ---------------------------------------------------------------- results files


def load(path: Path) -> dict:
    if path.exists():
        try:
            return json.loads(path.read_text())
        except ValueError:
            print(f"warning: {path} is damaged; starting it again", file=sys.stderr)
    return {"units": {}}


def save(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, sort_keys=True))
    os.replace(tmp, path)


def stopped_at_missing_operators(res: dict | None) -> bool:
    """Every sample of a finished unit stopped at OperatorNotFound: the sweep's other modes
    of it would stop at the same operator, so they are recorded as not lowered
    ("inferred") without running."""
    return (
        res is not None
        and res.get("status") == "done"
        and res["passed"] == 0
        and res["failed"] == 0
        and res["errored"] > 0
        and res["errored"] == res["not_found"]
    )


class ShardResults:
    """One shard's results file during a sweep: `start` logs the run and says what is
    left, `record` keeps each unit's result (and saves now and then), `finish` saves."""

    def __init__(self, results_dir: str, shard_text: str):
        self.index, self.count = shard(shard_text)
        self.path = Path(results_dir) / f"results-{self.index}of{self.count}.json"
        self.data = load(self.path)
        self.units: dict[str, dict] = self.data["units"]
        self.progress: Progress | None = None
        self._last_save = time.perf_counter()

    def start(self, planned: int, todo: int) -> None:
        self.data.setdefault("runs", []).append(
            {
                "argv": " ".join(sys.argv[1:]),
                "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                "units": planned,
                "todo": todo,
            }
        )
        print(
            f"{planned} units in shard {self.index}/{self.count}, {planned - todo} already done, "
            f"results in {self.path}",
            file=sys.stderr,
        )
        self.progress = Progress(todo)

    def record(self, unit_id: str, res: dict, label: str) -> None:
        self.units[unit_id] = res
        self.progress.step(label)
        if time.perf_counter() - self._last_save > SAVE_EVERY_SECONDS:
            save(self.path, self.data)
            self._last_save = time.perf_counter()

    def close_progress(self) -> None:
        if self.progress is not None:
            self.progress.close()

    def finish(self, **run_facts) -> None:
        """Save, with `run_facts` added to this run's entry in the log."""
        self.data["runs"][-1].update(run_facts)
        save(self.path, self.data)


def read_all(results_dir: str, every_run: bool) -> tuple[dict[str, dict], list[dict]]:
    """The units of every results file in `results_dir`, and the log of runs (each
    file's last one, or `every_run`), each entry naming its file and how many units it
    holds."""
    units: dict[str, dict] = {}
    runs: list[dict] = []
    for f in sorted(glob.glob(os.path.join(results_dir, "results-*.json"))):
        d = load(Path(f))
        units.update(d["units"])
        logged = d.get("runs", []) if every_run else d.get("runs", [])[-1:]
        runs += [{**r, "file": os.path.basename(f), "done": len(d["units"])} for r in logged]
    return units, runs


# ---------------------------------------------------------------- progress


def fmt_time(s: float) -> str:
    if not math.isfinite(s):
        return "?"
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


class Progress:
    def __init__(self, total: int):
        self.total, self.done, self.start = total, 0, time.perf_counter()

    def step(self, label: str) -> None:
        self.done += 1
        el = time.perf_counter() - self.start
        eta = el / self.done * (self.total - self.done) if self.done else math.inf
        width = 30
        fill = int(width * self.done / max(self.total, 1))
        bar = "#" * fill + "." * (width - fill)
        sys.stderr.write(f"\r[{bar}] {self.done}/{self.total} {fmt_time(el)} eta {fmt_time(eta)}  {label[:60]:<60}")
        sys.stderr.flush()

    def close(self) -> None:
        sys.stderr.write("\n")


# ---------------------------------------------------------------- the report


def write_report(out_dir: str, report: str, doc: dict, markdown: Callable[[], str]) -> None:
    """`report`.json (the whole document) and `report`.md (`markdown()`) under `out_dir`."""
    os.makedirs(out_dir, exist_ok=True)
    Path(out_dir, f"{report}.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    Path(out_dir, f"{report}.md").write_text(markdown())


def pct(rate: float | None) -> str:
    return "–" if rate is None else f"{100 * rate:.1f}%"


def md_escape(text: str) -> str:
    """Text for a Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


# ---------------------------------------------------------------- running


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(
    argv: list[str] | None,
    parse_args: Callable[[list[str] | None], argparse.Namespace],
    run_sweep: Callable[[argparse.Namespace], None],
    build_report: Callable[[str, str], dict],
    summary: Callable[[dict, argparse.Namespace], str],
) -> None:
    """A sweep's command: run it (unless --report-only), build its report from every
    results file, and print `summary(report, args)`."""
    # a sweep run in the background (SIGINT ignored) still saves its results on SIGTERM
    signal.signal(signal.SIGTERM, _interrupt)
    args = parse_args(argv)
    if not args.report_only:
        run_sweep(args)
    named = {"report": args.report_name} if getattr(args, "report_name", None) else {}
    doc = build_report(args.results_dir, args.out, **named)
    print(summary(doc, args), file=sys.stderr)
