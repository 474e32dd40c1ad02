"""torch.distributions' samplers on our device (`_standard_gamma`, `_sample_dirichlet`,
`poisson`, `binomial`: runtime/supported/random.py), the gradients of their
reparameterized samples (`_standard_gamma_grad` lowered, `_dirichlet_grad` in the
manifest's fallback section), and generators of our device (Note [Generators of our
device] in runtime/platform/device_guard.py). Our numbers come from JAX's generator, so
draws are checked by their moments and by the cases PyTorch's own draws are
deterministic in; dtypes, shapes, errors and gradients are checked against PyTorch CPU."""

from __future__ import annotations

import copy
import math

import pytest
import scipy.special
import torch

import xla_native_functions as xnf
from xla_native_functions.runtime.platform.device_guard import hooks_missing
from xla_native_functions.runtime.platform.metrics import metrics

dist = torch.distributions
N = 20000


def ours(t):
    return xnf.to_xla(t)


def cpu(t):
    return xnf.to_torch(t)


def _moments(samples):
    s = cpu(samples).double()
    return s.mean(0), s.var(0)


def _assert_moments(samples, mean, var):
    m, v = _moments(samples)
    mean, var = torch.as_tensor(mean, dtype=torch.float64), torch.as_tensor(var, dtype=torch.float64)
    assert torch.all((m - mean).abs() <= 5 * (var / N).sqrt() + 1e-6), (m, mean)
    assert torch.all((v - var).abs() <= 0.1 * var + 1e-6), (v, var)


def _gamma(alpha, rate):
    return dist.Gamma(alpha, rate), alpha / rate, alpha / rate**2


def _beta(a, b):
    return dist.Beta(a, b), a / (a + b), a * b / ((a + b) ** 2 * (a + b + 1))


def _dirichlet(alpha):
    total = alpha.sum()
    return dist.Dirichlet(alpha), alpha / total, alpha * (total - alpha) / (total**2 * (total + 1))


def _poisson(rate):
    return dist.Poisson(rate), rate, rate


def _binomial(count, prob):
    return dist.Binomial(count, prob), count * prob, count * prob * (1 - prob)


def _chi2(df):
    return dist.Chi2(df), df, 2 * df


