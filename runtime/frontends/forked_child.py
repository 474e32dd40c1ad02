"""The frontends' part of Note [Fork after JAX started] (runtime/platform/fork_guard.py):
in a child forked after JAX started, the ways in that would run executables compiled
before the fork raise instead."""

from __future__ import annotations

from ..core.tensor import register_dispatcher
from ..platform.fork_guard import on_fork_in_child, refuse
from . import dispatch, dynamo, env, replay


def _refuse_entry_points() -> None:
    register_dispatcher(refuse)  # every op on an XlaTensor
    dispatch.dispatch = refuse  # factories asked for device="jax" (the PrivateUse1 kernels call it)
    env.dispatch = refuse  # factories and ops inside the environment
    replay.signature = refuse  # every call of a compile()d function, replayed or traced
    dynamo.JaxGraph.__call__ = dynamo._Partitioned.__call__ = refuse  # torch.compile graphs


def install() -> None:
    on_fork_in_child(_refuse_entry_points)
