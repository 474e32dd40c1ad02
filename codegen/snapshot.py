"""A behaviour snapshot of operators, and the difference of two: the zero-diff gate of a
refactor or a move.

    python -m codegen.snapshot --ops aten::cholesky --out before.json
    ... change a lowering, regenerate ...
    python -m codegen.snapshot --ops aten::cholesky --out after.json
    python -m codegen.snapshot --diff before.json after.json     # exit 1 and print any difference

For each operator, the OpInfos that reach it (from the committed coverage report: those
named like it and those whose samples call it, the most direct first, --max-opinfos of
them) run every sample, and every error input, through the backend in eager and
compiled mode (in-place and Python-operator variants too where the OpInfo has them),
each sample also with its input negated, zeroed, strided, and holding NaN and
infinities. For each call the snapshot records the outputs' values (exactly: a hash of
their bytes, NaNs equal), dtypes, shapes, strides and aliasing, the exception type
raised, and the per-op counters with their sections and CPU fallbacks. It runs in a
subprocess that imports this checkout's package; nothing here imports torch.
`python -m codegen.move` takes one before and one after moving an entry.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .diagnostics import SourceError
from .manifest import ManifestError
from .ops_index import REPO, CommandError, load_coverage, manifest_spelling, opinfos_reaching, qualified

DTYPES = ("float32", "float64", "int64", "bool")
MODES = ("eager", "compiled", "inplace", "operator")
VARIANTS = ("given", "negated", "zeros", "strided", "nonfinite")
DEFAULT_MAX_OPINFOS = 2


def select_opinfos(ops: list[str], max_opinfos: int, root: Path = REPO) -> tuple[list[str], list[str]]:
    """The OpInfos to run for `ops` (manifest spellings) and notes on the choice."""
    coverage = load_coverage(root)
    chosen: list[str] = []
    notes: list[str] = []
    for op in ops:
        matches = opinfos_reaching(op, coverage)
        reaching = [m for m in matches if m.why != "named like it"] or matches
        if not reaching:
            notes.append(f"no OpInfo reaches {qualified(op)} (per the coverage report): pass --opinfos")
            continue
        take = reaching if not max_opinfos else reaching[:max_opinfos]
        if len(take) < len(reaching):
            notes.append(f"{qualified(op)}: {len(take)} of the {len(reaching)} OpInfos that reach it "
                         f"({', '.join(m.key for m in take)}; --max-opinfos 0 runs all)")
        chosen += [m.key for m in take if m.key not in chosen]
    return chosen, notes


def take(opinfos: list[str], root: Path = REPO, dtypes=DTYPES, modes=MODES, variants=VARIANTS,
         max_samples: int = 0, timeout: float = 3600.0) -> dict:
    """Run the snapshot worker on `root`'s package; its result."""
    request = {"root": str(Path(root).resolve()), "opinfos": list(opinfos), "dtypes": list(dtypes),
               "modes": list(modes), "variants": list(variants), "max_samples": max_samples}
    with tempfile.TemporaryDirectory(prefix="xnf-snapshot-") as tmp:
        req, out = Path(tmp) / "request.json", Path(tmp) / "result.json"
        req.write_text(json.dumps(request))
        env = dict(os.environ, PYTHONWARNINGS="ignore")
        proc = subprocess.run([sys.executable, "-m", "codegen.snapshot_worker", str(req), str(out)], cwd=root,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout, env=env)
        if proc.returncode != 0 or not out.exists():
            tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
            raise CommandError(f"the snapshot of {', '.join(opinfos)} failed (exit code {proc.returncode}):\n{tail}")
        result = json.loads(out.read_text())
    result["request"] = request
    return result


def _outcome(rec: dict) -> str:
    if "conversion" in rec:
        return f"input conversion raised {rec['conversion']['raised']}"
    if "raised" in rec:
        return f"raised {rec['raised']} ({rec['message'][:80]})"
    outs = rec.get("outputs", [])
    shown = []
    for o in outs[:3]:
        if o.get("kind") == "tensor":
            shown.append(f"{o['dtype']}{o['shape']} {o.get('preview', [])[:4]}")
        else:
            shown.append(o.get("value", o.get("kind")))
    return "returned " + ", ".join(shown) + (" ..." if len(outs) > 3 else "")


