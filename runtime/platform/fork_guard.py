"""A process forked after JAX started refuses to run ops, with an error that says what
to do instead.

Note [Fork after JAX started]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
JAX does not support os.fork() once its backend exists: the child inherits the CPU
client but not the threads behind it, so its first compile, and any execution that
hands work to XLA's thread pools (a large matrix product), waits forever; a fresh
client in the child trips over the parent's locks (absl aborts). Before the first op
nothing of JAX's exists yet and a fork is harmless.

So a fork handler acts in a child forked after JAX's backend started: every compile
raises a RuntimeError naming the fix, multiprocessing's "spawn" start method (instead
of hanging: moving a tensor to JAX, a new op, the user's own JAX code), and the layers
above replace their entry points that would run executables compiled before the fork
(every op on our tensors, factories, compile() calls, the torch.compile backend's
graphs; frontends/forked_child.py) with the same error. The parent is unaffected, and
no op pays a check: the child's entry points are replaced once, by the handler.
"""

from __future__ import annotations

import os
from typing import Any, Callable

from jax._src import compiler, xla_bridge

FORKED_CHILD_MESSAGE = (
    "xla_native_functions cannot run in a process forked after JAX started (os.fork(), or multiprocessing's "
    "default 'fork' start method, DataLoader workers included): JAX's threads stay in the parent, and the child "
    "would hang at its first compile. Start worker processes with the 'spawn' start method "
    "(multiprocessing.get_context('spawn'), torch.multiprocessing.set_start_method('spawn'), or "
    "DataLoader(..., multiprocessing_context='spawn')), or fork before the first op."
)

_handlers: list[Callable[[], None]] = []


def refuse(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError(FORKED_CHILD_MESSAGE)


def on_fork_in_child(handler: Callable[[], None]) -> None:
    """Run `handler` in every child forked after JAX's backend started."""
    _handlers.append(handler)


def _after_fork_in_child() -> None:
    if not xla_bridge.backends_are_initialized():
        return  # JAX starts afresh in this process
    compiler.compile_or_get_cached = refuse  # JAX's one way to a new executable
    for handler in _handlers:
        handler()


def install() -> None:
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_in_child)
