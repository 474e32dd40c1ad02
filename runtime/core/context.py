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

import torch


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


# Note [PyTorch kernels inside dispatch]
# While __torch_dispatch__ runs, PyTorch excludes the dispatch keys it passed on the way
# to the Python key, Conjugate and Negative among them: their fallbacks are what turns
# a conjugate or negative view into its values. A PyTorch CPU kernel run there (a first
# call answered on PyTorch, a CPU fallback, the debug reference) that makes such a view
# internally then reads it as the plain tensor: complex linalg.pinv, whose CPU kernel
# multiplies by U.mH(), came back wrong. Such kernels run inside pytorch_kernels(),
# with those keys included again.
_VIEW_BIT_KEYS = (torch._C.DispatchKey.Conjugate, torch._C.DispatchKey.Negative, torch._C.DispatchKey.ZeroTensor)


@contextlib.contextmanager
def pytorch_kernels() -> Iterator[None]:
    """Run PyTorch CPU kernels inside the block as they run outside a dispatch: with
    the conjugate, negative and zero-tensor fallbacks (Note [PyTorch kernels inside
    dispatch])."""
    excluded = torch._C._dispatch_tls_local_exclude_set()
    if not any(excluded.has(k) for k in _VIEW_BIT_KEYS):
        yield
        return
    for key in _VIEW_BIT_KEYS:
        excluded = excluded.remove(key)
    with torch._C._ForceDispatchKeyGuard(torch._C._dispatch_tls_local_include_set(), excluded):
        yield
