"""Where an operator stands.

    python -m codegen.status aten::cholesky

prints its manifest section and derived forms, its handwritten functions (file:line,
unfinished stubs marked), the OpInfos that reach it with their pass rates from the
committed coverage report, and the tests that name it. Reads files only (no torch).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from .diagnostics import SourceError
from .manifest import ManifestError, load_manifest
from .model import unambiguous_name
from .ops_index import (REPO, CommandError, coverage_path, find_entry, load_coverage, manifest_spelling,
                        opinfos_reaching, qualified, scan_handwritten, suggest, test_table_keys)
from .schemas import load_schema_database

MODE_ORDER = ("eager", "compiled", "inplace", "grad", "error_inputs", "operator")


def _rates(info: dict) -> str:
    totals: dict[str, list[int]] = {}
    for modes in info.get("dtypes", {}).values():
        for mode, counts in modes.items():
            t = totals.setdefault(mode, [0, 0])
            t[0] += counts.get("passed", 0)
            t[1] += counts.get("passed", 0) + counts.get("failed", 0) + counts.get("errored", 0)
    parts = []
    for mode in sorted(totals, key=lambda m: MODE_ORDER.index(m) if m in MODE_ORDER else 99):
        passed, total = totals[mode]
        if total:
            parts.append(f"{mode} {100 * passed / total:.0f}% ({passed}/{total})")
    return ", ".join(parts) or "no samples compared"


def _tests_naming(op: str, root: Path, keys: list[str]) -> list[str]:
    """file:line of test lines that call or name the op (its aten name or torch function)."""
    base = op.split(".")[0].split("::")[-1]
    patterns = [re.compile(rf"aten\.{re.escape(base)}\b"), re.compile(rf"torch\.{re.escape(base)}\("),
                re.compile(rf"[\"']{re.escape(base)}[\"'.]")]
    found = []
    for path in sorted((root / "tests").glob("test_*.py")):
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if any(p.search(line) for p in patterns):
                found.append(f"{path.relative_to(root)}:{i}")
                break
    return found


def status(op_text: str, root: Path = REPO, out=sys.stdout) -> int:
    manifest = load_manifest(root / "native_functions.yaml")
    op = manifest_spelling(op_text)
    name = qualified(op)
    entry = find_entry(manifest, op)
    db = load_schema_database()
    rec = db.records.get(op) if "::" not in op else None
    print(name, file=out)
    if rec is not None:
        print(f"  schema: {rec.schema}", file=out)
    if entry is None:
        if "::" not in op and rec is None:
            hint = suggest(op, db, manifest)
            print(f"  unknown aten operator (torch {db.torch_version})" + (f"; {hint}" if hint else ""), file=out)
            return 1
        if rec is not None and rec.composite_implicit:
            print(
                "  CompositeImplicitAutograd: PyTorch decomposes it before a backend sees it; nothing to list", file=out
            )
            return 0
        functional = None
        if rec is not None:
            functional = next((r for r in db.by_group()[rec.group] if r.kind == "functional"), None)
        listed = find_entry(manifest, functional.name) if functional is not None and functional.name != op else None
        if listed is not None:
            print(f"  the {rec.kind} form of {qualified(listed.op)}, listed under '{listed.section}' "
                  f"(native_functions.yaml:{listed.line}): derived from it", file=out)
        else:
            print(f"  not listed: `python -m codegen.scaffold {name}` adds it", file=out)
    else:
        print(f"  section: {entry.section} (native_functions.yaml:{entry.line})", file=out)
        if rec is not None:
            forms = sorted(r.name for r in db.by_group()[rec.group] if r.name != op and r.kind in ("inplace", "out")
                           and find_entry(manifest, r.name) is None)
            if forms and rec.kind == "functional":
                print(f"  derived forms: {', '.join(qualified(f) for f in forms)}", file=out)
    fns = scan_handwritten(root)
    uname = unambiguous_name(op)
    rows = [
        ("lowering", fns.lowerings.get(f"lower_{uname}")),
        ("shape function", fns.shape_fns.get(f"{uname}_output_shape")),
        ("implementation", fns.impls.get(f"impl_{uname}")),
    ]
    needed = {"full_codegen": ("lowering", "shape function"), "supported": ("implementation",)}.get(
        entry.section if entry else "", ())
    for what, fn in rows:
        if fn is None:
            if what in needed:
                print(f"  {what}: MISSING (python -m codegen.generate prints its signature)", file=out)
            continue
        state = " UNFINISHED (a scaffold stub)" if fn.unfinished else ""
        orphan = "" if what in needed or entry is None else " (not used by its section)"
        print(f"  {what}: {fn.path}:{fn.line} {fn.name}{state}{orphan}", file=out)
    coverage = load_coverage(root)
    path = coverage_path(root)
    matches = opinfos_reaching(op, coverage)
    if path is None:
        print("  OpInfos: no coverage report (python scripts/coverage_report.py writes one)", file=out)
    elif not matches:
        print(f"  OpInfos: none reaches it per {path.relative_to(root)}", file=out)
    else:
        print(f"  OpInfos ({path.relative_to(root)}; pass rates over its dtypes):", file=out)
        entries = coverage.get("opinfos", {})
        for m in matches[:12]:
            print(f"    {m.key}: {_rates(entries.get(m.key, {}))} -- {m.why}", file=out)
        if len(matches) > 12:
            print(f"    ... and {len(matches) - 12} more", file=out)
    keys, _, _ = test_table_keys(root)
    in_table = [m.key for m in matches if m.key in keys]
    print(f"  tests/test_opinfo.py OPINFOS: {', '.join(in_table) if in_table else 'none of them'}", file=out)
    tests = _tests_naming(op, root, keys)
    if tests:
        print(f"  tests naming it: {', '.join(tests[:8])}" + (" ..." if len(tests) > 8 else ""), file=out)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m codegen.status", description=__doc__.splitlines()[0])
    parser.add_argument("op", help="aten::<op>[.<overload>] or ns::op")
    args = parser.parse_args(argv)
    try:
        return status(args.op)
    except (CommandError, ManifestError, SourceError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
