"""What the contributor commands (scaffold, move, snapshot, status) know about an
operator without importing torch: its manifest spelling and entry, its schema, where
its handwritten functions are, which OpInfos reach it (from the committed coverage
report) and which family module similar operators live in."""

from __future__ import annotations

import ast
import difflib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from .manifest import Manifest, ManifestEntry
from .model import TENSOR, OpSpec, make_op_spec, split_namespace, unambiguous_name
from .schemas import SchemaDatabase, SchemaRecord
from .sources import FunctionSource, scan_functions

REPO = Path(__file__).resolve().parent.parent

# Python operators whose aten ops are other ops under another name: the OpInfo of the
# named op reaches them through its operator variant (`x << y`), and they belong with it.
OPERATOR_ALIASES = {
    "__lshift__": "bitwise_left_shift", "__rshift__": "bitwise_right_shift", "__and__": "bitwise_and",
    "__or__": "bitwise_or", "__xor__": "bitwise_xor", "__ilshift__": "bitwise_left_shift",
    "__irshift__": "bitwise_right_shift", "__iand__": "bitwise_and", "__ior__": "bitwise_or", "__ixor__": "bitwise_xor",
}


class CommandError(Exception):
    """A refusal of a contributor command, with what to do instead."""


def manifest_spelling(text: str) -> str:
    """The manifest's spelling of an operator given as `aten::add.Tensor`, `add.Tensor`,
    `aten::abs.default` or `mylib::op`: `add.Tensor`, `abs`, `mylib::op`."""
    text = text.strip()
    ns, op = split_namespace(text)
    op = op.removesuffix(".default")
    if not op or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?", op):
        raise CommandError(f"'{text}' is not an operator name like aten::add.Tensor or mylib::op")
    return op if ns == "aten" else f"{ns}::{op}"


def qualified(op: str) -> str:
    """`aten::add.Tensor` for the manifest's `add.Tensor`; `mylib::op` stays."""
    return op if "::" in op else f"aten::{op}"


def base_name(op: str) -> str:
    """`add` for `add.Tensor`, `mylib::rope` for `mylib::rope.half`."""
    return op.split(".")[0]


def find_entry(manifest: Manifest, op: str) -> ManifestEntry | None:
    return next((e for e in manifest.entries if e.op == op), None)


def suggest(op: str, db: SchemaDatabase, manifest: Manifest | None = None) -> str:
    """Close names: other overloads of the same op, else similar names."""
    base = base_name(op)
    overloads = sorted(k for k, r in db.records.items()
                       if base_name(k) == base and not r.composite_implicit and r.kind == "functional")
    if overloads:
        return (
            "its overloads are "
            + ", ".join(qualified(o) for o in overloads[:12])
            + (" ..." if len(overloads) > 12 else "")
        )
    pool = set(db.records) | ({e.op for e in manifest.entries} if manifest else set())
    close = difflib.get_close_matches(op, pool, n=4, cutoff=0.6)
    return "did you mean " + ", ".join(qualified(c) for c in close) + "?" if close else ""


# ---------------------------------------------------------------- handwritten functions


@dataclass(frozen=True)
class Functions:
    lowerings: dict[str, FunctionSource]
    shape_fns: dict[str, FunctionSource]
    impls: dict[str, FunctionSource]


def scan_handwritten(root: Path = REPO) -> Functions:
    return Functions(
        lowerings=scan_functions(root, "lowerings", prefix="lower_"),
        shape_fns=scan_functions(root, "shape_fns", suffix="_output_shape"),
        impls=scan_functions(root, "runtime", prefix="impl_"),
    )


def spec_for(op: str, section: str, db: SchemaDatabase, library_schema: str | None = None) -> OpSpec:
    """The OpSpec of a manifest entry (names, parameters) as the generator derives it."""
    if library_schema is not None:
        from torchgen.model import FunctionSchema

        from .model import torchgen_schema_text

        schema = FunctionSchema.parse(torchgen_schema_text(library_schema))
        is_view = any(r.annotation is not None and not r.annotation.is_write for r in schema.returns)
        return make_op_spec(op, library_schema, section, is_view, schema.kind().name)
    rec = db.records[op]
    return make_op_spec(op, rec.schema, section, rec.is_view, rec.kind)


# ---------------------------------------------------------------- OpInfos


def coverage_path(root: Path = REPO) -> Path | None:
    for candidate in (root / "docs" / "reports" / "coverage.json", root / "docs" / "coverage.json"):
        if candidate.exists():
            return candidate
    return None


def load_coverage(root: Path = REPO) -> dict:
    path = coverage_path(root)
    if path is None:
        return {}
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _opinfo_names(key: str) -> set[str]:
    """Aten-style names an OpInfo key may stand for: `nn.functional.relu` -> relu,
    `special.xlog1py` -> special_xlog1py, `div.no_rounding_mode` -> div."""
    parts = key.split(".")
    names = set()
    for i in range(len(parts)):
        for j in range(i + 1, len(parts) + 1):
            names.add("_".join(parts[i:j]))
    return names


@dataclass(frozen=True)
class OpInfoMatch:
    key: str
    why: str  # "reaches it", "named like it", "its operator variant reaches it"
    aten_ops: int  # how many aten ops its samples reach (fewer: a more direct test)


