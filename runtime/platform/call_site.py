"""Where in the user's code an op was called from, for errors, warnings and reports."""

from __future__ import annotations

import sys
import sysconfig
import traceback
from pathlib import Path
from typing import Any, NamedTuple

import jax
import torch

_RUNTIME = str(Path(__file__).resolve().parents[1])


def _library_dirs() -> tuple[str, ...]:
    ours = [
        sys.modules.get(m)
        for m in ("xla_native_functions", "xla_native_functions.lowerings", "xla_native_functions.shape_fns")
    ]
    return (str(Path(torch.__file__).parent), str(Path(jax.__file__).parent), _RUNTIME) + tuple(
        str(Path(m.__file__).parent) for m in ours if m is not None and getattr(m, "__file__", None)
    )


def user_call_site() -> str:
    """The innermost stack frame outside torch, JAX and this package."""
    skip = _library_dirs()
    for frame in reversed(traceback.extract_stack()[:-1]):
        if not frame.filename.startswith(skip) and "<frozen" not in frame.filename:
            return f"{frame.filename}:{frame.lineno} ({frame.line or frame.name})"
    if torch._C._current_graph_task_id() != -1:
        return "backward()"
    return "<unknown>"


class Frame(NamedTuple):
    filename: str
    lineno: int
    function: str


# code object -> whether its frames are library frames (torch, JAX, this package, the
# standard library): asked for every op an analysis watches, so decided once per code.
_LIBRARY_CODE: dict[object, bool] = {}
_DIRS: list[tuple[tuple[str, ...], str]] = []


def _is_library(code: object) -> bool:
    known = _LIBRARY_CODE.get(code)
    if known is None:
        if not _DIRS:
            # with the separator: torchvision's and other libraries' frames are user frames
            _DIRS.append((tuple(d + "/" for d in _library_dirs()), sysconfig.get_paths()["stdlib"] + "/"))
        libraries, stdlib = _DIRS[0]
        filename = code.co_filename  # type: ignore[attr-defined]
        known = (filename.startswith(libraries) or filename.startswith("<frozen")
                 or (filename.startswith(stdlib) and "-packages/" not in filename))
        if len(_LIBRARY_CODE) > 65536:
            _LIBRARY_CODE.clear()
        _LIBRARY_CODE[code] = known
    return known


def user_frame_object(depth: int = 1) -> Any:
    """The innermost frame of the caller's stack outside torch, JAX, this package and
    Python's standard library (a library such as transformers counts as user code: its
    modeling line is where a model calls an op), found without building a traceback.
    `depth`: frames to skip, 1 being the caller's. None when every frame is a library's."""
    frame = sys._getframe(depth + 1)
    while frame is not None:
        if not _is_library(frame.f_code):
            return frame
        frame = frame.f_back
    return None


def user_frame(depth: int = 1) -> Frame | None:
    """`user_frame_object` as (file name, line, function)."""
    frame = user_frame_object(depth + 1)
    if frame is None:
        return None
    return Frame(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
