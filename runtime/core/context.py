"""The execution context of the calling thread: which trace, if any, records its ops.

Note [Per-thread trace]
Eager, traced (compile(), lazy mode) and JAX-traced execution (the Dynamo backend,
interop) differ only by the trace that is current for the thread running an op: none
runs each op at once; a `Trace` (exec/trace.py) records it into IR. The current trace
is thread-local, as PyTorch's dispatch modes are: a thread inside compile() never
captures another thread's ops. Every op reads it, so it is one attribute of one
thread-local object (a module attribute read costs the same order, ~30 ns).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator


class _ThreadContext(threading.local):
    # The exec.trace.Trace recording this thread's ops; None: ops run eagerly.
    trace: Any = None
    # The tensors an in-place foreach op writes, while its functional form computes
    # (Note [Foreach ops] in runtime/supported/foreach.py).
    foreach_into: Any = None
    # While JAX traces torch code whose graph takes a random key as an operand (the
    # torch.compile backend's graphs): a function giving each random op its key, derived
    # from that operand, so that every call draws new numbers. None: random ops draw
    # their keys on the host (exec/keys.py).
    keys: Any = None


context = _ThreadContext()


@contextlib.contextmanager
def untraced() -> Iterator[None]:
    """Run this thread's ops eagerly inside the block, even within a trace: torch code
    run on JAX tracers (the Dynamo backend's graphs, interop) is eager code that JAX
    itself traces."""
    outer = context.trace
    context.trace = None
    try:
        yield
    finally:
        context.trace = outer
