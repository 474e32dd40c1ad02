"""Fractional max pooling (2-D, 3-D) and its backward ops against PyTorch CPU.

The window offsets come from `random_samples`; every test passes the same explicit
samples to PyTorch CPU and to the backend, so values and indices must agree exactly
(ties, NaNs, float16/bfloat16 offsets included), eagerly and compiled, with float64
gradients through F.fractional_max_pool2d/3d(_random_samples=...). Shape functions are
checked against meta (or CPU where meta has no kernel or differs) and against CPU's
errors."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

import xla_native_functions as xnf
from lowering_harness import CASES_LIVE_IN, as_meta, call_lowering, to_meta_arg
from xla_native_functions.lowerings import pooling as lower_pooling
from xla_native_functions.shape_fns import pooling as shape_pooling

aten = torch.ops.aten
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
# The pooling lowerings whose cases live in this file (tests/test_ops_conv.py checks
# that every pooling lowering has cases somewhere).
OPS_UNDER_TEST = CASES_LIVE_IN["test_ops_fractional_pool.py"]

# (input shape, kernel_size, output_size)
CONFIGS_2D = [
    ((2, 3, 9, 11), [2, 3], [4, 5]),
    ((3, 9, 11), [3, 1], [7, 11]),  # unbatched; output as wide as the input
    ((2, 2, 7, 8), [2, 2], [1, 1]),  # one window per dim: flush with the end
    ((1, 2, 25, 31), [4, 5], [13, 9]),
    ((2, 1, 6, 6), [6, 6], [1, 1]),  # the window is the whole plane
    ((0, 3, 8, 8), [2, 2], [3, 3]),  # empty batch
]
CONFIGS_3D = [
    ((2, 2, 7, 8, 9), [2, 3, 2], [3, 4, 5]),
    ((3, 6, 7, 8), [1, 2, 3], [5, 5, 5]),  # unbatched
    ((1, 2, 5, 6, 7), [2, 2, 2], [1, 1, 1]),
    ((1, 1, 11, 5, 13), [3, 2, 4], [6, 2, 7]),
]
CONFIGS = [(2, *c) for c in CONFIGS_2D] + [(3, *c) for c in CONFIGS_3D]
IDS = [f"{nd}d-{'x'.join(map(str, s))}-k{k}-o{o}" for nd, s, k, o in CONFIGS]


def _forward(nd):
    return getattr(aten, f"fractional_max_pool{nd}d").default


def _backward(nd):
    return getattr(aten, f"fractional_max_pool{nd}d_backward").default


def _inputs(nd, shape, dtype, seed=0, nans=False):
    g = torch.Generator().manual_seed(seed)
    # Few distinct values, so windows hold ties and the first maximum must win.
    x = torch.randint(-4, 4, shape, generator=g).to(dtype)
    if nans:
        x[x == 3] = float("nan")
    n = shape[0] if len(shape) == nd + 2 else 1
    samples = torch.rand((n, shape[-nd - 1], nd), generator=g, dtype=torch.float64).to(dtype)
    return x, samples


def _assert_exact(ours, expected):
    for o, e in zip(ours, expected):
        assert o.dtype == e.dtype and o.shape == e.shape
        torch.testing.assert_close(o, e, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("nd, shape, kernel, out", CONFIGS, ids=IDS)
def test_forward_matches_cpu_eager(nd, shape, kernel, out, dtype):
    x, samples = _inputs(nd, shape, dtype, nans=dtype is torch.float32)
    expected = _forward(nd)(x, kernel, out, samples)
    ours = xnf.to_torch(_forward(nd)(xnf.to_xla(x), kernel, out, xnf.to_xla(samples)))
    _assert_exact(ours, expected)


@pytest.mark.parametrize("nd, shape, kernel, out", CONFIGS, ids=IDS)
def test_forward_and_backward_match_cpu_compiled(nd, shape, kernel, out):
    x, samples = _inputs(nd, shape, torch.float32, seed=1, nans=True)
    grad = torch.randn((*shape[:-nd], *out), generator=torch.Generator().manual_seed(2))

    def fn(x, samples, grad):
        values, indices = _forward(nd)(x, kernel, out, samples)
        return values, indices, _backward(nd)(grad, x, kernel, out, indices)

    expected = fn(x, samples, grad)
    ours = xnf.to_torch(xnf.compile(fn)(xnf.to_xla(x), xnf.to_xla(samples), xnf.to_xla(grad)))
    _assert_exact(ours, expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("nd", [2, 3])
def test_lowering_under_jit(nd, dtype):
    shape, kernel, out = (CONFIGS_2D[0] if nd == 2 else CONFIGS_3D[0])
    x, samples = _inputs(nd, shape, dtype, seed=3)
    op = _forward(nd)
    fn = getattr(lower_pooling, f"lower_fractional_max_pool{nd}d")
    _assert_exact(call_lowering(fn, op, (x, kernel, out, samples), {}), op(x, kernel, out, samples))


@pytest.mark.parametrize("nd", [2, 3])
def test_samples_pick_dims_like_cpu(nd):
    # A distinct sample per dim, on a plane whose values grow along every dim: each
    # window's maximum sits at its last tap, so the indices spell out the offsets.
    shape = (1, 1, 20, 23) if nd == 2 else (1, 1, 14, 17, 19)
    x = torch.arange(torch.Size(shape).numel(), dtype=torch.float64).reshape(shape)
    samples = torch.tensor([[[0.05, 0.5, 0.95][:nd]]], dtype=torch.float64)
    kernel, out = [2] * nd, [6] * nd
    expected = _forward(nd)(x, kernel, out, samples)
    _assert_exact(xnf.to_torch(_forward(nd)(xnf.to_xla(x), kernel, out, xnf.to_xla(samples))), expected)


def test_batch_of_samples_larger_than_input_batch():
    x, _ = _inputs(2, (2, 3, 9, 9), torch.float32)
    samples = torch.rand(5, 3, 2)
    expected = aten.fractional_max_pool2d(x, [2, 2], [4, 4], samples)
    _assert_exact(
        xnf.to_torch(aten.fractional_max_pool2d(xnf.to_xla(x), [2, 2], [4, 4], xnf.to_xla(samples))), expected
    )


def test_all_minus_inf_window_reports_its_first_tap():
    x = torch.full((1, 1, 6, 6), float("-inf"))
    samples = torch.tensor([[[0.7, 0.2]]])
    expected = aten.fractional_max_pool2d(x, [3, 2], [3, 4], samples)
    _assert_exact(
        xnf.to_torch(aten.fractional_max_pool2d(xnf.to_xla(x), [3, 2], [3, 4], xnf.to_xla(samples))), expected
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("nd, shape, kernel, out", CONFIGS, ids=IDS)
def test_backward_op_matches_cpu(nd, shape, kernel, out, dtype):
    x, samples = _inputs(nd, shape, dtype, seed=4)
    _, indices = _forward(nd)(x, kernel, out, samples)
    grad = torch.randn(indices.shape, generator=torch.Generator().manual_seed(5)).to(dtype)
    expected = _backward(nd)(grad, x, kernel, out, indices)
    ours = xnf.to_torch(_backward(nd)(xnf.to_xla(grad), xnf.to_xla(x), kernel, out, xnf.to_xla(indices)))
    assert ours.dtype == expected.dtype
    torch.testing.assert_close(ours, expected)


@pytest.mark.parametrize("nd, shape, kernel, out", CONFIGS, ids=IDS)
def test_float64_gradients_through_functional(nd, shape, kernel, out):
    x, samples = _inputs(nd, shape, torch.float64, seed=6)
    x = x + torch.rand(shape, dtype=torch.float64, generator=torch.Generator().manual_seed(7))  # no ties
    fn = getattr(F, f"fractional_max_pool{nd}d")
    w = torch.randn((*shape[:-nd], *out), dtype=torch.float64, generator=torch.Generator().manual_seed(8))

    def grads(x, samples, w):
        x = x.detach().requires_grad_()
        values, indices = fn(x, kernel, output_size=out, return_indices=True, _random_samples=samples)
        (values * w).sum().backward()
        return values.detach(), indices, x.grad

    expected = grads(x, samples, w)
    ours = xnf.to_torch(grads(xnf.to_xla(x), xnf.to_xla(samples), xnf.to_xla(w)))
    _assert_exact(ours[:2], expected[:2])
    torch.testing.assert_close(ours[2], expected[2])


def test_output_ratio_through_functional():
    x, samples = _inputs(2, (2, 3, 10, 12), torch.float32, seed=9)
    expected = F.fractional_max_pool2d(x, 3, output_ratio=(0.5, 0.5), return_indices=True, _random_samples=samples)
    ours = F.fractional_max_pool2d(
        xnf.to_xla(x), 3, output_ratio=(0.5, 0.5), return_indices=True, _random_samples=xnf.to_xla(samples)
    )
    _assert_exact(xnf.to_torch(ours), expected)


def test_out_variants():
    x, samples = _inputs(2, (2, 3, 9, 11), torch.float32, seed=10)
    expected = aten.fractional_max_pool2d(x, [2, 2], [4, 4], samples)
    out, idx = xnf.to_xla(torch.empty(0)), xnf.to_xla(torch.empty(0, dtype=torch.int64))
    aten.fractional_max_pool2d.output(xnf.to_xla(x), [2, 2], [4, 4], xnf.to_xla(samples), output=out, indices=idx)
    _assert_exact(xnf.to_torch((out, idx)), expected)
    grad = torch.randn(expected[0].shape)
    want = aten.fractional_max_pool2d_backward(grad, x, [2, 2], [4, 4], expected[1])
    got = xnf.to_xla(torch.empty(0))
    aten.fractional_max_pool2d_backward.grad_input(
        xnf.to_xla(grad), xnf.to_xla(x), [2, 2], [4, 4], xnf.to_xla(expected[1]), grad_input=got
    )
    torch.testing.assert_close(xnf.to_torch(got), want)


def test_random_samples_drawn_on_the_backend_are_seeded():
    x = xnf.to_xla(torch.randn(2, 3, 9, 9))
    torch.manual_seed(0)
    a = F.fractional_max_pool2d(x, 2, output_size=4, return_indices=True)
    torch.manual_seed(0)
    b = F.fractional_max_pool2d(x, 2, output_size=4, return_indices=True)
    _assert_exact(xnf.to_torch(a), xnf.to_torch(b))
    assert a[0].shape == (2, 3, 4, 4) and a[1].dtype == torch.int64


# ---------------------------------------------------------------------------- shapes


def _shape_fn(name):
    return getattr(shape_pooling, f"{name}_output_shape")


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("nd, shape, kernel, out", CONFIGS, ids=IDS)
def test_shape_fns_match_meta(nd, shape, kernel, out, dtype):
    x, samples = _inputs(nd, shape, dtype)
    args = (x, kernel, out, samples)
    ours = _shape_fn(f"fractional_max_pool{nd}d")(*map(to_meta_arg, args))
    expected = _forward(nd)(*(a.to("meta") if isinstance(a, torch.Tensor) else a for a in args))
    assert ours == as_meta(expected)
    values, indices = _forward(nd)(*args)
    bargs = (values, x, kernel, out, indices)
    ours = _shape_fn(f"fractional_max_pool{nd}d_backward")(*map(to_meta_arg, bargs))
    # No meta kernel for the 3-D backward op: CPU's result is the reference there.
    expected = (
        _backward(nd)(*bargs)
        if nd == 3
        else _backward(nd)(*(a.to("meta") if isinstance(a, torch.Tensor) else a for a in bargs))
    )
    assert ours == as_meta(expected)


def _x(*shape, dtype=torch.float32):
    return torch.zeros(shape, dtype=dtype)


def _r(*shape, dtype=torch.float32):
    return torch.full(shape, 0.5, dtype=dtype)


_X2, _X3 = _x(2, 3, 7, 8), _x(2, 3, 5, 6, 7)
_G2 = _x(2, 3, 3, 3)
_I2 = torch.zeros(2, 3, 3, 3, dtype=torch.int64)
_G3 = _x(2, 3, 3, 3, 3)
_I3 = torch.zeros(2, 3, 3, 3, 3, dtype=torch.int64)

ERROR_CASES = [
    ("kernel_len_2d", aten.fractional_max_pool2d, (_X2, [2], [3, 3], _r(2, 3, 2))),
    ("output_len_2d", aten.fractional_max_pool2d, (_X2, [2, 2], [3], _r(2, 3, 2))),
    ("rank_2d", aten.fractional_max_pool2d, (_x(7, 8), [2, 2], [3, 3], _r(2, 3, 2))),
    ("empty_channels_2d", aten.fractional_max_pool2d, (_x(2, 0, 7, 8), [2, 2], [3, 3], _r(2, 0, 2))),
    ("pool_height_2d", aten.fractional_max_pool2d, (_X2, [2, 2], [7, 3], _r(2, 3, 2))),
    ("pool_width_2d", aten.fractional_max_pool2d, (_X2, [2, 3], [3, 7], _r(2, 3, 2))),
    ("negative_output_2d", aten.fractional_max_pool2d, (_X2, [2, 2], [-1, 3], _r(2, 3, 2))),
    ("samples_dtype_2d", aten.fractional_max_pool2d, (_X2, [2, 2], [3, 3], _r(2, 3, 2, dtype=torch.float64))),
    ("samples_rank_2d", aten.fractional_max_pool2d, (_X2, [2, 2], [3, 3], _r(3, 2))),
    ("samples_batch_2d", aten.fractional_max_pool2d, (_X2, [2, 2], [3, 3], _r(1, 3, 2))),
    ("samples_channels_2d", aten.fractional_max_pool2d, (_X2, [2, 2], [3, 3], _r(2, 1, 2))),
    ("samples_last_2d", aten.fractional_max_pool2d, (_X2, [2, 2], [3, 3], _r(2, 3, 3))),
    ("int_input_2d", aten.fractional_max_pool2d, (_X2.long(), [2, 2], [3, 3], _r(2, 3, 2).long())),
    ("kernel_len_3d", aten.fractional_max_pool3d, (_X3, [2, 2], [3, 3, 3], _r(2, 3, 3))),
    ("output_len_3d", aten.fractional_max_pool3d, (_X3, [2, 2, 2], [3, 3], _r(2, 3, 3))),
    ("rank_3d", aten.fractional_max_pool3d, (_x(5, 6, 7), [2, 2, 2], [3, 3, 3], _r(2, 3, 3))),
    ("empty_time_3d", aten.fractional_max_pool3d, (_x(2, 3, 0, 6, 7), [2, 2, 2], [3, 3, 3], _r(2, 3, 3))),
    (
        "pool_time_3d",
        aten.fractional_max_pool3d,
        (_X3, [2, 2, 2], [4, 3, 3], _r(2, 3, 3)),
    ),  # ends flush: rejected in 3-D
    ("pool_height_3d", aten.fractional_max_pool3d, (_X3, [2, 2, 2], [3, 5, 3], _r(2, 3, 3))),
    ("pool_width_3d", aten.fractional_max_pool3d, (_X3, [2, 2, 2], [3, 3, 6], _r(2, 3, 3))),
    ("samples_dtype_3d", aten.fractional_max_pool3d, (_X3, [2, 2, 2], [3, 3, 3], _r(2, 3, 3, dtype=torch.float64))),
    ("samples_batch_3d", aten.fractional_max_pool3d, (_X3, [2, 2, 2], [3, 3, 3], _r(1, 3, 3))),
    ("samples_last_3d", aten.fractional_max_pool3d, (_X3, [2, 2, 2], [3, 3, 3], _r(2, 3, 2))),
    ("int_input_3d", aten.fractional_max_pool3d, (_X3.long(), [2, 2, 2], [3, 3, 3], _r(2, 3, 3).long())),
    ("grad_sizes_2d", aten.fractional_max_pool2d_backward, (_G2, _X2, [2, 2], [3, 4], _I2)),
    ("indices_sizes_2d", aten.fractional_max_pool2d_backward, (_G2, _X2, [2, 2], [3, 3], _I2[:, :, :2])),
    ("grad_dtype_2d", aten.fractional_max_pool2d_backward, (_G2.double(), _X2, [2, 2], [3, 3], _I2)),
    ("indices_dtype_2d", aten.fractional_max_pool2d_backward, (_G2, _X2, [2, 2], [3, 3], _I2.int())),
    ("int_input_backward_2d", aten.fractional_max_pool2d_backward, (_G2.long(), _X2.long(), [2, 2], [3, 3], _I2)),
    ("grad_width_3d", aten.fractional_max_pool3d_backward, (_G3, _X3, [2, 2, 2], [3, 3, 4], _I3)),
    ("grad_time_3d", aten.fractional_max_pool3d_backward, (_G3, _X3, [2, 2, 2], [4, 3, 3], _I3)),
    ("grad_dtype_3d", aten.fractional_max_pool3d_backward, (_G3.double(), _X3, [2, 2, 2], [3, 3, 3], _I3)),
    ("int_input_backward_3d", aten.fractional_max_pool3d_backward, (_G3.long(), _X3.long(), [2, 2, 2], [3, 3, 3], _I3)),
]


@pytest.mark.parametrize("op, args", [c[1:] for c in ERROR_CASES], ids=[c[0] for c in ERROR_CASES])
def test_errors_match_cpu(op, args):
    with pytest.raises(Exception) as cpu:
        op(*args)
    name = op._qualified_op_name.split("::")[1]
    with pytest.raises(type(cpu.value)) as ours:
        _shape_fn(name)(*map(to_meta_arg, args))
    assert str(ours.value) == str(cpu.value).split("\n")[0]
    # The backend raises the same error through dispatch.
    with pytest.raises(type(cpu.value), match="^" + re.escape(str(cpu.value).split("\n")[0])):
        op(*(xnf.to_xla(a) if isinstance(a, torch.Tensor) else a for a in args))


# ---------------------------------------------------------------------------- OpInfo samples


def _opinfo(nd):
    from torch.testing._internal.common_methods_invocations import op_db

    return next(op for op in op_db if op.name == f"nn.functional.fractional_max_pool{nd}d")


@pytest.mark.parametrize("nd", [2, 3])
def test_opinfo_samples_with_explicit_samples_values_and_float64_gradients(nd):
    # The OpInfo draws its offsets with torch.rand (a different stream on each side), so
    # its samples run here with explicit offsets, shared by CPU and the backend.
    fn = getattr(F, f"fractional_max_pool{nd}d")
    g = torch.Generator().manual_seed(11)
    count = 0
    for sample in _opinfo(nd).sample_inputs("cpu", torch.float64, requires_grad=True):
        x = sample.input
        n = x.shape[0] if x.ndim == nd + 2 else 1
        samples = torch.rand((n, x.shape[-nd - 1], nd), generator=g, dtype=torch.float64)
        kwargs = {**sample.kwargs, "return_indices": True, "_random_samples": samples}
        values, indices = fn(x, *sample.args, **kwargs)
        w = torch.randn(values.shape, generator=g, dtype=torch.float64)
        (expected_grad,) = torch.autograd.grad((values * w).sum(), x)

        ours_x = xnf.to_xla(x.detach()).requires_grad_()
        kwargs["_random_samples"] = xnf.to_xla(samples)
        ours_values, ours_indices = fn(ours_x, *sample.args, **kwargs)
        (ours_grad,) = torch.autograd.grad((ours_values * xnf.to_xla(w)).sum(), ours_x)
        _assert_exact(xnf.to_torch((ours_values.detach(), ours_indices)), (values.detach(), indices))
        torch.testing.assert_close(xnf.to_torch(ours_grad), expected_grad)
        count += 1
    assert count > 10
