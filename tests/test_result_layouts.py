"""Note [Result layouts] (runtime/exec/layouts.py): results are laid out as PyTorch CPU
lays them out (strides compared with PyTorch's, values too), eagerly and in compile(),
and code that depends on those layouts (a `view` after permutes) runs as on PyTorch."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import xla_native_functions as xnf

CL = torch.channels_last
aten = torch.ops.aten


def _permuted(x, order):
    """x's values in a dense layout with its dims in memory in `order` (outermost first)."""
    inverse = sorted(range(x.dim()), key=lambda d: order[d])
    return x.permute(order).contiguous().permute(inverse)


def _on_device(x):
    """x on our device with x's size, strides and offset over a copy of its storage."""
    if not isinstance(x, torch.Tensor):
        return x
    numel = x.untyped_storage().nbytes() // x.element_size()
    storage = xnf.to_xla(x.as_strided((numel,), (1,), 0).clone())
    return storage.as_strided(x.shape, x.stride(), x.storage_offset())


def _check(expected, got):
    expected = expected if isinstance(expected, tuple) else (expected,)
    got = got if isinstance(got, tuple) else (got,)
    assert len(expected) == len(got)
    for e, g in zip(expected, got):
        if e is None:
            assert g is None
            continue
        assert g.shape == e.shape and g.dtype == e.dtype
        assert g.stride() == e.stride(), (g.stride(), e.stride())
        torch.testing.assert_close(g.cpu(), e, atol=1e-5, rtol=1e-4)


def _run_both(fn, args, compiled=False):
    expected = fn(*args)
    ours = [_on_device(a) for a in args]
    for a, o in zip(args, ours):
        if isinstance(a, torch.Tensor):
            assert o.stride() == a.stride()
    if compiled:
        run = xnf.compile(fn)
        for _ in range(3):  # traced, traced, replayed
            _check(expected, run(*ours))
    else:
        _check(expected, fn(*ours))


torch.manual_seed(0)
_X3 = torch.randn(2, 3, 4)
_X4 = torch.randn(2, 3, 4, 5)

# inputs: (name, tensors)
_POINTWISE_INPUTS = [
    ("transposed", (_permuted(_X3, (0, 2, 1)), _permuted(_X3, (0, 2, 1)))),
    ("permuted", (_permuted(_X3, (2, 0, 1)), _permuted(_X3, (2, 0, 1)))),
    ("channels_last", (_X4.contiguous(memory_format=CL), _X4.contiguous(memory_format=CL))),
    ("first_decides", (_permuted(_X3, (0, 2, 1)), _X3.clone())),
    ("second_decides_where_first_cannot", (_X3[:, :1, :].clone().expand(2, 3, 4), _permuted(_X3, (2, 1, 0)))),
    ("broadcast_row", (_permuted(_X3, (0, 2, 1)), torch.randn(4))),
    ("column_slice", (_X3.transpose(1, 2)[:, ::2], torch.randn(2, 2, 3))),
    ("contiguous", (_X3.clone(), _X3.clone())),
]
_POINTWISE_OPS = [
    ("relu", lambda a, b: a.relu()),
    ("add", lambda a, b: a + b),
    ("mul_scalar", lambda a, b: a * 2),
    ("where", lambda a, b: torch.where(a > 0, a, b)),
    ("lt", lambda a, b: a < b),
    ("sigmoid_backward", lambda a, b: aten.sigmoid_backward(a, b.sigmoid())),
    ("lerp", lambda a, b: torch.lerp(a, b, 0.3)),
    ("to_double", lambda a, b: a.to(torch.float64)),
]


@pytest.mark.parametrize("inputs", _POINTWISE_INPUTS, ids=[n for n, _ in _POINTWISE_INPUTS])
@pytest.mark.parametrize("op", _POINTWISE_OPS, ids=[n for n, _ in _POINTWISE_OPS])
def test_pointwise_results_take_their_inputs_layout(op, inputs):
    _run_both(op[1], inputs[1])


