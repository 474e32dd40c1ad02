"""The manifest, `native_functions.yaml`, parsed strictly into frozen dataclasses.

Every error names the file and line and says what to do. The manifest is our own
format (torchgen's backend-yaml parser rejects keys it does not know), so it is
parsed here from PyYAML's node tree, which keeps line numbers and lets duplicate
keys be caught instead of silently overwritten.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from .diagnostics import read_text, yaml_error

SECTIONS = ("full_codegen", "supported", "fallback")
TOP_LEVEL_KEYS = ("backend",) + SECTIONS
# Optional: namespace -> the Python module whose import registers that namespace's
# operators with torch (`libraries: {torchvision: torchvision}`), for entries spelled
# `ns::op.overload`.
OPTIONAL_KEYS = ("libraries", "internal", "policy")
# `policy`: facts about operators that generated code and the runtime act on, each a
# list of op names, a mapping from op name to a list of integers (`ints`) or a mapping
# from op name to a name (`name`), with the kind of op name each takes: "base" (every
# overload of `index_add`, in-place and out= forms included) or "op" (an unambiguous
# name, `add_Tensor`), and whether the runtime reads it (the others are baked into the
# generated stubs). The generator checks every op name against the manifest.
POLICY_FACTS = {
    "inplace_rejects_partial_overlap": ("base", list, False),
    "inplace_rejects_any_overlap": ("base", list, False),
    "inplace_rounds_scalar_to_self": ("base", list, False),
    "out_exact_dtype": ("op", list, False),
    "out_distinct_from_inputs": ("op", list, False),
    "host_only": ("op", list, True),
    "transposed_weight_operands": ("op", "ints", True),
    "eager_value_checks": ("base", "name", True),
}
# `internal`: IR nodes the runtime records that are not torch operators (how tensors are
# read and written through views, what `supported` ops compute), each given by its
# schema and lowered like a `full_codegen` entry.
INTERNAL = "internal"
_SCHEMA_NAME = re.compile(r"([a-z][a-z0-9_]*)\(")
_NAMESPACE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


class ManifestError(Exception):
    """A problem in the manifest or the handwritten code it names. Its message starts
    with `file:line:` when it has a place."""


@dataclass(frozen=True)
class ManifestEntry:
    op: str  # "add.Tensor", as torchgen spells it
    section: str  # one of SECTIONS, or INTERNAL
    line: int  # 1-based line in the manifest
    schema: str | None = None  # an internal node's schema (operators' come from torch)

    def where(self, path: str) -> str:
        return f"{path}:{self.line}"

    @property
    def namespace(self) -> str:
        """`torchvision` for `torchvision::nms`; `aten` for an entry without one."""
        ns, sep, _ = self.op.partition("::")
        return ns if sep else "aten"


@dataclass(frozen=True)
class Library:
    namespace: str  # "torchvision"
    module: str  # the module to import for its operators: "torchvision"
    line: int


@dataclass(frozen=True)
class PolicyFact:
    name: str  # one of POLICY_FACTS
    line: int
    ops: tuple[tuple[str, tuple[int | str, ...], int], ...]  # (op name, its integers or its name, line)


@dataclass(frozen=True)
class Manifest:
    path: str
    backend: str
    entries: tuple[ManifestEntry, ...]
    libraries: tuple[Library, ...] = ()
    policy: tuple[PolicyFact, ...] = ()

    def fact(self, name: str) -> PolicyFact:
        return next((f for f in self.policy if f.name == name), PolicyFact(name, 1, ()))

    def section(self, name: str) -> tuple[ManifestEntry, ...]:
        return tuple(e for e in self.entries if e.section == name)


def _fail(path: str, node: yaml.Node | None, message: str) -> ManifestError:
    line = node.start_mark.line + 1 if node is not None else 1
    return ManifestError(f"{path}:{line}: {message}")


def load_manifest(path: str | Path) -> Manifest:
    path = str(path)
    text = read_text(path, "manifest file")
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        raise ManifestError(str(yaml_error(path, text, e))) from None
    if root is None:
        raise ManifestError(f"{path}:1: the manifest is empty; it needs the keys {', '.join(TOP_LEVEL_KEYS)}")
    if not isinstance(root, yaml.MappingNode):
        raise _fail(path, root, "the manifest must be a mapping with the keys " + ", ".join(TOP_LEVEL_KEYS))

    seen_keys: dict[str, yaml.Node] = {}
    backend = None
    libraries: tuple[Library, ...] = ()
    policy: tuple[PolicyFact, ...] = ()
    entries: list[ManifestEntry] = []
    first_place: dict[str, ManifestEntry] = {}
    for key_node, value_node in root.value:
        key = key_node.value
        if key in seen_keys:
            raise _fail(
                path, key_node, f"duplicate key '{key}' (first at line {seen_keys[key].start_mark.line + 1})"
            )
        seen_keys[key] = key_node
        if key not in TOP_LEVEL_KEYS + OPTIONAL_KEYS:
            raise _fail(
                path,
                key_node,
                f"unknown key '{key}'; the manifest's keys are {', '.join(TOP_LEVEL_KEYS + OPTIONAL_KEYS)}",
            )
        if key == "libraries":
            libraries = _parse_libraries(path, value_node)
            continue
        if key == "policy":
            policy = _parse_policy(path, value_node)
            continue
        if key == INTERNAL:
            for entry in _parse_internal(path, value_node):
                prior = first_place.get(entry.op)
                if prior is not None:
                    raise ManifestError(
                        f"{path}:{entry.line}: '{entry.op}' is listed twice (first at line {prior.line}); "
                        "give the internal node another name"
                    )
                first_place[entry.op] = entry
                entries.append(entry)
            continue
        if key == "backend":
            if not isinstance(value_node, yaml.ScalarNode) or not value_node.value:
                raise _fail(path, value_node, "'backend' must be a name, like 'backend: XLA'")
            backend = value_node.value
            continue
        if isinstance(value_node, yaml.ScalarNode) and value_node.value in ("", "~", "null"):
            continue  # an empty section
        if not isinstance(value_node, yaml.SequenceNode):
            raise _fail(path, value_node, f"'{key}' must be a list of aten operator names, like '- add.Tensor'")
        for item in value_node.value:
            if not isinstance(item, yaml.ScalarNode) or not item.value.strip():
                raise _fail(path, item, f"entries of '{key}' must be aten operator names, like 'add.Tensor'")
            entry = ManifestEntry(op=item.value.strip(), section=key, line=item.start_mark.line + 1)
            prior = first_place.get(entry.op)
            if prior is not None:
                where = "twice in" if prior.section == key else f"in both '{prior.section}' and"
                raise ManifestError(
                    f"{path}:{entry.line}: '{entry.op}' is listed {where} '{key}' "
                    f"(first at line {prior.line}); keep one entry"
                )
            first_place[entry.op] = entry
            entries.append(entry)
    missing = [k for k in TOP_LEVEL_KEYS if k not in seen_keys]
    if missing:
        raise ManifestError(f"{path}:1: missing key(s) {', '.join(missing)}")
    _check_namespaces(path, entries, libraries)
    return Manifest(path=path, backend=backend or "", entries=tuple(entries), libraries=libraries, policy=policy)


def _parse_policy(path: str, node: yaml.Node) -> tuple[PolicyFact, ...]:
    if not isinstance(node, yaml.MappingNode):
        raise _fail(path, node, "'policy' must map facts (" + ", ".join(POLICY_FACTS) + ") to op names")
    facts = []
    for key_node, value_node in node.value:
        name = key_node.value
        if name not in POLICY_FACTS:
            raise _fail(path, key_node, f"unknown policy fact '{name}'; the facts are {', '.join(POLICY_FACTS)}")
        shape = POLICY_FACTS[name][1]
        ops = []
        if shape is list and isinstance(value_node, yaml.SequenceNode):
            for item in value_node.value:
                if not isinstance(item, yaml.ScalarNode) or not item.value:
                    raise _fail(path, item, f"'{name}' lists op names")
                ops.append((item.value, (), item.start_mark.line + 1))
        elif shape == "name" and isinstance(value_node, yaml.MappingNode):
            for op_node, name_node in value_node.value:
                if not isinstance(name_node, yaml.ScalarNode) or not name_node.value.isidentifier():
                    raise _fail(path, name_node, f"'{name}' maps each op name to a name")
                ops.append((op_node.value, (name_node.value,), op_node.start_mark.line + 1))
        elif shape == "ints" and isinstance(value_node, yaml.MappingNode):
            for op_node, ints_node in value_node.value:
                values = ints_node.value if isinstance(ints_node, yaml.SequenceNode) else None
                if values is None or not all(isinstance(v, yaml.ScalarNode) and v.value.isdigit() for v in values):
                    raise _fail(path, ints_node, f"'{name}' maps each op name to a list of integers")
                ops.append((op_node.value, tuple(int(v.value) for v in values), op_node.start_mark.line + 1))
        else:
            raise _fail(path, value_node, f"'{name}' must be a {'list of op names' if shape is list else 'mapping'}")
        if [o for o, _, _ in ops] != sorted(o for o, _, _ in ops) or len({o for o, _, _ in ops}) != len(ops):
            raise _fail(path, value_node, f"keep '{name}' sorted and without repeats")
        facts.append(PolicyFact(name, key_node.start_mark.line + 1, tuple(ops)))
    return tuple(facts)


def _parse_internal(path: str, node: yaml.Node) -> list[ManifestEntry]:
    if isinstance(node, yaml.ScalarNode) and node.value in ("", "~", "null"):
        return []
    if not isinstance(node, yaml.SequenceNode):
        raise _fail(path, node, "'internal' must be a list of schemas, like '- \"copy_to(Tensor src, int[] shape, "
                                "ScalarType dtype) -> Tensor\"'")
    found = []
    for item in node.value:
        text = item.value.strip() if isinstance(item, yaml.ScalarNode) else ""
        match = _SCHEMA_NAME.match(text)
        if not match or "->" not in text:
            raise _fail(path, item, "entries of 'internal' must be schemas like 'name(Tensor self, int dim) -> Tensor' "
                                    "(a lower-case name without an overload)")
        found.append(ManifestEntry(op=match.group(1), section=INTERNAL, line=item.start_mark.line + 1, schema=text))
    return found


def _parse_libraries(path: str, node: yaml.Node) -> tuple[Library, ...]:
    if isinstance(node, yaml.ScalarNode) and node.value in ("", "~", "null"):
        return ()
    if not isinstance(node, yaml.MappingNode):
        raise _fail(path, node, "'libraries' must map a namespace to the module that defines it, like "
                                "'libraries: {torchvision: torchvision}'")
    found: dict[str, Library] = {}
    for key_node, value_node in node.value:
        ns = key_node.value if isinstance(key_node, yaml.ScalarNode) else ""
        if not _NAMESPACE.fullmatch(ns) or ns == "aten":
            raise _fail(path, key_node, f"'{ns}' is not a library namespace (a Python identifier other than aten)")
        module = value_node.value if isinstance(value_node, yaml.ScalarNode) else ""
        if not _MODULE.fullmatch(module):
            raise _fail(path, value_node, f"library '{ns}' must name a Python module to import, like 'torchvision'")
        if ns in found:
            raise _fail(path, key_node, f"library '{ns}' is listed twice (first at line {found[ns].line})")
        found[ns] = Library(namespace=ns, module=module, line=key_node.start_mark.line + 1)
    return tuple(found.values())


def _check_namespaces(path: str, entries: list[ManifestEntry], libraries: tuple[Library, ...]) -> None:
    known = {lib.namespace for lib in libraries}
    for e in entries:
        ns, sep, op = e.op.partition("::")
        if not sep:
            continue
        if ns == "aten":
            raise ManifestError(f"{path}:{e.line}: write aten operators without their namespace: '{op}'")
        if not _NAMESPACE.fullmatch(ns) or not op:
            raise ManifestError(f"{path}:{e.line}: '{e.op}' is not an operator name like 'torchvision::nms'")
        if ns not in known:
            raise ManifestError(
                f"{path}:{e.line}: '{e.op}' is in namespace '{ns}', which 'libraries' does not name; add "
                f"'libraries: {{{ns}: <the module that registers {ns}:: operators>}}' to the manifest"
            )


def lint_libraries(manifest: Manifest) -> list[str]:
    """Warnings for libraries no entry uses (they are not imported)."""
    used = {e.namespace for e in manifest.entries}
    return [
        f"{manifest.path}:{lib.line}: warning: library '{lib.namespace}' is not used by any entry"
        for lib in manifest.libraries
        if lib.namespace not in used
    ]


def lint_order(manifest: Manifest) -> list[str]:
    """Warnings for sections whose entries are not sorted (a sorted list keeps diffs small)."""
    warnings = []
    for section in SECTIONS + (INTERNAL,):
        ops = [e for e in manifest.section(section)]
        for prev, cur in zip(ops, ops[1:]):
            if cur.op < prev.op:
                warnings.append(
                    f"{manifest.path}:{cur.line}: '{cur.op}' is out of order in '{section}' (after '{prev.op}'); "
                    "keep each section sorted"
                )
                break
    return warnings
