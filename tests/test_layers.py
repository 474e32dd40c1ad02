"""The runtime's layers import only downwards (docs/architecture.md), read from the
source with `ast`, imports inside functions included: no upward import, no cycle, no
import of generated code or the generator, and no function-level import of the
package's own modules beyond the short list below, each with its reason."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Layer of each runtime package; a module may import its own layer and those below.
# `frontends` and `supported` sit side by side: neither imports the other.
LAYERS = {"platform": 0, "core": 1, "exec": 2, "frontends": 3, "supported": 3, "api": 4}

# Function-level imports of the package's own modules: (importing module, imported
# module) -> why it cannot be at the top. Keep this list short.
DEFERRED_IMPORTS: dict[tuple[str, str], str] = {}


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[str, int, bool]]:
    """(imported module, line, at function level) of every import of the repo's own
    modules in `path`, relative imports resolved."""
    package = _module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []

    def visit(node: ast.AST, nested: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = nested or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.ImportFrom) and child.level:
                base = package[: len(package) - child.level + 1]
                target = ".".join(base + ([child.module] if child.module else []))
                # `from .m import name` may import a module or a name in one: the
                # longest existing module is resolved later
                for alias in child.names:
                    found.append((f"{target}.{alias.name}", child.lineno, inner))
            elif isinstance(child, ast.ImportFrom) and child.module and child.module.split(".")[0] in (
                    "xla_native_functions", "codegen", "torchgen"):
                found.append((child.module, child.lineno, inner))
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name.split(".")[0] in ("xla_native_functions", "codegen", "torchgen"):
                        found.append((alias.name, child.lineno, inner))
            visit(child, inner)

    visit(tree, False)
    return found


def _layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "runtime" or len(parts) < 2:
        return None
    return LAYERS.get(parts[1])


RUNTIME_FILES = sorted((ROOT / "runtime").rglob("*.py"))


def _runtime_modules() -> dict[str, Path]:
    return {_module_name(p): p for p in RUNTIME_FILES}


def _resolve(target: str, modules: dict[str, Path]) -> str | None:
    """The runtime module an import names (`from ..core.convert import X` names
    runtime.core.convert; `from ..core import convert` names it too)."""
    while target and target not in modules:
        target = target.rpartition(".")[0]
    return target or None


def test_every_runtime_module_is_in_a_layer():
    for path in RUNTIME_FILES:
        name = _module_name(path)
        if name == "runtime":
            continue
        assert _layer(name) is not None, (
            f"{path.relative_to(ROOT)} is in no layer: put it under one of {sorted(LAYERS)}"
        )


@pytest.mark.parametrize("path", RUNTIME_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_runtime_imports_go_downwards(path):
    modules = _runtime_modules()
    name = _module_name(path)
    here = _layer(name)
    problems = []
    for target, line, nested in _imports(path):
        where = f"{path.relative_to(ROOT)}:{line}"
        if target.split(".")[0] in ("codegen", "torchgen", "xla_native_functions", "ir", "dispatch", "registry"):
            problems.append(f"{where}: imports {target or 'the generated package'} (the runtime never imports "
                            "generated code or the generator)")
            continue
        if target.split(".")[0] in ("lowerings", "shape_fns"):  # pure, below every layer
            if nested:
                problems.append(f"{where}: function-level import of {target}: import it at the top")
            continue
        resolved = _resolve(target, modules)
        there = None if resolved is None else _layer(resolved)
        if there is not None and here is not None:
            sideways = name.split(".")[1] != resolved.split(".")[1] and there == here
            if there > here or sideways:
                problems.append(f"{where}: {name} imports {resolved}, which is not below it")
        if nested and resolved is not None and (name, resolved) not in DEFERRED_IMPORTS:
            problems.append(f"{where}: function-level import of {resolved}: import it at the top (or add it to "
                            "DEFERRED_IMPORTS with the reason)")
    assert not problems, "\n".join(problems)


def test_runtime_has_no_import_cycles():
    modules = _runtime_modules()
    graph = {}
    for name, path in modules.items():
        targets = {_resolve(t, modules) for t, _, _ in _imports(path)}
        graph[name] = {t for t in targets if t is not None and t != name}
    # A package imports its __init__ implicitly; edges into it are not cycles of ours.
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                cycle = stack[stack.index(m):] + [m]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if m not in state:
                visit(m)
        stack.pop()
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n)


def test_generated_code_uses_only_the_stub_abi():
    """Generated stubs and IR classes import the runtime through exec/stub_abi.py (and
    the supported implementations they call); the package __init__ imports the api."""
    allowed = {
        "dispatch.py": ("runtime.exec.stub_abi",),
        "ir.py": ("runtime.exec.stub_abi", "runtime.supported."),
        "registry.py": (),
        "__init__.py": ("runtime.api",),
    }
    package = ROOT / "generated" / "xla_native_functions"
    for file, prefixes in allowed.items():
        tree = ast.parse((package / file).read_text())
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.ImportFrom)
                and node.level == 1
                and node.module
                and node.module.startswith("runtime")
            ):
                assert node.module.startswith(prefixes), f"generated {file} imports {node.module}"
