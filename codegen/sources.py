"""The handwritten half, read as source with `ast` (never imported: importing torch and
jax alone costs over a second, and a broken lowering must not break the generator)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from .diagnostics import parse_python
from .manifest import ManifestError

# A stub `python -m codegen.scaffold` wrote and nobody filled in yet: a body (after an
# optional docstring) that only raises NotImplementedError("unfinished: ...").
UNFINISHED = "unfinished:"


@dataclass(frozen=True)
class FunctionSource:
    name: str
    module: str  # import path relative to the package: "lowerings.pointwise"
    path: str  # repo-relative file path
    line: int
    positional: tuple[str, ...]
    kwonly: tuple[str, ...]
    defaults: dict[str, str]  # parameter -> default source text
    has_varargs: bool
    unfinished: bool = False  # a scaffold stub (UNFINISHED)


def _read_function(node: ast.FunctionDef, module: str, path: str) -> FunctionSource:
    a = node.args
    positional = tuple(p.arg for p in a.posonlyargs + a.args)
    defaults = {}
    for p, d in zip(reversed(a.posonlyargs + a.args), reversed(a.defaults)):
        defaults[p.arg] = ast.unparse(d)
    for p, d in zip(a.kwonlyargs, a.kw_defaults):
        if d is not None:
            defaults[p.arg] = ast.unparse(d)
    return FunctionSource(
        name=node.name,
        module=module,
        path=path,
        line=node.lineno,
        positional=positional,
        kwonly=tuple(p.arg for p in a.kwonlyargs),
        defaults=defaults,
        has_varargs=a.vararg is not None or a.kwarg is not None,
        unfinished=_is_unfinished(node),
    )


def _is_unfinished(node: ast.FunctionDef) -> bool:
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    if len(body) != 1 or not isinstance(body[0], ast.Raise) or not isinstance(body[0].exc, ast.Call):
        return False
    call = body[0].exc
    return (isinstance(call.func, ast.Name) and call.func.id == "NotImplementedError" and len(call.args) == 1
            and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str)
            and call.args[0].value.startswith(UNFINISHED))


def scan_functions(
    root: Path, folder: str, prefix: str | None = None, suffix: str | None = None
) -> dict[str, FunctionSource]:
    """Top-level functions of `root/folder/**/*.py` whose names match prefix/suffix.
    A name defined twice is an error: the second definition would silently win."""
    found: dict[str, FunctionSource] = {}
    for file in sorted((root / folder).rglob("*.py")):
        rel = file.relative_to(root)
        module = ".".join(rel.with_suffix("").parts)
        tree = parse_python(file, str(rel))
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef):
                continue
            if prefix and not node.name.startswith(prefix):
                continue
            if suffix and not node.name.endswith(suffix):
                continue
            fn = _read_function(node, module, str(rel))
            prior = found.get(fn.name)
            if prior is not None:
                raise ManifestError(
                    f"{fn.path}:{fn.line}: '{fn.name}' is defined again (first at {prior.path}:{prior.line}); "
                    "remove one"
                )
            found[fn.name] = fn
    return found


def _literal(text: str) -> object:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def signature_problems(
    fn: FunctionSource, positional: list[str], kwonly: list[str], defaults: dict[str, str]
) -> list[str]:
    """Differences between a handwritten function and the parameters the schema asks for."""
    problems = []
    if fn.has_varargs:
        problems.append("uses *args/**kwargs; list the schema's parameters explicitly")
    if list(fn.positional) != positional:
        problems.append(
            f"positional parameters are ({', '.join(fn.positional)}), the schema has ({', '.join(positional)})"
        )
    if list(fn.kwonly) != kwonly:
        problems.append(f"keyword-only parameters are ({', '.join(fn.kwonly)}), the schema has ({', '.join(kwonly)})")
    for name in positional + kwonly:
        want, have = defaults.get(name), fn.defaults.get(name)
        if (want is None) != (have is None):
            problems.append(
                f"parameter '{name}' " + (f"needs the default {want}" if want is not None else "must have no default")
            )
        elif want is not None and _literal(want) != _literal(have):
            problems.append(f"parameter '{name}' defaults to {have}, the schema says {want}")
    return problems
