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

_state = {"seed": None, "counter": 0}


def next_key():
    """A new key tensor: a function of torch.initial_seed() and a per-seed counter."""
    seed = torch.initial_seed()
    if _state["seed"] != seed:
        _state["seed"], _state["counter"] = seed, 0
    _state["counter"] += 1
    with X64:
        key = jax.random.fold_in(jax.random.PRNGKey(seed % 2**63), _state["counter"])
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
