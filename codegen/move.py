"""Move a manifest entry to another section, with proof that nothing changed.

    python -m codegen.move aten::cholesky --to full_codegen

1. checks that the new section's functions exist and match the schema (the generator
   names any that are missing, with their signatures), before changing anything;
2. takes a behaviour snapshot of the operator (codegen/snapshot.py: every sample and
   error input of the OpInfos that reach it, eager and compiled, with edge-case
   variants: values, dtypes, shapes, strides, aliasing, exception types, per-op
   counters);
3. moves the entry (sorted position) and regenerates;
4. takes the snapshot again and compares: the operator's section and CPU fallbacks
   change by design; anything else is a difference. Any difference, a failure or
   Ctrl-C puts native_functions.yaml and generated/ back as they were, prints what
   differed, and exits 1.

--before FILE reuses a snapshot taken before (of the same OpInfos); --keep DIR keeps
both snapshots for `python -m codegen.snapshot --diff`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

from .diagnostics import SourceError
from .generate import PACKAGE, OutputError, _read_tree, output_lock, render, write_atomically
from .manifest import SECTIONS, ManifestError, load_manifest
from .manifest_edit import insert_entry, remove_entry
from .ops_index import REPO, CommandError, find_entry, manifest_spelling, qualified
from .snapshot import DEFAULT_MAX_OPINFOS, DTYPES, MODES, compare, print_diff, select_opinfos, summary, take


def _write_text(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, path.stat().st_mode & 0o777)
    os.replace(tmp, path)


def _render_text(text: str, manifest_path: Path, root: Path):
    """The generator's result for a manifest with this text (it reads the handwritten
    functions of `root`), without writing anything."""
    fd, tmp = tempfile.mkstemp(dir=manifest_path.parent, prefix=".native_functions.move-", suffix=".yaml")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        # the generated header hashes the manifest's bytes: the same as the real file's
        return render(Path(tmp), root)
    finally:
        os.unlink(tmp)


@contextlib.contextmanager
def _no_interrupt():
    """Ctrl-C waits until the block ends (putting files back must not stop halfway)."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def move(op_text: str, to: str, root: Path = REPO, max_opinfos: int = DEFAULT_MAX_OPINFOS,
         opinfos: list[str] | None = None, dtypes=DTYPES, modes=MODES, max_samples: int = 0,
         before_path: str | None = None, keep: str | None = None, ignore_counters: bool = False,
         tolerance: tuple[float, float] = (0.0, 0.0), out=sys.stdout) -> int:
    manifest_path = root / "native_functions.yaml"
    target = root / "generated" / PACKAGE
    manifest = load_manifest(manifest_path)
    op = manifest_spelling(op_text)
    entry = find_entry(manifest, op)
    if entry is None:
        raise CommandError(
            f"{qualified(op)} is not in the manifest; `python -m codegen.scaffold {qualified(op)}` adds it"
        )
    if to not in SECTIONS:
        raise CommandError(f"--to must be one of {', '.join(SECTIONS)}")
    if entry.section == to:
        raise CommandError(f"{qualified(op)} is in '{to}' already (native_functions.yaml:{entry.line})")
    old_text = manifest_path.read_text()
    new_text, _ = remove_entry(old_text, op)
    new_text, line = insert_entry(new_text, to, op)
    try:
        result = _render_text(new_text, manifest_path, root)
    except (ManifestError, SourceError) as e:
        raise CommandError(f"{qualified(op)} cannot move to '{to}' yet; nothing was changed:\n{e}") from None
    if result.order_problems:
        raise CommandError("\n".join(result.order_problems))
    primary = next(s for s in result.ops if s.op == op)
    moved = {qualified(s.op) for s in result.ops if s.op == op or s.functional == primary.name}

    chosen, notes = select_opinfos([op], max_opinfos, root)
    chosen += [k for k in opinfos or [] if k not in chosen]
    for n in notes:
        print(n, file=out)
    if not chosen:
        raise CommandError(f"no OpInfo reaches {qualified(op)}, so the move cannot be checked: name OpInfos that call "
                           "it with --opinfos KEY ...")
    start = time.perf_counter()
    if before_path:
        before = json.loads(Path(before_path).read_text())
        if sorted(before["request"]["opinfos"]) != sorted(chosen):
            raise CommandError(f"{before_path} is a snapshot of {before['request']['opinfos']}, not of {chosen}")
        print(f"before: {summary(before)} (from {before_path})", file=out)
    else:
        print(f"before: snapshot of {', '.join(chosen)} ...", file=out, flush=True)
        before = take(chosen, root, dtypes, modes, max_samples=max_samples)
        print(f"before: {summary(before)}", file=out)
    old_generated = _read_tree(target)
    with output_lock(target, 60.0):
        changed = False
        try:
            _write_text(manifest_path, new_text)
            changed = True
            write_atomically(result.files, target)
            print(f"moved {qualified(op)}: {entry.section} -> {to} (native_functions.yaml:{line}); regenerated; "
                  "after: snapshot ...", file=out, flush=True)
            after = take(chosen, root, before["request"]["dtypes"], before["request"]["modes"],
                         max_samples=before["request"].get("max_samples", 0))
            print(f"after: {summary(after)}", file=out)
            if keep:
                Path(keep).mkdir(parents=True, exist_ok=True)
                for name, snap in (("before", before), ("after", after)):
                    (Path(keep) / f"{name}.json").write_text(json.dumps(snap, indent=0, sort_keys=True))
            diffs = compare(before, after, ignore_sections=moved, ignore_counters=ignore_counters, tolerance=tolerance)
            if diffs:
                print(f"\n{len(diffs)} difference(s) after moving {qualified(op)} to '{to}':", file=out)
                print_diff(diffs, out)
                raise _Refused()
        except BaseException as e:
            if changed:
                with _no_interrupt():
                    _write_text(manifest_path, old_text)
                    write_atomically(old_generated, target)
                print(f"put back: native_functions.yaml and generated/{PACKAGE} are as they were", file=out)
            if isinstance(e, _Refused):
                return 1
            raise
    for w in result.warnings:
        if "orphan" in w:
            print(f"note: {w.replace('warning: ', '')} (the old section's function: delete it if nothing else uses it)",
                  file=out)
    print(f"no behaviour change: {summary(after)}; {time.perf_counter() - start:.1f}s in all", file=out)
    return 0


