"""Lazy modules (nn.LazyLinear, LazyConv*, LazyBatchNorm*, ...) moved with to_xla before
their first forward: they stay uninitialized, materialize on our device at the first
forward (eager, compile(), lazy_mode(); training and eval), initialized with our random
numbers exactly as a module built on our device after the same seed (Note [Lazy
modules] in runtime/core/uninitialized.py), and compute what the same module does on
PyTorch CPU with those values; to_torch before and after the first forward."""

from __future__ import annotations

import io

import pytest
import torch
from torch import nn
from torch.nn.parameter import UninitializedBuffer, UninitializedParameter, is_lazy

import xla_native_functions as xnf
from xla_native_functions.runtime.core.tensor import DEVICE, XlaTensor

# lazy module, the module it becomes (built on our device), a CPU input
CASES = {
    "linear": (lambda: nn.LazyLinear(6), lambda: nn.Linear(5, 6, device=DEVICE), (4, 5)),
    "conv1d": (lambda: nn.LazyConv1d(4, 3), lambda: nn.Conv1d(2, 4, 3, device=DEVICE), (2, 2, 9)),
    "conv2d": (lambda: nn.LazyConv2d(4, 3, padding=1), lambda: nn.Conv2d(3, 4, 3, padding=1, device=DEVICE),
               (2, 3, 6, 6)),
    "conv_transpose2d": (lambda: nn.LazyConvTranspose2d(2, 3), lambda: nn.ConvTranspose2d(3, 2, 3, device=DEVICE),
                         (1, 3, 4, 4)),
    "batchnorm1d": (lambda: nn.LazyBatchNorm1d(), lambda: nn.BatchNorm1d(5, device=DEVICE), (4, 5)),
    "batchnorm2d": (lambda: nn.LazyBatchNorm2d(), lambda: nn.BatchNorm2d(3, device=DEVICE), (2, 3, 4, 4)),
    "instancenorm1d": (lambda: nn.LazyInstanceNorm1d(affine=True, track_running_stats=True),
                       lambda: nn.InstanceNorm1d(2, affine=True, track_running_stats=True, device=DEVICE), (3, 2, 7)),
}


def _state(module):
    return {k: xnf.to_torch(v) for k, v in module.state_dict().items()}


def _reference(make_plain, state, training):
    ref = make_plain()
    xnf.to_torch(ref)
    ref.load_state_dict(state)
    return ref.train(training)


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("case", list(CASES))
def test_lazy_module_materializes_on_first_forward_eagerly(case, training):
    make_lazy, make_plain, shape = CASES[case]
    x = torch.randn(shape)
    lazy = xnf.to_xla(make_lazy()).train(training)
    assert lazy.has_uninitialized_params()
    lazy_tensors = [t for t in list(lazy.parameters()) + list(lazy.buffers()) if is_lazy(t)]
    assert lazy_tensors and all(isinstance(t, XlaTensor) and t.device == DEVICE for t in lazy_tensors)
    with pytest.raises(RuntimeError, match="Can't access the shape of an uninitialized"):
        lazy_tensors[0].shape

    torch.manual_seed(7)
    out = lazy(xnf.to_xla(x))
    torch.manual_seed(7)
    plain = make_plain()  # initialized on our device, after the same seed

    assert type(lazy) is type(plain)
    assert not any(is_lazy(t) for t in list(lazy.parameters()) + list(lazy.buffers()))
    for t in lazy_tensors:  # the same objects, now tensors of ours
        assert type(t) is XlaTensor and not is_lazy(t)
    for name, p in lazy.named_parameters():
        assert isinstance(p, nn.Parameter) and p.requires_grad, name
    # same values as the module built on our device (before the forward updated stats)
    initial = {k: xnf.to_torch(v) for k, v in plain.state_dict().items()}
    for name, value in _state(lazy).items():
        if "running" not in name and "num_batches" not in name:
            torch.testing.assert_close(value, initial[name], rtol=0, atol=0, msg=name)
    # and the forward PyTorch CPU computes with those values
    ref = _reference(make_plain, initial, training)
    expected = ref(x)
    torch.testing.assert_close(xnf.to_torch(out), expected)
    for name, value in _state(lazy).items():  # running statistics updated alike
        torch.testing.assert_close(value, ref.state_dict()[name], msg=name)


