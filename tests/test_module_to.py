"""Moving modules keeps their parameter objects, as `module.to("cuda")` does (Note
[Parameters keep their identity across devices] in runtime/frontends/parameter_moves.py):
tied weights stay tied, an optimizer built before the move trains the moved values, and
training matches PyTorch CPU's; `model.to("jax")`, `to_xla`, `.cpu()` and `to_torch`."""

from __future__ import annotations

import copy
import weakref

import pytest
import torch

import xla_native_functions as xnf
from xla_native_functions.runtime.core.tensor import XlaTensor

MOVES = {
    "to('jax')": lambda m: m.to("jax"),
    "to(torch.device)": lambda m: m.to(torch.device("jax")),
    "to_xla": xnf.to_xla,
}


class TiedLM(torch.nn.Module):
    """An embedding tied to the output layer (GPT-2's wte and lm_head), an LSTM (whose
    forward reads its list of weights) and a batch norm (buffers)."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(11, 8)
        self.rnn = torch.nn.LSTM(8, 8, batch_first=True)
        self.norm = torch.nn.BatchNorm1d(8)
        self.head = torch.nn.Linear(8, 11, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids):
        h, _ = self.rnn(self.emb(ids))
        return self.head(self.norm(h.transpose(1, 2)).transpose(1, 2))


def _same(tensors, expected) -> bool:
    return [id(t) for t in tensors] == [id(t) for t in expected]


def _train(model, opt, ids, steps=3):
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        logits = model(ids)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids.flatten())
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("move", list(MOVES))
def test_ties_and_an_optimizer_built_before_the_move_train_as_on_the_cpu(move):
    torch.manual_seed(0)
    cpu = TiedLM()
    model = copy.deepcopy(cpu)
    params = list(model.parameters())
    opt = torch.optim.Adam(model.parameters(), lr=0.05)  # before the move, as CUDA allows
    ref_opt = torch.optim.Adam(cpu.parameters(), lr=0.05)
    assert MOVES[move](model) is model
    assert _same(model.parameters(), params) and all(p.__class__ is XlaTensor for p in params)
    assert model.head.weight is model.emb.weight and len(params) == len(list(cpu.parameters()))
    ids = torch.randint(0, 11, (2, 5))
    ref = _train(cpu, ref_opt, ids)
    ours = _train(model, opt, ids.to("jax"))
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)
    assert model.cpu() is model and _same(model.parameters(), params)  # and back, the same objects
    assert all(p.__class__ is torch.nn.Parameter for p in params) and model.head.weight is model.emb.weight
    for (name, p), q in zip(model.named_parameters(), cpu.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-5, msg=name)
    for name, b in model.named_buffers():
        assert b.device.type == "cpu", name


def test_to_torch_keeps_the_objects_and_the_tie():
    model = xnf.to_xla(TiedLM())
    params = list(model.parameters())
    xnf.to_torch(model)
    assert _same(model.parameters(), params) and params[0].device.type == "cpu"
    assert model.head.weight is model.emb.weight


@pytest.mark.parametrize("move", list(MOVES))
def test_attributes_a_program_set_on_parameters_move_with_them(move):
    # Mamba marks parameters `_no_weight_decay` and reads the mark when it builds the
    # optimizer's groups, after the model moved
    layer = torch.nn.Linear(3, 2)
    layer.weight._no_weight_decay = True
    MOVES[move](layer)
    assert layer.weight.__class__ is XlaTensor and layer.weight._no_weight_decay is True
    decay = [p for p in layer.parameters() if not getattr(p, "_no_weight_decay", False)]
    assert _same(decay, [layer.bias])
    if move == "to_xla":
        xnf.to_torch(layer)
    else:
        layer.cpu()
    assert layer.weight.__class__ is torch.nn.Parameter and layer.weight._no_weight_decay is True


def test_gradients_move_with_their_parameters():
    layer, x = torch.nn.Linear(3, 2), torch.randn(4, 3)
    layer(x).sum().backward()
    weight, grad = layer.weight, layer.weight.grad.clone()
    layer.to("jax")
    assert layer.weight is weight and layer.weight.grad.__class__ is XlaTensor
    torch.testing.assert_close(layer.weight.grad.cpu(), grad)
    layer(x.to("jax")).sum().backward()  # accumulates into the moved gradient
    torch.testing.assert_close(layer.weight.grad.cpu(), 2 * grad)


def test_a_parameter_that_cannot_take_the_move_in_place_is_replaced():
    # A weak reference forbids swapping the contents (torch.utils.swap_tensors): such a
    # parameter gets a new Parameter on the device, PyTorch's path for other devices.
    layer = torch.nn.Linear(3, 2)
    old_weight, old_bias = layer.weight, layer.bias
    ref = weakref.ref(old_weight)
    layer.to("jax")
    assert layer.weight is not old_weight and ref() is old_weight and old_weight.device.type == "cpu"
    assert layer.weight.__class__ is XlaTensor and isinstance(layer.weight, torch.nn.Parameter)
    assert layer.bias is old_bias and old_bias.__class__ is XlaTensor
    torch.testing.assert_close(layer.weight.cpu(), old_weight.detach())


def test_to_empty_from_meta_makes_new_parameters_as_for_cuda():
    with torch.device("meta"):
        model = TiedLM()
    model.to_empty(device="jax")
    assert model.emb.weight.__class__ is XlaTensor and model.head.weight is not model.emb.weight


def test_setting_a_moved_parameters_data_to_a_cpu_tensor_names_the_fix():
    layer = torch.nn.Linear(2, 2).to("jax")
    with pytest.raises(RuntimeError, match=r"incompatible tensor type: `variable` is on jax:0 and `tensor` on cpu"
                                           r".*p.data = t.to\(p.device\)"):
        layer.weight.data = torch.ones(2, 2)
    layer.weight.data = torch.ones(2, 2).to(layer.weight.device)
    layer.bias.data.copy_(torch.full((2,), 3.0))
    assert layer.weight.sum().item() == 4.0 and layer.bias.sum().item() == 6.0


def test_moving_between_a_forward_and_its_backward_raises():
    # as with torch.__future__.set_swap_module_params_on_conversion(True): the backward
    # would otherwise accumulate into the CPU tensor the move replaced
    layer = torch.nn.Linear(2, 2)
    loss = layer(torch.ones(1, 2)).sum()
    layer.to("jax")
    with pytest.raises(RuntimeError, match="poisoned by swap_tensors"):
        loss.backward()
