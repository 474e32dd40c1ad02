"""Random keys. Numbers come from JAX's generator, seeded from PyTorch's: each random
op draws a fresh key on the host and passes it to its executable or graph as an
operand, so a traced loop gets new numbers every step without recompiling."""

from __future__ import annotations

import contextlib
import itertools
from typing import Any, Callable, Iterator

import jax
import numpy as np
import torch

from ..core.context import context
from ..core.tensor import XlaTensor, from_array


def key_array() -> jax.Array:
    """A new JAX key, drawn from PyTorch's default CPU generator: torch.manual_seed,
    fork_rng and get/set_rng_state govern our numbers too."""
    with torch._C._DisableTorchDispatch():
        seed = int(torch.empty((), dtype=torch.int64).random_())
    # jax.random.PRNGKey(seed)'s value, made on the host: PRNGKey is an op, which under
    # a user's jax.jit around jax_function's function would be staged with x64 types
    # and fail to lower after x64 is left.
    return jax.device_put(np.array([seed >> 32, seed & 0xFFFFFFFF], dtype=np.uint32))


def next_key() -> XlaTensor:
    """A new key tensor (see key_array), or the next key of the graph JAX is tracing
    (`context.keys`); a trace's observer learns which storage holds it, so that a replay
    draws a new one there."""
    source = context.keys
    if source is not None:
        return from_array(source())
    t = from_array(key_array())
    trace = context.trace
    if trace is not None:
        trace.note_key(t._store)
    return t


def graph_seed() -> int:
    """The seed operand of a call of a jitted graph that draws random numbers, from
    PyTorch's default CPU generator (as key_array)."""
    with torch._C._DisableTorchDispatch():
        return int(torch.empty((), dtype=torch.int64).random_(0, 2**31 - 1))


@contextlib.contextmanager
def keys_from(seed: Any, on_draw: Callable[[], None] | None = None, *, key: Any = None) -> Iterator[None]:
    """While JAX traces torch code inside the block, each random op takes a key derived
    from `seed`, the graph's (traced) seed operand, or from a JAX `key` given instead,
    so that every call of the graph draws new numbers (`context.keys`). `on_draw`
    learns that the graph drew one."""
    if key is None:
        base = jax.random.PRNGKey(seed)
    elif jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        base = jax.random.key_data(key)  # a typed key (jax.random.key): our lowerings take raw ones
    else:
        base = key
    drawn = itertools.count()

    def next_key_array() -> jax.Array:
        if on_draw is not None:
            on_draw()
        return jax.random.fold_in(base, next(drawn))

    outer = context.keys
    context.keys = next_key_array
    try:
        yield
    finally:
        context.keys = outer