@pytest.mark.parametrize("inputs", _POINTWISE_INPUTS[:4], ids=[n for n, _ in _POINTWISE_INPUTS[:4]])
def test_pointwise_layouts_in_compile(inputs):
    _run_both(lambda a, b: ((a + b).relu(), a.exp() * 3, torch.where(a > b, a, b)), inputs[1], compiled=True)


_COPY_CASES = [
    ("clone", lambda x: x.clone()),
    ("clone_contiguous", lambda x: x.clone(memory_format=torch.contiguous_format)),
    ("contiguous", lambda x: x.contiguous()),
    ("to_channels_last", lambda x: x.to(memory_format=CL) if x.dim() == 4 else x.to(torch.float64)),
    ("contiguous_channels_last", lambda x: x.contiguous(memory_format=CL) if x.dim() == 4 else x.contiguous()),
    ("zeros_like", lambda x: torch.zeros_like(x)),
    ("full_like", lambda x: torch.full_like(x, 7.0)),
    ("ones_like_channels_last", lambda x: torch.ones_like(x, memory_format=CL) if x.dim() == 4 else x.sin()),
    ("empty_like_fill", lambda x: torch.empty_like(x).fill_(1.5)),
]
_COPY_INPUTS = [
    ("transposed", _permuted(_X3, (0, 2, 1))),
    ("channels_last", _X4.contiguous(memory_format=CL)),
    ("sliced", _X3.transpose(1, 2)[:, ::2]),
    ("contiguous", _X4.clone()),
]


@pytest.mark.parametrize("x", _COPY_INPUTS, ids=[n for n, _ in _COPY_INPUTS])
@pytest.mark.parametrize("op", _COPY_CASES, ids=[n for n, _ in _COPY_CASES])
def test_copies_and_like_factories_follow_memory_format(op, x):
    _run_both(op[1], (x[1],))


def test_random_like_factories_follow_the_layout():
    x = _on_device(_permuted(_X3, (2, 0, 1)))
    expected = _permuted(_X3, (2, 0, 1)).stride()
    for make in (torch.rand_like, torch.randn_like, lambda t: torch.randint_like(t, 5), torch.empty_like):
        assert make(x).stride() == expected


@pytest.mark.parametrize("size,stride", [((3, 4), (1, 3)), ((2, 3, 4), (12, 1, 3)), ((2, 3), (4, 1)),
                                         ((3, 2), (6, 2)), ((2, 3, 4), (1, 2, 6))])
def test_empty_strided_has_the_strides_asked_for(size, stride):
    expected = torch.empty_strided(size, stride).fill_(0)
    ours = torch.empty_strided(size, stride, device="jax")
    assert ours.stride() == expected.stride()
    assert ours.untyped_storage().nbytes() == expected.untyped_storage().nbytes()
    ours.fill_(2.0)
    expected.fill_(2.0)
    ours[0].add_(1)
    expected[0].add_(1)
    torch.testing.assert_close(ours.cpu(), expected)
    new = xnf.to_xla(torch.zeros(1)).new_empty_strided(size, stride)
    assert new.stride() == expected.stride()


def test_empty_in_memory_formats():
    for fmt, size in ((CL, (2, 3, 4, 5)), (torch.channels_last_3d, (2, 3, 4, 5, 6)), (torch.contiguous_format, (2, 3))):
        expected = torch.empty(size, memory_format=fmt).stride()
        assert torch.empty(size, device="jax", memory_format=fmt).stride() == expected
    assert (torch.empty_permuted((2, 3, 4), (2, 0, 1), device="jax").stride()
            == torch.empty_permuted((2, 3, 4), (2, 0, 1)).stride())
    with pytest.raises(RuntimeError, match="rank 4"):
        torch.empty((2, 3), device="jax", memory_format=CL)


