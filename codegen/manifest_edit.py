"""Edits of `native_functions.yaml` as text (comments, order and layout kept): add an
entry in sorted position, remove one, add a library. Positions come from PyYAML's node
tree, as in manifest.py; every result is parsed again by `load_manifest` before it is
written."""

from __future__ import annotations

import yaml

from .manifest import SECTIONS, ManifestError


def _root(text: str) -> yaml.MappingNode:
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if not isinstance(root, yaml.MappingNode):
        raise ManifestError("the manifest is not a mapping")
    return root


def _key(root: yaml.MappingNode, name: str) -> tuple[yaml.Node, yaml.Node] | None:
    return next(((k, v) for k, v in root.value if k.value == name), None)


def _entry_op(node: yaml.Node) -> str:
    if isinstance(node, yaml.ScalarNode):
        return node.value.strip()
    if isinstance(node, yaml.MappingNode):  # a future `- op: name` form with more keys
        for k, v in node.value:
            if k.value == "op":
                return v.value.strip()
    return ""


def insert_entry(text: str, section: str, op: str) -> tuple[str, int]:
    """`text` with `op` added to `section` before the first entry that sorts after it
    (the manifest keeps sections sorted); returns the new text and the entry's line."""
    if section not in SECTIONS:
        raise ManifestError(f"unknown section '{section}'; the sections are {', '.join(SECTIONS)}")
    lines = text.splitlines(keepends=True)
    found = _key(_root(text), section)
    if found is None:
        raise ManifestError(f"the manifest has no '{section}' key")
    key_node, value = found
    if isinstance(value, yaml.SequenceNode) and value.value:
        items = value.value
        # the dash sits two columns left of the scalar in `  - op`
        dash = " " * max(0, items[0].start_mark.column - 2)
        for item in items:
            if _entry_op(item) > op:
                at = item.start_mark.line
                lines.insert(at, f"{dash}- {op}\n")
                return "".join(lines), at + 1
        last = items[-1]
        at = last.end_mark.line if last.end_mark.column == 0 else last.end_mark.line + 1
        lines.insert(at, f"{dash}- {op}\n")
        return "".join(lines), at + 1
    # an empty section: `fallback:` or `fallback: []`
    at = key_node.start_mark.line
    lines[at] = f"{section}:\n"
    lines.insert(at + 1, f"  - {op}\n")
    return "".join(lines), at + 2


def remove_entry(text: str, op: str) -> tuple[str, str]:
    """`text` without `op`'s entry; returns the new text and the section it was in. A
    section left empty keeps its key (an empty section)."""
    lines = text.splitlines(keepends=True)
    root = _root(text)
    for section in SECTIONS:
        found = _key(root, section)
        if found is None or not isinstance(found[1], yaml.SequenceNode):
            continue
        items = found[1].value
        for i, item in enumerate(items):
            if _entry_op(item) != op:
                continue
            start = item.start_mark.line
            end = items[i + 1].start_mark.line if i + 1 < len(items) else (
                item.end_mark.line if item.end_mark.column == 0 else item.end_mark.line + 1)
            del lines[start:end]
            return "".join(lines), section
    raise ManifestError(f"'{op}' is not in the manifest")


def add_library(text: str, namespace: str, module: str) -> str:
    """`text` with `namespace: module` under `libraries:` (the key added after
    `backend:` when missing)."""
    lines = text.splitlines(keepends=True)
    root = _root(text)
    found = _key(root, "libraries")
    if found is not None:
        key_node, value = found
        if isinstance(value, yaml.MappingNode) and value.value:
            if value.flow_style:
                raise ManifestError("'libraries' is written in flow style ({...}); add the library by hand")
            last_value = value.value[-1][1]
            indent = " " * value.value[0][0].start_mark.column
            at = last_value.end_mark.line if last_value.end_mark.column == 0 else last_value.end_mark.line + 1
            lines.insert(at, f"{indent}{namespace}: {module}\n")
            return "".join(lines)
        at = key_node.start_mark.line
        lines[at] = "libraries:\n"
        lines.insert(at + 1, f"  {namespace}: {module}\n")
        return "".join(lines)
    backend = _key(root, "backend")
    at = (backend[1].end_mark.line + 1) if backend is not None else 0
    lines[at:at] = ["\n", "libraries:\n", f"  {namespace}: {module}\n"]
    return "".join(lines)
