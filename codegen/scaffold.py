"""Add an operator: its manifest entry, stubs of its handwritten functions, its tests.

    python -m codegen.scaffold aten::<op>[.<overload>] [--section full_codegen|supported|fallback] [--family NAME]
    python -m codegen.scaffold mylib::<op> --library-module mylib.ops

- adds the entry to the section (default: full_codegen for a functional op, else
  supported) in sorted position;
- writes stubs with the exact parameters of the schema: for full_codegen
  `lower_<name>` in lowerings/<family>.py and `<name>_output_shape` in
  shape_fns/<family>.py, for supported `impl_<name>` in runtime/supported/<family>.py.
  The family is the module where the most similar listed op keeps its function
  (its other overloads first), unless --family says; the command says which it chose
  and why. Each stub raises NotImplementedError("unfinished: ..."): the generator
  names unfinished stubs in a warning on every run and fails with --check, so none
  is committed by accident;
- adds the OpInfos that test it to tests/test_opinfo.py's OPINFOS (from the
  committed coverage report: those named like it, or whose samples reach it).

It refuses an operator already listed (`python -m codegen.status` shows where), an
unknown one (with suggestions), and what the generator would refuse (a
CompositeImplicitAutograd op, the in-place form of a listed functional op, a
mutating op under full_codegen). Operators of other namespaces need the module that
registers them (--library-module, written to the manifest's `libraries:`). Every
file is written only once all of them are ready; a failure leaves them as they were.
Nothing here imports torch (a library's schemas are read in a subprocess, as the
generator does).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from pathlib import Path

from .diagnostics import SourceError
from .manifest import SECTIONS, Library, ManifestError, load_manifest
from .manifest_edit import add_library, insert_entry
from .model import OpSpec, unambiguous_name
from .ops_index import (REPO, CommandError, FamilyGuess, add_to_test_table, find_entry, guess_family, load_coverage,
                        manifest_spelling, opinfos_reaching, qualified, scan_handwritten, spec_for, suggest)
from .schemas import load_schema_database
from .sources import UNFINISHED

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _default_section(kind: str, is_view: bool) -> str:
    return "full_codegen" if kind == "functional" or is_view else "supported"


def _check_aten(op: str, section: str | None, db, manifest) -> tuple[str, tuple[str, ...]]:
    """The section to use and the op's tags, or a refusal like the generator's."""
    rec = db.records.get(op)
    if rec is None:
        hint = suggest(op, db, manifest)
        raise CommandError(
            f"unknown aten operator '{qualified(op)}' (torch {db.torch_version})" + (f"; {hint}" if hint else "")
        )
    if rec.composite_implicit:
        raise CommandError(
            f"{qualified(op)} is CompositeImplicitAutograd: PyTorch decomposes it before it reaches a backend, so "
            "listing it has no effect; scaffold the ops it decomposes into (run your program: the first missing one "
            "is named by OperatorNotFound)")
    groups = db.by_group()
    functional = next((r for r in groups[rec.group] if r.kind == "functional"), None)
    derivable = functional is not None and not functional.composite_implicit and "generated" not in functional.tags
    if rec.kind != "functional" and derivable and "core" not in rec.tags:
        listed = find_entry(manifest, functional.name)
        state = f"already listed under '{listed.section}'" if listed else "not listed yet"
        raise CommandError(
            f"{qualified(op)} is the {rec.kind} form of {qualified(functional.name)} ({state}); scaffold "
            f"{qualified(functional.name)} instead: its in-place and out= forms are derived from it")
    section = section or _default_section(rec.kind, rec.is_view)
    if section == "full_codegen" and rec.kind != "functional" and not rec.is_view:
        raise CommandError(f"{qualified(op)} writes into its arguments ({rec.kind}); a lowering only returns new "
                           "values: use --section supported (an impl_ function) or fallback")
    return section, rec.tags


def _library_schema(op: str, module: str | None, manifest, db) -> tuple[str, str | None]:
    """(schema text, module to add under `libraries:` or None)."""
    from .library_schemas import load_library_schemas

    ns = op.partition("::")[0]
    known = {lib.namespace: lib.module for lib in manifest.libraries}
    add = None
    if ns in known:
        if module is not None and module != known[ns]:
            raise CommandError(f"the manifest's libraries map '{ns}' to '{known[ns]}', not '{module}'")
        module = known[ns]
    elif module is None:
        raise CommandError(f"'{ns}' is not in the manifest's `libraries:`; pass --library-module MODULE, the Python "
                           f"module whose import registers the {ns}:: operators")
    else:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", module):
            raise CommandError(f"--library-module '{module}' is not a module name")
        add = module
    lib = load_library_schemas([Library(ns, module, 0)], db.torch_version, verbose=True)[ns]
    if lib.error is not None:
        raise CommandError(f"cannot read the schema of {op}: {lib.error}")
    schema = lib.schemas.get(op)
    if schema is None:
        import difflib

        close = difflib.get_close_matches(op, lib.schemas, n=4, cutoff=0.6)
        raise CommandError(f"unknown operator '{op}' (after importing {module})"
                           + (f"; did you mean {', '.join(close)}?" if close else
                              f"; {ns} has {', '.join(sorted(lib.schemas)[:8]) or 'no operators'}"))
    return schema, add


def _module_header(folder: str, family: str) -> str:
    what = {"lowerings": "Lowerings", "shape_fns": "Shape functions", "runtime/supported": "Implementations"}[folder]
    return f'"""{what} of the {family} operators."""\n\nfrom __future__ import annotations\n'


def _stub(kind: str, name: str, spec: OpSpec, like: str | None) -> str:
    schema = spec.schema if "::" in spec.schema.split("(")[0] else "aten::" + spec.schema
    doc = {
        "lowering": ["Pure JAX: tensors arrive as jax.Arrays, Scalars as JAX scalars, other arguments as",
                     "Python values; return the result arrays with PyTorch's dtypes."],
        "shape": ["The results' TensorMeta(shape, dtype) from the arguments (TensorMetas for tensors);",
                  "raise PyTorch's error (same type and message) for input PyTorch rejects."],
        "impl": ["Runs on this backend's tensors: compose other ops or run a Node of your own",
                 "(runtime/supported/*.py); return what PyTorch returns, aliasing included."],
    }[kind]
    if like:
        doc.append(f"Like {like} in this file.")
    body = "".join(f"    {line}\n" for line in doc)
    return (f"\n\ndef {name}({spec.handwritten_signature()}):\n"
            f'    """{schema}\n\n{body}    """\n'
            f'    raise NotImplementedError("{UNFINISHED} {name}, written by python -m codegen.scaffold")\n')


class _Writes:
    """Files to write together: all or none."""

    def __init__(self):
        self.files: dict[Path, str] = {}

    def set(self, path: Path, text: str) -> None:
        self.files[path] = text

    def text(self, path: Path) -> str | None:
        if path in self.files:
            return self.files[path]
        return path.read_text() if path.exists() else None

    def commit(self) -> None:
        originals = {p: (p.read_bytes() if p.exists() else None) for p in self.files}
        done: list[Path] = []
        try:
            for path, text in self.files.items():
                path.parent.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
                with os.fdopen(fd, "w") as f:
                    f.write(text)
                if path.exists():
                    os.chmod(tmp, path.stat().st_mode & 0o777)
                os.replace(tmp, path)
                done.append(path)
        except BaseException:
            for path in done:
                if originals[path] is None:
                    path.unlink()
                else:
                    path.write_bytes(originals[path])
            raise


def _place(writes: _Writes, folder: str, family: str, name: str, stub: str, root: Path) -> str:
    path = root / folder / f"{family}.py"
    text = writes.text(path)
    if text is None:
        text = _module_header(folder, family)
    text = text.rstrip("\n") + "\n" + stub
    writes.set(path, text)
    line = text[: text.index(f"\ndef {name}(")].count("\n") + 2
    return f"{path.relative_to(root)}:{line}"


def scaffold(op_text: str, section: str | None = None, family: str | None = None, library_module: str | None = None,
             root: Path = REPO, out=sys.stdout) -> int:
    manifest_path = root / "native_functions.yaml"
    manifest = load_manifest(manifest_path)
    op = manifest_spelling(op_text)
    entry = find_entry(manifest, op)
    if entry is not None:
        raise CommandError(
            f"{qualified(op)} is already listed under '{entry.section}' (native_functions.yaml:{entry.line}); "
            f"`python -m codegen.status {qualified(op)}` shows where it stands, `python -m codegen.move "
            f"{qualified(op)} --to SECTION` moves it")
    if section is not None and section not in SECTIONS:
        raise CommandError(f"--section must be one of {', '.join(SECTIONS)}")
    if family is not None and not _IDENTIFIER.fullmatch(family):
        raise CommandError(f"--family '{family}' is not a module name (a Python identifier)")
    db = load_schema_database(verbose=True)
    library_schema = add_module = None
    if "::" in op:
        library_schema, add_module = _library_schema(op, library_module, manifest, db)
        spec0 = spec_for(op, "full_codegen", db, library_schema)
        is_mutating = spec0.kind != "functional"
        section = section or ("supported" if is_mutating or spec0.is_view else "full_codegen")
        if section == "full_codegen" and (is_mutating or spec0.is_view):
            raise CommandError(f"{op} {'returns a view' if spec0.is_view else 'writes into its arguments'}; a lowering "
                               "only returns new values: use --section supported or fallback")
        tags: tuple[str, ...] = ()
    else:
        if library_module is not None:
            raise CommandError("--library-module is for operators of other namespaces (mylib::op)")
        section, tags = _check_aten(op, section, db, manifest)
    spec = spec_for(op, section, db, library_schema)
    fns = scan_handwritten(root)
    writes = _Writes()
    notes: list[str] = []
    stubs: list[str] = []

    def choose(table, prefix, suffix, folder) -> tuple[str, FamilyGuess | None]:
        if family is not None:
            return family, None
        if "::" in op:
            return unambiguous_name(op.partition("::")[0]), None
        guess = guess_family(spec, tags, manifest, db, table, prefix, suffix, folder)
        if guess is None:
            if folder == "lowerings" and "pointwise" in tags:
                return "pointwise", None
            raise CommandError(f"no listed op is like {qualified(op)}: pass --family NAME ({folder}/NAME.py)")
        return guess.family, guess

    if section == "full_codegen":
        fam, guess = choose(fns.lowerings, "lower_", "", "lowerings")
        like = f"{guess.like}" if guess else None
        wanted = [
            (
                "lowering",
                spec.lowering,
                "lowerings",
                fns.lowerings,
                f"lower_{unambiguous_name(like)}" if like else None,
            ),
            (
                "shape",
                spec.shape_fn,
                "shape_fns",
                fns.shape_fns,
                f"{unambiguous_name(like)}_output_shape" if like else None,
            ),
        ]
    elif section == "supported":
        fam, guess = choose(fns.impls, "impl_", "", "runtime/supported")
        like = guess.like if guess else None
        wanted = [
            ("impl", spec.impl, "runtime/supported", fns.impls, f"impl_{unambiguous_name(like)}" if like else None)
        ]
    else:
        fam, guess, wanted = None, None, []
    if fam is not None:
        how = f"--family {fam}" if family is not None else (
            f"guessed: {guess.why}; --family NAME chooses another" if guess else "named after its namespace")
        notes.append(f"family: {fam} ({how})")
    for kind, name, folder, table, similar in wanted:
        existing = table.get(name)
        if existing is not None:
            stubs.append(f"  {existing.path}:{existing.line}  def {name}(...)  (exists: kept)")
            continue
        similar_fn = table.get(similar) if similar else None
        like_text = similar if similar_fn is not None and similar_fn.path == f"{folder}/{fam}.py" else None
        where = _place(writes, folder, fam, name, _stub(kind, name, spec, like_text), root)
        stubs.append(f"  {where}  def {name}({spec.handwritten_signature()}):")
    text = manifest_path.read_text()
    if add_module is not None:
        text = add_library(text, op.partition("::")[0], add_module)
    text, line = insert_entry(text, section, op)
    _validate_manifest(text, manifest_path, op, section)
    writes.set(manifest_path, text)
    coverage = load_coverage(root)
    matches = opinfos_reaching(op, coverage)
    direct = [m for m in matches if m.why != "its samples reach it"] or matches[:1]
    added, test_text = add_to_test_table([m.key for m in direct[:2]], root) if direct else ([], None)
    if test_text is not None:
        writes.set(root / "tests" / "test_opinfo.py", test_text)
    writes.commit()

    print(f"added {qualified(op)} to {section} (native_functions.yaml:{line})", file=out)
    for n in notes:
        print(n, file=out)
    if stubs:
        print("stubs (raise NotImplementedError until filled in; the generator names them until then):", file=out)
        for s in stubs:
            print(s, file=out)
    if added:
        why = "; ".join(f"{m.key}: {m.why}" for m in direct if m.key in added)
        print(f"tests: added {', '.join(added)} to OPINFOS in tests/test_opinfo.py ({why})", file=out)
    elif direct:
        print(f"tests: {', '.join(m.key for m in direct[:2])} already in OPINFOS in tests/test_opinfo.py", file=out)
    else:
        print("tests: no OpInfo reaches it (per the coverage report): add a test to tests/test_ops_*.py"
              + (" (tests/test_custom_ops.py shows operators of other namespaces)" if "::" in op else ""), file=out)
    keys = added or [m.key for m in direct[:2]]
    print("next:", file=out)
    step = 1
    if wanted:
        print(f"  {step}. write the function{'s' if len(wanted) > 1 else ''} above (CONTRIBUTING.md)", file=out)
        step += 1
    print(f"  {step}. python -m codegen.generate", file=out)
    if keys:
        print(f"  {step + 1}. python -m pytest tests/test_opinfo.py -k '{' or '.join(keys)}'", file=out)
        step += 1
    print(f"  {step + 1}. python -m codegen.status {qualified(op)}; python -m codegen.generate --check", file=out)
    return 0


def _validate_manifest(text: str, manifest_path: Path, op: str, section: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=manifest_path.parent, prefix=".manifest-check-", suffix=".yaml")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        new = load_manifest(tmp)
    finally:
        os.unlink(tmp)
    entry = find_entry(new, op)
    if entry is None or entry.section != section:
        raise CommandError(f"could not add {op} to {section} in the manifest (its layout is unusual): add it by hand")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m codegen.scaffold", description=__doc__.splitlines()[0])
    parser.add_argument("op", help="aten::<op>[.<overload>] or <namespace>::<op>[.<overload>]")
    parser.add_argument("--section", choices=SECTIONS, help="default: full_codegen for functional ops, else supported")
    parser.add_argument("--family", help="the module for its functions (lowerings/NAME.py, ...); default: guessed")
    parser.add_argument("--library-module", help="for another namespace: the module whose import registers its ops")
    args = parser.parse_args(argv)
    try:
        return scaffold(args.op, args.section, args.family, args.library_module)
    except (CommandError, ManifestError, SourceError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
