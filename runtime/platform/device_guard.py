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
torch installation; the library is kept in the cache directory, Note [Trusted cache
directory]) with the C++ compiler in $CXX (a command, which may carry arguments), or
c++ or g++ from PATH, and registers it in place of the Python guard (and the device's
hooks in place of Python's: Note [Generators of our device]). Without a compiler, or if
the build fails, the Python guard and hooks stay: everything works as before, only
slower and without generators of our device, and `metrics_report()` says why.
XLA_NATIVE_FUNCTIONS_PYTHON_DEVICE_GUARD=1 keeps the Python guard and hooks. With the
Python guard, hooks are wrapped (Note [Hook errors during backward]).

Loading a damaged library can kill the process (a truncated one faults with SIGBUS
inside dlopen), so a library is only loaded after it proved whole: the build appends
a trailer (a marker and the SHA-256 of the library's bytes, past the end of the ELF
data, where the loader never looks) and a cached file whose trailer does not match is
removed and built again, once; the build writes a private temporary file and renames
it into place, so processes building at once never see each other's partial files.

Note [Generators of our device]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
`torch.Generator(device="jax")` (as diffusers' pipelines and sampling code make one for
the model's device) asks the PrivateUse1 hooks for a new generator, which a backend
registered from Python cannot provide: its hooks are Python's, which make none. The
same library registers C++ hooks in their place (answering what Python's answer), whose
generator is PyTorch's CPU generator placed on our device, with its seeding, state and
stream. Random ops given
it draw the seed of their JAX key from it (runtime/supported/random.py), as ops given
no generator draw from the default CPU generator, so `manual_seed` on it makes their
numbers reproducible. CPU kernels refuse it, as they refuse a CUDA generator. Without the
library (no C++ compiler, or XLA_NATIVE_FUNCTIONS_PYTHON_DEVICE_GUARD=1) there is no
such generator, and `metrics_report()` says why; random ops still take CPU generators.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

from .backend import env_flag
from .cache_trust import WITHOUT_CACHE, cache_root, make_private_dirs, no_cache_reason, refusal, refuse
from .hook_errors import wrap_hooks

PYTHON_GUARD_ENV = "XLA_NATIVE_FUNCTIONS_PYTHON_DEVICE_GUARD"
SOURCE = Path(__file__).with_name("device_guard.cpp")
TRAILER_MARK = b"xnf-device-guard-sha256:"
_TRAILER_SIZE = len(TRAILER_MARK) + 32

_description = ["Python (PyTorch's guard for a Python-registered device)"]
_loaded: list[ctypes.CDLL] = []  # the registered guard and generator live in this library
_hooks_missing: list[str | None] = ["the C++ library was not loaded"]


class GuardBuildError(RuntimeError):
    """The C++ device guard could not be built."""


def install_native_device() -> bool:
    """Register the C++ hooks (which make the device's generators) and guard of our
    device (Note [Native device guard], Note [Generators of our device]). False, with
    nothing registered, where the library is not available."""
    if env_flag(PYTHON_GUARD_ENV):
        _use_python_guard(f"Python ({PYTHON_GUARD_ENV} is set)")
        _hooks_missing[0] = f"{PYTHON_GUARD_ENV} is set"
        return False
    try:
        library = load_library()
    except (OSError, GuardBuildError, subprocess.SubprocessError) as error:
        _use_python_guard(f"Python: the C++ guard was not built ({error})")
        _hooks_missing[0] = f"the C++ library was not built ({error})"
        return False
    if library.xnf_register_hooks():
        _use_python_guard("Python: PyTorch refused the C++ hooks (another library registered hooks for PrivateUse1)")
        _hooks_missing[0] = "another library registered hooks for PrivateUse1"
        return False
    _loaded.append(library)
    library.xnf_register_device_guard()
    _description[0] = "C++ (Note [Native device guard])"
    _hooks_missing[0] = None
    return True


def hooks_missing() -> str | None:
    """Why the C++ hooks (generators of our device, pinned memory) are not registered, or None."""
    return _hooks_missing[0]


def _use_python_guard(description: str) -> None:
    _description[0] = description
    wrap_hooks()  # Note [Hook errors during backward]


def python_guard_in_use() -> bool:
    return not _loaded


def guard_description() -> str:
    """One line for metrics_report()."""
    return _description[0]


def library_path() -> Path:
    """Where the guard for the installed torch is cached (checked: Note [Trusted cache
    directory])."""
    root = cache_root()
    if root is None:
        raise GuardBuildError(no_cache_reason())
    torch_dir = Path(torch.__file__).parent
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    key = hashlib.sha256(SOURCE.read_bytes() + f"|{torch.__version__}|{torch_dir}|{abi}".encode()).hexdigest()[:16]
    reason = refusal(root)
    if reason:
        refuse(reason, WITHOUT_CACHE)
        raise GuardBuildError(reason)
    make_private_dirs(root)
    target = root / f"device_guard-{key}.so"
    reason = refusal(target)
    if reason:
        refuse(reason, "PyTorch's Python device guard")
        raise GuardBuildError(reason)
    return target


def load_library() -> ctypes.CDLL:
    """The guard library, loaded once it proved whole; a damaged cached copy is removed
    and built again, once."""
    target = library_path()
    if target.exists() and not is_whole(target):
        target.unlink(missing_ok=True)
    if not target.exists():
        build(target)
    library = ctypes.CDLL(str(target))
    library.xnf_register_device_guard  # noqa: B018 (raises AttributeError if missing)
    library.xnf_register_hooks  # noqa: B018
    return library


def is_whole(path: Path) -> bool:
    """Whether the file ends with the trailer its build appended, matching its bytes."""
    try:
        data = path.read_bytes()
    except OSError:
        return False
    body, trailer = data[:-_TRAILER_SIZE], data[-_TRAILER_SIZE:]
    return len(data) > _TRAILER_SIZE and trailer == TRAILER_MARK + hashlib.sha256(body).digest()


def compiler_command() -> list[str]:
    """The C++ compiler: $CXX split as a shell would (`ccache g++`, `g++ -m64`), else
    c++ or g++ from PATH."""
    chosen = os.environ.get("CXX", "").strip()
    if chosen:
        try:
            return shlex.split(chosen)
        except ValueError as error:
            raise GuardBuildError(f"CXX={chosen!r} is not a command: {error}") from None
    found = shutil.which("c++") or shutil.which("g++")
    if not found:
        raise GuardBuildError("no C++ compiler: set CXX or install g++")
    return [found]


def build(target: Path) -> None:
    """Compile the guard into `target`, atomically."""
    compiler = compiler_command()
    torch_dir = Path(torch.__file__).parent
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    fd, partial = tempfile.mkstemp(prefix=target.stem, suffix=".so", dir=target.parent)
    os.close(fd)
    command = [*compiler, "-O2", "-shared", "-fPIC", "-std=c++17", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
               f"-I{torch_dir / 'include'}", str(SOURCE), "-o", partial,
               f"-L{torch_dir / 'lib'}", "-lc10", "-ltorch_cpu", f"-Wl,-rpath,{torch_dir / 'lib'}"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        if done.returncode:
            first = (done.stderr.strip().splitlines() or ["no output"])[0]
            raise GuardBuildError(f"{shlex.join(compiler)} exited with {done.returncode}: {first}")
        with open(partial, "rb+") as f:
            body = f.read()
            f.write(TRAILER_MARK + hashlib.sha256(body).digest())
        os.chmod(partial, 0o700)  # ours alone, whatever the umask (Note [Trusted cache directory])
        os.replace(partial, target)  # atomic: processes building at once each write their own file
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