def test_views_that_pytorch_allows_after_layout_preserving_ops():
    def patterns(x, c):
        return (
            (x[0].t() * 2).t().view(-1),
            x.permute(0, 2, 1).relu().permute(0, 2, 1).view(2, -1),
            c.to(memory_format=CL).relu().permute(0, 2, 3, 1).view(-1, 3),
            F.conv2d(c.to(memory_format=CL), torch.ones(2, 3, 1, 1, device=c.device)).permute(0, 2, 3, 1).view(-1, 2),
            x.transpose(1, 2).clone().transpose(1, 2).view(-1),
        )

    x, c = torch.randn(2, 3, 4), torch.randn(2, 3, 4, 5)
    expected = patterns(x, c)
    for run in (patterns, xnf.compile(patterns), xnf.compile(patterns)):
        for e, g in zip(expected, run(xnf.to_xla(x), xnf.to_xla(c))):
            assert g.stride() == e.stride()
            torch.testing.assert_close(g.cpu(), e)


def test_writes_through_laid_out_results_reach_their_views():
    def body(x):
        y = x.permute(0, 2, 1).exp()  # a view of a storage held in y's layout
        y.add_(1)  # a write of the whole storage through the view
        y[:, 0].mul_(-1)  # a write of part of it
        z = y.permute(0, 2, 1)  # contiguous again
        z.view(-1)[:3] = 0
        return y, z

    x = torch.randn(2, 3, 4)
    expected = body(x.clone())
    for run in (body, xnf.compile(body), xnf.compile(body)):
        y, z = run(xnf.to_xla(x))
        _check(expected, (y, z))
        assert z.is_contiguous() and y.data_ptr() == z.data_ptr()


def test_as_strided_copies_and_scatters_address_the_layout_in_memory():
    # as_strided_copy reads the storage of its input; as_strided_scatter writes the
    # memory of a copy laid out as its input. Called repeatedly: a new signature's first
    # calls run PyTorch's kernel, later ones ours (Note [First calls on PyTorch CPU]).
    def both(x, src):
        return (torch.as_strided_copy(x.t(), (2, 3), (1, 8), 1),
                torch.as_strided_scatter(x.t() * 2, src, (2, 3), (1, 8), 1),
                torch.as_strided_copy(x[1:], (2, 3), (1, 8)),
                torch.as_strided_scatter(x[1:], src, (2, 3), (1, 8)))

    x, src = torch.randn(8, 4), torch.randn(2, 3)
    expected = both(x, src)
    for run in (both, both, both, xnf.compile(both), xnf.compile(both)):
        _check(expected, run(xnf.to_xla(x), xnf.to_xla(src)))
    with pytest.raises(RuntimeError, match="expected src to have a size equal to the slice of self"):
        torch.as_strided_scatter(xnf.to_xla(x), xnf.to_xla(src), (3, 2), (1, 8))


def test_moves_between_devices_keep_dense_layouts():
    x = _permuted(_X4, (0, 2, 3, 1))
    assert x.to("jax").stride() == x.stride()
    assert xnf.to_xla(x).stride() == x.stride()
    ours = _on_device(x)
    for back in (ours.cpu(), ours.to("cpu"), xnf.to_torch(ours)):
        assert back.stride() == x.stride()
        torch.testing.assert_close(back, x)
    assert xnf.to_xla(torch.zeros(0, 3)).cpu().stride() == (3, 1)


