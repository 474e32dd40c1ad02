"""PyTorch's other ways of differentiating, on our tensors against PyTorch CPU:
torch.func transforms (vmap, grad, jacrev, jacfwd, hessian, per-example gradients),
torch.autograd.functional, double backward (a gradient penalty) and forward-mode AD
(torch.autograd.forward_ad), in eager mode, compile() and the Dynamo backend."""

from __future__ import annotations

import pytest
import torch
import torch.autograd.forward_ad as fwAD
import torch.nn as nn
from torch.func import functional_call, grad, hessian, jacfwd, jacrev, vmap

import xla_native_functions as xnf

X = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
W = torch.randn(3, 3, generator=torch.Generator().manual_seed(1))


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))


def on(device, *tensors):
    return [t.to(device) for t in tensors]


def assert_same(got, expected):
    if isinstance(got, dict):
        assert got.keys() == expected.keys()
        for k in got:
            assert_same(got[k], expected[k])
    elif isinstance(got, (tuple, list)):
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert_same(g, e)
    else:
        assert got.device.type == "jax"
        torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-6)


TRANSFORMS = {
    "vmap": lambda x, w: vmap(lambda r: torch.sin(r @ w).sum())(x),
    "grad": lambda x, w: grad(lambda w: torch.tanh(x @ w).pow(2).sum())(w),
    "jacrev": lambda x, w: jacrev(lambda v: torch.sin(v) * (v @ w).sum())(x[0]),
    "jacfwd": lambda x, w: jacfwd(lambda v: torch.sin(v) * (v @ w).sum())(x[0]),
    "hessian": lambda x, w: hessian(lambda v: (torch.sin(v @ w) * v).sum())(x[0]),
    "vmap_of_grad": lambda x, w: vmap(grad(lambda v: (v.exp() * (v @ w)).sum()))(x),
    "autograd.functional.jacobian": lambda x, w: torch.autograd.functional.jacobian(lambda v: (v @ w).sin(), x[0]),
    "autograd.functional.hessian": lambda x, w: torch.autograd.functional.hessian(lambda v: (v.sin() * v).sum(), x[0]),
    "autograd.functional.vjp": lambda x, w: torch.autograd.functional.vjp(lambda v: (v @ w).sin(), x, x.cos()),
    "autograd.functional.jvp": lambda x, w: torch.autograd.functional.jvp(lambda v: (v @ w).sin(), x, x.cos()),
}


@pytest.mark.parametrize("name", TRANSFORMS)
def test_function_transforms(name):
    f = TRANSFORMS[name]
    assert_same(f(*on("jax", X, W)), f(X, W))


def per_example_gradients(model, params, x, y):
    def loss(p, x, y):
        return nn.functional.mse_loss(functional_call(model, p, (x[None],)), y[None])

    return vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)


@pytest.mark.parametrize("mode", ["eager", "compile", "torch.compile", "torch.compile_moved"])
def test_per_example_gradients(mode):
    """torch.compile takes the CPU model (the backend moves it) or, op by op, a moved one."""
    y = X.sum(1, keepdim=True).cos()
    model = mlp()
    expected = per_example_gradients(model, {k: v.detach() for k, v in model.named_parameters()}, X, y)
    if mode == "torch.compile":
        step, inputs = torch.compile(per_example_gradients, backend="xla_native"), (mlp(), X, y)
    else:
        step = {"eager": per_example_gradients, "compile": xnf.compile(per_example_gradients),
                "torch.compile_moved": torch.compile(per_example_gradients, backend="xla_native")}[mode]
        inputs = (xnf.to_xla(mlp()), *on("jax", X, y))
    params = {k: v.detach() for k, v in inputs[0].named_parameters()}
    for _ in range(3):  # compile() replays from the third call
        got = step(inputs[0], params, *inputs[1:])
    if mode == "torch.compile":
        got = {k: v.to("jax") for k, v in got.items()}  # the backend returns CPU tensors for CPU inputs
    assert_same(got, expected)


