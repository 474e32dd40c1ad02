"""The device guard of the "jax" device, built from C++ on first use.

Note [Native device guard]
~~~~~~~~~~~~~~~~~~~~~~~~~~
PyTorch asks a device's guard for the current device and stream around every backward
node, a few times per node and about nine times per backward() call. Our device is
registered from Python (runtime/core/tensor.py), and PyTorch's guard for such a device
answers each question by calling into Python. A guard written in C++ answers without
Python: one device, one stream, nothing to record or wait for. It took a one-node
backward from 114 to 94 us, and the small BERT's eager SGD step from 27.9 to 24.5 ms
and from 29.8 to 25.4 ms in two paired runs (the small MLP's and ResNet's steps moved
within this machine's noise).

So importing xla_native_functions compiles `device_guard.cpp` (about 2 s, once per
torch installation; the library is kept in XLA_NATIVE_FUNCTIONS_CACHE, else
$XDG_CACHE_HOME/xla_native_functions or ~/.cache/xla_native_functions) with the C++
compiler in $CXX, or c++ or g++ from PATH, and registers it in place of the Python
guard. Without a compiler, or if the build fails, the Python guard stays: everything
works as before, only slower, and `metrics_report()` says why.
XLA_NATIVE_FUNCTIONS_PYTHON_DEVICE_GUARD=1 keeps the Python guard.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

from .backend import cache_root, env_flag

PYTHON_GUARD_ENV = "XLA_NATIVE_FUNCTIONS_PYTHON_DEVICE_GUARD"
SOURCE = Path(__file__).with_name("device_guard.cpp")

_description = ["Python (PyTorch's guard for a Python-registered device)"]
_loaded: list[ctypes.CDLL] = []  # the registered guard lives in this library


class GuardBuildError(RuntimeError):
    """The C++ device guard could not be built."""


def install_native_device_guard() -> None:
    """Register the C++ guard for our device (Note [Native device guard])."""
    if env_flag(PYTHON_GUARD_ENV):
        _description[0] = f"Python ({PYTHON_GUARD_ENV} is set)"
        return
    try:
        library = ctypes.CDLL(str(built_library()))
    except (OSError, GuardBuildError, subprocess.SubprocessError) as error:
        _description[0] = f"Python: the C++ guard was not built ({error})"
        return
    library.xnf_register_device_guard()
    _loaded.append(library)
    _description[0] = "C++ (Note [Native device guard])"


def guard_description() -> str:
    """One line for metrics_report()."""
    return _description[0]


def built_library() -> Path:
    """The compiled guard for the installed torch, built into the cache if missing."""
    torch_dir = Path(torch.__file__).parent
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    key = hashlib.sha256(SOURCE.read_bytes() + f"|{torch.__version__}|{torch_dir}|{abi}".encode()).hexdigest()[:16]
    target = cache_root() / f"device_guard-{key}.so"
    if target.exists():
        return target
    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if not compiler:
        raise GuardBuildError("no C++ compiler: set CXX or install g++")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(prefix=target.stem, suffix=".so", dir=target.parent)
    os.close(fd)
    command = [compiler, "-O2", "-shared", "-fPIC", "-std=c++17", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
               f"-I{torch_dir / 'include'}", str(SOURCE), "-o", partial,
               f"-L{torch_dir / 'lib'}", "-lc10", f"-Wl,-rpath,{torch_dir / 'lib'}"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        if done.returncode:
            first = (done.stderr.strip().splitlines() or ["no output"])[0]
            raise GuardBuildError(f"{compiler} exited with {done.returncode}: {first}")
        os.replace(partial, target)  # atomic: processes building at once each write their own file
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    return target