_CHANNELS_LAST_OPS = [
    ("conv", lambda x, w: F.conv2d(x, w, padding=1), "xw"),
    ("conv_weight_channels_last", lambda x, w: F.conv2d(x.contiguous(), w.contiguous(memory_format=CL)), "xw"),
    ("conv_transpose", lambda x, w: F.conv_transpose2d(x, w.transpose(0, 1)), "xw"),
    ("conv_backward", lambda x, w: aten.convolution_backward(
        torch.ones(2, 6, 6, 6), x, w, [6], [1, 1], [0, 0], [1, 1], False, [0, 0], 1, [True, True, True]), "xw"),
    ("batch_norm", lambda x: F.batch_norm(x, None, None, training=True), "x"),
    ("batch_norm_backward", lambda x: aten.native_batch_norm_backward(
        torch.ones_like(x, memory_format=torch.contiguous_format) * 0.5, x, torch.ones(4), None, None,
        torch.zeros(4), torch.ones(4), True, 1e-5, [True, True, True]), "x"),
    ("group_norm", lambda x: F.group_norm(x, 2), "x"),
    ("max_pool", lambda x: F.max_pool2d(x, 2, return_indices=True), "x"),
    ("avg_pool", lambda x: F.avg_pool2d(x, 2), "x"),
    ("adaptive_avg_pool", lambda x: F.adaptive_avg_pool2d(x, 3), "x"),
    ("adaptive_max_pool", lambda x: F.adaptive_max_pool2d(x, 3, return_indices=True), "x"),
    ("upsample_nearest", lambda x: F.interpolate(x, scale_factor=2), "x"),
    ("upsample_bilinear", lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), "x"),
    ("upsample_backward", lambda x: aten.upsample_nearest2d_backward(x, [8, 8], [2, 4, 4, 4]), "x"),
    ("pad", lambda x: F.pad(x, (1, 1, 1, 1)), "x"),
    ("pixel_shuffle", lambda x: F.pixel_shuffle(x, 2), "x"),
    ("cat", lambda x: torch.cat([x, x * 2], 1), "x"),
    ("cat_of_mixed_formats", lambda x: torch.cat([x, x.contiguous()], 1), "x"),
    ("softmax", lambda x: F.softmax(x, 1), "x"),
    ("layer_norm", lambda x: F.layer_norm(x, (8,)), "x"),
    ("masked_fill", lambda x: x.masked_fill(x > 0, 0.0), "x"),
    ("sum", lambda x: x.sum(1, keepdim=True), "x"),
]


@pytest.mark.parametrize("case", _CHANNELS_LAST_OPS, ids=[n for n, _, _ in _CHANNELS_LAST_OPS])
def test_channels_last_through_vision_ops(case):
    _, fn, kinds = case
    x = torch.randn(2, 4, 8, 8).contiguous(memory_format=CL)
    args = (x, torch.randn(6, 4, 3, 3)) if kinds == "xw" else (x,)

    # the factories inside fn make their tensors beside its inputs
    expected = fn(*args)
    with torch.device("jax"):
        got = fn(*[_on_device(a) for a in args])
    _check(expected, got)


def _weight(*shape):
    """Fixed weights, made alike on either device."""
    return torch.arange(float(torch.Size(shape).numel())).reshape(shape).sin()


_CHANNELS_LAST_3D_OPS = [
    ("conv", lambda x: F.conv3d(x, _weight(3, 4, 3, 3, 3))),
    ("conv_transpose", lambda x: F.conv_transpose3d(x, _weight(4, 3, 3, 3, 3))),
    ("conv_backward", lambda x: aten.convolution_backward(
        torch.ones(2, 3, 4, 4, 4), x, _weight(3, 4, 3, 3, 3), [3], [1, 1, 1], [0, 0, 0], [1, 1, 1], False,
        [0, 0, 0], 1, [True, True, True])),
    ("batch_norm", lambda x: F.batch_norm(x, torch.zeros(4), torch.ones(4), training=True)),
    ("max_pool", lambda x: F.max_pool3d(x, 2, return_indices=True)),
    ("max_pool_backward", lambda x: aten.max_pool3d_with_indices_backward(
        torch.ones(2, 4, 3, 3, 3), x, [2, 2, 2], [2, 2, 2], [0, 0, 0], [1, 1, 1], False,
        F.max_pool3d(x, 2, return_indices=True)[1])),
    ("avg_pool", lambda x: F.avg_pool3d(x, 2)),
    ("adaptive_avg_pool", lambda x: F.adaptive_avg_pool3d(x, 3)),
    ("adaptive_max_pool", lambda x: F.adaptive_max_pool3d(x, 3)),
    ("upsample_nearest", lambda x: F.interpolate(x, scale_factor=2)),
    ("upsample_trilinear", lambda x: F.interpolate(x, scale_factor=2, mode="trilinear")),
    ("upsample_backward", lambda x: aten.upsample_nearest3d_backward(
        x.repeat(1, 1, 2, 2, 2).contiguous(memory_format=torch.channels_last_3d), [12, 12, 12], [2, 4, 6, 6, 6])),
    ("pad", lambda x: F.pad(x, (1, 1, 1, 1, 1, 1))),
]


