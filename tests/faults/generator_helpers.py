"""Helpers shared by the generator fault tests (tests/faults/test_generator_*.py).

The synthetic manifests and handwritten roots come from tests/codegen_harness.py. Here:
running the generator in a subprocess (so that it can be killed, run twice at once or
run on a read-only mount), hashing trees and listing leftovers.
"""

from __future__ import annotations

import hashlib
import os
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

from codegen import generate as gen  # noqa: F401 (the tests use it through this module)
from codegen_harness import GOOD_MANIFEST, make_root, write_manifest  # noqa: F401

REPO = Path(__file__).resolve().parents[2]

# The test hooks of codegen/generate.py (documented in docs/reliability.md).
PAUSE_ENV = "XLA_NATIVE_FUNCTIONS_GENERATE_PAUSE_AT"
SWAP_ENV = "XLA_NATIVE_FUNCTIONS_GENERATE_SWAP"
PAUSE_POINTS = ("locked", "writing", "staged", "moved-aside", "swapped")

# GOOD_MANIFEST with one more fallback op: a different tree to swap in.
NEXT_MANIFEST = GOOD_MANIFEST + "  - median\n"

# `python -m codegen.generate`, reading the handwritten half from ROOT (argv[1]) when
# it is given, else from the repository.
_DRIVER = """\
import functools, sys
from pathlib import Path
sys.path.insert(0, {repo!r})
from codegen import generate as g
root = sys.argv.pop(1)
if root:
    g.render = functools.partial(g.render, root=Path(root))
sys.exit(g.main(sys.argv[1:]))
"""


def generator_command(root: Path | None, *args: str) -> list[str]:
    return [sys.executable, "-c", _DRIVER.format(repo=str(REPO)), str(root or ""), *map(str, args)]


def generator_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (PAUSE_ENV, SWAP_ENV)}
    env.update(extra)
    return env


def run_generator(root: Path | None, *args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        generator_command(root, *args),
        env=generator_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )


def start_generator(root: Path | None, *args: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        generator_command(root, *args), env=generator_env(**env), cwd=REPO,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def wait_for_line(proc: subprocess.Popen, wanted: str, timeout: float = 60) -> list[str]:
    """Read proc's stderr until a line equal to `wanted`; the lines read. Fails if the
    process ends or the time runs out first. Reads the pipe unbuffered, so that nothing
    waits in a buffer that select() does not see."""
    fd = proc.stderr.fileno()
    buffer = b""
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        lines.extend(line.decode(errors="replace") for line in complete)
        if wanted in lines:
            return lines
    proc.kill()
    rest = proc.communicate()[1]
    raise AssertionError(f"no {wanted!r} from the generator; stderr:\n" + "\n".join(lines) + buffer.decode() + rest)


def tree_hash(path: Path) -> dict[str, str]:
    """sha256 of every file (bytecode caches included) and the type of every entry."""
    if path.is_symlink() or not path.is_dir():
        return {".": hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "missing"}
    out = {}
    for p in sorted(path.rglob("*")):
        rel = str(p.relative_to(path))
        out[rel] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() and not p.is_symlink() else "dir"
    return out


def files_of(path: Path) -> dict[str, bytes]:
    """The generated files of a tree (bytecode caches aside), or None if it is missing."""
    if not path.is_dir():
        return None
    return {
        str(p.relative_to(path)): p.read_bytes()
        for p in sorted(path.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def encoded(files: dict[str, str]) -> dict[str, bytes]:
    return {k: v.encode() for k, v in files.items()}


def copy_tree(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
    return dst


def assert_clean_error(proc: subprocess.CompletedProcess, *starts: str) -> str:
    """A non-zero exit with `error: ...` on stderr, no traceback, nothing on stdout."""
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout == ""
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, proc.stderr
    for start in starts:
        assert errors[0].startswith(start), (errors[0], start)
    return errors[0]