def forms_of(op: str) -> set[str]:
    """An entry and the names its derived in-place and out= forms go by (as OpInfo
    sweeps record them: `add.Tensor`, `add_.Tensor`, `add.out`)."""
    base, _, overload = op.partition(".")
    forms = {op, f"{base}.out"}
    if not base.endswith("__"):
        forms.add(f"{base}_" + (f".{overload}" if overload else ""))
    return forms


def opinfos_reaching(op: str, coverage: dict) -> list[OpInfoMatch]:
    """OpInfos whose samples reach `op` (manifest spelling), per the coverage report's
    record of the aten ops each one's samples call, and OpInfos named like it or whose
    Python operator variant calls it (`<<` for __lshift__): those named like it first,
    then by how few aten ops they reach (the most direct tests first)."""
    if "::" in op:
        return []
    forms = forms_of(op)
    base = base_name(op)
    alias = OPERATOR_ALIASES.get(base)
    found: list[tuple[int, int, str, OpInfoMatch]] = []
    for key, info in coverage.get("opinfos", {}).items():
        ops = info.get("aten_ops") or []
        names = _opinfo_names(key)
        if forms & set(ops):
            why = "its samples reach it"
        elif base in names:
            why = "named like it"
        elif alias is not None and key.split(".")[0] == alias:
            why = f"its Python operator variant calls {qualified(base)}"
        else:
            continue
        named = base in names or (alias is not None and key.split(".")[0] == alias)
        found.append((0 if named else 1, len(ops), key, OpInfoMatch(key, why, len(ops))))
    return [m for *_, m in sorted(found, key=lambda t: t[:3])]


# ---------------------------------------------------------------- families


def _signature_class(spec: OpSpec, tags: tuple[str, ...]) -> tuple:
    """What makes two ops alike for placement: pointwise or not, the kinds of their
    positional inputs, what they return."""
    return ("pointwise" in tags, tuple(a.kind for a in spec.inputs if not a.kwarg_only), spec.returns_kind)


def _name_for_similarity(op: str) -> str:
    base, dot, overload = op.partition(".")
    base = OPERATOR_ALIASES.get(base, base)
    return base + dot + overload


def _tokens(name: str) -> set[str]:
    return {t for t in name.replace(".", "_").split("_") if t}


@dataclass(frozen=True)
class FamilyGuess:
    family: str
    like: str  # the listed op it resembles most
    why: str


def guess_family(spec: OpSpec, tags: tuple[str, ...], manifest: Manifest, db: SchemaDatabase,
                 table: dict[str, FunctionSource], prefix: str, suffix: str, folder: str) -> FamilyGuess | None:
    """The module (stem) of `folder` where the handwritten function of the listed op
    most like `spec` lives: its other overloads first, else the op with the same
    argument kinds and tags and the closest name."""
    klass = _signature_class(spec, tags)
    best: tuple[float, str, str] | None = None
    target = _name_for_similarity(spec.op)
    for entry in manifest.entries:
        if entry.op == spec.op or entry.section != spec.section or "::" in entry.op:
            continue
        rec = db.records.get(entry.op)
        if rec is None:
            continue
        fn = table.get(prefix + unambiguous_name(entry.op) + suffix)
        if fn is None or not fn.path.startswith(folder + "/"):
            continue
        same_base = base_name(entry.op) == base_name(spec.op)
        other = make_op_spec(entry.op, rec.schema, entry.section, rec.is_view, rec.kind)
        name = _name_for_similarity(entry.op)
        # weights chosen on the manifest itself: each listed op, left out, is placed in
        # its own module 68% of the time (the rest in a sibling, say pointwise_math
        # for pointwise)
        score = (0.5 if same_base else 0.0) + (1.0 if _signature_class(other, rec.tags) == klass else 0.0)
        score += difflib.SequenceMatcher(None, target, name).ratio()
        mine, theirs = _tokens(target), _tokens(name)
        score += len(mine & theirs) / max(1, len(mine | theirs))
        if best is None or score > best[0]:
            best = (score, entry.op, Path(fn.path).stem)
    if best is None:
        return None
    score, like, family = best
    if base_name(like) == base_name(spec.op):
        why = f"where its other overload {qualified(like)} lives"
    elif score >= 2.0:
        why = f"where {qualified(like)}, the listed op most like it (arguments, tags, name), lives"
    else:
        why = f"where {qualified(like)}, the listed op with the closest name, lives"
    return FamilyGuess(family, like, why)


def test_table_keys(root: Path = REPO) -> tuple[list[str], int, Path]:
    """The OpInfo keys of tests/test_opinfo.py's OPINFOS, and the line of its closing
    bracket."""
    path = root / "tests" / "test_opinfo.py"
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "OPINFOS" for t in node.targets):
            keys = [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
            return keys, node.value.end_lineno, path
    raise CommandError(f"{path}: no OPINFOS list found")


def add_to_test_table(keys: list[str], root: Path = REPO) -> tuple[list[str], str | None]:
    """Append OpInfo keys to OPINFOS (those not there yet); returns the keys added and
    the new text of the file (None when nothing changes)."""
    listed, closing, path = test_table_keys(root)
    new = [k for k in keys if k not in listed]
    if not new:
        return [], None
    lines = path.read_text().splitlines(keepends=True)
    lines[closing - 1:closing - 1] = [f'    "{k}",\n' for k in new]
    return new, "".join(lines)


def schema_record(op: str, db: SchemaDatabase) -> SchemaRecord | None:
    return db.records.get(op)


def tensor_arg_names(spec: OpSpec) -> list[str]:
    return [a.name for a in spec.inputs if a.kind == TENSOR]