class _Refused(Exception):
    pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m codegen.move", description=__doc__.splitlines()[0])
    parser.add_argument("op", help="aten::<op>[.<overload>] (or ns::op)")
    parser.add_argument("--to", required=True, choices=SECTIONS)
    parser.add_argument(
        "--max-opinfos",
        type=int,
        default=DEFAULT_MAX_OPINFOS,
        help=f"OpInfos that reach it to run, the most direct first (default {DEFAULT_MAX_OPINFOS}; 0: all)",
    )
    parser.add_argument("--opinfos", nargs="+", default=[], metavar="KEY", help="more OpInfos to run")
    parser.add_argument("--dtypes", default=",".join(DTYPES))
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--max-samples", type=int, default=0, help="samples per OpInfo and dtype (default 0: all)")
    parser.add_argument("--before", help="a snapshot taken before (python -m codegen.snapshot --out), to reuse")
    parser.add_argument("--keep", metavar="DIR", help="keep before.json and after.json here")
    parser.add_argument("--ignore-counters", action="store_true", help="do not compare per-op counters")
    parser.add_argument("--rtol", type=float, default=0.0, help="relative tolerance of values (default 0: bit for bit)")
    parser.add_argument("--atol", type=float, default=0.0, help="absolute tolerance of values (default 0)")
    args = parser.parse_args(argv)
    try:
        return move(args.op, args.to, max_opinfos=args.max_opinfos, opinfos=args.opinfos,
                    dtypes=args.dtypes.split(","), modes=args.modes.split(","), max_samples=args.max_samples,
                    before_path=args.before, keep=args.keep, ignore_counters=args.ignore_counters,
                    tolerance=(args.rtol, args.atol))
    except (CommandError, ManifestError, SourceError, OutputError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted: the manifest and generated code are as they were", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
