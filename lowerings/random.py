"""Random numbers from JAX's generator: the runtime's internal random nodes. Each takes
the key the runtime drew for its call as `ctx.key` (an operand, so a traced loop gets new
numbers every step without recompiling)."""

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


def lower_random_normal(size, dtype, *, ctx):
    return jax.random.normal(ctx.key, size, to_numpy_dtype(dtype))


def _uniform(key, shape, dtype, low=0.0, high=1.0):
    """U(low, high) draws; a complex dtype draws its real and imaginary parts each so, as
    PyTorch CPU does."""
    if jnp.issubdtype(dtype, jnp.complexfloating):
        part = jnp.finfo(dtype).dtype
        pairs = jax.random.uniform(key, tuple(shape) + (2,), part, low, high)
        return jax.lax.complex(pairs[..., 0], pairs[..., 1]).astype(dtype)
    return jax.random.uniform(key, shape, dtype, low, high)


def lower_random_uniform(size, dtype, *, ctx):
    return _uniform(ctx.key, size, to_numpy_dtype(dtype))


def lower_random_dropout(input, p, *, ctx):
    """(input with elements zeroed with probability p and the rest scaled by 1 / (1 - p),
    the mask of kept elements)."""
    # The keep probability in float32: as a Python float under x64 it would draw float64
    # uniforms, twice the random bits, and types that fail to lower when a user's
    # jax.jit around jax_function's function is lowered outside x64.
    keep = jax.random.bernoulli(ctx.key, jnp.float32(1.0 - p), input.shape)
    scale = 0.0 if p >= 1 else 1.0 / (1.0 - p)
    return jnp.where(keep, input * jnp.asarray(scale, input.dtype), jnp.zeros((), input.dtype)), keep


def lower_random_sample(kind, shape, dtype, params, *, ctx):
    """Numbers of one distribution with static parameters, in a shape and dtype."""
    key = ctx.key
    compute, out = _compute_dtype(dtype)
    if kind == "uniform":
        low, high = params
        return _uniform(key, shape, compute, low, high).astype(out)
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
        # float32 probabilities, as dropout's (lower_random_dropout)
        return jax.random.bernoulli(key, jnp.float32(p), shape).astype(out)
    raise ValueError(kind)


def lower_random_integers(shape, dtype, low, high, *, ctx):
    """Integers in [low, high), drawn in int64 and cast to `dtype`."""
    if high - low > 2**62:
        # randint's maxval is exclusive and int64-bounded: draw 63 random bits.
        bits = jax.random.bits(ctx.key, shape, jnp.uint64) >> jnp.uint64(1)
        return (bits.astype(jnp.int64) + low).astype(to_numpy_dtype(dtype))
    return jax.random.randint(ctx.key, shape, low, high, jnp.int64).astype(to_numpy_dtype(dtype))


def lower_random_permutation(n, dtype, *, ctx):
    return jax.random.permutation(ctx.key, n).astype(to_numpy_dtype(dtype))


def lower_random_bernoulli(self, p, *, ctx):
    """Bernoulli draws with per-element probabilities `p`, in `self`'s shape and dtype."""
    u = jax.random.uniform(ctx.key, self.shape, jnp.float64 if p.dtype == jnp.float64 else jnp.float32)
    return (u < jnp.broadcast_to(p, self.shape)).astype(self.dtype)


def lower_random_normal_affine(mean, std, shape, dtype, *, ctx):
    """mean + std * N(0, 1), broadcasting tensor and float means and deviations."""
    compute, out = _compute_dtype(dtype)
    z = jax.random.normal(ctx.key, shape, compute)
    return (mean.astype(compute) + std.astype(compute) * z).astype(out)


def lower_random_multinomial(probs, num_samples, replacement, *, ctx):
    key = ctx.key
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


def _gamma(key, alpha):
    """Gamma(alpha, 1) draws, at least the dtype's smallest normal number, as PyTorch
    CPU clamps them (where alpha <= 0 too). Float32 draws are made in float64 and
    rounded, so that a small alpha's tiny draws keep their relative sizes."""
    tiny = jnp.finfo(alpha.dtype).tiny
    draws = jax.random.gamma(key, alpha.astype(jnp.float64))
    return jnp.where(draws >= tiny, draws, tiny).astype(alpha.dtype)


def lower_random_per_element(kind, param, other, *, ctx):
    key = ctx.key
    if kind == "gamma":
        return _gamma(key, param)
    if kind == "dirichlet":
        draws = _gamma(key, param).astype(jnp.float64)
        return (draws / jnp.sum(draws, axis=-1 if draws.ndim else None, keepdims=True)).astype(param.dtype)
    if kind == "poisson":
        rate = param.astype(jnp.float64)
        return jax.random.poisson(key, rate, dtype=jnp.int64).astype(param.dtype)
    if kind == "binomial":
        count, prob = jnp.broadcast_arrays(param.astype(jnp.float64), other.astype(jnp.float64))
        count = jnp.floor(count)
        draws = jax.random.binomial(key, count, prob)
        return jnp.where(jnp.isnan(prob), jnp.nan, draws).astype(param.dtype)
    raise ValueError(kind)


def lower__standard_gamma_grad(self, output):
    """d output / d alpha of a Gamma(alpha, 1) draw `output` whose CDF is held fixed
    (the pathwise gradient of _standard_gamma)."""
    alpha, draws = jnp.broadcast_arrays(self, output)
    return jax.lax.random_gamma_grad(alpha, draws)