def _value_difference(a: dict, b: dict, tolerance: tuple[float, float]) -> str | None:
    """Why two outputs' values differ, or None when they agree within `tolerance`
    (rtol, atol; (0, 0): exactly, NaNs equal)."""
    x, y = a.get("data"), b.get("data")
    if x is None or y is None or len(x) != len(y):
        return f"values differ: {a.get('preview')} -> {b.get('preview')}"
    rtol, atol = tolerance
    worst, at = -1.0, 0
    for i, (p, q) in enumerate(zip(x, y)):
        if p == q or (p != p and q != q):
            continue
        if p != p or q != q or math.isinf(p) or math.isinf(q):
            return f"values differ at element {i}: {p} -> {q}"
        err = abs(p - q)
        if err > atol + rtol * abs(p) and err > worst:
            worst, at = err, i
    if worst < 0:
        return None
    return f"values differ: max abs difference {worst:.3g} at element {at} ({x[at]!r} -> {y[at]!r})"


def _compare_tensor(prefix: str, a: dict, b: dict, tolerance: tuple[float, float] = (0.0, 0.0)) -> list[str]:
    out = []
    for field in ("kind", "device", "dtype", "shape", "stride", "offset", "requires_grad", "is", "aliases", "values",
                  "value"):
        if a.get(field) != b.get(field):
            if field == "values":
                why = _value_difference(a, b, tolerance)
                if why is not None:
                    out.append(f"{prefix} {why}")
            elif field in ("is", "aliases"):
                out.append(f"{prefix} aliasing: {a.get(field) or 'a new tensor'} -> {b.get(field) or 'a new tensor'}")
            else:
                out.append(f"{prefix} {field}: {a.get(field)} -> {b.get(field)}")
    return out


def compare(a: dict, b: dict, ignore_sections: set[str] = frozenset(), ignore_counters: bool = False,
            tolerance: tuple[float, float] = (0.0, 0.0)) -> list[str]:
    """Every difference between two snapshots' records, one line each. Values must be
    equal bit for bit (NaNs equal) unless `tolerance` (rtol, atol) says otherwise.
    Sections and CPU fallbacks of the operators in `ignore_sections` (qualified names)
    are not compared: a move changes them on purpose."""
    ra, rb = a["records"], b["records"]
    diffs: list[str] = []
    for key in sorted(set(ra) | set(rb)):
        where = key.replace("|", " ")
        if key not in rb:
            diffs.append(f"{where}: only in the first snapshot")
            continue
        if key not in ra:
            diffs.append(f"{where}: only in the second snapshot")
            continue
        x, y = ra[key], rb[key]
        lines: list[str] = []
        if ("raised" in x) != ("raised" in y) or ("conversion" in x) != ("conversion" in y):
            lines.append(f"{_outcome(x)} -> {_outcome(y)}")
        elif "raised" in x and x["raised"] != y["raised"]:
            lines.append(f"raised {x['raised']} -> {y['raised']} ({y['message'][:80]})")
        else:
            xo, yo = x.get("outputs", []), y.get("outputs", [])
            if len(xo) != len(yo):
                lines.append(f"{len(xo)} outputs -> {len(yo)}: {_outcome(x)} -> {_outcome(y)}")
            else:
                for i, (p, q) in enumerate(zip(xo, yo)):
                    lines += _compare_tensor(f"output {i}", p, q, tolerance)
            if (x.get("argument0") or {}) != (y.get("argument0") or {}):
                lines += _compare_tensor(
                    "argument 0 after the call", x.get("argument0") or {}, y.get("argument0") or {}, tolerance
                )
        if not ignore_counters:
            cx, cy = x.get("counters", {}), y.get("counters", {})
            for name in sorted(set(cx) | set(cy)):
                p, q = cx.get(name), cy.get(name)
                if name in ignore_sections and p and q:
                    p, q = p[0], q[0]
                if p != q:
                    lines.append(f"counter {name}: {_count(p)} -> {_count(q)}")
        fx = [f for f in x.get("fallbacks", []) if f not in ignore_sections]
        fy = [f for f in y.get("fallbacks", []) if f not in ignore_sections]
        if fx != fy:
            lines.append(f"CPU fallbacks: {fx or 'none'} -> {fy or 'none'}")
        diffs += [f"{where}: {line}" for line in lines]
    return diffs


