"""JAX interop against PyTorch CPU: value round trips, torch modules and functions as
pure JAX functions under jax.jit / jax.grad / jax.vmap, the jax_jit decorator, and
JAX functions called from torch code (with autograd)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn as nn

import xla_native_functions as xnf
from xla_native_functions.runtime.core.tensor import XlaTensor

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int8,
          torch.uint8, torch.bool, torch.complex64]


def sample(dtype, shape=(3, 4)):
    torch.manual_seed(0)
    if dtype == torch.bool:
        return torch.rand(shape) > 0.5
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(shape, dtype=dtype)
    return torch.randint(0, 100, shape, dtype=dtype)


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.Linear(16, 3))


# ---------------------------------------------------------------- values


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(3, 4), (), (0, 2), (2, 1, 3)], ids=str)
def test_cpu_tensor_round_trip(dtype, shape):
    t = sample(dtype, shape)
    a = xnf.to_jax(t)
    assert isinstance(a, jax.Array)
    assert a.shape == tuple(shape)
    assert np.dtype(a.dtype) == xnf.to_jax(torch.empty(0, dtype=dtype)).dtype
    back = xnf.to_torch_tensor(a, device="cpu")
    assert back.dtype == dtype and back.shape == t.shape
    assert torch.equal(back, t)
    ours = xnf.to_torch_tensor(a)
    assert isinstance(ours, XlaTensor) and ours.dtype == dtype
    assert torch.equal(xnf.to_torch(ours), t)


def test_int64_values_beyond_32_bits_survive():
    t = torch.tensor([2**40 + 1, -(2**50)])
    a = xnf.to_jax(t)
    with xnf.x64():
        assert a.dtype == jnp.int64
        assert int(a[0]) == 2**40 + 1
    assert torch.equal(xnf.to_torch_tensor(a, device="cpu"), t)


def test_cpu_conversion_is_zero_copy_where_dlpack_allows():
    t = torch.randn(64, 64)
    a = xnf.to_jax(t)
    assert a.unsafe_buffer_pointer() == t.data_ptr()


def test_transposed_cpu_tensors_and_arrays_in_other_layouts():
    from xla_native_functions.runtime.core import convert, placement

    t = torch.arange(24.0).reshape(2, 3, 4).transpose(0, 1)
    np.testing.assert_array_equal(np.asarray(xnf.to_jax(t)), t.numpy())
    # DLPack gives a transposed tensor as an array in another layout; passed on not
    # committed to its device, it must not be read as row-major
    permuted = jax.dlpack.from_dlpack(t)
    plus_one = jax.jit(lambda a: a + 1)
    for uncommitted in (convert.uncommitted, placement.uncommitted):
        np.testing.assert_array_equal(np.asarray(plus_one(uncommitted(permuted))), t.numpy() + 1)
    ours = xnf.to_torch_tensor(permuted)
    assert torch.equal(xnf.to_torch(ours.sum(0)), t.sum(0))


def test_our_tensors_convert_without_copy_and_views_read_correctly():
    x = xnf.to_xla(torch.arange(12.0).reshape(3, 4))
    assert xnf.to_jax(x) is x._store.array
    np.testing.assert_array_equal(np.asarray(xnf.to_jax(x.t()[1:])), torch.arange(12.0).reshape(3, 4).t()[1:].numpy())


def test_pytrees_and_modules():
    tree = {"a": torch.ones(2), "b": [torch.zeros(3, dtype=torch.int64), 5, "s"]}
    out = xnf.to_jax(tree)
    assert isinstance(out["a"], jax.Array) and out["b"][1:] == [5, "s"]
    back = xnf.to_torch_tensor(out, device="cpu")
    assert torch.equal(back["b"][0], tree["b"][0])
    model = nn.BatchNorm1d(3)
    state = xnf.to_jax(model)
    assert set(state) == {"weight", "bias", "running_mean", "running_var", "num_batches_tracked"}
    with xnf.x64():
        assert state["num_batches_tracked"].dtype == jnp.int64


def test_to_torch_tensor_rejects_unknown_device():
    with pytest.raises(ValueError, match="device"):
        xnf.to_torch_tensor(jnp.ones(2), device="cuda")


# ---------------------------------------------------------------- torch as JAX


def test_jax_function_of_a_module_matches_torch():
    model = mlp()
    fn, params = xnf.jax_function(model)
    assert set(params) == {n for n, _ in model.named_parameters()}
    x = torch.randn(5, 6)
    out = fn(params, xnf.to_jax(x))
    assert isinstance(out, jax.Array) and out.shape == (5, 3)
    np.testing.assert_allclose(np.asarray(out), model(x).detach().numpy(), rtol=1e-5, atol=1e-6)
    out_jit = jax.jit(fn)(params, xnf.to_jax(x))
    np.testing.assert_allclose(np.asarray(out_jit), np.asarray(out), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_jax_grad_equals_torch_autograd(dtype):
    model = mlp().to(dtype)
    fn, params = xnf.jax_function(model)
    x, y = torch.randn(8, 6, dtype=dtype), torch.randn(8, 3, dtype=dtype)

    def loss(p, x, y):
        return jnp.mean((fn(p, x) - y) ** 2)

    with xnf.x64():
        value, grads = jax.jit(jax.value_and_grad(loss))(params, xnf.to_jax(x), xnf.to_jax(y))
    expected = nn.functional.mse_loss(model(x), y)
    expected.backward()
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(float(value), expected.item(), **tol)
    for name, p in model.named_parameters():
        assert grads[name].dtype == xnf.to_jax(p).dtype
        np.testing.assert_allclose(np.asarray(grads[name]), p.grad.numpy(), **tol)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.qkv = nn.Linear(8, 24)
        self.norm = nn.LayerNorm(8)

    def forward(self, x):
        q, k, v = self.qkv(self.norm(x)).split(8, dim=-1)
        att = torch.softmax(q @ k.transpose(-1, -2) / 8**0.5, dim=-1)
        return x + att @ v


def test_jax_grad_through_an_attention_block():
    block = Attention()
    fn, params = xnf.jax_function(block)
    x = torch.randn(2, 5, 8)
    g = jax.jit(jax.grad(lambda p, x: jnp.sum(fn(p, x) ** 2)))(params, xnf.to_jax(x))
    block(x).pow(2).sum().backward()
    for name, p in block.named_parameters():
        np.testing.assert_allclose(np.asarray(g[name]), p.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_jax_grad_through_a_transformer_layer():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True)
    fn, params = xnf.jax_function(layer)
    x = torch.randn(2, 5, 8)
    g = jax.grad(lambda p: jnp.sum(fn(p, xnf.to_jax(x)) ** 2))(params)
    layer(x).pow(2).sum().backward()
    for name, p in layer.named_parameters():
        np.testing.assert_allclose(np.asarray(g[name]), p.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_tied_weights_get_one_gradient():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.embed = nn.Embedding(10, 4)
            self.out = nn.Linear(4, 10, bias=False)
            self.out.weight = self.embed.weight

        def forward(self, tokens):
            return self.out(self.embed(tokens))

    model = Tied()
    fn, params = xnf.jax_function(model)
    assert set(params) == {"embed.weight"}
    tokens = torch.tensor([[1, 2, 3]])
    g = jax.grad(lambda p: jnp.sum(fn(p, xnf.to_jax(tokens)) ** 2))(params)
    model(tokens).pow(2).sum().backward()
    np.testing.assert_allclose(np.asarray(g["embed.weight"]), model.embed.weight.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_vmap_over_a_torch_function():
    def f(a, b):
        return torch.tanh(a @ b).sum(-1)

    fn, _ = xnf.jax_function(f)
    a, b = torch.randn(7, 3, 4), torch.randn(4, 5)
    out = jax.vmap(lambda ai: fn({}, ai, xnf.to_jax(b)))(xnf.to_jax(a))
    np.testing.assert_allclose(np.asarray(out), f(a, b).numpy(), rtol=1e-5, atol=1e-6)
    per_example = jax.vmap(jax.grad(lambda ai: jnp.sum(fn({}, ai, xnf.to_jax(b)))))(xnf.to_jax(a))
    a_t = a.clone().requires_grad_(True)
    f(a_t, b).sum().backward()
    np.testing.assert_allclose(np.asarray(per_example), a_t.grad.numpy(), rtol=1e-5, atol=1e-6)


class StochasticDepth(nn.Module):
    """Dropout and a per-sample bernoulli_ draw (timm's drop_path), in float32."""

    def __init__(self):
        super().__init__()
        self.linear, self.dropout = nn.Linear(6, 512), nn.Dropout(0.5)

    def forward(self, x):
        keep = x.new_empty(x.shape[0], 1).bernoulli_(0.75)
        return self.dropout(self.linear(x)) * keep


def test_random_ops_under_a_users_jax_jit():
    """Outside x64, a jitted function with dropout failed to lower (its keys and keep
    probabilities were staged with 64-bit types under the runtime's x64 scope)."""
    torch.manual_seed(0)
    model = StochasticDepth()
    x = torch.randn(64, 6)
    dense = model.linear(x).detach().numpy()
    fn, params = xnf.jax_function(model)
    out = np.asarray(jax.jit(fn)(params, xnf.to_jax(x)))
    assert out.dtype == np.float32
    kept = out != 0
    np.testing.assert_allclose(out[kept], 2 * dense[kept], rtol=1e-5, atol=1e-6)  # dropout's scale
    assert 0.3 < kept.mean() < 0.45  # about 0.5 * 0.75
    rows = kept.any(1)
    assert 0.55 < rows.mean() < 0.95  # whole rows dropped by the per-sample draw


def test_jax_function_with_key_draws_from_the_key():
    torch.manual_seed(0)
    model = StochasticDepth()
    x = xnf.to_jax(torch.randn(64, 6))
    fn, params = xnf.jax_function(model, with_key=True)
    step = jax.jit(fn)
    first = np.asarray(step(params, jax.random.key(0), x))
    assert (np.asarray(step(params, jax.random.key(0), x)) == first).all()  # same key, same numbers
    assert (np.asarray(step(params, jax.random.PRNGKey(0), x)) == first).all()  # a raw key: the same
    other = np.asarray(step(params, jax.random.key(1), x))
    assert ((other != 0) != (first != 0)).mean() > 0.2
    # without the key, the jitted function repeats what it drew when traced
    plain = jax.jit(xnf.jax_function(model)[0])
    assert (np.asarray(plain(params, x)) == np.asarray(plain(params, x))).all()
    # a key per example under vmap, gradients through the kept elements
    batched = jax.vmap(fn, in_axes=(None, 0, None))(params, jax.random.split(jax.random.key(2), 3), x)
    assert len({np.asarray(b != 0).tobytes() for b in batched}) == 3
    grads = jax.grad(lambda p, k: fn(p, k, x).sum())(params, jax.random.key(3))
    assert grads["linear.weight"].shape == (512, 6)
    with pytest.raises(TypeError, match=r"takes a JAX PRNG key after the parameters, fn\(params, key, \*inputs\)"):
        fn(params, x)


def test_jax_jit_decorator_on_cpu_and_our_tensors():
    calls = []

    @xnf.jax_jit
    def f(a, b, scale):
        calls.append(1)
        return torch.relu(a @ b) * scale, a.sum(0)

    a, b = torch.randn(3, 4), torch.randn(4, 2)
    out, s = f(a, b, 2.0)
    assert out.device.type == "cpu" and s.device.type == "cpu"
    torch.testing.assert_close(out, torch.relu(a @ b) * 2.0)
    torch.testing.assert_close(s, a.sum(0))
    f(a * 2, b, 2.0)
    assert len(calls) == 1  # same shapes and statics: no retrace
    f(a, b, 3.0)
    assert len(calls) == 2  # a new static value traces again
    out_x, _ = f(xnf.to_xla(a), xnf.to_xla(b), 2.0)
    assert isinstance(out_x, XlaTensor)
    torch.testing.assert_close(xnf.to_torch(out_x), torch.relu(a @ b) * 2.0)


def test_jax_jit_with_a_module_argument_sees_parameter_updates():
    model = mlp()

    @xnf.jax_jit
    def forward(m, x):
        return m(x)

    x = torch.randn(4, 6)
    torch.testing.assert_close(forward(model, x), model(x).detach())
    with torch.no_grad():
        model[0].weight.mul_(2)
    torch.testing.assert_close(forward(model, x), model(x).detach())


def test_jax_jit_writes_back_in_place_updates():
    @xnf.jax_jit
    def step(x, y):
        x.add_(y)
        return x * 2

    x, y = torch.ones(3), torch.arange(3.0)
    out = step(x, y)
    torch.testing.assert_close(x, torch.tensor([1.0, 2.0, 3.0]))
    torch.testing.assert_close(out, torch.tensor([2.0, 4.0, 6.0]))


@pytest.mark.parametrize("ours", [False, True], ids=["cpu", "jax"])
def test_jax_jit_draws_new_random_numbers_every_call(ours):
    """Random ops drew their keys while JAX traced the function, so every later call
    repeated the first call's numbers."""
    dropout = nn.Dropout(0.5)

    @xnf.jax_jit
    def noisy(module, x):
        return module(x) + torch.rand_like(x)

    x = torch.ones(2000)
    x = xnf.to_xla(x) if ours else x
    torch.manual_seed(7)
    first, second = xnf.to_torch(noisy(dropout, x)), xnf.to_torch(noisy(dropout, x))
    assert not torch.equal(first, second)
    kept = first >= 1.0  # dropout keeps (and doubles) about half; rand adds [0, 1)
    assert abs(kept.float().mean().item() - 0.5) < 0.05 and (first[kept] >= 2.0).all()
    torch.manual_seed(7)
    assert torch.equal(xnf.to_torch(noisy(dropout, x)), first)


def test_jax_jit_keys_its_programs_by_the_default_dtype():
    @xnf.jax_jit
    def ramp(x):
        return x + torch.arange(3.0, device=x.device) / 3

    x = torch.zeros(3)
    try:
        for dtype in (torch.float32, torch.float64, torch.float32):
            torch.set_default_dtype(dtype)
            expected = torch.zeros(3) + torch.arange(3.0) / 3
            got = ramp(x)
            assert got.dtype == expected.dtype == dtype
            torch.testing.assert_close(got, expected, rtol=0, atol=0)
    finally:
        torch.set_default_dtype(torch.float32)


def test_jax_jit_of_a_function_without_random_ops_leaves_the_generator_alone():
    @xnf.jax_jit
    def double(x):
        return x * 2

    torch.manual_seed(3)
    double(torch.ones(3))  # the first call: not yet known whether it draws
    double(torch.ones(3))
    after = torch.rand(4)
    torch.manual_seed(3)
    assert torch.equal(torch.rand(4), after)


# ---------------------------------------------------------------- JAX from torch


def test_call_jax_on_our_tensors_keeps_dtypes():
    x = xnf.to_xla(torch.arange(4))
    out = xnf.call_jax(lambda a: a * 2**40, x)
    assert isinstance(out, XlaTensor) and out.dtype == torch.int64
    assert xnf.to_torch(out).tolist() == [0, 2**40, 2**41, 3 * 2**40]
    pair = xnf.call_jax(lambda a, k: {"s": jnp.sum(a), "k": k}, x, k=3)
    assert pair["k"] == 3 and xnf.to_torch(pair["s"]).item() == 6


@pytest.mark.parametrize("ours", [False, True], ids=["cpu", "jax"])
def test_call_jax_gradients_equal_torch(ours):
    torch.manual_seed(0)
    a0, b0 = torch.randn(3, 4, dtype=torch.float64), torch.randn(4, dtype=torch.float64)
    a = (xnf.to_xla(a0) if ours else a0.clone()).requires_grad_(True)
    b = (xnf.to_xla(b0) if ours else b0.clone()).requires_grad_(True)
    out = xnf.call_jax(lambda x, y: (jnp.sin(x) * y, jnp.sum(x)), a, b)
    (out[0].sum() * 3 + out[1]).backward()
    ra, rb = a0.clone().requires_grad_(True), b0.clone().requires_grad_(True)
    ((torch.sin(ra) * rb).sum() * 3 + ra.sum()).backward()
    torch.testing.assert_close(xnf.to_torch(a.grad), ra.grad)
    torch.testing.assert_close(xnf.to_torch(b.grad), rb.grad)


def test_call_jax_inside_a_torch_model_trains():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            return xnf.call_jax(jax.nn.softplus, self.lin(x))

    net = Net()
    x = torch.randn(3, 4)
    net(x).sum().backward()
    ref = nn.functional.softplus(net.lin(x))
    torch.testing.assert_close(net(x), ref)
    g = net.lin.weight.grad.clone()
    net.zero_grad()
    ref.sum().backward()
    torch.testing.assert_close(g, net.lin.weight.grad)


# ---------------------------------------------------------------- examples


def _example(name):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"example_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_optax_training_lowers_the_loss():
    model_loss = _example("train_optax").main(steps=100)
    assert model_loss < 0.2


def test_example_vmap_runs():
    _example("vmap_torch_function").main()


def test_repr_of_a_tensor_traced_by_jax():
    import jax
    import jax.numpy as jnp

    from xla_native_functions.runtime.core.tensor import from_array

    seen = []

    def f(a):
        seen.append(repr(from_array(a)))
        return a

    jax.jit(f)(jnp.ones(3))
    assert seen == ["XlaTensor(<traced by JAX>, size=(3,), dtype=torch.float32, device='jax:0')"]
