"""torch.optim's fused optimizers (`fused=True`: Adam, AdamW, SGD, Adagrad) on our
device against the same optimizers fused on PyTorch CPU: parameters, optimizer state
and gradients after several steps, eagerly and in compile()d steps, with tensor
learning rates, low-precision parameters and GradScaler's skipped steps."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

import xla_native_functions as xnf
from xla_native_functions.runtime.platform.metrics import metrics

OPTIMIZERS = {
    "Adam": lambda p: torch.optim.Adam(p, lr=0.01, fused=True),
    "Adam_weight_decay_amsgrad": lambda p: torch.optim.Adam(p, lr=0.01, weight_decay=0.1, amsgrad=True, fused=True),
    "AdamW": lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1, fused=True),
    "AdamW_amsgrad_maximize": lambda p: torch.optim.AdamW(p, lr=0.01, amsgrad=True, maximize=True, fused=True),
    "AdamW_tensor_lr": lambda p: torch.optim.AdamW(p, lr=torch.tensor(0.01), betas=(0.8, 0.9), fused=True),
    "SGD": lambda p: torch.optim.SGD(p, lr=0.1, fused=True),
    "SGD_momentum_dampening": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, dampening=0.2, weight_decay=0.01,
                                                        fused=True),
    "SGD_nesterov_maximize": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, maximize=True,
                                                       fused=True),
    "Adagrad": lambda p: torch.optim.Adagrad(p, lr=0.1, lr_decay=0.01, weight_decay=0.1, fused=True),
}


def model(dtype=torch.float32):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 2)).to(dtype)


def train(net, make_optimizer, device, wrap=None, steps=4):
    """Losses, model and optimizer after `steps` steps; `wrap` compiles the step."""
    opt = make_optimizer(net.parameters())
    x = torch.randn(8, 6, generator=torch.Generator().manual_seed(1), dtype=net[0].weight.dtype).to(device)

    def step():
        opt.zero_grad()
        loss = net(x).square().mean()
        loss.backward()
        opt.step()
        return loss.detach()

    if wrap is not None:
        step = wrap(step)
    losses = [step().cpu() for _ in range(steps)]
    return losses, net, opt


def assert_state_matches(net, opt, expected_net, expected_opt, **tolerance):
    for p, e in zip(net.parameters(), expected_net.parameters()):
        assert p.device.type == "jax" and p.dtype == e.dtype
        torch.testing.assert_close(p.detach().cpu(), e.detach(), **tolerance)
        torch.testing.assert_close(p.grad.cpu(), e.grad, **tolerance)
    for p, e in zip(net.parameters(), expected_net.parameters()):
        state, expected = opt.state[p], expected_opt.state[e]
        assert state.keys() == expected.keys()
        for k, v in expected.items():
            if isinstance(v, torch.Tensor):
                assert state[k].device.type == "jax", k
                torch.testing.assert_close(state[k].cpu(), v, **tolerance)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", OPTIMIZERS)
def test_fused_optimizer_matches_pytorch_cpu(name, compiled):
    expected_losses, expected_net, expected_opt = train(model(), OPTIMIZERS[name], "cpu")
    replays = metrics.replays
    losses, net, opt = train(xnf.to_xla(model()), OPTIMIZERS[name], "jax", xnf.compile if compiled else None)
    torch.testing.assert_close(torch.stack(losses), torch.stack(expected_losses), rtol=1e-5, atol=1e-6)
    assert_state_matches(net, opt, expected_net, expected_opt, rtol=1e-5, atol=1e-6)
    if compiled and name != "AdamW_tensor_lr":
        assert metrics.replays > replays, xnf.metrics_report()


@pytest.mark.parametrize("name", ["Adam_weight_decay_amsgrad", "AdamW", "Adagrad"])
def test_low_precision_parameters_update_in_float32(name):
    """PyTorch's kernels update bfloat16 parameters in float32 and round once (Adagrad's
    vectorized loop rounds its constants to bfloat16 first): at least 99% of the results
    are PyTorch's bit for bit, the rest one bfloat16 step away (XLA contracts AdamW's
    decayed parameter minus the step into one fused multiply-add, where PyTorch rounds
    the product first; rounding each operation in bfloat16 instead would be off in most
    elements). Fixed gradients: a bfloat16 backward pass may round differently."""

    def steps(device):
        g = torch.Generator().manual_seed(4)
        params = [torch.randn(n, generator=g).bfloat16().to(device).requires_grad_() for n in (4096, 7)]
        grads = [torch.randn(n, generator=g).bfloat16().to(device) for n in (4096, 7)]
        opt = OPTIMIZERS[name](params)
        for _ in range(3):
            for p, grad in zip(params, grads):
                p.grad = grad.clone()
            opt.step()
        return params, opt

    expected, expected_opt = steps("cpu")
    params, opt = steps("jax")
    for p, e in zip(params, expected):
        for got, want in [(p.detach(), e.detach())] + [(opt.state[p][k], v) for k, v in expected_opt.state[e].items()]:
            got = got.cpu()
            torch.testing.assert_close(got, want, rtol=2**-7, atol=0)
            assert (got == want).float().mean() >= 0.99


def test_low_precision_sgd_momentum_is_the_kernels_formula():
    """SGD with momentum on bfloat16 parameters, against the formula of PyTorch's CPU
    kernel written out here: in float32, the buffer stored rounded. (PyTorch CPU's own
    fused kernel reads the bfloat16 buffer as float32 in its vectorized loop: 64 elements
    end up to 1.36 away after three steps; docs/semantics.md.)"""
    g = torch.Generator().manual_seed(3)
    param, grad = torch.randn(64, generator=g).bfloat16(), torch.randn(64, generator=g).bfloat16()
    lr, momentum, dampening, weight_decay = 0.1, 0.9, 0.2, 0.01
    expected_param, expected_buf = param.clone(), None
    for _ in range(3):
        d = grad.float() + expected_param.float() * weight_decay
        d = d if expected_buf is None else expected_buf.float() * momentum + d * (1 - dampening)
        expected_buf = d.bfloat16()
        expected_param = (expected_param.float() - d * lr).bfloat16()
    params, grads, bufs = [xnf.to_xla(param)], [xnf.to_xla(grad)], [xnf.to_xla(torch.zeros(64).bfloat16())]
    for i in range(3):
        torch._fused_sgd_(params, grads, bufs, weight_decay=weight_decay, momentum=momentum, lr=lr,
                          dampening=dampening, nesterov=False, maximize=False, is_first_step=i == 0)
    torch.testing.assert_close(params[0].cpu(), expected_param, rtol=0, atol=0)
    torch.testing.assert_close(bufs[0].cpu(), expected_buf, rtol=0, atol=0)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", ["Adam", "SGD_momentum_dampening", "Adagrad"])
def test_grad_scaler_passes_its_scale_and_skips_non_finite_steps(name, compiled):
    """GradScaler hands fused optimizers its scale and non-finite flag (grad_scale,
    found_inf): the kernel unscales the gradients and skips a step with an inf."""

    def run(net, device, compiled):
        opt = OPTIMIZERS[name](net.parameters())
        scaler = torch.amp.GradScaler(device, init_scale=1024.0, growth_interval=2)

        def step(x):
            opt.zero_grad()
            loss = net(x).square().mean()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            return loss.detach()

        step = xnf.compile(step) if compiled else step
        g = torch.Generator().manual_seed(2)
        for i in range(5):
            x = torch.randn(8, 6, generator=g)
            if i == 2:
                x[0, 0] = float("inf")
            step(x.to(device))
        return net, opt, scaler.get_scale()

    expected_net, expected_opt, expected_scale = run(model(), "cpu", False)
    net, opt, scale = run(xnf.to_xla(model()), "jax", compiled)
    assert scale == expected_scale
    for p, e in zip(net.parameters(), expected_net.parameters()):
        torch.testing.assert_close(p.detach().cpu(), e.detach(), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(p.grad.cpu(), e.grad, rtol=1e-5, atol=1e-6)  # unscaled in place


def test_whole_step_under_torch_compile():
    """A torch.compile'd step with a fused optimizer: the backend runs the update."""
    expected_losses, expected_net, _ = train(model(), OPTIMIZERS["AdamW"], "cpu")
    losses, net, _ = train(model(), OPTIMIZERS["AdamW"], "cpu", lambda step: torch.compile(step, backend="xla_native"))
    torch.testing.assert_close(torch.stack(losses), torch.stack(expected_losses), rtol=1e-5, atol=1e-6)
    for p, e in zip(net.parameters(), expected_net.parameters()):
        torch.testing.assert_close(p.detach(), e.detach(), rtol=1e-5, atol=1e-6)


def test_mismatched_lists_raise():
    params = [xnf.to_xla(torch.ones(3))]
    with pytest.raises(RuntimeError, match="grads"):
        torch._fused_sgd_(params, [], [], weight_decay=0.0, momentum=0.0, lr=0.1, dampening=0.0, nesterov=False,
                          maximize=False, is_first_step=False)
    with pytest.raises(RuntimeError, match="max_exp_avg_sqs"):
        torch._fused_adam_(params, params, params, params, [], [xnf.to_xla(torch.tensor(1.0))], lr=0.1, beta1=0.9,
                           beta2=0.99, weight_decay=0.0, eps=1e-8, amsgrad=True, maximize=False)
    unchanged = copy.deepcopy(params[0].cpu())
    torch.testing.assert_close(params[0].cpu(), unchanged)
