"""The cache directory is used only when nobody else can write into it (Note [Trusted
cache directory] in runtime/cache_trust.py), a damaged cached device guard is built
again instead of being loaded (Note [Native device guard]), and an empty HOME never
puts the cache at the filesystem root. Imports run in child processes, each with a
cache directory of its own."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from runtime_fault_helpers import run_python

from xla_native_functions.runtime.platform import cache_trust, device_guard
from xla_native_functions.runtime.platform.backend import NO_COMPILATION_CACHE_ENV
from xla_native_functions.runtime.platform.cache_trust import CACHE_DIR_ENV
from xla_native_functions.runtime.platform.device_guard import PYTHON_GUARD_ENV

_compiler = shutil.which("c++") or shutil.which("g++")
needs_compiler = pytest.mark.skipif(_compiler is None, reason="no C++ compiler to build the guard")
needs_root = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                                reason="giving a file to another user takes root")
posix_only = pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX ownership and modes")

_REPORT = r"""
import json, warnings
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    import torch, xla_native_functions as xnf
x = xnf.to_xla(torch.arange(3.0)).requires_grad_()
(x * x).sum().backward()
assert xnf.to_torch(x.grad).tolist() == [0.0, 2.0, 4.0]
lines = {l.split(":", 1)[0].strip(): l.split(":", 1)[1].strip() for l in xnf.metrics_report().splitlines() if ":" in l}
print(json.dumps({"guard": lines["device guard"], "cache": lines["persistent compilation cache"],
                  "warnings": [str(w.message) for w in caught if w.category.__name__ == "CacheWarning"]}))