@pytest.mark.parametrize("case", _CHANNELS_LAST_3D_OPS, ids=[n for n, _ in _CHANNELS_LAST_3D_OPS])
def test_channels_last_3d_where_pytorch_keeps_it(case):
    x = torch.randn(2, 4, 6, 6, 6).contiguous(memory_format=torch.channels_last_3d)
    expected = case[1](x)
    with torch.device("jax"):
        got = case[1](_on_device(x))
    _check(expected, got)


def test_a_channels_last_cnn_trains_as_on_pytorch():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True), nn.MaxPool2d(2),
                        nn.Conv2d(8, 8, 3, padding=1, groups=2), nn.GroupNorm(2, 8), nn.SiLU(),
                        nn.Upsample(scale_factor=2), nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(32, 4))
    x = torch.randn(2, 3, 16, 16)
    ref = copy.deepcopy(net).to(memory_format=CL)
    ours = xnf.to_xla(copy.deepcopy(net)).to(memory_format=CL)

    def step(m, opt, xb):
        loss = m(xb).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach()

    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    our_opt = torch.optim.SGD(ours.parameters(), lr=0.1, momentum=0.9)
    compiled = xnf.compile(step)
    for i in range(4):
        expected = step(ref, ref_opt, x.to(memory_format=CL))
        got = (step if i < 2 else compiled)(ours, our_opt, xnf.to_xla(x).to(memory_format=CL))
        torch.testing.assert_close(got.cpu(), expected, atol=1e-5, rtol=1e-4)
    for (name, p), q in zip(ref.named_parameters(), ours.parameters()):
        assert q.stride() == p.stride() and q.grad.stride() == p.grad.stride(), name
        torch.testing.assert_close(q.cpu(), p, atol=1e-4, rtol=1e-4)
    activation = ours[:3](xnf.to_xla(x).to(memory_format=CL))
    assert activation.stride() == ref[:3](x.to(memory_format=CL)).stride()
    assert activation.permute(0, 2, 3, 1).view(-1, 8).shape == (512, 8)


_SWEPT = ("add", "mul", "where", "lerp", "sigmoid", "nn.functional.relu", "nn.functional.gelu", "clone", "to",
          "zeros_like", "full_like", "nn.functional.conv2d", "nn.functional.conv_transpose2d",
          "nn.functional.max_pool2d", "nn.functional.avg_pool2d", "nn.functional.batch_norm",
          "nn.functional.group_norm", "nn.functional.interpolate", "nn.functional.pixel_shuffle", "cat")


def test_layout_sweep_of_representative_opinfos():
    """scripts/layout_sweep.py's check (PyTorch's op_db samples in transposed and
    channels-last layouts) on ops of each family above; the script sweeps all of op_db
    into docs/reports/layouts.md."""
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "scripts"))
    try:
        import layout_sweep
        import opinfo_harness as h
    finally:
        sys.path.remove(str(root / "scripts"))
    ops = h.opinfos()
    keys = [k for k in ops if ops[k].name in _SWEPT]
    assert {ops[k].name for k in keys} == set(_SWEPT)
    results = []
    with xnf.default_env():
        for key in keys:
            results += layout_sweep.run_op(ops[key], key, samples=4, scan=40, time_limit=120)
    compared = [r for r in results if r.status in ("match", "stride_mismatch", "error")]
    assert len(compared) > 60
    wrong = [(r.key, r.variant, r.inputs, r.mismatches or r.detail) for r in compared if r.status != "match"]
    assert not wrong


def test_resize_to_memory_formats():
    for fmt, size in ((CL, (2, 3, 4, 5)), (torch.channels_last_3d, (2, 3, 4, 5, 6))):
        expected = torch.zeros(2).resize_(size, memory_format=fmt).stride()
        assert xnf.to_xla(torch.zeros(2)).resize_(size, memory_format=fmt).stride() == expected
    with pytest.raises(RuntimeError, match="required rank 4 tensor to use channels_last format"):
        xnf.to_xla(torch.zeros(2)).resize_((2, 3, 4), memory_format=CL)
