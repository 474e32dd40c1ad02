"""Note [Channels-last convolution programs] (runtime/exec/channels_last.py): compiled
graphs with convolutions hold the values between convolutions channels-last, computing
the same values as the program as traced."""

from __future__ import annotations

import copy

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from jax import lax

import xla_native_functions as xnf
from xla_native_functions.runtime.exec.channels_last import channels_last

NCHW = ("NCHW", "OIHW", "NCHW")


def _conv(x, w, stride=1):
    return lax.conv_general_dilated(x, w, (stride, stride), ((1, 1), (1, 1)), dimension_numbers=NCHW)


def _batch_norm(x):
    mean = jnp.mean(x, axis=(0, 2, 3), keepdims=True)
    var = jnp.mean((x - mean) ** 2, axis=(0, 2, 3), keepdims=True)
    return (x - mean) * lax.rsqrt(var + 1e-5)


def _max_pool(x):
    padded = lax.pad(x, -jnp.inf, ((0, 0, 0), (0, 0, 0), (1, 1, 0), (1, 1, 0)))
    return lax.reduce_window(padded, -jnp.inf, lax.max, (1, 1, 3, 3), (1, 1, 2, 2), "VALID")


# Programs of the kinds compiled graphs hold: every equation kind the rewrite maps
# (elementwise with broadcasts and size-1 operands, reductions, windows, pads, slices,
# concatenations, transposes), next to ones it leaves to the logical values (reshape,
# products, an operand held in the logical order).
PROGRAMS = {
    "conv, bias, relu, conv": lambda x, w, v, b: _conv(jax.nn.relu(_conv(x, w) + b[None, :, None, None]), v),
    "batch norm between convs": lambda x, w, v, b: _conv(jax.nn.relu(_batch_norm(_conv(x, w))), v),
    "residual": lambda x, w, v, b: jax.nn.relu(_conv(jax.nn.relu(_conv(x, w)), v) + x),
    "max pool, strided conv": lambda x, w, v, b: _conv(_max_pool(_conv(x, w)), v, stride=2),
    "channel concatenation and slice": lambda x, w, v, b: _conv(
        jnp.concatenate([_conv(x, w), _conv(x, v)], axis=1)[:, 2:10, 1:, :-1], v),
    "mean pool, linear": lambda x, w, v, b: jnp.mean(_conv(x, w), axis=(2, 3)) @ v.reshape(8, -1)[:, :8].T,
    "flatten": lambda x, w, v, b: _conv(x, w).reshape(x.shape[0], -1) * 2.0,
    "argmax over channels": lambda x, w, v, b: jnp.argmax(_conv(x, w), axis=1),
    "transposed activation": lambda x, w, v, b: jnp.swapaxes(_conv(x, w), 2, 3) + 1.0,
    "select on a comparison": lambda x, w, v, b: _conv(jnp.where(_conv(x, w) > 0, x, 0.0), v),
    "gradients": jax.grad(lambda x, w, v, b: jnp.sum(_conv(jax.nn.relu(_batch_norm(_conv(x, w))), v) ** 2),
                          argnums=(0, 1, 2)),
    "max pool gradient": jax.grad(lambda x, w, v, b: jnp.sum(_max_pool(_conv(x, w)) ** 2), argnums=(0, 1)),
}


def _inputs():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 8, 10, 12)).astype(np.float32)
    w = rng.standard_normal((8, 8, 3, 3)).astype(np.float32) / 8
    v = rng.standard_normal((8, 8, 3, 3)).astype(np.float32) / 8
    b = rng.standard_normal(8).astype(np.float32)
    return tuple(jnp.asarray(a) for a in (x, w, v, b))


def _convolution_operands(closed) -> list:
    """For each convolution of the program, the primitives producing its operands."""
    producers = {}
    found = []
    for eqn in closed.jaxpr.eqns:
        if eqn.primitive is lax.conv_general_dilated_p:
            found.append([producers.get(v) for v in eqn.invars])
        for out in eqn.outvars:
            producers[out] = eqn.primitive
    return found


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_rewritten_program_gives_the_traced_programs_values(name):
    fn = PROGRAMS[name]
    args = _inputs()
    expected = jax.tree.leaves(jax.jit(fn)(*args))
    got = jax.tree.leaves(jax.jit(channels_last(fn))(*args))
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=2e-5, atol=2e-5)