"""


def _import_report(env: dict) -> dict:
    import json

    base = {PYTHON_GUARD_ENV: None, "CXX": None, NO_COMPILATION_CACHE_ENV: None, "JAX_COMPILATION_CACHE_DIR": None}
    done = run_python(_REPORT, base | env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _guard_path(cache: Path) -> Path:
    previous = os.environ.get(CACHE_DIR_ENV)
    os.environ[CACHE_DIR_ENV] = str(cache)
    try:
        return device_guard.library_path()
    finally:
        if previous is None:
            del os.environ[CACHE_DIR_ENV]
        else:
            os.environ[CACHE_DIR_ENV] = previous


def _plant_library(path: Path, marker: Path) -> None:
    """A library that would leave `marker` behind if it were ever loaded, with a valid
    trailer: only the trust check stands between it and the process."""
    source = path.parent / "planted.cpp"
    source.write_text('#include <cstdio>\n__attribute__((constructor)) static void planted() {\n'
                      f'  FILE* f = std::fopen("{marker}", "w"); if (f) std::fclose(f);\n}}\n'
                      'extern "C" void xnf_register_device_guard() {}\n')
    subprocess.run([_compiler, "-shared", "-fPIC", str(source), "-o", str(path)], check=True, timeout=300)
    source.unlink()
    body = path.read_bytes()
    path.write_bytes(body + device_guard.TRAILER_MARK + hashlib.sha256(body).digest())


@posix_only
@needs_compiler
def test_group_writable_cache_is_refused_and_its_library_never_loaded(tmp_path):
    cache, marker = tmp_path / "cache", tmp_path / "planted-library-ran"
    path = _guard_path(cache)
    _plant_library(path, marker)
    cache.chmod(0o770)
    report = _import_report({CACHE_DIR_ENV: str(cache)})
    assert not marker.exists()
    assert report["guard"].startswith("Python") and report["cache"].startswith("off (")
    assert len(report["warnings"]) == 1  # once, though the guard and the compilation cache both refuse it
    assert str(cache) in report["warnings"][0] and f"chmod go-w {cache}" in report["warnings"][0]
    assert sorted(p.name for p in cache.iterdir()) == [path.name]  # nothing added


@needs_root
@needs_compiler
def test_library_owned_by_another_user_is_never_loaded(tmp_path):
    cache, marker = tmp_path / "cache", tmp_path / "planted-library-ran"
    path = _guard_path(cache)
    _plant_library(path, marker)
    os.chown(path, 65534, 65534)
    report = _import_report({CACHE_DIR_ENV: str(cache)})
    assert not marker.exists() and report["guard"].startswith("Python")
    assert report["cache"] == f"{cache / 'jax-compilation-cache'}"  # the directory itself is fine
    assert len(report["warnings"]) == 1 and str(path) in report["warnings"][0] and "uid 65534" in report["warnings"][0]


@needs_root
def test_cache_directory_owned_by_another_user_is_refused(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o755)
    os.chown(cache, 65534, 65534)
    report = _import_report({CACHE_DIR_ENV: str(cache)})
    assert report["guard"].startswith("Python") and report["cache"].startswith("off (")
    assert len(report["warnings"]) == 1 and str(cache) in report["warnings"][0]
    assert list(cache.iterdir()) == []


@posix_only
def test_writable_compilation_cache_is_refused(tmp_path):
    cache = tmp_path / "cache"
    (cache / "jax-compilation-cache").mkdir(parents=True, mode=0o700)
    (cache / "jax-compilation-cache").chmod(0o703)
    report = _import_report({CACHE_DIR_ENV: str(cache), PYTHON_GUARD_ENV: "1"})
    assert report["cache"].startswith("off (") and "writable by other users" in report["cache"]
    assert len(report["warnings"]) == 1 and f"chmod go-w {cache / 'jax-compilation-cache'}" in report["warnings"][0]
    assert list((cache / "jax-compilation-cache").iterdir()) == []


@needs_compiler
def test_truncated_guard_is_built_again(tmp_path):
    cache = tmp_path / "cache"
    first = _import_report({CACHE_DIR_ENV: str(cache)})
    path = _guard_path(cache)
    assert first["guard"].startswith("C++") and device_guard.is_whole(path)
    whole = path.read_bytes()
    for length in (0, 1000, 8000, len(whole) - 1):  # dlopen of most of these faults (SIGBUS)
        path.write_bytes(whole[:length])
        report = _import_report({CACHE_DIR_ENV: str(cache)})
        assert report["guard"].startswith("C++") and report["warnings"] == []
        assert device_guard.is_whole(path)
    assert sorted(p.name for p in cache.iterdir()) == sorted([path.name, "jax-compilation-cache"])  # no partial files


@needs_compiler
def test_compiler_command_with_arguments_builds_the_guard(tmp_path):
    report = _import_report({CACHE_DIR_ENV: str(tmp_path / "cache"), "CXX": f"{_compiler} -O1"})
    assert report["guard"].startswith("C++")


@posix_only
def test_created_cache_directories_are_private(tmp_path):
    cache = tmp_path / "new" / "cache"
    cache_trust.make_private_dirs(cache / "jax-compilation-cache")
    for path in (tmp_path / "new", cache, cache / "jax-compilation-cache"):
        assert path.stat().st_mode & 0o077 == 0
        assert cache_trust.refusal(path) is None


def test_empty_home_means_the_accounts_home(monkeypatch, tmp_path):
    import pwd

    account = pwd.getpwuid(os.getuid())
    monkeypatch.delenv(CACHE_DIR_ENV, raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", "")
    with pytest.warns(cache_trust.CacheWarning, match="HOME is empty"):
        root = cache_trust.cache_root()
    if account.pw_dir and os.path.abspath(account.pw_dir) != os.sep:
        assert root == Path(account.pw_dir) / ".cache" / "xla_native_functions"
    else:
        assert root is None
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/path")  # not absolute: ignored, as the XDG spec asks
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache_trust.cache_root() == tmp_path / ".cache" / "xla_native_functions"


def test_filesystem_root_is_never_the_home_of_the_cache(monkeypatch):
    monkeypatch.delenv(CACHE_DIR_ENV, raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", "/")
    with pytest.warns(cache_trust.CacheWarning, match="filesystem root"):
        assert cache_trust.cache_root() is None


def test_root_home_runs_without_a_cache():
    existed = os.path.exists("/.cache/xla_native_functions")
    report = _import_report({"HOME": "/", CACHE_DIR_ENV: None, "XDG_CACHE_HOME": None})
    assert report["guard"].startswith("Python") and report["cache"].startswith("off (no cache directory")
    assert len(report["warnings"]) == 1 and "filesystem root" in report["warnings"][0]
    assert os.path.exists("/.cache/xla_native_functions") == existed
