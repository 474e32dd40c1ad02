"""Schemas of operators outside aten (`torchvision::nms`), read from torch's dispatcher.

Such operators exist only once the library that defines them has been imported, so
their schemas cannot come from torchgen's YAML. For each namespace the manifest names
under `libraries:` and uses, one subprocess imports torch and the library and prints
the schema of every operator in the namespace. Importing torch alone takes seconds,
and a library may be broken (a CUDA build whose extension does not load, or a crash
at import), so this happens in a child process, and only when an entry needs it: the
result, success or the import error, is cached as JSON keyed by the torch version, the
module, and the sizes and modification times of the module's files (the package's
top-level files for a package). An aten-only manifest never gets here.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .manifest import Library
from .schemas import cache_dir

# Run in the child: import torch and each module, then list the schemas of every
# operator of each namespace. argv: the parent's sys.path (JSON), the output file,
# then namespace=module pairs.
_CHILD = r"""
import json, sys, traceback, warnings
sys.path[:] = json.loads(sys.argv[1])
out_path = sys.argv[2]
import torch
result = {}
for pair in sys.argv[3:]:
    ns, module = pair.split("=", 1)
    caught = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            __import__(module)
    except BaseException as e:
        result[ns] = {"error": f"{type(e).__name__}: {e}".splitlines()[0]}
        continue
    schemas = {}
    for name in torch._C._dispatch_get_all_op_names():
        if name.startswith(ns + "::"):
            base, _, overload = name.partition(".")
            schemas[name] = str(torch._C._get_schema(base, overload))
    entry = {"schemas": schemas}
    if not schemas and caught:
        entry["note"] = str(caught[0].message).splitlines()[0]
    result[ns] = entry
with open(out_path, "w") as f:
    json.dump(result, f)
"""


@dataclass(frozen=True)
class LibrarySchemas:
    namespace: str
    module: str
    schemas: dict[str, str]  # "torchvision::nms" (default overload) or "ns::op.overload" -> schema text
    error: str | None  # why the library's operators are unavailable, or None
    cache_path: str | None  # where the result is cached (named in warnings about a cached failure)


def _find_spec(module: str) -> importlib.machinery.ModuleSpec | None:
    """The spec of the module, or of its innermost package that can be found without
    running any code (importlib.util.find_spec imports the parents of a dotted name;
    this walks their search paths); None when its top-level package is not installed.
    A submodule this walk does not find (one mapped elsewhere by an editable install)
    is left to the import itself."""
    parts = module.split(".")
    # For a top-level name find_spec runs no code; it also asks the finders of editable
    # installs, which PathFinder alone does not know.
    spec = importlib.machinery.PathFinder.find_spec(parts[0], sys.path) or importlib.util.find_spec(parts[0])
    for i in range(1, len(parts)):
        if spec is None or not spec.submodule_search_locations:
            break
        child = importlib.machinery.PathFinder.find_spec(
            ".".join(parts[: i + 1]), list(spec.submodule_search_locations)
        )
        if child is None:
            break
        spec = child
    return spec


def _fingerprint(spec: importlib.machinery.ModuleSpec, torch_version: str) -> str:
    h = hashlib.sha256(torch_version.encode())
    files: list[Path] = []
    if spec.origin and os.path.exists(spec.origin):
        files.append(Path(spec.origin))
    for location in spec.submodule_search_locations or ():
        folder = Path(location)
        if folder.is_dir():
            files.extend(p for p in sorted(folder.iterdir()) if p.is_file())
    for p in files:
        st = p.stat()
        h.update(f"{p}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def _run_child(libraries: list[Library]) -> dict[str, dict]:
    fd, out_path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        argv = [sys.executable, "-c", _CHILD, json.dumps(sys.path), out_path]
        argv += [f"{lib.namespace}={lib.module}" for lib in libraries]
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
        text = Path(out_path).read_text()
        if proc.returncode != 0 or not text:
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            modules = ", ".join(lib.module for lib in libraries)
            why = f"importing torch and {modules} failed (exit code {proc.returncode}: {last})"
            return {lib.namespace: {"error": why, "transient": True} for lib in libraries}
        return json.loads(text)
    except subprocess.TimeoutExpired:
        return {lib.namespace: {"error": "importing it took over 10 minutes", "transient": True} for lib in libraries}
    finally:
        os.unlink(out_path)


def load_library_schemas(
    libraries: list[Library], torch_version: str, verbose: bool = False
) -> dict[str, LibrarySchemas]:
    """The operators of each library's namespace, or why they are unavailable."""
    found: dict[str, LibrarySchemas] = {}
    todo: list[tuple[Library, Path]] = []
    for lib in libraries:
        spec = _find_spec(lib.module)
        if spec is None:
            found[lib.namespace] = LibrarySchemas(
                lib.namespace, lib.module, {}, f"ModuleNotFoundError: No module named '{lib.module}'", None
            )
            continue
        key = hashlib.sha256(f"{lib.namespace}\0{lib.module}".encode()).hexdigest()[:8]
        path = cache_dir() / f"library-schemas-{key}-{_fingerprint(spec, torch_version)}.json"
        try:
            raw = json.loads(path.read_text())
            found[lib.namespace] = LibrarySchemas(lib.namespace, lib.module, raw["schemas"], raw["error"], str(path))
            continue
        except (OSError, ValueError, KeyError, TypeError):
            todo.append((lib, path))  # not cached yet, or a damaged cache: read it again
    if todo:
        if verbose:
            names = ", ".join(lib.module for lib, _ in todo)
            print(f"importing {names} for the schemas of their operators (cached afterwards)...", file=sys.stderr)
        results = _run_child([lib for lib, _ in todo])
        for lib, path in todo:
            raw = results.get(lib.namespace, {"error": "the schema reader returned nothing for it", "transient": True})
            schemas = raw.get("schemas", {})
            error = raw.get("error")
            if error is None and not schemas:
                error = f"importing {lib.module} registered no {lib.namespace}:: operators"
                if raw.get("note"):
                    error += f" (it warned: {raw['note']})"
            found[lib.namespace] = LibrarySchemas(lib.namespace, lib.module, schemas, error, str(path))
            if raw.get("transient"):
                continue  # a crash or a timeout may not happen again: not cached
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                json.dump({"module": lib.module, "schemas": schemas, "error": error}, f)
            os.replace(tmp, path)
    return found
