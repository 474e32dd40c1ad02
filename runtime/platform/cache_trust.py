"""Whether xla_native_functions' cache directory may be used: where it is, and whether
anyone else could have written into it.

Note [Trusted cache directory]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
The cache holds a shared library that every import loads into the process (the C++
device guard, Note [Native device guard]) and compiled XLA programs that eager ops and
compiled steps run instead of compiling (Note [Persistent compilation cache]). Whoever
can write there can run code in our process or change our results. So, as ssh does
with its keys, the cache directory, its `jax-compilation-cache` directory and the
guard library must be owned by the user running the process and writable by nobody
else (no group or other write bit); the directories we create are made private
(mode 0700). A path that fails is refused with one warning naming it and the fix
(`chmod go-w`, or another directory in XLA_NATIVE_FUNCTIONS_CACHE), and the process
runs without it: PyTorch's Python device guard, no persistent compilation cache.
Parent directories and the cache's individual entries are not checked.

Where the cache is by default: XLA_NATIVE_FUNCTIONS_CACHE if set, else
$XDG_CACHE_HOME/xla_native_functions (an absolute XDG_CACHE_HOME only, as the XDG
specification asks), else ~/.cache/xla_native_functions. An empty HOME counts as
unset (the account's home directory from the password database); a home that is the
filesystem root or cannot be found leaves the process without a cache, with a warning,
rather than writing to /.cache.
"""

from __future__ import annotations

import os
import stat
import warnings
from pathlib import Path

CACHE_DIR_ENV = "XLA_NATIVE_FUNCTIONS_CACHE"  # the generator's cache too (codegen/schemas.py)
_warned: set[str] = set()


class CacheWarning(UserWarning):
    """The cache directory is not used (Note [Trusted cache directory])."""


def warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, CacheWarning, stacklevel=3)


def _home() -> tuple[str | None, str | None]:
    """The user's home directory (None: none that may hold a cache), and a warning to
    give when HOME could not be used as it is."""
    home = os.environ.get("HOME")
    if home:
        if os.path.abspath(home) == os.sep:
            return None, (f"HOME is the filesystem root: xla_native_functions runs without its cache (set "
                          f"{CACHE_DIR_ENV} to a directory of yours to keep one)")
        return home, None
    # unset, as expanduser does, or empty: the account's home directory
    try:
        import pwd

        home = pwd.getpwuid(os.getuid()).pw_dir
    except (ImportError, KeyError, AttributeError):
        home = None
    empty = "HOME" in os.environ
    if not home or os.path.abspath(home) == os.sep:
        return None, (f"HOME is {'empty' if empty else 'not set'} and the account's home directory is "
                      f"{home or 'unknown'}: xla_native_functions runs without its cache (set {CACHE_DIR_ENV} to a "
                      "directory of yours to keep one)")
    return home, f"HOME is empty: using {home}, the account's home directory" if empty else None


def cache_root() -> Path | None:
    """Where xla_native_functions keeps what it builds once, or None for no cache."""
    chosen = os.environ.get(CACHE_DIR_ENV)
    if chosen:
        return Path(chosen)
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "xla_native_functions"
    home, note = _home()
    if note:
        warn_once(note)
    return None if home is None else Path(home) / ".cache" / "xla_native_functions"


def no_cache_reason() -> str:
    return f"no cache directory: HOME is not usable and {CACHE_DIR_ENV} is not set"


def make_private_dirs(path: Path) -> None:
    """`mkdir -p path`, the directories it creates private to the user (mode 0700)."""
    missing = []
    for p in (path, *path.parents):
        if p.exists():
            break
        missing.append(p)
    for p in reversed(missing):
        try:
            os.mkdir(p, 0o700)
        except FileExistsError:  # made by another process meanwhile
            pass


def refusal(path: Path) -> str | None:
    """Why `path` must not be used (Note [Trusted cache directory]), or None."""
    if not hasattr(os, "geteuid"):  # no POSIX ownership to check
        return None
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    uid = os.geteuid()
    if st.st_uid != uid:
        return (f"{path} is owned by uid {st.st_uid}, not by you (uid {uid}), so another user may have written it: "
                f"use a directory of your own (set {CACHE_DIR_ENV})")
    writers = [who for who, bit in (("its group", stat.S_IWGRP), ("other users", stat.S_IWOTH)) if st.st_mode & bit]
    if writers:
        return (f"{path} is writable by {' and '.join(writers)} (mode {stat.S_IMODE(st.st_mode):o}): delete what "
                f"others may have put there and run `chmod go-w {path}`, or choose another directory with "
                f"{CACHE_DIR_ENV}")
    return None


WITHOUT_CACHE = "PyTorch's Python device guard, no persistent compilation cache"


def refuse(reason: str, consequence: str) -> None:
    """Warn once per reason that a cache path is not used."""
    if reason not in _warned:
        _warned.add(reason)
        warnings.warn(f"xla_native_functions does not trust its cache: {reason}. Until then it runs without it "
                      f"({consequence}).", CacheWarning, stacklevel=3)
