"""How much memory eager mode's compiled executables may hold.

Note [Memory of eager executables]
Eager mode runs each op through a `jax.jit` function of its own (runtime/exec/eager.py),
and JAX keeps one compiled executable per input signature for the life of the
function: ever-new input shapes (variable sequence lengths, growing batches) compile
ever more. On XLA CPU an executable holds about 1.25 MB: a loop of three small ops
over new shapes grew the process by 5.4-5.9 MB per shape (4.5 executables each) and
never gave it back. Note [Mappings of compiled code] (backend.py) stops the process
from hitting the kernel's cap on memory mappings, which takes some 16,000 shapes, or
about 65 GB.

So every jitted function of eager mode is made by `eager_jit`, whose traced body (run
only when JAX compiles for a new signature) moves the function to the end of a
least-recently-compiled order and checks the budget, `config.eager_cache_bytes`
(default 1 GiB, about 850 executables; None: unbounded). Past it, functions are
evicted from the front of that order, all their executables at once (`clear_cache`:
JAX drops them from every cache it keeps, and their memory is reused for the next
ones), until the estimate is under half the budget; what runs next compiles again, or
loads from the persistent compilation cache. The estimate counts executables
(`_cache_size()` of each function) times EXECUTABLE_BYTES: the executables' real size
is not visible from Python, and counting makes the budget independent of the tensors
the process holds. `metrics_report()` counts the evictions.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import jax

from .config import config

# Memory of one small eager executable on XLA CPU (measured: Note [Memory of eager executables]).
EXECUTABLE_BYTES = 1_250_000


class EagerExecutables:
    """The eager jitted functions, least recently compiled first, and their budget."""

    def __init__(self):
        self.order: dict[int, Any] = {}  # id -> jitted function; dict order is compile order
        self.evicted_functions = 0
        self.evicted_executables = 0

    def compiled(self, fn: Any) -> None:
        """`fn` compiles for a new signature (called while JAX traces its body)."""
        order = self.order
        order.pop(id(fn), None)
        order[id(fn)] = fn
        budget = config.eager_cache_bytes
        if budget is not None and self.cached() * EXECUTABLE_BYTES > budget:
            self.evict(budget // 2, keep=fn)

    def cached(self) -> int:
        """Executables the eager functions hold."""
        # a snapshot (taken atomically under the GIL): the background thread of Note
        # [First calls on PyTorch CPU] compiles while the caller's thread does
        return sum(f._cache_size() for f in list(self.order.values()))

    def evict(self, target_bytes: int, keep: Any = None) -> None:
        """Clear functions, least recently compiled first, until their executables fit in
        `target_bytes`; `keep` (the function being traced) is left alone."""
        count = self.cached()
        for key in list(self.order):
            if count * EXECUTABLE_BYTES <= target_bytes:
                break
            fn = self.order.get(key)
            if fn is None or fn is keep:
                continue
            if self.order.pop(key, None) is None:  # another thread evicted it meanwhile
                continue
            size = fn._cache_size()
            fn.clear_cache()
            count -= size
            self.evicted_functions += 1
            self.evicted_executables += size


eager_executables = EagerExecutables()


def eager_jit(fun: Callable, **jit_kwargs: Any) -> Any:
    """`jax.jit(fun, **jit_kwargs)` whose compiled executables count against
    config.eager_cache_bytes (Note [Memory of eager executables])."""

    @functools.wraps(fun)
    def body(*args, **kwargs):
        eager_executables.compiled(jitted)
        return fun(*args, **kwargs)

    jitted = jax.jit(body, **jit_kwargs)
    return jitted
