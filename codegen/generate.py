"""Generate `generated/xla_native_functions/` from `native_functions.yaml`.

    python -m codegen.generate            # regenerate (writes only what changed)
    python -m codegen.generate --check    # exit 1 and print the diff if generated/ is stale
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import hashlib
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import jinja2

from .manifest import SECTIONS, Manifest, ManifestEntry, ManifestError, lint_libraries, lint_order, load_manifest
from .model import ATTR, ATTR_LIST, OpSpec, make_op_spec, torchgen_schema_text, unambiguous_name
from .schemas import SchemaDatabase, SchemaRecord, load_schema_database
from .sources import FunctionSource, scan_functions, signature_problems

REPO = Path(__file__).resolve().parent.parent
PACKAGE = "xla_native_functions"
TEMPLATES = Path(__file__).resolve().parent / "templates"

# The runtime's user-facing API, re-exported by the package __init__ (runtime/api.py).
PUBLIC_API = (
    "OperatorNotFound",
    "call_jax",
    "compile",
    "config",
    "default_env",
    "dynamo_report",
    "jax_function",
    "jax_jit",
    "lazy_mode",
    "mark_step",
    "metrics_report",
    "register_lowering",
    "reset_metrics",
    "to_jax",
    "to_torch",
    "to_torch_tensor",
    "to_xla",
    "x64",
)


@dataclass
class Result:
    files: dict[str, str]
    warnings: list[str] = field(default_factory=list)
    ops: list[OpSpec] = field(default_factory=list)
    # manifest entries of libraries that could not be imported: op -> why
    unavailable: dict[str, str] = field(default_factory=dict)


def _suggest(name: str, db: SchemaDatabase) -> str:
    close = difflib.get_close_matches(name, db.records.keys(), n=3, cutoff=0.6)
    base = name.split(".")[0]
    overloads = sorted(k for k in db.records if k.split(".")[0] == base)
    hints = []
    if overloads:
        hints.append("its overloads are " + ", ".join(overloads[:12]) + (" ..." if len(overloads) > 12 else ""))
    elif close:
        hints.append("did you mean " + ", ".join(close) + "?")
    return "; ".join(hints)


# In-place forms whose PyTorch kernels reject an operand sharing memory with `self`
# (ATen's assert_no_partial_overlap / assert_no_overlap), by functional base name.
# TensorIterator ops, those tagged pointwise and these, reject a partial overlap
# (x.add_(x[0]), x.copy_(x.t())) and accept a full one (x.add_(x)):
PARTIAL_OVERLAP_CHECKED = frozenset({"addr", "copy", "floor_divide"})
# scatter-like ops reject any overlap of self with their index or source:
ANY_OVERLAP_CHECKED = frozenset({
    "index_add", "index_copy", "index_put", "index_reduce", "put", "scatter", "scatter_add", "scatter_reduce",
})
# Other in-place ops (addmm_, masked_scatter_) do not check.


def _overlap_check(functional: SchemaRecord) -> str:
    base = functional.name.split(".")[0]
    if base in ANY_OVERLAP_CHECKED:
        return "any"
    if "pointwise" in functional.tags or base in PARTIAL_OVERLAP_CHECKED:
        return "partial"
    return ""


def resolve(manifest: Manifest, db: SchemaDatabase) -> list[OpSpec]:
    """Manifest entries and their derived in-place / out= variants, as OpSpecs."""
    groups = db.by_group()
    listed = {e.op for e in manifest.entries}
    specs: list[OpSpec] = []
    errors: list[str] = []
    for entry in manifest.entries:
        if entry.namespace != "aten":
            continue  # resolve_library_ops
        rec = db.records.get(entry.op)
        if rec is None:
            hint = _suggest(entry.op, db)
            errors.append(
                f"{entry.where(manifest.path)}: unknown aten operator '{entry.op}' "
                f"(torch {db.torch_version}){'; ' + hint if hint else ''}"
            )
            continue
        functional = next((r for r in groups[rec.group] if r.kind == "functional"), None)
        # A functional form that PyTorch decomposes (conj_physical) or that torchgen only
        # autogenerates (resize_as, rrelu_with_noise_functional) has no kernel of its own
        # to derive from: the in-place / mutable form is listed as it is.
        derivable = functional is not None and not functional.composite_implicit and "generated" not in functional.tags
        if rec.kind != "functional" and derivable and "core" not in rec.tags:
            errors.append(
                f"{entry.where(manifest.path)}: '{entry.op}' is the {rec.kind} form of '{functional.name}'; "
                f"list '{functional.name}' instead (its in-place and out= forms are derived from it)"
            )
            continue
        if rec.composite_implicit:
            errors.append(
                f"{entry.where(manifest.path)}: '{entry.op}' is CompositeImplicitAutograd: PyTorch decomposes it "
                "before it reaches a backend, so listing it has no effect; list the ops it decomposes into"
            )
            continue
        if entry.section == "full_codegen" and rec.kind != "functional" and not rec.is_view:
            errors.append(
                f"{entry.where(manifest.path)}: '{entry.op}' writes into its arguments ({rec.kind}); a lowering "
                "only returns new values, so list it under `supported` (handwritten impl_*) or `fallback`"
            )
            continue
        spec = make_op_spec(entry.op, rec.schema, entry.section, rec.is_view, rec.kind)
        specs.append(spec)
        if rec.kind != "functional":
            continue
        for variant in sorted(groups[rec.group], key=lambda r: r.name):
            if variant.kind not in ("inplace", "out") or variant.name in listed:
                continue
            if rec.is_view and variant.kind != "inplace":
                continue  # views have no out= form worth deriving (their _copy ops are separate entries)
            # An in-place view (t_, squeeze_) gives `self` the view's sizes and strides.
            vspec = make_op_spec(variant.name, variant.schema, entry.section, rec.is_view, variant.kind, functional=spec.name)
            if variant.kind == "out" and len(vspec.outs) != len(spec.returns):
                continue
            if variant.kind == "inplace" and not rec.is_view:
                vspec = dataclasses.replace(vspec, overlap_check=_overlap_check(rec))
            names, vnames = {a.name for a in spec.inputs}, {a.name for a in vspec.inputs}
            # A factory (no `self`) writes in the out tensor's dtype; ops derived from a
            # tensor (full_like.out) compute in their own dtype, then cast into out.
            if variant.kind == "out" and "dtype" in names and "dtype" not in vnames and "self" not in names:
                vspec = dataclasses.replace(vspec, dtype_from_out=True)
            specs.append(vspec)
    if errors:
        raise ManifestError("\n".join(errors))
    return specs


def resolve_library_ops(manifest: Manifest, torch_version: str) -> tuple[list[OpSpec], dict[str, str], list[str]]:
    """Entries of other namespaces (`torchvision::nms`) as OpSpecs, from the schemas torch's
    dispatcher has once their library is imported (codegen/library_schemas.py). Entries
    of a library that cannot be imported are left out, each with the reason, and named
    in one warning per library. Their in-place and out= forms are not derived: list
    each overload you want."""
    entries = [e for e in manifest.entries if e.namespace != "aten"]
    if not entries:
        return [], {}, []
    from .library_schemas import load_library_schemas
    from torchgen.model import FunctionSchema

    used = {e.namespace for e in entries}
    libraries = load_library_schemas([lib for lib in manifest.libraries if lib.namespace in used], torch_version, verbose=True)
    specs: list[OpSpec] = []
    unavailable: dict[str, str] = {}
    errors: list[str] = []
    for entry in entries:
        lib = libraries[entry.namespace]
        if lib.error is not None:
            unavailable[entry.op] = f"importing '{lib.module}' failed ({lib.error})"
            continue
        schema_text = lib.schemas.get(entry.op)
        where = entry.where(manifest.path)
        if schema_text is None:
            bare = {name.partition("::")[2]: name for name in lib.schemas}  # the shared prefix would match anything
            close = difflib.get_close_matches(entry.op.partition("::")[2], bare, n=3, cutoff=0.6)
            hint = "; did you mean " + ", ".join(bare[c] for c in close) + "?" if close else ""
            errors.append(f"{where}: unknown operator '{entry.op}' (after importing {lib.module}){hint}")
            continue
        try:
            schema = FunctionSchema.parse(torchgen_schema_text(schema_text))
            kind = schema.kind().name
            is_view = any(r.annotation is not None and not r.annotation.is_write for r in schema.returns)
            spec = make_op_spec(entry.op, schema_text, entry.section, is_view, kind)
        except Exception as e:  # torchgen's parser raises AssertionError, among others
            errors.append(f"{where}: the schema of '{entry.op}' ({schema_text}) cannot be read by torchgen: {e}")
            continue
        if entry.section == "full_codegen" and (kind != "functional" or is_view):
            what = "returns a view of its input" if is_view else f"writes into its arguments ({kind})"
            errors.append(
                f"{where}: '{entry.op}' {what}; a lowering only returns new values, so list it under "
                "`supported` (handwritten impl_*) or `fallback`"
            )
            continue
        specs.append(spec)
    if errors:
        raise ManifestError("\n".join(errors))
    warnings = []
    for lib in libraries.values():
        skipped = [e.op for e in entries if e.namespace == lib.namespace and e.op in unavailable]
        if skipped:
            retry = f"; delete {lib.cache_path} to try again" if lib.cache_path else ""
            warnings.append(
                f"warning: skipping {', '.join(skipped)}: importing '{lib.module}' failed ({lib.error}); "
                f"they are registered only once the package is regenerated with {lib.module} importable{retry}"
            )
    return specs, unavailable, warnings


def _schema_params(spec: OpSpec) -> tuple[list[str], list[str], dict[str, str]]:
    positional = [a.name for a in spec.handwritten_args if not a.kwarg_only]
    kwonly = [a.name for a in spec.handwritten_args if a.kwarg_only]
    defaults = {a.name: a.default for a in spec.handwritten_args if a.default is not None}
    return positional, kwonly, defaults


def check_sources(manifest: Manifest, specs: list[OpSpec], root: Path) -> tuple[dict[str, FunctionSource], list[str]]:
    """Every full_codegen op has its lowering and shape function, every supported op its
    implementation, each with the schema's parameters. Returns the functions found and
    warnings for orphans."""
    lowerings = scan_functions(root, "lowerings", prefix="lower_")
    shape_fns = scan_functions(root, "shape_fns", suffix="_output_shape")
    impls = scan_functions(root, "runtime", prefix="impl_")
    lines = {e.op: e.line for e in manifest.entries}
    missing: list[str] = []
    mismatched: list[str] = []
    used: set[str] = set()
    for spec in specs:
        if spec.functional is not None:
            continue
        wanted: list[tuple[str, dict[str, FunctionSource], str]] = []
        if spec.section == "full_codegen":
            wanted = [(spec.lowering, lowerings, "lowerings/<family>.py"), (spec.shape_fn, shape_fns, "shape_fns/<family>.py")]
        elif spec.section == "supported":
            wanted = [(spec.impl, impls, "runtime/<module>.py")]
        positional, kwonly, defaults = _schema_params(spec)
        for fname, table, where in wanted:
            used.add(fname)
            fn = table.get(fname)
            place = f"{manifest.path}:{lines[spec.op]}"
            if fn is None:
                missing.append(f"  {place}: {spec.op} needs, in {where}:\n      def {fname}({spec.handwritten_signature()}):")
                continue
            problems = signature_problems(fn, positional, kwonly, defaults)
            if problems:
                mismatched.append(
                    f"  {fn.path}:{fn.line}: {fname} does not match the schema of {spec.op} ({spec.schema}):\n"
                    + "".join(f"      - {p}\n" for p in problems)
                    + f"    expected: def {fname}({spec.handwritten_signature()}):"
                )
    errors = []
    if missing:
        errors.append(f"{len(missing)} handwritten function(s) are missing:\n" + "\n".join(missing))
    if mismatched:
        errors.append("handwritten function(s) disagree with their schema:\n" + "\n".join(mismatched))
    if errors:
        raise ManifestError("\n".join(errors))
    warnings = [
        f"{fn.path}:{fn.line}: warning: '{name}' is not used by any manifest entry (orphan)"
        for table in (lowerings, shape_fns, impls)
        for name, fn in sorted(table.items())
        if name not in used
    ]
    found = {**lowerings, **shape_fns, **impls}
    return {k: v for k, v in found.items() if k in used}, warnings


def _check_class_names(specs: list[OpSpec]) -> None:
    seen: dict[str, str] = {}
    for spec in specs:
        if spec.functional is not None:
            continue
        prior = seen.setdefault(spec.class_name, spec.op)
        if prior != spec.op:
            raise ManifestError(f"IR class name {spec.class_name} is shared by {prior} and {spec.op}")


def render(manifest_path: Path, root: Path = REPO) -> Result:
    manifest = load_manifest(manifest_path)
    warnings = lint_order(manifest) + lint_libraries(manifest)
    db = load_schema_database(verbose=True)
    specs = resolve(manifest, db)
    library_specs, unavailable, library_warnings = resolve_library_ops(manifest, db.torch_version)
    specs += library_specs
    warnings += library_warnings
    functions, orphan_warnings = check_sources(manifest, specs, root)
    warnings += orphan_warnings
    _check_class_names(specs)
    specs.sort(key=lambda s: s.op)

    digest = hashlib.sha256(Path(manifest_path).read_bytes()).hexdigest()[:16]
    header = (
        f"# @generated by `python -m codegen.generate` from native_functions.yaml (sha256 {digest}),\n"
        f"# torch {db.torch_version}. Do not edit: change the manifest, the handwritten functions\n"
        "# or codegen/templates, and regenerate."
    )
    imports: dict[str, list[str]] = {}
    for fn in functions.values():
        imports.setdefault(fn.module, []).append(fn.name)
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters["py"] = repr  # a Python literal (tojson escapes `<`, `>` and `&`)
    primary = [s for s in specs if s.functional is None]
    by_name = {s.name: s for s in primary}
    donating = {s.name: by_name[s.functional] for s in specs
                if s.functional is not None and s.donating_form_of(by_name[s.functional])}
    context = dict(
        header=header,
        header_txt=header,
        ops=specs,
        aten_ops=[s for s in specs if s.namespace == "aten"],
        library_ops=[s for s in specs if s.namespace != "aten"],
        unavailable=sorted(unavailable.items()),
        donating=donating,
        imports=sorted((m, sorted(n)) for m, n in imports.items()),
        api=PUBLIC_API,
    )
    files = {
        "__init__.py": env.get_template("__init__.py.j2").render(context),
        "ir.py": env.get_template("ir.py.j2").render({**context, "ops": primary}),
        "dispatch.py": env.get_template("dispatch.py.j2").render(context),
        "registry.py": env.get_template("registry.py.j2").render(context),
        "ops.txt": env.get_template("ops.txt.j2").render(context),
    }
    return Result(files=files, warnings=warnings, ops=specs, unavailable=unavailable)


def _read_tree(path: Path) -> dict[str, str]:
    if not path.is_dir():
        return {}
    return {str(p.relative_to(path)): p.read_text() for p in sorted(path.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def write_atomically(files: dict[str, str], target: Path) -> bool:
    """Replace `target` with exactly `files`; nothing is touched when they already match.
    The new tree is written beside the old one and swapped in by renames, so a failure
    leaves the previous tree in place."""
    if _read_tree(target) == files:
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=target.parent))
    staging.chmod(target.stat().st_mode & 0o7777 if target.exists() else 0o755)  # mkdtemp makes it private
    try:
        for name, text in files.items():
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            (staging / name).write_text(text)
        old = None
        if target.exists():
            old = target.parent / f".old-{os.getpid()}-{target.name}"
            os.rename(target, old)
        try:
            os.rename(staging, target)
        except OSError:
            if old is not None:
                os.rename(old, target)
            raise
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return True


def stale_diff(files: dict[str, str], target: Path) -> str:
    current = _read_tree(target)
    out = []
    for name in sorted(set(files) | set(current)):
        a, b = current.get(name, ""), files.get(name, "")
        if a != b:
            out.extend(
                difflib.unified_diff(
                    a.splitlines(keepends=True), b.splitlines(keepends=True), f"generated/{PACKAGE}/{name}", f"(regenerated) {name}"
                )
            )
    return "".join(out)


def counts(ops: list[OpSpec]) -> str:
    parts = []
    for section in SECTIONS:
        listed = sum(1 for o in ops if o.section == section and o.functional is None)
        derived = sum(1 for o in ops if o.section == section and o.functional is not None)
        parts.append(f"{section} {listed} (+{derived} in-place/out=)")
    return ", ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m codegen.generate", description=__doc__.splitlines()[0])
    parser.add_argument("--manifest", default=str(REPO / "native_functions.yaml"))
    parser.add_argument("--out", default=str(REPO / "generated" / PACKAGE), help="the package directory to write")
    parser.add_argument("--check", action="store_true", help="fail if the generated files are stale; write nothing")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        result = render(Path(args.manifest))
    except ManifestError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for w in result.warnings:
        print(w, file=sys.stderr)
    target = Path(args.out)
    if args.check:
        diff = stale_diff(result.files, target)
        if diff:
            sys.stdout.write(diff)
            print(f"\ngenerated/{PACKAGE} is stale: run `python -m codegen.generate` and commit the result", file=sys.stderr)
            return 1
        print(f"generated/{PACKAGE} is up to date ({counts(result.ops)})")
        return 0
    changed = write_atomically(result.files, target)
    elapsed = time.perf_counter() - start
    print(f"{'wrote' if changed else 'unchanged:'} {target} ({counts(result.ops)}) in {elapsed:.2f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
