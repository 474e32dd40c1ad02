"""torch.compile of a model already moved with to_xla (or called with our tensors).

Note [Moved models under torch.compile]
Dynamo cannot trace an XlaTensor: it is a Python tensor subclass whose data is a JAX
array, not a traceable wrapper of torch tensors, so Dynamo sees an opaque object, breaks
the graph at every op on one and runs that op eagerly. Such a model compiles nothing
and runs op by op, at eager mode's speed at best (tests/test_moved_model_compile.py
measures it). Tracing it would take an XlaTensor made of inner torch tensors, which it
is not. So the backend says so, once: Dynamo counts the reasons for its graph breaks
(`torch._dynamo.utils.counters["graph_break"]`, also without logging), and a callback
Dynamo runs at the end of each frame it compiles warns when one names an XlaTensor,
with the fix: keep the model and its inputs on the CPU and let the backend move them
(`torch.compile(cpu_model, backend="xla_native")`), or compile a model moved with
to_xla with `xla_native_functions.compile(step)`. The check runs when Dynamo compiles a
frame, never on calls of compiled code.
"""

from __future__ import annotations

import sys
import sysconfig
import warnings
from pathlib import Path
from typing import Any

import torch

from ..core.tensor import XlaTensor


class MovedModelWarning(UserWarning):
    """torch.compile met tensors already on our device, which it cannot trace."""


_warned = [False]
_seen = [0]  # graph breaks on our tensors counted so far


def watch_graph_breaks(only_if_loaded: bool = False) -> None:
    """Warn once when Dynamo breaks a graph on one of our tensors (Note [Moved models
    under torch.compile]). Called when the backend loads, and by to_xla when Dynamo is
    loaded (only_if_loaded: never loading it), since torch._dynamo.reset() drops the
    callbacks registered with Dynamo."""
    if only_if_loaded and "torch._dynamo.callback" not in sys.modules:
        return
    from torch._dynamo.callback import callback_handler  # torch._dynamo loads with the backend only

    if _after_dynamo_compile not in callback_handler.end_callbacks:
        callback_handler.register_end_callback(_after_dynamo_compile)


def _after_dynamo_compile(args: Any = None) -> None:
    if _warned[0]:
        return
    from torch._dynamo.utils import counters

    name = XlaTensor.__name__
    seen = sum(n for reason, n in counters["graph_break"].items() if name in reason)
    new, _seen[0] = seen > _seen[0], seen  # only breaks since the last compile (counters outlive resets)
    if new:
        _warned[0] = True
        filename, lineno = _user_frame()
        warnings.warn_explicit(
            "torch.compile met tensors already on the jax device (moved with xla_native_functions.to_xla): Dynamo "
            "cannot trace them, so the code that uses them runs op by op, uncompiled. Keep the model and its inputs "
            "on the CPU and let the backend move them (torch.compile(cpu_model, backend='xla_native')), or compile "
            "a step of a model moved with to_xla with xla_native_functions.compile(step)",
            MovedModelWarning, filename, lineno)


_LIBRARY_DIRS = (str(Path(torch.__file__).parent), str(Path(__file__).resolve().parents[1]),
                 sysconfig.get_paths()["stdlib"])


def _user_frame() -> tuple[str, int]:
    """The innermost frame outside torch, this package and the standard library: the
    call of the compiled code."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(_LIBRARY_DIRS) and not name.startswith("<"):
            return name, frame.f_lineno
        frame = frame.f_back
    return "<unknown>", 0
