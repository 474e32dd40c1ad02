"""float8 tensors (fp8 checkpoints): moved to the device and back bit for bit, cast as
PyTorch CPU casts (float8_e4m3fn saturating at +-448), eagerly and in compile()."""

from __future__ import annotations

import pytest
import torch

import xla_native_functions as xnf

FLOAT8 = [torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz]


def _values():
    torch.manual_seed(0)
    special = [0.0, -0.0, 447.0, 449.0, 464.0, 480.0, 500.0, 1e6, 57344.0, 61440.0, 1e-9, 2.0**-9, 2.0**-10,
               float("inf"), -float("inf"), float("nan")]
    return torch.cat([torch.randn(4000) * 100, torch.randn(4000) * 1e-3, torch.tensor(special)])


def _same(got, expected):
    """Equal values, NaN where PyTorch has NaN (whose bit pattern may differ)."""
    assert got.dtype == expected.dtype and got.shape == expected.shape
    torch.testing.assert_close(got.cpu().float(), expected.float(), rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_float8_tensors_move_bit_for_bit(dtype):
    x = _values().to(dtype).reshape(-1, 4)
    for ours in (xnf.to_xla(x), x.to("jax")):
        assert ours.dtype == dtype and ours.shape == x.shape
        for back in (ours.cpu(), xnf.to_torch(ours)):
            assert torch.equal(back.view(torch.uint8), x.view(torch.uint8))
    assert repr(xnf.to_xla(x[:1])).startswith(repr(x[:1])[:-1])


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
@pytest.mark.parametrize("source", [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int32],
                         ids=str)
def test_casts_to_float8_round_as_pytorch(dtype, source):
    x = _values()
    x = x.to(source) if source.is_floating_point else x.nan_to_num(0, 2**30, -(2**30)).to(source)
    expected = x.to(dtype)
    ours = xnf.to_xla(x)
    for _ in range(3):  # a new signature's first calls run PyTorch's kernel, later ones ours
        _same(ours.to(dtype), expected)
    cast = xnf.compile(lambda t: t.to(dtype))
    for _ in range(3):
        _same(cast(ours), expected)


def test_float8_e4m3fn_saturates_where_xla_gives_nan():
    x = torch.tensor([480.0, 500.0, 1e6, float("inf"), -float("inf"), float("nan")])
    got = xnf.to_xla(x).to(torch.float8_e4m3fn).cpu().float()
    assert got[:5].tolist() == [448.0, 448.0, 448.0, 448.0, -448.0]
    assert got[5].isnan()


def test_an_fp8_checkpoint_dequantized_on_the_device():
    torch.manual_seed(0)
    weight = (torch.randn(16, 8) * 30).to(torch.float8_e4m3fn)
    scale = torch.tensor(0.02)
    x = torch.randn(4, 8)

    def layer(x, weight, scale):
        return x @ (weight.to(torch.bfloat16) * scale.to(torch.bfloat16)).float().t()

    expected = layer(x, weight, scale)
    moved = [xnf.to_xla(t) for t in (x, weight, scale)]
    for run in (layer, xnf.compile(layer), xnf.compile(layer)):
        torch.testing.assert_close(run(*moved).cpu(), expected, rtol=1e-5, atol=1e-5)
    state = {"weight": weight}
    module = torch.nn.Module()
    module.register_buffer("weight", torch.zeros(16, 8, dtype=torch.float8_e4m3fn))
    xnf.to_xla(module).load_state_dict(state)
    assert module.weight.device.type == "jax"
    assert torch.equal(module.weight.cpu().view(torch.uint8), weight.view(torch.uint8))


def test_float8_tensors_through_ops_pytorch_cpu_runs():
    x = torch.tensor([[1.0, -2.0, 3.5], [448.0, 0.25, -0.0]]).to(torch.float8_e4m3fn)
    ours = xnf.to_xla(x)
    for op in (lambda t: torch.cat([t, t]), lambda t: t[1], lambda t: t.t().contiguous(), lambda t: t.abs(),
               lambda t: t.flip(0), lambda t: t.to(torch.float8_e5m2), lambda t: t.to(torch.int32),
               lambda t: torch.where(t.float() > 0, t, t.abs()), lambda t: torch.empty_like(t).copy_(t)):
        _same(op(ours), op(x))
    assert torch.equal(ours == ours, xnf.to_xla(x == x))


def test_unsupported_float8_types_name_themselves():
    with pytest.raises(TypeError, match="float8_e8m0fnu has no JAX equivalent"):
        xnf.to_xla(torch.ones(2).to(torch.float8_e8m0fnu))
