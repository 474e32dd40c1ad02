"""Exceptions raised by autograd hooks, carried out of backward() without crossing the
autograd engine (used with PyTorch's Python device guard only).

Note [Hook errors during backward]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
With PyTorch's Python device guard (Note [Native device guard]), an exception from a
Python function that the autograd engine calls around a backward node kills the
process: the engine leaves the Python error pending while it unwinds, the node's stream
guard asks the Python guard for its device on the way out, and that call fails inside a
noexcept function (std::terminate, "terminate called without an active exception").
Op errors are kept by the dispatcher (Note [Errors during backward]); the functions
below are the user's: tensor hooks (`register_hook`, on leaves too), post-accumulate-
grad hooks, hooks on graph nodes (`grad_fn.register_hook` / `register_prehook`, which
module backward hooks and `register_multi_grad_hook` are built on) and the unpack
hooks of `saved_tensors_hooks` (activation checkpointing's among them).

So while the Python guard is in use, each such hook is wrapped as it is registered:
an exception it raises is kept, and the hook hands the engine a result the engine
itself rejects with a C++ error (a gradient of another device type, a tuple of the
wrong length, a non-tensor), which stops the pass as the exception would have, without
a pending Python error. The autograd engine wrapper (runtime/frontends/dispatch.py)
then raises the kept exception, the same object the hook raised, from backward(). With
the C++ guard nothing is wrapped: exceptions cross the engine as PyTorch raises them.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch

_active = [False]
# Errors kept during a backward pass, for the autograd engine wrapper to raise from
# backward(): the hooks' (below) and the ops' (Note [Errors during backward] in
# runtime/frontends/dispatch.py).
backward_errors: list[BaseException] = []


def keep(error: BaseException) -> None:
    """Keep `error` for backward() to raise; the first error of a pass wins."""
    if not backward_errors:
        backward_errors.append(error)


def _rejected_gradient(grad: Any) -> torch.Tensor:
    # check_variable_result rejects a gradient of another device type; a None
    # gradient cannot be replaced by anything.
    return torch.empty(0, device="cpu" if getattr(grad, "device", None) == torch.device("meta") else "meta")


def tensor_hook(hook: Callable) -> Callable:
    """A hook for Tensor.register_hook (Note [Hook errors during backward])."""
    if not _active[0]:
        return hook

    @functools.wraps(hook)
    def run(grad):
        try:
            return hook(grad)
        except BaseException as error:
            keep(error)
            return _rejected_gradient(grad)

    return run


def post_accumulate_grad_hook(hook: Callable) -> Callable:
    """A hook for Tensor.register_post_accumulate_grad_hook."""
    if not _active[0]:
        return hook

    @functools.wraps(hook)
    def run(tensor):
        try:
            return hook(tensor)
        except BaseException as error:
            keep(error)
            return _rejected_gradient(tensor)  # checked as a gradient is, before "should return None"

    return run


def node_hook(hook: Callable) -> Callable:
    """A pre-hook (grad_outputs) or post-hook (grad_inputs, grad_outputs) of a graph node."""

    @functools.wraps(hook)
    def run(*args):
        try:
            return hook(*args)
        except BaseException as error:
            keep(error)
            return (None,) * (len(args[0]) + 1)  # "hook ... has returned an incorrect number of values"

    return run


def unpack_hook(hook: Callable) -> Callable:
    """The unpack hook of saved_tensors_hooks."""

    @functools.wraps(hook)
    def run(packed):
        try:
            return hook(packed)
        except BaseException as error:
            keep(error)
            return None  # "Output of saved tensor unpack_hook expected to be a Tensor"

    return run


def wrap_hooks() -> None:
    """Wrap the hooks registered from now on (the Python device guard is in use)."""
    if _active[0]:
        return
    _active[0] = True
    from torch.autograd import function

    # Graph nodes of built-in ops and of autograd.Functions register their Python hooks
    # through this function (torch/csrc/autograd/python_cpp_function.cpp).
    register = function._HookMixin._register_hook

    def register_guarded(backward_hooks, hook):
        return register(backward_hooks, node_hook(hook))

    function._HookMixin._register_hook = staticmethod(register_guarded)
    autograd = torch._C._autograd
    push = autograd._push_saved_tensors_default_hooks

    def push_guarded(pack_hook, unpack):
        return push(pack_hook, unpack_hook(unpack))

    autograd._push_saved_tensors_default_hooks = push_guarded