def gradient_penalty_step(model, opt, x):
    x = x.clone().requires_grad_()
    out = model(x)
    g, = torch.autograd.grad(out.sum(), x, create_graph=True)
    loss = out.mean() + ((g.norm(2, dim=1) - 1) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.detach()


@pytest.mark.parametrize("mode", ["eager", "compile", "torch.compile_moved"])
def test_gradient_penalty_training(mode):
    """Double backward: the loss holds a gradient of the model (WGAN-GP's penalty).
    (torch.compile of a CPU model refuses double backward, with inductor as with ours.)"""
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    expected = [gradient_penalty_step(model, opt, X) for _ in range(4)]
    moved = xnf.to_xla(mlp())
    opt = torch.optim.SGD(moved.parameters(), lr=0.1)
    step = {"eager": gradient_penalty_step, "compile": xnf.compile(gradient_penalty_step),
            "torch.compile_moved": torch.compile(gradient_penalty_step, backend="xla_native")}[mode]
    got = [step(moved, opt, xnf.to_xla(X)) for _ in range(4)]
    assert_same(got, expected)
    assert_same(list(moved.parameters()), [p.detach() for p in model.parameters()])


def tangent(model, x, t):
    with fwAD.dual_level():
        return fwAD.unpack_dual(model(fwAD.make_dual(x, t))).tangent


FORWARD_AD_MODELS = {
    "mlp": (lambda: nn.Sequential(nn.Linear(6, 8), nn.GELU(), nn.LayerNorm(8), nn.Linear(8, 3), nn.Softmax(-1)),
            (4, 6)),
    "conv": (lambda: nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                                   nn.Flatten()), (2, 3, 8, 8)),
}


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("name", FORWARD_AD_MODELS)
def test_forward_mode_ad(name, training):
    make, shape = FORWARD_AD_MODELS[name]
    torch.manual_seed(0)
    model = make().train(training)
    x, t = torch.randn(shape), torch.randn(shape)
    moved = xnf.to_xla(make().train(training))
    moved.load_state_dict(model.state_dict())
    expected = tangent(model, x, t)
    assert_same(tangent(moved, *on("jax", x, t)), expected)
    if not training:  # the batch statistics would have moved the running ones
        assert_same([b for b in moved.buffers() if b.is_floating_point()],
                    [b for b in model.buffers() if b.is_floating_point()])


@pytest.mark.parametrize("mode", ["compile", "torch.compile", "torch.compile_moved"])
def test_forward_mode_ad_compiled(mode):
    """With a moved model, Dynamo breaks the graph at forward AD and runs the model op by
    op, where PyTorch makes zero tangents through our device's factory kernel: Dynamo
    must not try to compile that kernel's frame."""
    model = mlp().eval()
    t = X.cos()
    expected = tangent(model, X, t)
    if mode == "torch.compile":
        got = torch.compile(tangent, backend="xla_native")(mlp().eval(), X, t)
        assert got.device.type == "cpu"
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
        return
    moved = xnf.to_xla(mlp().eval())
    step = xnf.compile(tangent) if mode == "compile" else torch.compile(tangent, backend="xla_native")
    for _ in range(3):
        got = step(moved, *on("jax", X, t))
    assert_same(got, expected)


def test_size_and_storage_comparisons():
    """The metadata questions forward AD asks of a primal and its tangent, views of one
    storage included."""
    pairs = [lambda b: (b, torch.ones(4, 3)), lambda b: (b, b[1:]), lambda b: (b, b.t()), lambda b: (b[1:], b[:3]),
             lambda b: (b, torch.ones(12)), lambda b: (b[2], torch.ones(13)), lambda b: (b[:, 0], torch.ones(4))]
    base = torch.zeros(4, 3)
    for pair in pairs:
        a, b = pair(base)
        a_jax, b_jax = pair(xnf.to_xla(base))
        b_jax = b_jax.to("jax")
        assert a_jax.is_same_size(b_jax) == a.is_same_size(b)
        assert torch.ops.aten._has_same_storage_numel(a_jax, b_jax) == torch.ops.aten._has_same_storage_numel(a, b)
