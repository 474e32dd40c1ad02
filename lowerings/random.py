"""Random numbers from JAX's generator. Each takes the key its op drew (an operand, so a
traced loop gets new numbers every step without recompiling)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import torch

from ..shape_fns.common import to_numpy_dtype


def _compute_dtype(dtype):
    # Reduced-precision floats sample in float32 and round once, like PyTorch CPU.
    np_dtype = to_numpy_dtype(dtype)
    if dtype in (torch.float16, torch.bfloat16):
        return jnp.float32, np_dtype
    return np_dtype, np_dtype


def random_normal(key, size, dtype):
    return jax.random.normal(key, size, to_numpy_dtype(dtype))


def random_uniform(key, size, dtype):
    return jax.random.uniform(key, size, to_numpy_dtype(dtype))


def dropout(key, x, p):
    """(x with elements zeroed with probability p and the rest scaled by 1 / (1 - p), the
    mask of kept elements)."""
    keep = jax.random.bernoulli(key, 1.0 - p, x.shape)
    scale = 0.0 if p >= 1 else 1.0 / (1.0 - p)
    return jnp.where(keep, x * jnp.asarray(scale, x.dtype), jnp.zeros((), x.dtype)), keep


def random_sample(key, kind, shape, dtype, params):
    """Numbers of one distribution with static parameters, in a shape and dtype."""
    compute, out = _compute_dtype(dtype)
    if kind == "uniform":
        low, high = params
        return jax.random.uniform(key, shape, compute, low, high).astype(out)
    if kind == "normal":
        mean, std = params
        return (mean + std * jax.random.normal(key, shape, compute)).astype(out)
    if kind == "log_normal":
        mean, std = params
        return jnp.exp(mean + std * jax.random.normal(key, shape, compute)).astype(out)
    if kind == "exponential":
        (lambd,) = params
        return (jax.random.exponential(key, shape, compute) / lambd).astype(out)
    if kind == "cauchy":
        median, sigma = params
        return (median + sigma * jax.random.cauchy(key, shape, compute)).astype(out)
    if kind == "geometric":
        (p,) = params
        u = jax.random.uniform(key, shape, jnp.float64, jnp.finfo(jnp.float64).tiny, 1.0)
        # Trials up to the first success: ceil(log(u) / log(1 - p)), at least 1.
        draws = jnp.maximum(jnp.ceil(jnp.log(u) / jnp.log1p(-p)), 1.0)
        return draws.astype(out)
    if kind == "bernoulli":
        (p,) = params
        return jax.random.bernoulli(key, p, shape).astype(out)
    if kind == "integers":
        low, high = params  # [low, high)
        if high - low > 2**62:
            # randint's maxval is exclusive and int64-bounded: draw 63 random bits.
            bits = jax.random.bits(key, shape, jnp.uint64) >> jnp.uint64(1)
            return (bits.astype(jnp.int64) + low).astype(out)
        return jax.random.randint(key, shape, low, high, jnp.int64).astype(out)
    if kind == "permutation":
        (n,) = params
        return jax.random.permutation(key, n).astype(out)
    raise ValueError(kind)


def bernoulli_tensor(key, self, p):
    """Bernoulli draws with per-element probabilities `p`, in `self`'s shape and dtype."""
    u = jax.random.uniform(key, self.shape, jnp.float64 if p.dtype == jnp.float64 else jnp.float32)
    return (u < jnp.broadcast_to(p, self.shape)).astype(self.dtype)


def normal_tensor(key, mean, std, shape, dtype):
    """mean + std * N(0, 1), broadcasting tensor and float means and deviations."""
    compute, out = _compute_dtype(dtype)
    z = jax.random.normal(key, shape, compute)
    return (mean.astype(compute) + std.astype(compute) * z).astype(out)


def multinomial(key, probs, num_samples, replacement):
    p = probs.astype(jnp.float64) if probs.dtype == jnp.float64 else probs.astype(jnp.float32)
    rows = p.reshape(-1, p.shape[-1])
    logits = jnp.log(rows)  # zero probabilities are never drawn
    if replacement:
        draws = jax.random.categorical(key, logits, axis=-1, shape=(num_samples, rows.shape[0])).T
    else:
        # Gumbel top-k: k draws without replacement, weighted by the probabilities.
        g = jax.random.gumbel(key, rows.shape, rows.dtype)
        _, draws = jax.lax.top_k(logits + g, num_samples)
    return draws.reshape(probs.shape[:-1] + (num_samples,)).astype(jnp.int64)