@pytest.mark.parametrize(
    "make, params",
    [
        (_gamma, ([0.3, 2.0, 9.0], [1.0, 2.0, 0.5])),
        (_beta, ([0.5, 2.0], [0.5, 5.0])),
        (_dirichlet, ([0.2, 1.0, 3.0],)),
        (_poisson, ([0.0, 0.5, 7.0, 300.0],)),
        (_binomial, ([10.0, 3.0, 0.0], [0.3, 0.9, 0.5])),
        (_chi2, ([1.0, 4.0],)),
    ],
    ids=["gamma", "beta", "dirichlet", "poisson", "binomial", "chi2"],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_samples_have_the_distributions_moments(make, params, dtype):
    params = [torch.tensor(p, dtype=dtype) for p in params]
    expected_dist, mean, var = make(*params)
    torch.manual_seed(0)
    got = make(*[ours(p) for p in params])[0].sample((N,))
    expected = expected_dist.sample((N,))
    assert got.device.type == "jax" and got.dtype == expected.dtype and got.shape == expected.shape
    _assert_moments(got, mean, var)


def test_discrete_draws_are_whole_numbers_within_their_support():
    torch.manual_seed(0)
    p = cpu(torch.poisson(ours(torch.full((N,), 3.5))))
    assert torch.equal(p, p.round()) and p.min() >= 0
    b = cpu(torch.binomial(ours(torch.full((N,), 6.0)), ours(torch.full((N,), 0.4))))
    assert torch.equal(b, b.round()) and b.min() >= 0 and b.max() <= 6


@pytest.mark.parametrize(
    "call",
    [
        lambda t: torch._standard_gamma(torch.tensor([-1.0, 0.0, 1e-3, 1e-3], dtype=t)),  # clamped to tiny
        lambda t: torch._sample_dirichlet(torch.tensor([[0.0, 0.0], [1e-30, 1e-30]], dtype=t)),  # even split
        lambda t: torch._sample_dirichlet(torch.tensor(1.5, dtype=t)),  # one category
        lambda t: torch.poisson(torch.tensor([0.0, 0.0], dtype=t)),
        lambda t: torch.binomial(torch.tensor([0.0, 4.0, 3.0], dtype=t), torch.tensor([0.5, 1.0, 0.0], dtype=t)),
        lambda t: torch.binomial(torch.tensor([3.0, 2.0], dtype=t), torch.tensor([float("nan"), 0.0], dtype=t)),
    ],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_draws_pytorch_makes_deterministic_are_pytorchs(call, dtype):
    expected = call(dtype)
    with torch.device(ours(torch.zeros(1)).device):
        got = call(dtype)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    torch.testing.assert_close(cpu(got), expected, equal_nan=True)


def test_small_concentrations_keep_their_relative_sizes():
    """Float32 gamma draws of a small alpha are mostly below float32's smallest normal
    number, which PyTorch clamps them to; drawn in float64 and rounded, ours spread the
    same way (the median draw of Gamma(0.05) is about 1e-6)."""
    torch.manual_seed(0)
    draws = cpu(torch._standard_gamma(ours(torch.full((N,), 0.05))))
    expected = torch._standard_gamma(torch.full((N,), 0.05))
    assert draws.min() >= torch.finfo(torch.float32).tiny
    assert abs(draws.log().median() - expected.log().median()) < 2.0  # log-scale medians about -14


@pytest.mark.parametrize(
    "call",
    [
        lambda x: torch._standard_gamma(x.to(torch.float16)),
        lambda x: torch._standard_gamma(x.to(torch.int64)),
        lambda x: torch._sample_dirichlet(x.to(torch.bfloat16)),
        lambda x: torch.poisson(x.to(torch.int64)),
        lambda x: torch.poisson(-x),
        lambda x: torch.poisson(x * float("nan")),
        lambda x: torch.binomial(x.to(torch.int64), x),
        lambda x: torch.binomial(x.to(torch.float16), x.to(torch.float16)),
        lambda x: torch.binomial(x, x.double()),
        lambda x: torch.binomial(x, x.repeat(2)),
        lambda x: torch._standard_gamma_grad(x, x.double()),
    ],
    ids=["gamma-half", "gamma-long", "dirichlet-bfloat16", "poisson-long", "poisson-negative", "poisson-nan",
         "binomial-long", "binomial-half", "binomial-dtypes", "binomial-shapes", "gamma-grad-dtypes"],
)
def test_errors_are_pytorchs(call):
    x = torch.tensor([1.0, 2.0, 3.0])
    with pytest.raises(Exception) as expected:
        call(x)
    with pytest.raises(type(expected.value)) as got:
        call(ours(x))
    assert str(got.value) == str(expected.value)


@pytest.mark.parametrize(
    "call",
    [
        lambda x: torch.bernoulli(x / 2),  # 1.5
        lambda x: torch.bernoulli(x - 2),  # -1
        lambda x: torch.bernoulli(x * float("nan")),
        lambda x: torch.zeros_like(x).bernoulli_(x / 2),
        lambda x: torch.normal(x, x - 2),  # std -1
        lambda x: torch.normal(0.0, x * float("nan")),
    ],
    ids=["bernoulli-above", "bernoulli-below", "bernoulli-nan", "bernoulli_-tensor", "normal-negative-std",
         "normal-nan-std"],
)
def test_parameter_values_outside_their_range_raise_in_eager_mode(call):
    """Eager checks of tensor parameters, as PyTorch CPU makes them (they drew numbers
    before); compiled programs cannot raise and draw from what they are given."""
    x = torch.tensor([1.0, 3.0, 2.0])
    with pytest.raises(RuntimeError) as expected:
        call(x)
    with pytest.raises(RuntimeError) as got:
        call(ours(x))
    assert str(got.value) in str(expected.value)  # PyTorch appends a line to bernoulli's
    assert cpu(xnf.compile(call)(ours(x))).shape == (3,)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_standard_gamma_grad(dtype):
    """The pathwise gradient d x / d alpha at points x that are known quantiles of
    Gamma(alpha). PyTorch's approximation is within 2.1e-4 (relative) of the exact
    value; ours within 1e-5 in float64 (1e-4 in float32, from rounding its arguments),
    checked against central differences of scipy's inverse incomplete gamma function."""
    alpha = torch.tensor([0.01, 0.1, 0.5, 1.0, 3.0, 10.0, 100.0, 1000.0], dtype=torch.float64).repeat_interleave(5)
    quantile = torch.tensor([0.01, 0.2, 0.5, 0.8, 0.99], dtype=torch.float64).repeat(8)
    x = torch.from_numpy(scipy.special.gammaincinv(alpha.numpy(), quantile.numpy())).clamp_min(1e-30)
    h = 1e-6 * alpha
    exact = (
        torch.from_numpy(scipy.special.gammaincinv((alpha + h).numpy(), quantile.numpy()))
        - torch.from_numpy(scipy.special.gammaincinv((alpha - h).numpy(), quantile.numpy()))
    ) / (2 * h)
    got = torch._standard_gamma_grad(ours(alpha.to(dtype)), ours(x.to(dtype)))
    expected = torch._standard_gamma_grad(alpha.to(dtype), x.to(dtype))
    assert got.dtype == dtype and got.shape == alpha.shape
    torch.testing.assert_close(cpu(got), expected, rtol=5e-4, atol=0)
    resolved = exact.abs() > 1e-20  # where the differences are not rounding noise
    rtol = 1e-5 if dtype == torch.float64 else 1e-4
    torch.testing.assert_close(cpu(got).double()[resolved], exact[resolved], rtol=rtol, atol=0)


def test_reparameterized_gamma_gradient_is_pytorchs_at_our_samples():
    """Gamma.rsample()'s backward is _standard_gamma_grad at the drawn samples: the
    gradient our autograd computes equals PyTorch's formula evaluated at them."""
    torch.manual_seed(0)
    alpha = ours(torch.tensor([0.7, 2.0, 5.0])).requires_grad_()
    rate = ours(torch.tensor([1.0, 2.0, 0.5]))
    samples = dist.Gamma(alpha, rate).rsample((4,))
    samples.sum().backward()
    x = cpu(samples.detach()) * torch.tensor([1.0, 2.0, 0.5])  # the standard Gamma(alpha, 1) draws
    a = torch.tensor([0.7, 2.0, 5.0]).expand(4, 3)
    expected = (torch._standard_gamma_grad(a, x) / torch.tensor([1.0, 2.0, 0.5])).sum(0)
    torch.testing.assert_close(cpu(alpha.grad), expected, rtol=5e-4, atol=1e-6)


def test_dirichlet_grad_runs_pytorchs_kernel_as_a_counted_fallback():
    x = torch.tensor([[0.2, 0.5, 0.3], [0.05, 0.9, 0.05]])
    alpha = torch.tensor([[1.0, 2.0, 1.5], [0.3, 4.0, 0.3]])
    total = alpha.sum(-1, keepdim=True).expand_as(alpha)
    before = metrics.fallback_calls["aten._dirichlet_grad.default"]
    got = torch._dirichlet_grad(ours(x), ours(alpha), ours(total))
    assert got.device.type == "jax"
    torch.testing.assert_close(cpu(got), torch._dirichlet_grad(x, alpha, total), rtol=0, atol=0)
    assert metrics.fallback_calls["aten._dirichlet_grad.default"] == before + 1


def test_beta_rsample_trains():
    """A Beta's concentrations learned through rsample(): both the sampler and the
    gradient (PyTorch's kernel, run on the CPU) reach the parameters."""
    torch.manual_seed(0)
    log_a = ours(torch.zeros(2)).requires_grad_()
    opt = torch.optim.SGD([log_a], lr=0.5)
    for _ in range(3):
        opt.zero_grad()
        a = log_a.exp()
        x = dist.Beta(a[0], a[1]).rsample((256,))
        (x - 0.9).square().mean().backward()
        assert torch.isfinite(cpu(log_a.grad)).all() and cpu(log_a.grad).abs().sum() > 0
        opt.step()
    assert cpu(log_a)[0] > cpu(log_a)[1]  # the mean a / (a + b) moved towards 0.9


def test_same_seed_same_draws_and_new_draws_every_call():
    def draw():
        poisson = torch.poisson(ours(torch.full((64,), 4.0)))
        return cpu(poisson), cpu(torch._standard_gamma(ours(torch.full((64,), 2.0))))

    torch.manual_seed(3)
    first = draw()
    second = draw()
    torch.manual_seed(3)
    again = draw()
    for a, b in zip(first, again):
        assert torch.equal(a, b)
    assert not torch.equal(first[1], second[1])


def test_compiled_step_replays_with_new_draws():
    """A compile()d step that samples a Gamma and differentiates through the samples
    replays, and each replay draws new numbers."""
    alpha = ours(torch.tensor([1.5, 3.0])).requires_grad_()

    def step():
        alpha.grad = None
        x = dist.Gamma(alpha, 1.0).rsample((8,))
        x.mean().backward()
        return x.detach()

    compiled = xnf.compile(step)
    replays = metrics.replays
    draws = [cpu(compiled()) for _ in range(5)]
    assert metrics.replays - replays >= 2, xnf.metrics_report()
    assert all(not torch.equal(draws[i], draws[i + 1]) for i in range(4))
    assert torch.isfinite(cpu(alpha.grad)).all() and (cpu(alpha.grad) > 0).all()
    assert math.isfinite(float(cpu(draws[-1]).sum()))


needs_device_generators = pytest.mark.skipif(
    hooks_missing() is not None, reason=f"no generators of our device: {hooks_missing()}"
)

# (name, draw(generator)): random ops that take a generator, on our device
GENERATOR_DRAWS = [
    ("randn", lambda g: torch.randn(64, generator=g, device="jax")),
    ("rand", lambda g: torch.rand(64, generator=g, device="jax", dtype=torch.float64)),
    ("randint", lambda g: torch.randint(0, 1000, (64,), generator=g, device="jax")),  # random_.from
    ("randperm", lambda g: torch.randperm(64, generator=g, device="jax")),
    ("normal_", lambda g: ours(torch.zeros(64)).normal_(2.0, 3.0, generator=g)),
    ("uniform_", lambda g: ours(torch.zeros(64)).uniform_(generator=g)),
    ("exponential_", lambda g: ours(torch.zeros(64)).exponential_(generator=g)),
    ("bernoulli", lambda g: torch.bernoulli(ours(torch.full((64,), 0.5)), generator=g)),
    ("multinomial", lambda g: torch.multinomial(ours(torch.ones(64)), 64, generator=g)),
    ("poisson", lambda g: torch.poisson(ours(torch.full((64,), 30.0)), generator=g)),
    ("gamma", lambda g: torch._standard_gamma(ours(torch.full((64,), 2.0)), generator=g)),
    ("rand_like", lambda g: torch.rand_like(ours(torch.zeros(64)), generator=g, dtype=torch.float64)),
    ("randn_like", lambda g: torch.randn_like(ours(torch.zeros(64)), generator=g)),
    ("randint_like", lambda g: torch.randint_like(ours(torch.zeros(64)), 1000, generator=g)),
    ("randint_like_low", lambda g: torch.randint_like(ours(torch.zeros(64)), 5, 1000, generator=g, dtype=torch.int32)),
    ("randint_like_tensor_high", lambda g: torch.randint_like(ours(torch.zeros(64)), ours(torch.tensor(1000)),
                                                              generator=g)),
]


@pytest.mark.parametrize("dtype", [None, torch.int32, torch.float64], ids=str)
def test_like_draws_take_pytorchs_dtype_and_range(dtype):
    """The *_like draws (with or without a generator, a tensor `high`): shape, dtype and
    support as PyTorch CPU's."""
    x = torch.zeros(3, 40)
    for low, high in ((0, 7), (-3, 4)):
        draws = [torch.randint_like(ours(x), low, high, dtype=dtype, generator=torch.Generator().manual_seed(1))]
        if low == 0:
            draws.append(torch.randint_like(ours(x), ours(torch.tensor(high)), dtype=dtype))
        expected = torch.randint_like(x, low, high, dtype=dtype)
        for d in draws:
            assert d.shape == expected.shape and d.dtype == expected.dtype
            d = cpu(d)
            assert d.min() >= low and d.max() < high and d.min() == low and d.max() == high - 1


@needs_device_generators
@pytest.mark.parametrize("draw", [d for _, d in GENERATOR_DRAWS], ids=[n for n, _ in GENERATOR_DRAWS])
def test_a_device_generator_seeds_our_random_ops(draw):
    g = torch.Generator(device="jax")
    assert g.device == torch.device("jax", 0) and g.initial_seed() == torch.Generator().initial_seed()
    g.manual_seed(7)
    torch.manual_seed(1)  # the default generator plays no part
    first, second = cpu(draw(g)), cpu(draw(g))
    g.manual_seed(7)
    torch.manual_seed(2)
    assert torch.equal(cpu(draw(g)), first)
    assert not torch.equal(first, second)  # each draw advances the generator


@needs_device_generators
def test_a_device_generators_state_round_trips():
    g = torch.Generator(device="jax").manual_seed(11)
    state = g.get_state()
    first = cpu(torch.randn(8, generator=g, device="jax"))
    g.set_state(state)
    assert torch.equal(cpu(torch.randn(8, generator=g, device="jax")), first)
    g.set_state(state)
    copied = copy.deepcopy(g)
    assert copied.device == g.device
    assert torch.equal(cpu(torch.randn(8, generator=copied, device="jax")), first)


@needs_device_generators
def test_cpu_ops_refuse_a_device_generator_as_pytorch_refuses_another_devices():
    g = torch.Generator(device="jax")
    with pytest.raises(RuntimeError, match="Expected a 'cpu' device type for generator but found 'jax'"):
        torch.randn(3, generator=g)
    with pytest.raises(RuntimeError, match="Expected a 'cpu' device type for generator but found 'jax'"):
        torch.zeros(3).uniform_(generator=g)


@needs_device_generators
def test_seeded_latents_as_diffusion_pipelines_make_them():
    """diffusers' randn_tensor: a generator made for the model's device, seeded per call."""
    device = ours(torch.zeros(1)).device

    def latents(seed):
        generator = torch.Generator(device).manual_seed(seed)
        return cpu(torch.randn((1, 4, 8, 8), generator=generator, device=device, dtype=torch.float32))

    a, b, c = latents(0), latents(0), latents(1)
    assert a.shape == (1, 4, 8, 8) and torch.equal(a, b) and not torch.equal(a, c)
    assert abs(a.mean().item()) < 0.4 and abs(a.std().item() - 1) < 0.3


def test_random_from_takes_pytorchs_ranges_and_errors():
    torch.manual_seed(0)
    x = ours(torch.zeros(N))
    drawn = cpu(x.random_(-3, 4))
    assert drawn.min() == -3 and drawn.max() == 3 and torch.equal(drawn, drawn.round())
    wide = cpu(ours(torch.zeros(N, dtype=torch.int16)).random_(100, None))
    assert wide.dtype == torch.int16 and wide.min() >= 100 and wide.max() > 2**14
    for bad in (lambda t: t.random_(5, 2), lambda t: t.to(torch.complex64).random_(0, 3)):
        with pytest.raises(RuntimeError) as expected:
            bad(torch.zeros(3))
        with pytest.raises(RuntimeError) as got:
            bad(ours(torch.zeros(3)))
        assert str(got.value) == str(expected.value)


@pytest.mark.parametrize("distribution", ["student_t", "negative_binomial"])
def test_time_series_transformer_generates_from_its_distribution_head(distribution):
    """Hugging Face's probabilistic forecasters sample their predictions from a
    StudentT (gamma draws) or NegativeBinomial (gamma, then Poisson) head."""
    import transformers

    config = transformers.TimeSeriesTransformerConfig(
        prediction_length=4, context_length=16, lags_sequence=[1, 2, 3], num_time_features=2, d_model=16,
        encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
        encoder_ffn_dim=16, decoder_ffn_dim=16, distribution_output=distribution, num_parallel_samples=64)
    torch.manual_seed(0)
    model = transformers.TimeSeriesTransformerForPrediction(config).eval()
    counts = torch.randint(0, 9, (2, 23)).float()  # whole numbers: the negative binomial's support
    past = dict(past_values=counts[:, :19], past_time_features=torch.randn(2, 19, 2),
                past_observed_mask=torch.ones(2, 19))
    future = dict(future_values=counts[:, 19:], future_time_features=torch.randn(2, 4, 2))
    with torch.no_grad():
        expected_loss = model(**past, **future).loss
        moved = xnf.to_xla(copy.deepcopy(model))
        loss = moved(**ours_tree(past), **ours_tree(future)).loss
        sequences = cpu(moved.generate(**ours_tree(past), future_time_features=ours(future["future_time_features"]))
                        .sequences)
        expected = model.generate(**past, future_time_features=future["future_time_features"]).sequences
    torch.testing.assert_close(cpu(loss), expected_loss, rtol=1e-5, atol=1e-6)
    assert sequences.shape == expected.shape == (2, 64, 4) and torch.isfinite(sequences).all()
    if distribution == "negative_binomial":
        assert torch.equal(sequences, sequences.round()) and (sequences >= 0).all()
    # 64 samples per series: their medians agree with PyTorch's to within the spread
    spread = expected.std(1).mean()
    assert (sequences.median(1).values - expected.median(1).values).abs().max() < spread


def ours_tree(tensors):
    return {k: ours(v) for k, v in tensors.items()}


@pytest.mark.parametrize(
    "draw, low, high",
    [
        (lambda device: torch.rand(N, dtype=torch.complex64, device=device), 0.0, 1.0),
        (lambda device: torch.zeros(N, dtype=torch.complex128, device=device).uniform_(2.0, 4.0), 2.0, 4.0),
        (lambda device: torch.rand_like(torch.zeros(N, dtype=torch.complex64, device=device)), 0.0, 1.0),
    ],
    ids=["rand", "uniform_", "rand_like"],
)
def test_complex_uniform_draws_each_part(draw, low, high):
    """PyTorch CPU draws a complex tensor's real and imaginary parts each from U(from, to);
    ours raised JAX's "must be a float dtype"."""
    torch.manual_seed(0)
    expected = draw("cpu")
    got = draw(ours(torch.zeros(1)).device)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    for part in (cpu(got).real, cpu(got).imag):
        assert part.min() >= low and part.max() < high
        _assert_moments(part, (low + high) / 2, (high - low) ** 2 / 12)