def _count(c) -> str:
    if c is None:
        return "not called"
    if isinstance(c, list):
        return f"{c[0]} ({c[1]})"
    return str(c)


def print_diff(diffs: list[str], out=sys.stdout, limit: int = 40) -> None:
    for line in diffs[:limit]:
        print(f"  {line}", file=out)
    if len(diffs) > limit:
        print(f"  ... and {len(diffs) - limit} more", file=out)


def summary(snap: dict) -> str:
    records = snap["records"]
    raised = sum(1 for r in records.values() if "raised" in r)
    return (f"{len(records)} calls ({raised} raising) of {len(snap['request']['opinfos'])} OpInfo(s) "
            f"in {snap.get('seconds', 0):.1f}s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m codegen.snapshot", description=__doc__.splitlines()[0])
    parser.add_argument("--ops", nargs="+", default=[], metavar="OP", help="operators: aten::cholesky, add.Tensor")
    parser.add_argument("--opinfos", nargs="+", default=[], metavar="KEY", help="OpInfos to run besides (or instead)")
    parser.add_argument("--max-opinfos", type=int, default=DEFAULT_MAX_OPINFOS,
                        help=f"OpInfos per operator, the most direct first (default {DEFAULT_MAX_OPINFOS}; 0: all)")
    parser.add_argument("--dtypes", default=",".join(DTYPES), help=f"default {','.join(DTYPES)}")
    parser.add_argument("--modes", default=",".join(MODES), help=f"default {','.join(MODES)}")
    parser.add_argument("--max-samples", type=int, default=0, help="samples per OpInfo and dtype (default 0: all)")
    parser.add_argument("--out", help="write the snapshot here (JSON)")
    parser.add_argument("--diff", nargs=2, metavar=("A", "B"), help="compare two snapshots; exit 1 if they differ")
    parser.add_argument("--ignore-counters", action="store_true", help="with --diff: do not compare op counters")
    parser.add_argument("--rtol", type=float, default=0.0, help="with --diff: relative tolerance of values (default 0)")
    parser.add_argument("--atol", type=float, default=0.0, help="with --diff: absolute tolerance of values (default 0)")
    args = parser.parse_args(argv)
    try:
        if args.diff:
            a, b = (json.loads(Path(p).read_text()) for p in args.diff)
            diffs = compare(a, b, ignore_counters=args.ignore_counters, tolerance=(args.rtol, args.atol))
            if diffs:
                print(f"{len(diffs)} difference(s) between {args.diff[0]} and {args.diff[1]}:")
                print_diff(diffs)
                return 1
            print(f"no difference: {summary(b)}")
            return 0
        ops = [manifest_spelling(o) for o in args.ops]
        opinfos, notes = select_opinfos(ops, args.max_opinfos)
        opinfos += [k for k in args.opinfos if k not in opinfos]
        for n in notes:
            print(n, file=sys.stderr)
        if not opinfos:
            raise CommandError("nothing to run: name --ops with OpInfos that reach them, or --opinfos")
        start = time.perf_counter()
        snap = take(opinfos, dtypes=args.dtypes.split(","), modes=args.modes.split(","),
                    max_samples=args.max_samples)
        snap["ops"] = [qualified(o) for o in ops]
        for n in snap.get("notes", []):
            print(n, file=sys.stderr)
        text = json.dumps(snap, indent=0, sort_keys=True)
        if args.out:
            Path(args.out).write_text(text)
        print(f"snapshot: {summary(snap)}; {time.perf_counter() - start:.1f}s in all"
              + (f" -> {args.out}" if args.out else ""))
        return 0
    except (CommandError, ManifestError, SourceError, OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
