"""Where in the user's code an op was called from, for errors and warnings."""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

import jax
import torch

_RUNTIME = str(Path(__file__).resolve().parents[1])


def user_call_site() -> str:
    """The innermost stack frame outside torch, JAX and this package."""
    ours = [sys.modules.get(m) for m in ("xla_native_functions", "xla_native_functions.lowerings", "xla_native_functions.shape_fns")]
    skip = (str(Path(torch.__file__).parent), str(Path(jax.__file__).parent), _RUNTIME) + tuple(
        str(Path(m.__file__).parent) for m in ours if m is not None and getattr(m, "__file__", None)
    )
    for frame in reversed(traceback.extract_stack()[:-1]):
        if not frame.filename.startswith(skip) and "<frozen" not in frame.filename:
            return f"{frame.filename}:{frame.lineno} ({frame.line or frame.name})"
    if torch._C._current_graph_task_id() != -1:
        return "backward()"
    return "<unknown>"
