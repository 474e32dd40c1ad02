"""float8 tensors (fp8 checkpoints): moved to the device and back bit for bit, cast as
PyTorch CPU casts (float8_e4m3fn saturating at +-448), eagerly and in compile()."""

from __future__ import annotations

import re

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


def _float8_steps_apart(got, expected):
    """How many float8 steps each finite value of `got` is from PyTorch's (the same
    sign's bit patterns count steps); NaN must be where PyTorch has NaN."""
    assert got.dtype == expected.dtype and got.shape == expected.shape
    nan = expected.float().isnan()
    assert torch.equal(got.float().isnan(), nan)
    assert torch.equal(got.float().sign()[~nan], expected.float().sign()[~nan])
    bits = (got.view(torch.uint8).int() - expected.view(torch.uint8).int()).abs()
    return bits[~nan]


def _scaled_mm_cases():
    torch.manual_seed(0)
    e4, e5 = torch.float8_e4m3fn, torch.float8_e5m2
    a, b = torch.randn(64, 96).to(e4), torch.randn(80, 96).to(e4).t()  # mat2 column-major, as cuBLAS wants
    a5, b5 = (torch.randn(64, 96) * 8).to(e5), (torch.randn(80, 96) * 8).to(e5).t()
    one, two = torch.tensor(0.37), torch.tensor(1.9)
    rows, cols = torch.rand(64, 1) + 0.5, torch.rand(1, 80) + 0.5
    bias = torch.randn(80).to(torch.bfloat16)
    return {
        "float8 result": ((a, b, one, two), {}),
        "float32 result": ((a, b, one, two), {"out_dtype": torch.float32}),
        "bfloat16 result with bias": ((a, b, one, two), {"bias": bias, "out_dtype": torch.bfloat16}),
        "row-wise scales": ((a, b, rows, cols), {"out_dtype": torch.float32}),
        "e5m2, e4m3fn operands": ((a5, b, one, two), {"out_dtype": torch.float16}),
        "e5m2 result": ((a5, b5, one, two), {"out_dtype": e5}),
        # PyTorch CPU divides by scale_result only when out_dtype names a float8 type
        "scale_result, float8 out_dtype": ((a, b, one, two), {"scale_result": torch.tensor(4.0), "out_dtype": e4}),
        "scale_result, default out_dtype": ((a, b, one, two), {"scale_result": torch.tensor(4.0)}),
        # beyond float8_e4m3fn's range the product is NaN (no saturation, unlike a cast) for
        # operands of one type and one scale each; otherwise PyTorch's fallback saturates
        "overflowing": ((a, b, torch.tensor(50.0), torch.tensor(50.0)), {}),
        "overflowing, mixed operands": ((a5, b, torch.tensor(50.0), torch.tensor(50.0)), {"out_dtype": e4}),
        "overflowing, row-wise scales": ((a, b, rows * 50, cols * 50), {}),
        "overflowing e5m2": ((a, b, torch.tensor(5e3), torch.tensor(5e3)), {"out_dtype": e5}),
    }


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_scaled_mm_matches_pytorch_cpu(mode, compiled_first_calls):
    """torch._scaled_mm, as fp8 linear layers call it: PyTorch CPU's values (float8
    results within one float8 step where float32 sums in another order round the other
    way), dtypes and shapes."""
    fn = torch._scaled_mm if mode == "eager" else xnf.compile(lambda *a, **k: torch._scaled_mm(*a, **k))
    for name, (args, kwargs) in _scaled_mm_cases().items():
        expected = torch._scaled_mm(*args, **kwargs)
        moved = [xnf.to_xla(a) for a in args]
        moved_kwargs = {k: xnf.to_xla(v) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
        got = xnf.to_torch(fn(*moved, **moved_kwargs))
        if expected.dtype.itemsize == 1:
            apart = _float8_steps_apart(got, expected)
            assert apart.max() <= 1 and (apart > 0).sum() <= expected.numel() // 100, name
        else:
            assert got.dtype == expected.dtype, name
            tolerance = {"rtol": 2e-5, "atol": 1e-4} if expected.dtype == torch.float32 else {}  # (else the dtype's)
            torch.testing.assert_close(got, expected, **tolerance, msg=name)


def test_scaled_mm_refuses_as_pytorch_cpu():
    e4 = torch.float8_e4m3fn
    a, b, one = torch.randn(8, 16).to(e4), torch.randn(4, 16).to(e4).t(), torch.tensor(1.0)
    cases = {
        "bfloat16 operand": ((a.bfloat16(), b, one, one), {}, ValueError, "Invalid scaling configuration."),
        "two scales": ((a, b, torch.ones(2), one), {}, ValueError, "Invalid scaling configuration."),
        "bfloat16 row-wise scales": ((a, b, torch.ones(8, 1).bfloat16(), torch.ones(1, 4).bfloat16()), {},
                                     ValueError, "Invalid scaling configuration."),
        "vector": ((a[0], b, one, one), {}, RuntimeError, "mat1 must be a matrix"),
        "contraction": ((a, b[:15], one, one), {}, RuntimeError,
                        "mat1 and mat2 shapes cannot be multiplied (8x16 and 15x4)"),
        "bias size": ((a, b, one, one), {"bias": torch.ones(8).bfloat16(), "out_dtype": torch.bfloat16},
                      RuntimeError, "Bias must be size 4 but got 8"),
        "float64 result": ((a, b, one, one), {"out_dtype": torch.float64}, RuntimeError, "tensor inputDouble"),
        "fnuz operands": ((a.to(torch.float8_e4m3fnuz), b.to(torch.float8_e4m3fnuz), one, one), {}, RuntimeError,
                          "tensor inputFloat8_e4m3fnuz"),
        "scale_result": ((a, b, one, one), {"scale_result": torch.ones(2), "out_dtype": e4}, RuntimeError,
                         "scale_result must be a float scalar"),
    }
    for name, (args, kwargs, error, message) in cases.items():
        with pytest.raises(error, match=re.escape(message)):
            torch._scaled_mm(*args, **kwargs)
        moved_kwargs = {k: xnf.to_xla(v) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
        with pytest.raises(error, match=re.escape(message)):
            torch._scaled_mm(*[xnf.to_xla(a) for a in args], **moved_kwargs)
