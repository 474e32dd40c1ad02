"""Random ops. Numbers come from JAX's generator, seeded by torch.manual_seed: the same
seed gives the same values on our side (not PyTorch's stream). Each call draws a fresh
key on the host and passes it to the graph as an operand, so a traced loop gets new
numbers every step without recompiling."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import torch

from ...shape_fns.common import TensorMeta, to_numpy_dtype
from ..dispatch import X64, run_node
from ..ir import ATTR, TENSOR, Node
from ..tensor import from_array

def next_key():
    """A new key tensor, drawn from PyTorch's default CPU generator: torch.manual_seed,
    fork_rng and get/set_rng_state govern our numbers too."""
    with torch._C._DisableTorchDispatch():
        seed = int(torch.empty((), dtype=torch.int64).random_())
    with X64:
        key = jax.random.PRNGKey(seed)
    return from_array(key)


class _RandomNode(Node):
    __slots__ = ()
    arg_kinds = (TENSOR, ATTR, ATTR)

    @staticmethod
    def output_shape(key, size, dtype):
        return TensorMeta(tuple(size), dtype)


class RandomNormal(_RandomNode):
    __slots__ = ()
    op = name = "random_normal"

    @staticmethod
    def lower(key, size, dtype):
        return jax.random.normal(key, size, to_numpy_dtype(dtype))


class RandomUniform(_RandomNode):
    __slots__ = ()
    op = name = "random_uniform"

    @staticmethod
    def lower(key, size, dtype):
        return jax.random.uniform(key, size, to_numpy_dtype(dtype))


class Dropout(Node):
    __slots__ = ()
    op = name = "dropout"
    arg_kinds = (TENSOR, TENSOR, ATTR)

    @staticmethod
    def lower(key, x, p):
        keep = jax.random.bernoulli(key, 1.0 - p, x.shape)
        scale = 0.0 if p >= 1 else 1.0 / (1.0 - p)
        return jnp.where(keep, x * jnp.asarray(scale, x.dtype), jnp.zeros((), x.dtype)), keep

    @staticmethod
    def output_shape(key, x, p):
        return x, TensorMeta(x.shape, torch.bool)


def impl_randn(size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return run_node(RandomNormal, (next_key(), tuple(size), dtype or torch.get_default_dtype()))


def impl_rand(size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return run_node(RandomUniform, (next_key(), tuple(size), dtype or torch.get_default_dtype()))


def impl_native_dropout(input, p, train):
    if train is False:
        from ..dispatch import _REGISTRY

        clone = _REGISTRY[torch.ops.aten.clone.default](input)
        ones = _REGISTRY[torch.ops.aten.ones_like.default](input, dtype=torch.bool)
        return clone, ones
    return run_node(Dropout, (next_key(), input, float(p)))
