"""Random keys. Numbers come from JAX's generator, seeded from PyTorch's: each random
op draws a fresh key on the host and passes it to its executable or graph as an
operand, so a traced loop gets new numbers every step without recompiling."""

from __future__ import annotations

import jax
import torch

from ..core.context import context
from ..core.convert import X64
from ..core.tensor import XlaTensor, from_array


def key_array() -> jax.Array:
    """A new JAX key, drawn from PyTorch's default CPU generator: torch.manual_seed,
    fork_rng and get/set_rng_state govern our numbers too."""
    with torch._C._DisableTorchDispatch():
        seed = int(torch.empty((), dtype=torch.int64).random_())
    with X64:
        return jax.random.PRNGKey(seed)


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
