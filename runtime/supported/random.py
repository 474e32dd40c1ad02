"""Random ops. Numbers come from JAX's generator, seeded by torch.manual_seed: the same
seed gives the same values on our side (not PyTorch's stream). Each call draws a fresh
key on the host and passes it to the graph as an operand, so a traced loop gets new
numbers every step without recompiling."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import torch

from ...shape_fns.common import broadcast_shapes, scalar_type_name
from ..core.context import context
from ..core.convert import X64
from ..core.tensor import from_array
from ..exec.eager import run_node, value
from ..exec.index_checks import value_range
from ..exec.mutation import write_inplace
from ..exec.registry import handler, node


def impl_randn(size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return run_node(node("random_normal"), (tuple(size), dtype or torch.get_default_dtype()))


def impl_rand(size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return run_node(node("random_uniform"), (tuple(size), dtype or torch.get_default_dtype()))


def impl_native_dropout(input, p, train):
    if train is False:
        clone = handler(torch.ops.aten.clone.default)(input)
        ones = handler(torch.ops.aten.ones_like.default)(input, dtype=torch.bool)
        return clone, ones
    return run_node(node("random_dropout"), (input, float(p)))


def _key(generator=None):
    """A key drawn from an explicit torch.Generator; None (the runtime draws one) without."""
    if generator is None:
        return None
    if context.trace is not None:
        context.trace.refuse_replay("it draws random numbers from an explicit torch.Generator")
    with torch._C._DisableTorchDispatch():
        if generator.device.type == "cpu":
            seed = int(torch.empty((), dtype=torch.int64).random_(generator=generator))
        else:  # our device's generator, a CPU generator placed there (Note [Generators of our device])
            cpu = torch.Generator()
            cpu.set_state(generator.get_state())
            seed = int(torch.empty((), dtype=torch.int64).random_(generator=cpu))
            generator.set_state(cpu.get_state())
    with X64:
        key = jax.random.PRNGKey(seed)
    return from_array(key)


# The largest value random_() draws (inclusive): 2**digits for floats (every integer
# up to it is exact), the type's maximum for integers.
_RANDOM_HIGH = {
    torch.float16: 2**11, torch.bfloat16: 2**8, torch.float32: 2**24, torch.float64: 2**53,
    torch.bool: 1, torch.uint8: 2**8 - 1, torch.int8: 2**7 - 1, torch.int16: 2**15 - 1,
    torch.int32: 2**31 - 1, torch.int64: 2**63 - 1,
}


def _sample(kind, shape, dtype, params, generator=None):
    return run_node(
        node("random_sample"), (kind, tuple(shape), dtype, tuple(float(p) for p in params)), _key(generator)
    )


def _integers(shape, dtype, low, high, generator=None):
    """Integers in [low, high)."""
    return run_node(node("random_integers"), (tuple(shape), dtype, int(low), int(high)), _key(generator))


def _check_float(op, dtype):
    if not dtype.is_floating_point:
        raise NotImplementedError(f'"{op}" not implemented for \'{dtype}\'')


def impl_uniform(self, from_=0, to=1, *, generator=None):
    if not self.dtype.is_complex:  # complex: real and imaginary parts each drawn
        _check_float("check_uniform_bounds", self.dtype)
    if from_ > to:
        raise RuntimeError(f"uniform_ expects to return a [from, to) range, but found from={from_} > to={to}")
    return _sample("uniform", self.shape, self.dtype, (float(from_), float(to)), generator)


def impl_normal_functional(self, mean=0, std=1, *, generator=None):
    if std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
    return _sample("normal", self.shape, self.dtype, (float(mean), float(std)), generator)


def impl_log_normal(self, mean=1, std=2, *, generator=None):
    if std <= 0:
        raise RuntimeError(f"log_normal_ expects std > 0.0, but found std={std}")
    return _sample("log_normal", self.shape, self.dtype, (float(mean), float(std)), generator)


def impl_exponential(self, lambd=1, *, generator=None):
    if lambd <= 0:
        raise RuntimeError(f"exponential_ expects lambda > 0.0, but found lambda={lambd}")
    return _sample("exponential", self.shape, self.dtype, (float(lambd),), generator)


def impl_cauchy(self, median=0, sigma=1, *, generator=None):
    if sigma <= 0:
        raise RuntimeError(f"cauchy_ expects sigma > 0.0, but found sigma={sigma}")
    return _sample("cauchy", self.shape, self.dtype, (float(median), float(sigma)), generator)


def impl_geometric(self, p, *, generator=None):
    if not 0 < p < 1:
        raise RuntimeError(f"geometric_ expects p to be in (0, 1), but got p={p}")
    return _sample("geometric", self.shape, self.dtype, (float(p),), generator)


def impl_bernoulli_p(self, p, *, generator=None):
    if not 0 <= p <= 1:
        raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={p}")
    return _sample("bernoulli", self.shape, self.dtype, (float(p),), generator)


def impl_bernoulli(self, *, generator=None):
    _check_parameters(self, 0.0, 1.0, "Expected p_in >= 0 && p_in <= 1 to be true, but got false.")
    return run_node(node("random_bernoulli"), (self, self), _key(generator))


def impl_bernoulli_Tensor(self, p, *, generator=None):
    _check_parameters(p, 0.0, 1.0, "Expected p_in >= 0 && p_in <= 1 to be true, but got false.")
    return run_node(node("random_bernoulli"), (self, p), _key(generator))


def _check_parameters(t, low: float, high: float, message: str) -> None:
    """PyTorch CPU's check that a tensor of parameters lies in [low, high] (NaN does
    not); eager only (a compiled program cannot raise), at one read back to the host."""
    bounds = value_range(t) if context.trace is None else None
    if bounds is not None and not (low <= bounds[0] and bounds[1] <= high):  # NaN fails
        raise RuntimeError(message)


def _normal(mean, std, shape, dtype, generator):
    return run_node(node("random_normal_affine"), (mean, std, tuple(shape), dtype), _key(generator))


def _tensor_like(x, ref):
    return handler(torch.ops.aten.scalar_tensor.default)(float(x), dtype=ref)


def impl_normal_Tensor_float(mean, std=1, *, generator=None):
    if std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
    return _normal(mean, _tensor_like(std, mean.dtype), mean.shape, mean.dtype, generator)


_NEGATIVE_STD = "normal expects all elements of std >= 0.0"


def impl_normal_float_Tensor(mean, std, *, generator=None):
    _check_parameters(std, 0.0, math.inf, _NEGATIVE_STD)
    return _normal(_tensor_like(mean, std.dtype), std, std.shape, std.dtype, generator)


def impl_normal_Tensor_Tensor(mean, std, *, generator=None):
    _check_parameters(std, 0.0, math.inf, _NEGATIVE_STD)
    shape = broadcast_shapes(tuple(mean.shape), tuple(std.shape))
    dtype = torch.promote_types(mean.dtype, std.dtype)
    return _normal(mean, std, shape, dtype, generator)


def impl_normal_float_float(mean, std, size, *, generator=None, dtype=None, layout=None, device=None, pin_memory=None):
    if std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
    return _sample("normal", size, dtype or torch.get_default_dtype(), (float(mean), float(std)), generator)


def _check_bounds(dtype, low, high):
    """random_'s checks of the tensor's dtype and of its bounds."""
    if dtype.is_complex:
        raise RuntimeError("check_random_bounds handles only integral, floating-point and boolean types")
    _check_range(low, high)


def _check_range(low, high):
    if low >= high:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}")


def impl_randint_low(low, high, size, *, dtype=torch.int64, layout=None, device=None, pin_memory=None):
    _check_range(low, high)
    return _integers(size, dtype or torch.int64, low, high)


def impl_randint(high, size, *, dtype=torch.int64, layout=None, device=None, pin_memory=None):
    return impl_randint_low(0, high, size, dtype=dtype)


def impl_randint_like_low_dtype(
    self, low, high, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None
):
    return impl_randint_like_low_generator_dtype(self, low, high, generator=None, dtype=dtype)


def impl_randint_like(self, high, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return impl_randint_like_low_dtype(self, 0, high, dtype=dtype)


def impl_randint_like_low_generator_dtype(
    self, low, high, *, generator, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None
):
    _check_range(low, high)
    return _integers(self.shape, dtype or self.dtype, low, high, generator)


def impl_randint_like_generator(
    self, high, *, generator, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None
):
    return impl_randint_like_low_generator_dtype(self, 0, high, generator=generator, dtype=dtype)


def impl_randint_like_Tensor(self, high, *, dtype=None, layout=None, device=None, pin_memory=None,
                             memory_format=None):
    return impl_randint_like_low_dtype(self, 0, high.item(), dtype=dtype)  # PyTorch reads `high` on the host too


def impl_randint_like_Tensor_generator(
    self, high, *, generator, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None
):
    return impl_randint_like_low_generator_dtype(self, 0, high.item(), generator=generator, dtype=dtype)


def impl_random(self, *, generator=None):
    high = _RANDOM_HIGH.get(self.dtype)
    if high is None:
        raise NotImplementedError(f'"random_" not implemented for \'{self.dtype}\'')
    return _integers(self.shape, self.dtype, 0, high + 1, generator)


def impl_random_from(self, from_, to, *, generator=None):
    """Integers in [from_, to), or from `from_` to random_()'s largest value without `to`
    (torch.randint given a generator comes here)."""
    if to is not None:
        _check_bounds(self.dtype, from_, to)
        return _integers(self.shape, self.dtype, from_, to, generator)
    high = _RANDOM_HIGH.get(self.dtype)
    if high is None:
        raise NotImplementedError(f'"random_from_to" not implemented for \'{scalar_type_name(self.dtype)}\'')
    _check_bounds(self.dtype, from_, high + 1)
    return _integers(self.shape, self.dtype, from_, high + 1, generator)


def impl_random_to(self, to, *, generator=None):
    _check_bounds(self.dtype, 0, to)
    return _integers(self.shape, self.dtype, 0, to, generator)


def impl_rand_like(self, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return _sample("uniform", self.shape, dtype or self.dtype, (0.0, 1.0))


def impl_randn_like(self, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return _sample("normal", self.shape, dtype or self.dtype, (0.0, 1.0))


def impl_rand_like_generator(self, *, generator, dtype=None, layout=None, device=None, pin_memory=None,
                             memory_format=None):
    return _sample("uniform", self.shape, dtype or self.dtype, (0.0, 1.0), generator)


def impl_randn_like_generator(self, *, generator, dtype=None, layout=None, device=None, pin_memory=None,
                              memory_format=None):
    return _sample("normal", self.shape, dtype or self.dtype, (0.0, 1.0), generator)


def impl_randperm(n, *, dtype=torch.int64, layout=None, device=None, pin_memory=None):
    return impl_randperm_generator(n, generator=None, dtype=dtype)


def impl_randperm_generator(n, *, generator, dtype=torch.int64, layout=None, device=None, pin_memory=None):
    if n < 0:
        raise RuntimeError(f"n must be non-negative, got{n}")
    return run_node(node("random_permutation"), (int(n), dtype or torch.int64), _key(generator))


@jax.jit
def _probability_errors(p):
    p = p.astype(jnp.float64) if p.dtype != jnp.float64 else p
    bad_entry = jnp.any(~jnp.isfinite(p) | (p < 0))
    bad_sum = jnp.any(jnp.sum(p, axis=-1) <= 0)
    return bad_entry, bad_sum


def _check_probabilities(p) -> None:
    """PyTorch CPU's value checks; eager only (a compiled program cannot raise), at the
    cost of one read back to the host."""
    with X64:
        bad_entry, bad_sum = (bool(b) for b in _probability_errors(p))
    if bad_entry:
        raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
    if bad_sum:
        raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")


def impl_multinomial(self, num_samples, replacement=False, *, generator=None):
    if self.dim() not in (1, 2):
        raise RuntimeError("prob_dist must be 1 or 2 dim")
    if not self.dtype.is_floating_point:
        raise RuntimeError(f"multinomial only supports floating-point dtypes for input, got: {self.dtype}")
    if num_samples <= 0:
        raise RuntimeError("cannot sample n_sample <= 0 samples")
    n = self.shape[-1]
    if not replacement and num_samples > n:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    if n > 2**24:
        raise RuntimeError("number of categories cannot exceed 2^24")
    if context.trace is None and not isinstance(value(self), jax.core.Tracer):  # eager: compiled programs cannot raise
        _check_probabilities(value(self))
    return run_node(node("random_multinomial"), (self, int(num_samples), bool(replacement)), _key(generator))


def _rrelu_with_noise(self, noise, lower, upper, training, generator):
    """(result, new noise or None): rrelu's randomized leaky ReLU. In training every
    element <= 0 is scaled by a slope drawn from U(lower, upper), and `noise` records the
    slope of every element (1 where the input is positive); otherwise it is leaky_relu
    with the mean slope and `noise` is left alone."""
    aten = torch.ops.aten
    if tuple(self.shape) != tuple(noise.shape):
        raise RuntimeError(
            f"noise tensor shape must match self tensor shape. Got self.shape = {list(self.shape)} "
            f"noise.shape = {list(noise.shape)}"
        )
    if not training:
        # PyTorch averages the bounds in double precision.
        return aten.leaky_relu.default(self, (float(lower) + float(upper)) / 2), None
    if not self.dtype.is_floating_point:
        raise NotImplementedError(f"\"rrelu_with_noise_out_cpu\" not implemented for '{scalar_type_name(self.dtype)}'")
    if noise.dtype != self.dtype:
        raise RuntimeError(
            f"expected scalar type {scalar_type_name(self.dtype)} but found {scalar_type_name(noise.dtype)}"
        )
    if float(lower) > float(upper):
        # PyTorch raises this only when it draws a slope (some element <= 0); the data
        # is not read on the host here, so it is raised for every input.
        raise RuntimeError(
            "Expected from <= to to be true, but got false.  (Could this error message be improved?  "
            "If so, please report an enhancement request to PyTorch.)"
        )
    slope = _sample("uniform", self.shape, self.dtype, (float(lower), float(upper)), generator)
    negative = aten.le.Scalar(self, 0)
    result = aten.where.self(negative, aten.mul.Tensor(self, slope), self)
    return result, aten.where.self(negative, slope, aten.ones_like.default(slope))


def impl_rrelu_with_noise(self, noise, lower=0.125, upper=0.3333333333333333, training=False, generator=None):
    result, new_noise = _rrelu_with_noise(self, noise, lower, upper, training, generator)
    if new_noise is not None:
        write_inplace(noise, new_noise)
    return result


def impl_rrelu_with_noise_(self, noise, lower=0.125, upper=0.3333333333333333, training=False, generator=None):
    result, new_noise = _rrelu_with_noise(self, noise, lower, upper, training, generator)
    if new_noise is not None:
        write_inplace(noise, new_noise)
    return write_inplace(self, result)


# torch.distributions' samplers: Gamma (and Chi2, StudentT), Dirichlet (and Beta),
# Poisson and Binomial. Each draws with a parameter per element (`random_per_element`).


def _check_dtype(op, dtype, allowed):
    if dtype not in allowed:
        raise NotImplementedError(f'"{op}" not implemented for \'{scalar_type_name(dtype)}\'')


_FLOAT = (torch.float32, torch.float64)


def impl__standard_gamma(self, generator=None):
    _check_dtype("gamma_cpu", self.dtype, _FLOAT)
    return run_node(node("random_per_element"), ("gamma", self, None), _key(generator))


def impl__sample_dirichlet(self, generator=None):
    _check_dtype("dirichlet", self.dtype, _FLOAT)
    return run_node(node("random_per_element"), ("dirichlet", self, None), _key(generator))


@jax.jit
def _any_invalid_rate(rate):
    return jnp.any(~(rate >= 0))  # negative or NaN


def impl_poisson(self, generator=None):
    _check_dtype("poisson_cpu", self.dtype, _FLOAT + (torch.float16, torch.bfloat16))
    if context.trace is None and not isinstance(value(self), jax.core.Tracer):  # eager only, as _check_probabilities
        with X64:
            invalid = bool(_any_invalid_rate(value(self)))
        if invalid:
            raise RuntimeError("invalid Poisson rate, expected rate to be non-negative")
    return run_node(node("random_per_element"), ("poisson", self, None), _key(generator))


def impl_binomial(count, prob, generator=None):
    if not count.dtype.is_floating_point:
        dtype = scalar_type_name(count.dtype)
        raise ValueError(f"binomial only supports floating-point dtypes for count, got: {dtype}")
    _check_dtype("binomial_cpu", count.dtype, _FLOAT)
    return run_node(node("random_per_element"), ("binomial", count, prob), _key(generator))