def test_convolutions_read_the_previous_convolutions_output_without_a_transpose():
    args = _inputs()
    closed = jax.make_jaxpr(channels_last(PROGRAMS["batch norm between convs"]))(*args)
    first, second = _convolution_operands(closed)
    assert first[0] is None  # the program's NCHW input, read as it is
    assert second[0] is lax.max_p  # batch norm and ReLU computed channels-last
    dn = [e for e in closed.jaxpr.eqns if e.primitive is lax.conv_general_dilated_p][1].params["dimension_numbers"]
    assert dn.lhs_spec == (0, 3, 1, 2) and dn.out_spec == (0, 3, 1, 2)
    # the traced program transposes nothing: each convolution reads its NCHW operand
    traced = jax.make_jaxpr(PROGRAMS["batch norm between convs"])(*args)
    assert not any(e.primitive is lax.transpose_p for e in traced.jaxpr.eqns)


def test_static_arguments_pass_through():
    def fn(x, scale, w):
        return _conv(x, w) * scale[0]

    x, w, _, _ = _inputs()
    got = jax.jit(channels_last(fn, static_argnums=(1,)), static_argnums=(1,))(x, (3.0,), w)
    np.testing.assert_allclose(np.asarray(got), np.asarray(fn(x, (3.0,), w)), rtol=2e-5, atol=2e-5)


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8),
                                        torch.nn.ReLU(), torch.nn.MaxPool2d(3, 2, 1))
        self.conv1 = torch.nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x):
        h = self.stem(x)
        h = torch.relu(h + self.conv2(torch.relu(self.bn1(self.conv1(h)))))
        return self.head(h.mean((2, 3)))


def _train(model, x, y):
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()
    return step


def _case():
    torch.manual_seed(0)
    return _Block(), torch.randn(4, 3, 16, 16), torch.randint(0, 5, (4,))


@pytest.mark.parametrize("enabled", [True, False])
def test_compiled_conv_training_matches_pytorch(monkeypatch, enabled):
    monkeypatch.setattr(xnf.config, "channels_last_convolutions", enabled)
    model, x, y = _case()
    ref = _train(model, x, y)
    moved = xnf.to_xla(copy.deepcopy(model))
    step = xnf.compile(_train(moved, xnf.to_xla(x), xnf.to_xla(y)))
    for _ in range(3):
        expected, got = ref(), step()
        torch.testing.assert_close(xnf.to_torch(got), expected, rtol=1e-4, atol=1e-5)
    for (name, p), q in zip(model.named_parameters(), moved.parameters()):
        torch.testing.assert_close(xnf.to_torch(q), p.detach(), rtol=1e-4, atol=1e-5, msg=name)
    torch.testing.assert_close(xnf.to_torch(moved.bn1.running_var), model.bn1.running_var, rtol=1e-4, atol=1e-6)


def test_compiled_conv_step_copies_fewer_activations(monkeypatch):
    model, x, y = _case()
    moved = xnf.to_xla(model)
    step = _train(moved, xnf.to_xla(x), xnf.to_xla(y))
    counts = {}
    for enabled in (False, True):
        monkeypatch.setattr(xnf.config, "channels_last_convolutions", enabled)
        text = xnf.hlo(step, dialect="optimized_hlo")
        entry = text[text.index("ENTRY"):]
        names = [line.split("=")[0] for line in entry.splitlines() if "=" in line]
        counts[enabled] = sum("transpose" in name for name in names)
    assert counts[True] < counts[False], counts


@pytest.mark.parametrize("enabled", [True, False])
def test_backend_conv_training_matches_pytorch(monkeypatch, enabled):
    monkeypatch.setattr(xnf.config, "channels_last_convolutions", enabled)
    torch._dynamo.reset()
    model, x, y = _case()
    ours = copy.deepcopy(model)
    ref, step = _train(model, x, y), _train(torch.compile(ours, backend="xla_native"), x, y)
    for _ in range(3):
        torch.testing.assert_close(step(), ref(), rtol=1e-4, atol=1e-5)
    for (name, p), q in zip(model.named_parameters(), ours.parameters()):
        torch.testing.assert_close(q.detach(), p.detach(), rtol=1e-4, atol=1e-5, msg=name)
