"""Lazy mode, PyTorch/XLA style: ops are recorded (exec/trace.py) until `mark_step()`
runs them as one program, or a value is needed on the host."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

from ..core.context import context
from ..exec.trace import tracing


class _LazyScope(threading.local):
    # The entered tracing() of this thread's lazy mode, None when it is off.
    scope: Any = None


_lazy = _LazyScope()


def mark_step() -> None:
    """The first call starts recording this thread's ops; every call runs what was
    recorded since the last one. Ops outside a `lazy_mode()` block stay lazy for the
    rest of the thread, as on PyTorch/XLA."""
    if _lazy.scope is None:
        cm = tracing()
        cm.__enter__()
        _lazy.scope = cm
        return
    trace = context.trace
    trace.sync()
    trace.segment = 0  # a step boundary: the next graph is compared with this step's first


@contextlib.contextmanager
def lazy_mode():
    """Record this thread's ops lazily inside the block: `mark_step()` runs what was
    recorded so far, the end of the block runs the rest and returns to eager execution.
    If the block raises, what it recorded still runs (Note [Failed traces] in
    exec/trace.py)."""
    if _lazy.scope is not None:
        raise RuntimeError("lazy_mode() cannot be entered while lazy mode is already on")
    cm = tracing()
    cm.__enter__()
    _lazy.scope = cm
    try:
        yield
    except BaseException as error:
        _lazy.scope = None
        if not cm.__exit__(type(error), error, error.__traceback__):
            raise
    else:
        _lazy.scope = None
        cm.__exit__(None, None, None)