def test_lazy_training_step_with_an_optimizer_built_before_the_first_forward():
    torch.manual_seed(0)
    x, target = torch.randn(8, 5), torch.randn(8, 3)
    model = xnf.to_xla(nn.Sequential(nn.LazyLinear(16), nn.LazyBatchNorm1d(), nn.ReLU(), nn.LazyLinear(3)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)  # holds the placeholders themselves
    torch.manual_seed(1)
    loss = nn.functional.mse_loss(model(xnf.to_xla(x)), xnf.to_xla(target))
    loss.backward()
    opt.step()
    assert all(p.grad is not None and p.grad.shape == p.shape for p in model.parameters())

    torch.manual_seed(1)  # the same modules built on our device: the same initial values
    ref = nn.Sequential(nn.Linear(5, 16, device=DEVICE), nn.BatchNorm1d(16, device=DEVICE), nn.ReLU(),
                        nn.Linear(16, 3, device=DEVICE))
    xnf.to_torch(ref)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    ref_loss = nn.functional.mse_loss(ref(x), target)
    ref_loss.backward()
    ref_opt.step()
    torch.testing.assert_close(xnf.to_torch(loss), ref_loss)
    for name, value in _state(model).items():
        torch.testing.assert_close(value, ref.state_dict()[name], msg=name)


@pytest.mark.parametrize("mode", ["compile", "lazy_mode"])
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_lazy_module_materializes_inside_traced_calls(mode, training):
    torch.manual_seed(0)
    x = torch.randn(6, 5)
    model = xnf.to_xla(nn.Sequential(nn.LazyLinear(8), nn.LazyBatchNorm1d(), nn.Tanh())).train(training)
    eager = xnf.to_xla(nn.Sequential(nn.LazyLinear(8), nn.LazyBatchNorm1d(), nn.Tanh())).train(training)
    torch.manual_seed(3)
    expected = eager(xnf.to_xla(x))

    def step(inp):
        return model(inp)

    torch.manual_seed(3)
    if mode == "compile":
        compiled = xnf.compile(step)
        out = compiled(xnf.to_xla(x))
    else:
        with xnf.lazy_mode():
            out = step(xnf.to_xla(x))
            xnf.mark_step()
    assert not any(is_lazy(t) for t in list(model.parameters()) + list(model.buffers()))
    torch.testing.assert_close(xnf.to_torch(out), xnf.to_torch(expected))
    for name, value in _state(model).items():
        torch.testing.assert_close(value, _state(eager)[name], msg=name)
    if mode == "compile":  # later calls: an initialized module, traced then replayed
        for _ in range(3):
            eager_out = eager(xnf.to_xla(x))
            out = compiled(xnf.to_xla(x))
        torch.testing.assert_close(xnf.to_torch(out), xnf.to_torch(eager_out))
        for name, value in _state(model).items():
            torch.testing.assert_close(value, _state(eager)[name], msg=name)


def test_to_torch_of_an_uninitialized_moved_module_is_pytorchs_lazy_module():
    model = xnf.to_xla(nn.Sequential(nn.LazyLinear(4), nn.LazyBatchNorm1d()))
    back = xnf.to_torch(model)
    assert type(back[0].weight) is UninitializedParameter and back[0].weight.device.type == "cpu"
    assert type(back[1].running_mean) is UninitializedBuffer
    x = torch.randn(3, 5)
    out = back(x)  # PyTorch's own lazy initialization, on the CPU
    assert type(back[0].weight) is nn.Parameter and back[0].weight.shape == (4, 5) and out.shape == (3, 4)


def test_to_torch_after_materializing():
    model = xnf.to_xla(nn.LazyConv2d(2, 3))
    x = torch.randn(1, 3, 5, 5)
    out = model(xnf.to_xla(x))
    back = xnf.to_torch(model)
    assert type(back.weight) is nn.Parameter and back.weight.device.type == "cpu"
    torch.testing.assert_close(back(x), xnf.to_torch(out))


def test_uninitialized_moved_module_loads_a_state_dict():
    torch.manual_seed(0)
    source = nn.Linear(5, 3)
    lazy = xnf.to_xla(nn.LazyLinear(3))
    lazy.load_state_dict(source.state_dict())  # materializes from the saved shapes
    assert isinstance(lazy.weight, XlaTensor) and not is_lazy(lazy.weight)
    x = torch.randn(2, 5)
    torch.testing.assert_close(xnf.to_torch(lazy(xnf.to_xla(x))), source(x))


def test_uninitialized_moved_module_pickles_as_uninitialized():
    lazy = xnf.to_xla(nn.LazyLinear(3))
    buffer = io.BytesIO()
    torch.save(lazy, buffer)
    loaded = torch.load(io.BytesIO(buffer.getvalue()), weights_only=False)
    assert loaded.has_uninitialized_params() and loaded.weight.device == DEVICE
    out = loaded(xnf.to_xla(torch.randn(2, 4)))
    assert out.shape == (2, 3) and loaded.weight.shape == (3, 4)


def test_dtype_of_the_placeholder_is_kept():
    lazy = xnf.to_xla(nn.LazyLinear(3, dtype=torch.float64))
    out = lazy(xnf.to_xla(torch.randn(2, 4, dtype=torch.float64)))
    assert lazy.weight.dtype == torch.float64 and out.dtype == torch.float64


def test_materializing_on_another_device_is_refused():
    lazy = xnf.to_xla(nn.LazyLinear(3))
    with pytest.raises(ValueError, match="to_torch"):
        lazy.weight.materialize((3, 4), device="cpu")
