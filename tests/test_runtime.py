"""The runtime against PyTorch CPU: tensors, dtypes, views and mutation, modules,
autograd, compiled mode, fallback, missing ops and metrics."""

from __future__ import annotations

import copy
import math
import os
import re
import shutil
import subprocess
import sys
import time
import warnings

import pytest
import torch

import xla_native_functions as xnf
from xla_native_functions.runtime.core import views
from xla_native_functions.runtime.exec import eager, fallback, graph, registry
from xla_native_functions.runtime.frontends import dispatch
from xla_native_functions.runtime.core import tensor as xla_tensor_module
from xla_native_functions.runtime.platform.backend import (
    ASYNC_DISPATCH_ENV,
    MALLOC_DEFAULTS_ENV,
    NO_COMPILATION_CACHE_ENV,
    SCHEDULER_FLAG,
)
from xla_native_functions.runtime.platform.cache_trust import CACHE_DIR_ENV
from xla_native_functions.runtime.platform.device_guard import PYTHON_GUARD_ENV, hooks_missing
from xla_native_functions.runtime.platform.metrics import metrics
from xla_native_functions.runtime.core.tensor import DEVICE, XlaTensor


def cpu(t):
    return xnf.to_torch(t)


@pytest.fixture(autouse=True)
def fresh_graph_cache(monkeypatch):
    """Compile counts in one test do not depend on graphs other tests compiled."""
    monkeypatch.setattr(graph, "_GRAPH_CACHE", {})
    monkeypatch.setattr(graph, "_LAST_KEYS", {})


# ---------------------------------------------------------------- tensors and dtypes


@pytest.mark.parametrize(
    "t",
    [
        torch.tensor([2**40 + 1, -3]),
        torch.tensor([1.5, -2.25], dtype=torch.float64),
        torch.tensor([True, False]),
        torch.tensor([1, 200], dtype=torch.uint8),
        torch.tensor([1, -7], dtype=torch.int8),
        torch.tensor([1, -7], dtype=torch.int32),
        torch.tensor([1.5, 3.0], dtype=torch.float16),
        torch.tensor([1.5, 3.0], dtype=torch.bfloat16),
        torch.tensor([1 + 2j], dtype=torch.complex64),
    ],
    ids=lambda t: str(t.dtype),
)
def test_round_trip_keeps_dtype_and_values(t):
    x = xnf.to_xla(t)
    assert isinstance(x, XlaTensor)
    assert x.dtype == t.dtype and x.shape == t.shape and x.device.type == "jax"
    back = cpu(x)
    assert back.dtype == t.dtype
    assert torch.equal(back, t)


def test_int64_arithmetic_stays_64_bit():
    t = torch.tensor([2**40 + 1, 3])
    x = xnf.to_xla(t)
    assert torch.equal(cpu(x * 2 + 1), t * 2 + 1)
    assert torch.equal(cpu(x.sum()), t.sum())


def test_type_promotion_matches_torch():
    i = torch.tensor([1, 2, 3])
    f = torch.tensor([0.5, 1.5, 2.5])
    h = torch.tensor(2.0, dtype=torch.float64)
    cases = [
        (lambda a, b, c: a + b, (i, f, h)),
        (lambda a, b, c: a + c, (i, f, h)),  # zero-dim float64 with int64 -> default float
        (lambda a, b, c: b * c, (i, f, h)),  # zero-dim float64 does not widen float32
        (lambda a, b, c: a / 2, (i, f, h)),
        (lambda a, b, c: a * 2.5, (i, f, h)),
        (lambda a, b, c: a > 1, (i, f, h)),
    ]
    for fn, args in cases:
        ref = fn(*args)
        ours = cpu(fn(*[xnf.to_xla(a) for a in args]))
        assert ours.dtype == ref.dtype
        torch.testing.assert_close(ours, ref)


def test_metadata_and_host_reads():
    t = torch.arange(12.0).reshape(3, 4)
    x = xnf.to_xla(t)
    assert x.stride() == (4, 1)
    xt = x.t()
    assert xt.stride() == (1, 4) and not xt.is_contiguous()
    assert x[1, 2].item() == 6.0
    assert x.tolist() == t.tolist()
    assert (x.numpy() == t.numpy()).all()
    assert "device='jax:0'" in repr(x)
    assert torch.equal(x.cpu(), t)
    assert x.cpu().device.type == "cpu"


def test_device_events_time_what_runs_between_their_records():
    """Timing code written for torch.cuda.Event, on `torch.jax`'s events."""
    start, end = torch.jax.Event(enable_timing=True), torch.jax.Event(enable_timing=True)
    x = xnf.to_xla(torch.randn(32, 32))
    start.record()
    began = time.perf_counter()
    for _ in range(3):
        x = x @ x
        time.sleep(0.005)
    end.record()
    took = (time.perf_counter() - began) * 1000
    torch.jax.synchronize()
    assert 15 <= start.elapsed_time(end) <= took + 1
    with pytest.raises(RuntimeError, match="enable_timing=True"):
        torch.jax.Event().elapsed_time(end)
    with pytest.raises(RuntimeError, match="must be recorded"):
        start.elapsed_time(torch.jax.Event(enable_timing=True))


@pytest.mark.skipif(hooks_missing() is not None, reason=f"no pinned memory for our device: {hooks_missing()}")
def test_data_loader_pins_batches_for_our_device():
    dataset = torch.utils.data.TensorDataset(torch.arange(24.0).reshape(8, 3), torch.arange(8))
    loader = torch.utils.data.DataLoader(dataset, batch_size=4, pin_memory=True)
    batches = [(x.is_pinned(), y.is_pinned(), x.to("jax", non_blocking=True)) for x, y in loader]
    assert [(a, b) for a, b, _ in batches] == [(True, True)] * 2
    assert torch.equal(torch.cat([cpu(x) for _, _, x in batches]), torch.arange(24.0).reshape(8, 3))
    pinned = torch.ones(3).pin_memory()
    assert pinned.is_pinned() and pinned[1:].is_pinned() and not torch.ones(3).is_pinned()
    ours = xnf.to_xla(torch.ones(3))
    assert not ours.is_pinned()
    with pytest.raises(RuntimeError, match="only dense CPU tensors can be pinned"):
        ours.pin_memory()


@pytest.mark.skipif(hooks_missing() is not None, reason=f"no storage allocator for our device: {hooks_missing()}")
def test_accelerator_memory_functions_answer_or_refuse_clearly():
    torch.accelerator.empty_cache()
    for read in (torch.accelerator.memory_allocated, torch.accelerator.max_memory_allocated,
                 torch.accelerator.memory_stats, torch.accelerator.reset_peak_memory_stats):
        with pytest.raises(NotImplementedError, match=r"not kept for the jax device; jax\.live_arrays\(\)"):
            read()
    device_module = torch.get_device_module("jax")  # device-agnostic code's `torch.cuda`
    device_module.empty_cache()
    for read in (device_module.memory_allocated, device_module.max_memory_allocated,
                 device_module.memory_reserved, device_module.reset_peak_memory_stats):
        with pytest.raises(NotImplementedError, match=r"not kept for the jax device; jax\.live_arrays\(\)"):
            read()


def test_device_module_seeds_what_the_device_draws():
    # torch.cuda's seeding functions, as device-agnostic code calls them
    # (`torch.get_device_module(device).manual_seed(s)`): our numbers follow them.
    device_module = torch.get_device_module("jax")
    device_module.manual_seed(5)
    first = torch.randn(4, device="jax").cpu()
    assert device_module.initial_seed() == 5 == torch.initial_seed()
    torch.randn(4, device="jax")
    device_module.manual_seed_all(5)
    assert torch.equal(torch.randn(4, device="jax").cpu(), first)
    torch.manual_seed(5)  # seeds every device, ours through manual_seed_all
    assert torch.equal(torch.randn(4, device="jax").cpu(), first)
    device_module.seed()
    assert device_module.initial_seed() == torch.initial_seed() != 5
    before = torch.get_rng_state()
    with torch.random.fork_rng(device_type="jax"):  # restores what the device draws from
        torch.randn(4, device="jax")
    after = torch.randn(4, device="jax").cpu()
    torch.set_rng_state(before)
    assert torch.equal(torch.randn(4, device="jax").cpu(), after)
    assert len(device_module.get_rng_state_all()) == device_module.device_count()
    assert device_module.is_bf16_supported()
    assert device_module.get_device_name().startswith("jax")


@pytest.mark.parametrize(
    "pair",
    [lambda t: (t, t), lambda t: (t, t.view(3, 4)), lambda t: (t, t.view(12)), lambda t: (t, t[1:]),
     lambda t: (t[1:], t[1:]), lambda t: (t, t.clone()), lambda t: (t.t(), t.t()), lambda t: (t, t.t())],
)
def test_is_set_to_is_pytorchs(pair):
    t = torch.arange(12.0).reshape(3, 4)
    ours, expected = pair(xnf.to_xla(t)), pair(t)
    assert ours[0].is_set_to(ours[1]) is expected[0].is_set_to(expected[1])
    assert not pair(xnf.to_xla(t))[0].is_set_to(pair(xnf.to_xla(t))[1])  # two moves: two storages


def test_layout_queries_of_a_dense_tensor_are_pytorchs():
    t = torch.randn(2, 3, 4)
    x = xnf.to_xla(t)
    assert (x.sparse_dim(), x.dense_dim()) == (t.sparse_dim(), t.dense_dim()) == (0, 3)
    # const_data_ptr is data_ptr's device address (Note [Device addresses]), views included
    assert x.const_data_ptr() == x.data_ptr() != 0
    assert x[1].const_data_ptr() - x.const_data_ptr() == t[1].const_data_ptr() - t.const_data_ptr()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
def test_dequantize_of_a_tensor_that_is_not_quantized_is_pytorchs(dtype):
    t = torch.arange(6).to(dtype)
    x = xnf.to_xla(t)
    got, expected = x.dequantize(), t.dequantize()
    assert got.dtype == expected.dtype == torch.float32 and (got is x) == (expected is t)
    assert torch.equal(cpu(got), expected)


def test_numpy_is_a_copy_and_refuses_a_tensor_that_requires_grad_as_pytorch_does():
    x = xnf.to_xla(torch.arange(3.0))
    array = x.numpy()
    array[0] = 100.0  # the tensor has no host memory to share (docs/semantics.md)
    assert torch.equal(cpu(x), torch.arange(3.0))
    needs_grad = xnf.to_xla(torch.ones(2)).requires_grad_()
    with pytest.raises(RuntimeError) as expected:
        torch.ones(2).requires_grad_().numpy()
    with pytest.raises(RuntimeError) as got:
        needs_grad.numpy()
    assert str(got.value) == str(expected.value)
    assert (needs_grad.numpy(force=True) == 1).all()


@pytest.mark.parametrize("value", [torch.tensor(3), torch.tensor(2.5), torch.tensor(True), torch.tensor([1, 2])])
@pytest.mark.parametrize("spec", ["", ">4", ".2f"])
def test_format_matches_torch(value, spec):
    # a 0-dim tensor formats as its number (f"expert_{idx[0]}"), others as on the CPU
    try:
        expected = format(value, spec)
    except (TypeError, ValueError) as e:
        with pytest.raises(type(e)):
            format(xnf.to_xla(value), spec)
        return
    ours = format(xnf.to_xla(value), spec)
    assert ours == expected if value.dim() == 0 else ours == repr(xnf.to_xla(value))


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float64, torch.int64, torch.bool, torch.bfloat16, torch.complex64]
)
@pytest.mark.parametrize(
    "view",
    [
        lambda x: x.t(),
        lambda x: x[1:, ::2],
        lambda x: x[2],
        lambda x: x[:, 1:2].squeeze(1),
        lambda x: x.reshape(-1)[3:9],
        lambda x: x[1:2].expand(3, 4),
        lambda x: x.as_strided((2, 2), (1, 4), 5),
        lambda x: x[3:],
        lambda x: x[1:, 1:][5:],
    ],
    ids=[
        "t",
        "slices",
        "select",
        "squeezed_column",
        "flat_range",
        "expanded",
        "as_strided",
        "empty",
        "empty_past_the_end",
    ],
)
def test_host_reads_of_views_match_torch(view, dtype):
    ref = torch.arange(12).reshape(3, 4).to(dtype)
    ours = view(xnf.to_xla(ref))
    expected = view(ref)
    # a copy keeps the view's layout where it is dense (preserve_format), as PyTorch's does
    reads = [(cpu(ours), expected.clone()), (ours.cpu(), expected.clone())]
    if dtype != torch.bfloat16:
        reads.append((torch.from_numpy(ours.numpy()), torch.from_numpy(expected.clone().numpy())))
    for read, layout in reads:
        assert read.dtype == expected.dtype and read.shape == expected.shape
        assert read.stride() == layout.stride()
        assert torch.equal(read, expected)
    assert ours.tolist() == expected.tolist()
    if expected.numel() == 1:
        assert ours.item() == expected.item()


def test_assigning_data_rebinds_the_tensor_to_the_new_storage():
    ref = torch.nn.Parameter(torch.zeros(3))
    ours = torch.nn.Parameter(xnf.to_xla(torch.zeros(3)))
    base = torch.arange(6.0).reshape(2, 3)
    ours_base = xnf.to_xla(base.clone())
    ref.data, ours.data = base[1], ours_base[1]
    assert ours.shape == ref.shape and ours.stride() == ref.stride() and ours.storage_offset() == ref.storage_offset()
    assert torch.equal(cpu(ours.detach()), ref.detach())
    ref.data.mul_(2), ours.data.mul_(2)  # the new data is a view: writes land in its base
    assert torch.equal(cpu(ours_base), base) and base[1, 0] == 6
    ref.data, ours.data = torch.ones(4), xnf.to_xla(torch.ones(4))
    assert ours.shape == (4,) and torch.equal(cpu(ours.detach()), ref.detach())
    with pytest.raises(RuntimeError, match="incompatible tensor type"):
        ours.data = torch.ones(4)


def test_module_dtype_conversion_converts_the_backing_arrays():
    # Module._apply assigns param.data = converted param.
    torch.manual_seed(0)
    ref = torch.nn.Linear(3, 2)
    ours = xnf.to_xla(copy.deepcopy(ref))
    ref.double(), ours.double()
    assert ours.weight.dtype == torch.float64 and xnf.to_jax(ours.weight).dtype == "float64"
    x = torch.randn(4, 3, dtype=torch.float64)
    out = ours(xnf.to_xla(x))
    assert out.dtype == torch.float64
    torch.testing.assert_close(cpu(out), ref(x))


def test_float64_to_float16_rounds_through_float32_as_torch_does():
    # c10::Half converts only from float, so a double is rounded twice: these values sit
    # just above a float16 tie, which a direct rounding resolves the other way.
    ref = torch.tensor([1 + 2**-11 + 2**-40, -(2 + 2**-10 + 2**-38), 1 + 2**-8 + 2**-40], dtype=torch.float64)
    for dtype in (torch.float16, torch.bfloat16):
        expected = ref.to(dtype)
        assert torch.equal(cpu(xnf.to_xla(ref).to(dtype)), expected)
        written = torch.zeros(3, dtype=dtype, device=DEVICE)
        written.copy_(xnf.to_xla(ref))
        assert torch.equal(cpu(written), expected)
    expected = torch.tensor([1.0, -2.0, 1 + 2**-8], dtype=torch.float16)
    assert torch.equal(cpu(xnf.to_xla(ref).to(torch.float16)), expected)


_NEAR_A_HALF_TIE = 1 + 2**-11 + 2**-40  # 1.0 in float16 through float32, 1.001 directly
_SCALAR_CONSUMERS = {
    "add": lambda x: x + _NEAR_A_HALF_TIE,
    "add a 0-dim float64": lambda x: x + torch.tensor(_NEAR_A_HALF_TIE, dtype=torch.float64).to(x.device),
    "where": lambda x: torch.where(x > 0, x, _NEAR_A_HALF_TIE),
    "clamp": lambda x: x.clamp(min=_NEAR_A_HALF_TIE),
    "remainder": lambda x: torch.remainder(x + 3, _NEAR_A_HALF_TIE),
    "full": lambda x: torch.full((3,), _NEAR_A_HALF_TIE, dtype=x.dtype, device=x.device),
    "full_like": lambda x: torch.full_like(x, _NEAR_A_HALF_TIE),
    "new_full": lambda x: x.new_full((2,), _NEAR_A_HALF_TIE),
    "fill_": lambda x: x.clone().fill_(_NEAR_A_HALF_TIE),
    "masked_fill": lambda x: x.masked_fill(x == 0, _NEAR_A_HALF_TIE),
    "index_fill": lambda x: x.index_fill(0, torch.tensor([1]).to(x.device), _NEAR_A_HALF_TIE),
    "threshold": lambda x: torch.nn.functional.threshold(x, 0.5, _NEAR_A_HALF_TIE),
    "scalar_tensor": lambda x: torch.scalar_tensor(_NEAR_A_HALF_TIE, dtype=x.dtype, device=x.device),
}


@pytest.mark.usefixtures("compiled_first_calls")
@pytest.mark.parametrize("op", sorted(_SCALAR_CONSUMERS))
def test_python_numbers_reach_float16_through_float32_as_torch_does(op):
    x = torch.zeros(4, dtype=torch.float16)
    expected = _SCALAR_CONSUMERS[op](x)
    assert torch.equal(cpu(_SCALAR_CONSUMERS[op](xnf.to_xla(x))), expected)


def test_cpu_tensor_to_jax_device():
    t = torch.arange(6).reshape(2, 3)
    x = t.to("jax")
    assert isinstance(x, XlaTensor)
    assert torch.equal(cpu(x), t)


# ---------------------------------------------------------------- views and mutation


def _both(fn, make):
    ref = make()
    ours = xnf.to_xla(make())
    fn(ref)
    fn(ours)
    return ref, ours


@pytest.mark.parametrize(
    "mutate",
    [
        lambda x: x.view(-1).__setitem__(5, 7),
        lambda x: x.t()[1].add_(1),
        lambda x: x[1:3].fill_(2),
        lambda x: x[:, ::2].mul_(3),
        lambda x: x.unsqueeze(0).transpose(1, 2)[0, 1].zero_(),
        lambda x: x.permute(1, 0)[2:].copy_(torch.ones(2, 3)),
    ],
    ids=[
        "view_setitem",
        "t_select_add_",
        "slice_fill_",
        "step_slice_mul_",
        "unsqueeze_transpose_zero_",
        "permute_copy_",
    ],
)
def test_write_through_view_lands_in_base(mutate):
    ref, ours = _both(mutate, lambda: torch.arange(12.0).reshape(3, 4))
    assert torch.equal(cpu(ours), ref)


def test_write_to_base_is_seen_by_existing_view():
    x = xnf.to_xla(torch.zeros(3, 4))
    v = x[1]
    assert torch.equal(cpu(v), torch.zeros(4))
    x.add_(1)
    assert torch.equal(cpu(v), torch.ones(4))
    v.mul_(5)
    assert torch.equal(cpu(x)[1], torch.full((4,), 5.0))
    assert torch.equal(cpu(x)[0], torch.ones(4))


_VIEWS_FROM_OFFSET_0 = {
    "reshape": lambda x: x.view(4, 6),
    "t": lambda x: x.view(4, 6).t(),
    "permute": lambda x: x.permute(2, 0, 1),
    "expand": lambda x: x[:, :1].expand(2, 5, 4),
    "leading_slice": lambda x: x[:, :2, ::2],
    "select_0": lambda x: x[0],
    "diagonal": lambda x: x.view(4, 6).diagonal(),
}


@pytest.mark.parametrize("view", _VIEWS_FROM_OFFSET_0.values(), ids=_VIEWS_FROM_OFFSET_0.keys())
def test_ops_reading_views_match_torch_and_see_later_writes(view, monkeypatch):
    """Eager ops read a view from offset 0 inside their own executable (Note [Fused
    view reads]), with no strided read of their own: unary, binary with a whole tensor,
    a reduction, a list op, and a matmul, each before and after the base changes."""
    separate_reads = []
    read = views.strided_read_jit
    monkeypatch.setattr(eager, "strided_read_jit", lambda *a: separate_reads.append(a[1:]) or read(*a))
    ref = torch.arange(24.0).reshape(2, 3, 4)
    ours = xnf.to_xla(ref.clone())

    def uses(v):
        flat = v.reshape(-1)
        return [v.exp(), v * v, v.sum(0), torch.cat([v, v]), torch.mm(flat[None, :], flat[:, None])]

    for _ in range(2):
        for got, expected in zip(uses(view(ours)), uses(view(ref))):
            assert got.shape == expected.shape and got.dtype == expected.dtype
            torch.testing.assert_close(cpu(got), expected)
        ref.mul_(-0.5)
        ours.mul_(-0.5)
    assert separate_reads == []


@pytest.mark.usefixtures("compiled_first_calls")
def test_reading_views_at_new_offsets_does_not_compile_the_consuming_op_again():
    """Views from other offsets are read on their own (Note [Fused view reads]), so a
    loop over a tensor's slices compiles its consuming op once, not once per slice."""
    import xla_native_functions.dispatch as stubs

    x = xnf.to_xla(torch.randn(6, 40))
    y = xnf.to_xla(torch.randn(6))
    torch.testing.assert_close(cpu(torch.tanh(x[:, 1] + y)), torch.tanh(cpu(x)[:, 1] + cpu(y)))
    before = stubs._eager_tanh._cache_size(), stubs._eager_add_Tensor._cache_size()
    for i in range(2, 40):
        torch.testing.assert_close(cpu(torch.tanh(x[:, i] + y)), torch.tanh(cpu(x)[:, i] + cpu(y)))
    assert (stubs._eager_tanh._cache_size(), stubs._eager_add_Tensor._cache_size()) == before


def test_inplace_returns_same_object_and_checks_cast():
    x = xnf.to_xla(torch.tensor([1, 2, 3]))
    assert x.add_(1) is x
    assert torch.equal(cpu(x), torch.tensor([2, 3, 4]))
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        x.add_(1.5)
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        xnf.to_xla(torch.zeros(3)).add_(xnf.to_xla(torch.zeros(2, 3)))


def test_out_variant_writes_into_out():
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    out = xnf.to_xla(torch.empty(3, 4))
    ret = torch.add(xnf.to_xla(a), xnf.to_xla(b), alpha=2, out=out)
    assert ret is out
    torch.testing.assert_close(cpu(out), torch.add(a, b, alpha=2))


@pytest.mark.parametrize(
    "mutate",
    [
        lambda x: x.t_(),
        lambda x: x.transpose_(0, 1),
        lambda x: x.unsqueeze_(1),
        lambda x: x.unsqueeze_(0).squeeze_(0),
        lambda x: x.resize_(2, 2),
        lambda x: x.resize_(4, 4),  # grows the storage
        lambda x: x[1:].t_().mul_(2),
    ],
    ids=["t_", "transpose_", "unsqueeze_", "squeeze_", "resize_shrink", "resize_grow", "t_on_view"],
)
@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_inplace_metadata_ops_keep_identity(mutate, mode):
    ref = torch.arange(12.0).reshape(3, 4)
    x = xnf.to_xla(ref.clone())
    run = mutate if mode == "eager" else xnf.compile(mutate)
    result = run(x)
    expected = mutate(ref)
    assert x.shape == ref.shape and x.stride() == ref.stride() and x.storage_offset() == ref.storage_offset()
    if ref.numel() > 12:  # resize_ leaves grown elements uninitialized
        torch.testing.assert_close(cpu(x).flatten()[:12], ref.flatten()[:12])
    else:
        torch.testing.assert_close(cpu(x), ref)
        torch.testing.assert_close(cpu(result), expected)


def test_resize_keeps_aliasing_with_views():
    base = xnf.to_xla(torch.arange(6.0))
    view = base.view(6)
    view.resize_(3)
    view.fill_(1)
    assert torch.equal(cpu(base), torch.tensor([1.0, 1, 1, 3, 4, 5]))


def test_resize_to_the_same_sizes_keeps_a_views_strides():
    ref_base = torch.arange(12.0).reshape(3, 4)
    base = xnf.to_xla(ref_base)
    ref, ours = ref_base[:, ::2], base[:, ::2]
    ref.resize_(ref.shape), ours.resize_(ours.shape)
    assert ours.stride() == ref.stride()
    ours.fill_(-1), ref.fill_(-1)
    torch.testing.assert_close(cpu(base), ref_base)


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("numel", [0, 5])
def test_out_of_the_wrong_shape_is_resized(mode, numel):
    a, b = torch.randn(2, 3), torch.randn(2, 3)
    out, ref = xnf.to_xla(torch.zeros(numel)), torch.zeros(numel)

    def add(o, x, y):
        return torch.add(x, y, out=o)

    run = add if mode == "eager" else xnf.compile(add)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run(out, xnf.to_xla(a), xnf.to_xla(b))
    with warnings.catch_warnings(record=True) as ref_caught:
        warnings.simplefilter("always")
        add(ref, a, b)
    # PyTorch's message ends with its C++ source location "(Triggered internally at ...)".
    assert [str(w.message) for w in caught] == [str(w.message).split(" (Triggered internally")[0] for w in ref_caught]
    assert out.shape == ref.shape and out.stride() == ref.stride()
    torch.testing.assert_close(cpu(out), ref)


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("view", [lambda b: b.view(-1)[2:2], lambda b: b[1, 3:], lambda b: b.view(-1)[2:3]],
                         ids=["empty", "empty_row_end", "one_element"])
def test_out_view_is_resized_within_its_storage(view, mode):
    """An out= view resized to more elements stays a view of its storage where the
    storage holds them (PyTorch's resize_): the result lands in the base."""

    def add(base, x):
        out = view(base)
        torch.add(x, 1, out=out)
        return out

    run = add if mode == "eager" else xnf.compile(add)
    base, ref_base = xnf.to_xla(torch.zeros(2, 3)), torch.zeros(2, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the third case warns: it resizes a tensor with elements
        out = run(base, xnf.to_xla(torch.arange(3.0)))
        ref = add(ref_base, torch.arange(3.0))
    assert out.shape == ref.shape and out.stride() == ref.stride()
    torch.testing.assert_close(cpu(out), ref)
    torch.testing.assert_close(cpu(base), ref_base)


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_set_makes_a_tensor_view_anothers_storage(mode):
    """x.set_(y): x takes y's storage, sizes, strides and offset; writes through either
    reach the other. set_() empties x."""

    def step(x, y, z):
        x.set_(y[:, 1:])
        x.add_(100)
        z.set_()
        return x, y, z

    expected = step(torch.zeros(2), torch.arange(6.0).view(2, 3), torch.ones(3))
    run = xnf.compile(step) if mode == "compiled" else step
    for _ in range(2):
        got = run(xnf.to_xla(torch.zeros(2)), xnf.to_xla(torch.arange(6.0).view(2, 3)), xnf.to_xla(torch.ones(3)))
    for g, e in zip(got, expected):
        assert g.shape == e.shape and g.stride() == e.stride() and g.storage_offset() == e.storage_offset()
        torch.testing.assert_close(cpu(g), e)
    with pytest.raises(RuntimeError, match="Could not set tensor of type float to a tensor of type long int"):
        xnf.to_xla(torch.zeros(2, dtype=torch.int64)).set_(xnf.to_xla(torch.ones(2)))


@pytest.mark.parametrize("n", [1, 2, 7, 8])
def test_fft_frequencies_made_on_our_device(n):
    """torch.fft.fftfreq writes its negative frequencies into an empty view of its result."""
    torch.testing.assert_close(cpu(torch.fft.fftfreq(n, 0.1, device="jax")), torch.fft.fftfreq(n, 0.1))
    torch.testing.assert_close(cpu(torch.fft.rfftfreq(n, device="jax", dtype=torch.float64)),
                               torch.fft.rfftfreq(n, dtype=torch.float64))


def _raises_like_torch(fn, cpu_args, ours_args):
    with pytest.raises(Exception) as expected:
        fn(*cpu_args)
    with pytest.raises(type(expected.value)):
        fn(*ours_args)


def test_out_overlapping_an_input_raises_like_torch():
    base = torch.arange(8.0)
    idx = torch.tensor([0, 2])
    ours = xnf.to_xla(base)
    # partial overlap: rejected by every op
    _raises_like_torch(lambda b: torch.add(b[:4], 1, out=b[2:6]), (base.clone(),), (ours,))
    # the input itself as out=: fine for elementwise ops (that is the in-place form) ...
    for t in (base.clone(), ours):
        torch.mul(t[:4], 2, out=t[:4])
    torch.testing.assert_close(cpu(ours), torch.cat([torch.arange(4.0) * 2, torch.arange(4.0, 8.0)]))
    # ... but not for gather/index_select/take/cat/masked_select
    x = xnf.to_xla(torch.arange(6.0))
    _raises_like_torch(
        lambda t, i: torch.index_select(t, 0, i, out=t[:2]), (torch.arange(6.0), idx), (x, xnf.to_xla(idx))
    )
    _raises_like_torch(lambda t: torch.cat([t[:3], t[3:]], out=t[:6]), (torch.arange(6.0),), (x,))
    # an expanded out= has elements sharing memory
    _raises_like_torch(
        lambda o, t, i: torch.gather(t, 0, i, out=o),
        (torch.zeros(1).expand(2), torch.arange(6.0), idx),
        (xnf.to_xla(torch.zeros(1)).expand(2), x, xnf.to_xla(idx)),
    )


# In-place ops reading memory they write, run on a fresh arange(9).reshape(3, 3) `x`
# (and `i`, the index [0, 1, 2], on x's device): PyTorch's TensorIterator ops reject a
# partial overlap and accept a full one or a layout too hard to compare; its
# scatter-like ops reject any overlap. (Where PyTorch accepts an overlap its result
# can depend on the order its loop writes in: such cases are left out.)
IN_PLACE_OVERLAP = {
    "add_ row": lambda x, i: x.add_(x[0]),
    "add_ transpose": lambda x, i: x.add_(x.t()),
    "add_ itself": lambda x, i: x.add_(x),
    "add_ same layout": lambda x, i: x.add_(x.view(9).view(3, 3)),
    "add_ flattened": lambda x, i: x.view(9)[:4].add_(x.view(9)[2:6]),
    "add_ disjoint": lambda x, i: x[0].add_(x[2]),
    "sub_ columns, too hard": lambda x, i: x[:, 0:2].sub_(x[:, 1:3]),
    "mul_ 0-dim": lambda x, i: x.mul_(x[0, 0]),
    "addcmul_": lambda x, i: x.addcmul_(x[0], x[1]),
    "clamp_ tensor": lambda x, i: x.clamp_(min=x.t()),
    "lerp_ weight": lambda x, i: x.lerp_(torch.ones_like(x), x.t()),
    "floor_divide_": lambda x, i: x.add_(1).floor_divide_(x[0]),
    "addr_": lambda x, i: x.addr_(x[0], x[1]),
    "copy_ transpose": lambda x, i: x.copy_(x.t()),
    "copy_ shifted": lambda x, i: x[1:].copy_(x[:-1]),
    "copy_ itself": lambda x, i: x.copy_(x),
    "masked_fill_ 0-dim value": lambda x, i: x.masked_fill_(x > 3, x[0, 0]),
    "index_add_ itself": lambda x, i: x.index_add_(0, i, x),
    "index_copy_ row": lambda x, i: x.index_copy_(0, i[:1], x[1:2]),
    "index_put_ itself": lambda x, i: x.index_put_((i,), x),
    "scatter_add_ row": lambda x, i: x.scatter_add_(0, i.view(1, 3), x[1:2]),
    "put_ itself": lambda x, i: x.put_(torch.arange(9, device=x.device), x),
}


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("case", list(IN_PLACE_OVERLAP), ids=list(IN_PLACE_OVERLAP))
def test_in_place_overlap_matches_torch(case, mode):
    fn = IN_PLACE_OVERLAP[case]
    ref, ref_i = torch.arange(9.0).reshape(3, 3), torch.arange(3)
    ours, ours_i = xnf.to_xla(ref), xnf.to_xla(ref_i)
    run = fn if mode == "eager" else xnf.compile(fn)
    try:
        fn(ref, ref_i)
    except RuntimeError as e:
        with pytest.raises(RuntimeError) as info:
            run(ours, ours_i)
        assert str(info.value) == str(e)
        return
    run(ours, ours_i)
    torch.testing.assert_close(cpu(ours), ref)


def test_out_dtype_rules_match_torch():
    src, idx = torch.randn(4), torch.tensor([1, 3])
    # gather wants out in its own dtype; add accepts any dtype it can cast to
    _raises_like_torch(
        lambda t, i, o: torch.gather(t, 0, i, out=o), (src, idx, torch.empty(2, dtype=torch.float64)),
        (xnf.to_xla(src), xnf.to_xla(idx), xnf.to_xla(torch.empty(2, dtype=torch.float64))),
    )
    out = xnf.to_xla(torch.empty(4, dtype=torch.float64))
    torch.add(xnf.to_xla(src), 1, out=out)
    torch.testing.assert_close(cpu(out), (src + 1).double())
    # factories compute in the out tensor's dtype
    for make in (
        lambda o: torch.arange(0.0, 5.0, out=o),
        lambda o: torch.full((3,), 2.7, out=o),
        lambda o: torch.linspace(0, 7, 4, out=o),
    ):
        ref, ours = make(torch.empty(0, dtype=torch.int64)), make(xnf.to_xla(torch.empty(0, dtype=torch.int64)))
        assert ours.dtype == torch.int64
        torch.testing.assert_close(cpu(ours), ref)


def test_multinomial_rejects_invalid_probabilities_in_eager_mode():
    for probs in ([0.2, -0.1, 0.9], [0.5, float("nan")], [0.0, 0.0], [1.0, float("inf")]):
        p = torch.tensor(probs)
        _raises_like_torch(lambda t: torch.multinomial(t, 1), (p,), (xnf.to_xla(p),))



_X = torch.randn(3, 4)
INDEX_ERRORS = {
    "gather": lambda x, d: torch.gather(x, 1, torch.tensor([[0, 5]], device=d)),
    "gather_negative": lambda x, d: torch.gather(x, 1, torch.tensor([[-1]], device=d)),
    "scatter_": lambda x, d: x.clone().scatter_(1, torch.tensor([[4]], device=d), 1.0),
    "scatter_add": lambda x, d: torch.scatter_add(x, 0, torch.tensor([[3]], device=d), x[:1]),
    "index_select": lambda x, d: torch.index_select(x, 1, torch.tensor([4], device=d)),
    "index_add": lambda x, d: torch.index_add(x, 1, torch.tensor([-1], device=d), x[:, :1]),
    "index_copy_": lambda x, d: x.clone().index_copy_(1, torch.tensor([4], device=d), x[:, :1]),
    "index_fill": lambda x, d: torch.index_fill(x, 1, torch.tensor([-5], device=d), 1.0),
    "take": lambda x, d: torch.take(x, torch.tensor([-13], device=d)),
    "embedding": lambda x, d: torch.nn.functional.embedding(torch.tensor([3], device=d), x),
    "embedding_bag": lambda x, d: torch.nn.functional.embedding_bag(
        torch.tensor([5], device=d), x, torch.tensor([0], device=d)
    ),
    "nll_loss": lambda x, d: torch.nn.functional.nll_loss(x, torch.tensor([0, 1, 4], device=d)),
    "cross_entropy": lambda x, d: torch.nn.functional.cross_entropy(x, torch.tensor([0, -2, 1], device=d)),
}


@pytest.mark.parametrize("name", INDEX_ERRORS)
def test_out_of_range_index_values_raise_like_torch_in_eager_mode(name):
    fn = INDEX_ERRORS[name]
    with pytest.raises(Exception) as expected:
        fn(_X, "cpu")
    with pytest.raises(type(expected.value)):
        fn(xnf.to_xla(_X), DEVICE)


def test_in_range_index_values_pass_the_checks():
    # negative indices where PyTorch wraps them, and nll_loss's ignore_index
    x = xnf.to_xla(_X)
    torch.testing.assert_close(
        cpu(torch.take(x, xnf.to_xla(torch.tensor([-12, 11])))), torch.take(_X, torch.tensor([-12, 11]))
    )
    torch.testing.assert_close(
        cpu(torch.index_fill(x, 1, xnf.to_xla(torch.tensor([-1])), 2.0)),
        torch.index_fill(_X, 1, torch.tensor([-1]), 2.0),
    )
    target = torch.tensor([0, -100, 3])
    torch.testing.assert_close(
        cpu(torch.nn.functional.nll_loss(x, xnf.to_xla(target))), torch.nn.functional.nll_loss(_X, target)
    )


@pytest.mark.parametrize("input_value, target_value", [(1.5, 1.0), (-0.1, 0.0), (math.nan, 1.0), (0.5, 2.0)],
                         ids=["above", "below", "nan", "target"])
def test_binary_cross_entropy_outside_0_1_raises_like_torch_in_eager_mode(input_value, target_value):
    """It returned a number (NaN or a log of a negative clamped to -100) where PyTorch
    CPU raises; inside compiled programs it still does (docs/semantics.md)."""
    probabilities = torch.tensor([0.25, input_value, 0.75])
    target = torch.tensor([1.0, target_value, 0.0])
    with pytest.raises(RuntimeError) as expected:
        torch.nn.functional.binary_cross_entropy(probabilities, target)
    with pytest.raises(RuntimeError, match=re.escape(str(expected.value))):
        torch.nn.functional.binary_cross_entropy(xnf.to_xla(probabilities), xnf.to_xla(target))
    # the values at the ends of [0, 1] pass, and give PyTorch's loss
    ends, ends_target = torch.tensor([0.0, 1.0, 0.5]), torch.tensor([1.0, 0.0, 1.0])
    torch.testing.assert_close(
        cpu(torch.nn.functional.binary_cross_entropy(xnf.to_xla(ends), xnf.to_xla(ends_target))),
        torch.nn.functional.binary_cross_entropy(ends, ends_target),
    )


@pytest.mark.parametrize("value,message", [(torch.tensor(1), None), (torch.tensor(0), None), (torch.tensor(0.0), "bad"),
                                           (torch.tensor([1, 1]), None), (torch.tensor(True), "fine")])
def test_assert_async_raises_like_torch_in_eager_mode_only(value, message):
    def check(t):
        if message is None:
            torch._assert_async(t)
        else:
            torch._assert_async(t, message)
        return t + 1

    try:
        check(value)
        expected = None
    except RuntimeError as e:
        expected = str(e)
    if expected is None:
        check(xnf.to_xla(value))
    else:
        with pytest.raises(RuntimeError) as raised:
            check(xnf.to_xla(value))
        assert str(raised.value) == expected
    step = xnf.compile(check)
    for _ in range(3):  # compiled programs leave the check out, and replay
        torch.testing.assert_close(cpu(step(xnf.to_xla(value))), value + 1)


def test_index_value_checks_can_be_turned_off(monkeypatch):
    monkeypatch.setattr(xnf.config, "check_index_values", False)
    # the gather reads a fill value for the bad index instead of raising
    assert torch.gather(xnf.to_xla(_X), 1, xnf.to_xla(torch.tensor([[0, 5]]))).shape == (1, 2)


def test_select_slice_split_and_squeeze_layouts_match_torch():
    """Their sizes, strides and offsets are computed in Python on the common path
    (runtime/core/views.py `_fast_view_meta`); errors come from PyTorch's own kernels."""
    calls = [("select", (d, i)) for d in (-3, 0, 1, 2, 3) for i in (-6, -1, 0, 2, 4)]
    calls += [("slice", (d, start, end, step)) for d in (0, -1) for start in (None, -9, -2, 0, 2, 9)
              for end in (None, -9, -1, 1, 3, 9) for step in (1, 2, 0)]
    calls += [("split", (n, d)) for n in (1, 2, 3, 7, 0) for d in (0, 1, -1, 3)]
    calls += [("squeeze", (d,)) for d in (-1, 0, 2, 3)]
    ops = {"select": torch.ops.aten.select.int, "slice": torch.ops.aten.slice.Tensor,
           "split": torch.ops.aten.split.Tensor, "squeeze": torch.ops.aten.squeeze.dim}
    bases = {  # views with an offset and a step, an empty one, one with a size-1 dim, a 0-dim one
        "stepped": lambda t: t.reshape(4, 5, 6)[:, 1:, ::2],
        "empty": lambda t: t.reshape(4, 5, 6)[:, :0],
        "size_1": lambda t: t.reshape(4, 5, 6)[:, 2:3, 1:],
        "scalar": lambda t: t[7],
    }
    full = torch.arange(120.0)
    for name, args in calls:
        for kind, make in bases.items():
            ref, ours = make(full), make(xnf.to_xla(full))
            try:
                expected = ops[name](ref, *args)
            except (IndexError, RuntimeError) as e:
                with pytest.raises(type(e)):
                    ops[name](ours, *args)
                continue
            got = ops[name](ours, *args)
            pairs = zip(got, expected, strict=True) if name == "split" else [(got, expected)]
            for o, e in pairs:
                where = (name, args, kind)
                assert (o.shape, o.stride(), o.storage_offset()) == (e.shape, e.stride(), e.storage_offset()), where
                assert torch.equal(cpu(o), e), where


def test_view_errors_match_torch():
    x = xnf.to_xla(torch.zeros(3, 4))
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        x.t().view(12)
    with pytest.raises(IndexError):
        x.select(0, 5)


# ---------------------------------------------------------------- modules and autograd


def _block():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(16, 32),
        torch.nn.GELU(),
        torch.nn.LayerNorm(32),
        torch.nn.Linear(32, 8),
        torch.nn.ReLU(),
        torch.nn.Linear(8, 4),
        torch.nn.LogSoftmax(-1),
    )


def test_module_forward_matches_torch():
    model = _block()
    x = torch.randn(5, 16)
    ref = model(x)
    xnf.to_xla(model)
    assert all(isinstance(p, XlaTensor) for p in model.parameters())
    torch.testing.assert_close(cpu(model(xnf.to_xla(x))), ref, atol=1e-5, rtol=1e-5)


def test_backward_through_moved_module_matches_torch():
    model = _block()
    ref_model = copy.deepcopy(model)
    x = torch.randn(5, 16)
    ref_loss = (ref_model(x) ** 2).mean()
    ref_loss.backward()
    xnf.to_xla(model)
    loss = (model(xnf.to_xla(x)) ** 2).mean()
    loss.backward()
    torch.testing.assert_close(cpu(loss), ref_loss)
    for (name, p), q in zip(model.named_parameters(), ref_model.parameters()):
        assert isinstance(p.grad, XlaTensor), name
        torch.testing.assert_close(cpu(p.grad), q.grad, atol=1e-5, rtol=1e-4, msg=name)


def test_state_dict_round_trip():
    model = _block()
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    xnf.to_xla(model)
    sd = xnf.to_torch(model.state_dict())
    for k, v in expected.items():
        assert torch.equal(sd[k], v)


# ---------------------------------------------------------------- compiled mode


def test_compiled_training_step_compiles_once_and_matches_eager():
    model = _block()
    ref_model = copy.deepcopy(model)
    xnf.to_xla(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref_model.parameters(), lr=0.1)

    def step(x):
        opt.zero_grad()
        loss = (model(x) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    compiled = xnf.compile(step)
    xnf.reset_metrics()
    for i in range(4):
        x = torch.randn(5, 16)
        ref_opt.zero_grad()
        ref_loss = (ref_model(x) ** 2).mean()
        ref_loss.backward()
        ref_opt.step()
        loss = compiled(xnf.to_xla(x))
        torch.testing.assert_close(cpu(loss), ref_loss, atol=1e-5, rtol=1e-5)
    assert metrics.compile_count == 1, xnf.metrics_report()
    assert metrics.cache_hits == 3
    for p, q in zip(model.parameters(), ref_model.parameters()):
        torch.testing.assert_close(cpu(p), q, atol=1e-5, rtol=1e-5)


def test_lazy_mode_training_loop_matches_cpu_and_compiles_once():
    model = _block()
    ref_model = copy.deepcopy(model)
    xnf.to_xla(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref_model.parameters(), lr=0.1)
    losses = []
    xnf.reset_metrics()
    with xnf.lazy_mode():
        for _ in range(4):
            x = torch.randn(5, 16)
            ref_opt.zero_grad()
            ref_loss = (ref_model(x) ** 2).mean()
            ref_loss.backward()
            ref_opt.step()
            opt.zero_grad()
            loss = (model(xnf.to_xla(x)) ** 2).mean()
            loss.backward()
            opt.step()
            assert metrics.execute_count + metrics.compile_count == len(losses)  # nothing ran yet
            xnf.mark_step()
            losses.append((loss, ref_loss))
    assert xnf.runtime.core.context.context.trace is None
    for loss, ref_loss in losses:
        torch.testing.assert_close(cpu(loss), ref_loss, atol=1e-5, rtol=1e-5)
    assert metrics.compile_count == 1 and metrics.cache_hits == 3, xnf.metrics_report()
    for p, q in zip(model.parameters(), ref_model.parameters()):
        torch.testing.assert_close(cpu(p), q, atol=1e-5, rtol=1e-5)


def test_lazy_mode_host_read_runs_the_pending_graph():
    x = xnf.to_xla(torch.arange(6.0))
    with xnf.lazy_mode():
        y = (x * 2).sum()
        assert y.item() == 30.0  # a host read cannot wait for mark_step
        x.add_(1)
    assert torch.equal(cpu(x), torch.arange(6.0) + 1)


@pytest.mark.parametrize("capturable", [False, True], ids=["step_on_cpu", "capturable"])
@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_adamw_training_matches_cpu(mode, capturable):
    """Default AdamW reads its CPU step counter with .item() and passes a new float to
    addcdiv_ every step: compiled mode must neither freeze it nor recompile for it."""
    model = _block()
    ref_model = copy.deepcopy(model)
    xnf.to_xla(model)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01, capturable=capturable)
    ref_opt = torch.optim.AdamW(ref_model.parameters(), lr=0.01)

    def step(x):
        opt.zero_grad()
        loss = (model(x) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    run = step if mode == "eager" else xnf.compile(step)
    xnf.reset_metrics()
    for _ in range(4):
        x = torch.randn(5, 16)
        ref_opt.zero_grad()
        ref_loss = (ref_model(x) ** 2).mean()
        ref_loss.backward()
        ref_opt.step()
        torch.testing.assert_close(cpu(run(xnf.to_xla(x))), ref_loss, atol=1e-5, rtol=1e-5)
    for p, q in zip(model.parameters(), ref_model.parameters()):
        torch.testing.assert_close(cpu(p), q, atol=1e-5, rtol=1e-5)
    assert not metrics.fallback_calls
    if mode == "compiled":
        # The first step creates the optimizer state, so its graph differs from the rest.
        assert metrics.compile_count == 2, xnf.metrics_report()


def test_recompile_reason_names_the_changed_input():
    f = xnf.compile(lambda a: (a * 2).sum())
    xnf.reset_metrics()
    f(xnf.to_xla(torch.ones(3)))
    f(xnf.to_xla(torch.ones(4)))
    assert metrics.compile_count == 2
    assert "graph input 0 changed from ((3,), torch.float32) to ((4,), torch.float32)" in metrics.recompile_reasons[-1]


def test_new_scalar_does_not_recompile():
    x = xnf.to_xla(torch.ones(3))
    f = xnf.compile(lambda a, s: a.add(a, alpha=s))
    xnf.reset_metrics()
    for s in (0.5, 1.5, 2.5):
        assert torch.equal(cpu(f(x, s)), torch.ones(3) * (1 + s))
    assert metrics.compile_count == 1


def test_scalar_one_is_a_graph_constant_with_torch_semantics():
    """alpha and beta equal to 1 are folded into the graph (ir.SpecialScalar): results and
    dtypes stay PyTorch's, and only a move to or from 1 compiles."""
    f = xnf.compile(lambda a, b, s: torch.addmm(a, b, b, beta=s, alpha=s), replay=False)
    a, b = torch.randn(3, 3), torch.randn(3, 3)
    xnf.reset_metrics()
    for s in (1, 1.0, 2.5, 1, 0.5, 1.0):
        torch.testing.assert_close(cpu(f(xnf.to_xla(a), xnf.to_xla(b), s)), torch.addmm(a, b, b, beta=s, alpha=s))
    assert metrics.compile_count == 3  # 1, 1.0, and one graph for every other float
    i = torch.tensor([2**40, -3])
    g = xnf.compile(lambda x: x.add(x, alpha=1), replay=False)
    out = cpu(g(xnf.to_xla(i)))
    assert out.dtype == torch.int64 and torch.equal(out, i + i)


def test_compiled_tensor_from_python_data_on_our_device():
    # torch.tensor(data, device=...) ends in a CPU-to-device copy (_copy_from), whose
    # CPU value enters the trace as a graph input.
    f = xnf.compile(lambda: torch.tensor([1.0, 2.5], device=DEVICE) * 2)
    for _ in range(2):
        out = f()
        assert isinstance(out, XlaTensor)
        assert torch.equal(cpu(out), torch.tensor([2.0, 5.0]))


def test_compiled_mutation_through_view_is_written_back():
    x = xnf.to_xla(torch.zeros(3, 4))

    @xnf.compile
    def fill(t):
        t.view(-1)[5] = 7
        t[1:3].fill_(2)

    fill(x)
    ref = torch.zeros(3, 4)
    ref.view(-1)[5] = 7
    ref[1:3].fill_(2)
    assert torch.equal(cpu(x), ref)


# ---------------------------------------------------------------- environment and RNG


def test_factories_in_environment_and_seeded_rng():
    with xnf.default_env():
        z = torch.zeros(2, 3)
        a = torch.arange(5)
        torch.manual_seed(123)
        r1 = torch.randn(1000)
        torch.manual_seed(123)
        r2 = torch.randn(1000)
    assert isinstance(z, XlaTensor) and isinstance(a, XlaTensor) and isinstance(r1, XlaTensor)
    assert torch.equal(cpu(a), torch.arange(5))
    assert torch.equal(cpu(r1), cpu(r2))
    assert abs(cpu(r1).mean().item()) < 0.15 and abs(cpu(r1).std().item() - 1) < 0.1


def test_to_torch_gives_a_cpu_tensor_inside_and_outside_the_environment():
    # inside, torch.from_numpy would make an XlaTensor: the copy to the CPU must not
    x = xnf.to_xla(torch.arange(6.0).reshape(2, 3))
    outside = xnf.to_torch(x)
    with xnf.default_env():
        inside, inside_cpu = xnf.to_torch(x), x.cpu()
    for t in (outside, inside, inside_cpu):
        assert type(t) is torch.Tensor and t.device.type == "cpu"
        assert torch.equal(t, torch.arange(6.0).reshape(2, 3))


def test_environment_enabled_globally_until_disabled():
    env = xnf.default_env()
    env.enable_globally()
    try:
        inside = torch.ones(2)
        model = torch.nn.Linear(3, 2)  # parameters created on JAX
    finally:
        env.disable_globally()
    outside = torch.ones(2)
    assert isinstance(inside, XlaTensor) and isinstance(model.weight, XlaTensor)
    assert not isinstance(outside, XlaTensor)
    out = model(xnf.to_xla(torch.ones(4, 3)))
    torch.testing.assert_close(cpu(out), torch.ones(4, 3) @ cpu(model.weight).T + cpu(model.bias))


@pytest.mark.parametrize(
    "make",
    [
        lambda device: torch.eye(3, device=device),
        lambda device: torch.eye(2, 4, dtype=torch.int64, device=device),
        lambda device: torch.ones(2, device=device).new_empty_strided((2, 3), (1, 2)).fill_(5),
    ],
    ids=["eye", "eye_m", "new_empty_strided"],
)
def test_factories_match_cpu(make):
    ours, ref = make("jax"), make("cpu")
    assert isinstance(ours, XlaTensor) and ours.dtype == ref.dtype
    torch.testing.assert_close(cpu(ours), ref)


def test_cpu_data_copied_to_our_device_by_torch():
    """torch.tensor(data, device=...) and list indices copy CPU data through PrivateUse1."""
    x = xnf.to_xla(torch.arange(12.0).reshape(3, 4))
    t = torch.tensor([1.0, 2.0], device=x.device)
    assert isinstance(t, XlaTensor) and torch.equal(cpu(t), torch.tensor([1.0, 2.0]))
    assert torch.equal(cpu(x[[0, 2]]), torch.arange(12.0).reshape(3, 4)[[0, 2]])
    moved = torch.arange(3).to("jax")
    assert isinstance(moved, XlaTensor) and torch.equal(cpu(moved), torch.arange(3))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.bool,
                                   torch.complex64], ids=str)
@pytest.mark.parametrize("device", [None, "jax"])
@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_tensor_from_a_list_of_0_dim_tensors(dtype, device, mode):
    """torch.tensor([loss, acc]) reads each 0-dim tensor's value with the Python
    dispatch key excluded; the result is on the CPU unless a device is given."""
    values = torch.tensor([3, 0, 1], dtype=dtype)

    def build(xs):
        return torch.tensor([xs[0], xs[1] * 2], device=device), torch.as_tensor([[xs[2]], [xs[0]]])

    expected = build([values[i].to(device or "cpu") for i in range(3)])
    step = xnf.compile(build) if mode == "compiled" else build
    for _ in range(2):
        got = step([xnf.to_xla(values)[i] for i in range(3)])
    for g, e in zip(got, expected):
        assert g.device.type == e.device.type and g.dtype == e.dtype
        torch.testing.assert_close(g.cpu(), e.cpu())
    assert got[0].device.type == (device or "cpu")


def test_multihead_attention_forward_and_backward_match_cpu():
    """nn.MultiheadAttention and SDPA reach us as bmm, _safe_softmax, new_empty_strided..."""
    torch.manual_seed(0)
    attn = torch.nn.MultiheadAttention(16, 4, batch_first=True)
    ref = copy.deepcopy(attn)
    xnf.to_xla(attn)
    x = torch.randn(2, 5, 16)
    mask = torch.triu(torch.ones(5, 5, dtype=torch.bool), 1)
    ref_out, _ = ref(x, x, x, attn_mask=mask, need_weights=False)
    ref_out.sum().backward()
    xx = xnf.to_xla(x)
    out, _ = attn(xx, xx, xx, attn_mask=xnf.to_xla(mask), need_weights=False)
    out.sum().backward()
    torch.testing.assert_close(cpu(out), ref_out, atol=1e-5, rtol=1e-5)
    for p, q in zip(attn.parameters(), ref.parameters()):
        torch.testing.assert_close(cpu(p.grad), q.grad, atol=1e-5, rtol=1e-4)


# ---------------------------------------------------------------- fallback and missing ops


@pytest.fixture
def kthvalue_in_fallback(monkeypatch):
    """kthvalue listed under `fallback`, whatever today's manifest says."""
    op = torch.ops.aten.kthvalue.default
    monkeypatch.setitem(registry.REGISTRY, op, lambda *args, **kwargs: fallback.fallback(op, args, kwargs))


@pytest.fixture
def bessel_j0_unlisted(monkeypatch):
    monkeypatch.delitem(registry.REGISTRY, torch.ops.aten.special_bessel_j0.default, raising=False)


def test_fallback_op_runs_on_cpu_and_is_counted(kthvalue_in_fallback):
    t = torch.tensor([3.0, 1.0, 2.0, 5.0])
    xnf.reset_metrics()
    values, indices = xnf.to_xla(t).kthvalue(2)
    ref = t.kthvalue(2)
    assert torch.equal(cpu(values), ref.values) and torch.equal(cpu(indices), ref.indices)
    assert metrics.fallback_calls["aten.kthvalue.default"] == 1
    assert "aten.kthvalue.default: 1" in xnf.metrics_report()


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_fallback_writes_into_its_arguments(monkeypatch, mode):
    op = torch.ops.aten.addcmul_.default
    monkeypatch.setitem(registry.REGISTRY, op, lambda *args, **kwargs: fallback.fallback(op, args, kwargs))
    x, o = xnf.to_xla(torch.zeros(3)), xnf.to_xla(torch.ones(3))
    view = x[1:]

    def f():
        return view.addcmul_(o[1:], o[1:], value=2.0)

    result = f() if mode == "eager" else xnf.compile(f)()
    assert result is view
    assert torch.equal(cpu(x), torch.tensor([0.0, 2.0, 2.0]))


def test_missing_op_names_op_call_site_and_section(bessel_j0_unlisted):
    x = xnf.to_xla(torch.randn(3))
    with pytest.raises(xnf.OperatorNotFound) as info:
        torch.special.bessel_j0(x)  # the line named in the message
    message = str(info.value)
    assert "'special_bessel_j0'" in message
    assert re.search(r"test_runtime\.py:\d+ \(torch\.special\.bessel_j0\(x\)", message), message
    assert "native_functions.yaml" in message and "allow_cpu_fallback" in message


def test_allow_cpu_fallback_runs_missing_op(monkeypatch, bessel_j0_unlisted):
    monkeypatch.setattr(xnf.config, "allow_cpu_fallback", True)
    t = torch.rand(4)
    with pytest.warns(UserWarning, match="not lowered"):
        out = torch.special.bessel_j0(xnf.to_xla(t))
    torch.testing.assert_close(cpu(out), torch.special.bessel_j0(t))


@pytest.mark.parametrize("allow_cpu_fallback", [False, True])
def test_sparse_tensors_are_refused_with_the_dense_alternative(monkeypatch, allow_cpu_fallback):
    """A sparse layout is not a missing lowering: the message names the dense way, not
    the manifest, and the CPU fallback does not try it either."""
    monkeypatch.setattr(xnf.config, "allow_cpu_fallback", allow_cpu_fallback)
    embedding = xnf.to_xla(torch.nn.Embedding(10, 3, sparse=True))
    out = embedding(xnf.to_xla(torch.tensor([1, 2, 1])))
    with pytest.raises(xnf.OperatorNotFound, match="makes or reads a sparse tensor.*sparse=False") as info:
        out.sum().backward()
    assert "native_functions.yaml" not in str(info.value)
    coo = torch.sparse_coo_tensor(torch.tensor([[0, 1], [1, 0]]), torch.tensor([1.0, 2.0]), (2, 2))
    with pytest.raises(xnf.OperatorNotFound, match=r"x\.to_dense\(\) before moving x"):
        coo.to(embedding.weight.device)
    assert torch.equal(cpu(xnf.to_xla(coo.to_dense())), coo.to_dense())
    embedding.sparse = False  # the dense gradient PyTorch computes without sparse=True
    embedding(xnf.to_xla(torch.tensor([1, 2, 1]))).sum().backward()
    assert torch.equal(cpu(embedding.weight.grad)[:3, 0], torch.tensor([0.0, 2.0, 1.0]))


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_error_during_backward_raises_from_backward(monkeypatch, mode):
    """Note [Errors during backward]: the process survives and backward() raises."""
    monkeypatch.delitem(registry.REGISTRY, torch.ops.aten.threshold_backward.default)
    x = xnf.to_xla(torch.randn(3, 3)).requires_grad_()

    def step(a):
        a.relu().sum().backward()

    run = step if mode == "eager" else xnf.compile(step)
    with pytest.raises(xnf.OperatorNotFound, match="'threshold_backward'.*backward\\(\\)") as info:
        run(x)
    assert any("ReluBackward0" in note for note in info.value.__notes__)
    monkeypatch.undo()
    x.grad = None
    step(x)  # the next backward is unaffected
    torch.testing.assert_close(cpu(x.grad), (cpu(x) > 0).float())


def test_backward_runs_on_the_calling_thread(monkeypatch):
    """Note [Backward on the calling thread]: every backward op runs on the caller's
    thread, gradients match PyTorch, and the thread's multithreading switch is restored
    after a pass and after a failed one."""
    import threading

    threads = []
    original = dispatch.dispatch

    def recording(func, args, kwargs):
        threads.append(threading.get_ident())
        return original(func, args, kwargs)

    ref = torch.randn(4, 3, requires_grad=True)
    x = xnf.to_xla(ref.detach()).requires_grad_()
    monkeypatch.setattr(xla_tensor_module, "_dispatch", recording)
    (x.tanh() * 2).sum().backward()
    monkeypatch.undo()
    (ref.tanh() * 2).sum().backward()
    assert threads and set(threads) == {threading.get_ident()}
    torch.testing.assert_close(cpu(x.grad), ref.grad)
    assert torch._C._is_multithreading_enabled()

    y = xnf.to_xla(torch.randn(3)).requires_grad_()
    with pytest.raises(RuntimeError, match="does not require grad"):
        torch.autograd.grad(y.detach().sum(), y)
    assert torch._C._is_multithreading_enabled()
    with torch.autograd.set_multithreading_enabled(False):
        y.sum().backward()
        assert not torch._C._is_multithreading_enabled()


@pytest.mark.parametrize("reentrant", [True, False])
def test_activation_checkpointing(reentrant):
    """torch.utils.checkpoint recomputes the segment on our device: gradients match
    PyTorch CPU, and a dropout mask is recomputed the same (random keys come from the
    CPU generator, whose state checkpointing restores)."""
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    model = xnf.to_xla(copy.deepcopy(ref))
    x = torch.randn(4, 8)
    checkpoint(ref, x.clone().requires_grad_(), use_reentrant=reentrant).sum().backward()
    checkpoint(model, xnf.to_xla(x).requires_grad_(), use_reentrant=reentrant).sum().backward()
    for ours, theirs in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(cpu(ours.grad), theirs.grad)

    dropped = xnf.to_xla(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 1)))
    grads = []
    for checkpointed in (False, True):
        dropped.zero_grad()
        torch.manual_seed(1)
        inp = xnf.to_xla(x).requires_grad_()
        out = checkpoint(dropped, inp, use_reentrant=reentrant) if checkpointed else dropped(inp)
        out.sum().backward()
        grads.append(cpu(dropped[0].weight.grad))
    assert grads[0].count_nonzero() > 0
    torch.testing.assert_close(grads[1], grads[0])


def test_autocast_on_our_device_casts_as_cpu_autocast():
    # tests/test_autocast.py covers the op list, each policy and whole models
    model = torch.nn.Linear(4, 4)
    x = torch.randn(2, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = model(x)
    with torch.autocast("jax", dtype=torch.bfloat16):
        out = xnf.to_xla(model)(xnf.to_xla(x))
    assert out.dtype == expected.dtype == torch.bfloat16
    torch.testing.assert_close(cpu(out), expected)


def test_debug_print_each_op(monkeypatch, capsys):
    monkeypatch.setattr(xnf.config, "debug_print_each_op", True)
    xnf.to_xla(torch.ones(2, 3)) + 1
    assert "aten.add.Tensor(XlaTensor[2, 3]:float32, 1)" in capsys.readouterr().out


def test_debug_accuracy_reports_nothing_for_correct_ops(monkeypatch, capsys):
    monkeypatch.setattr(xnf.config, "debug_accuracy_for_each_op", True)
    x = xnf.to_xla(torch.randn(4, 4))
    (x @ x).relu()
    assert "accuracy" not in capsys.readouterr().out


def test_backward_formulas_returning_zero_tensors():
    # sgn's backward for real input is aten._efficientzerotensor on our device, created
    # on the autograd engine's thread (a missing kernel there aborts the process).
    x = torch.randn(5, dtype=torch.float64, requires_grad=True)
    ours = xnf.to_xla(x.detach()).requires_grad_()
    (g,) = torch.autograd.grad((torch.sgn(ours) * 3).sum(), ours)
    (ref,) = torch.autograd.grad((torch.sgn(x) * 3).sum(), x)
    torch.testing.assert_close(cpu(g), ref)


def test_composite_ops_called_below_autograd_are_decomposed():
    # bartlett_window's kernel calls narrow below autograd, so narrow (a
    # CompositeImplicitAutograd op, not in the manifest) reaches the backend.
    torch.testing.assert_close(cpu(torch.bartlett_window(7, device=DEVICE)), torch.bartlett_window(7))


def test_sparse_tensors_are_rejected_with_the_fix():
    with pytest.raises(RuntimeError, match="to_dense"):
        xnf.to_xla(torch.eye(3).to_sparse())


@torch.library.custom_op("xnf_test::scaled_softplus", mutates_args=())
def _scaled_softplus(x: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.nn.functional.softplus(x) * scale


@_scaled_softplus.register_fake
def _(x, scale):
    return torch.empty_like(x)


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_custom_ops_written_in_python_run_their_body_on_jax(mode):
    x = torch.randn(4, 3)
    run = (lambda t: _scaled_softplus(t, 2.5)) if mode == "eager" else xnf.compile(lambda t: _scaled_softplus(t, 2.5))
    torch.testing.assert_close(cpu(run(xnf.to_xla(x))), _scaled_softplus(x, 2.5))


def test_unknown_custom_op_without_a_python_body_names_itself():
    lib = torch.library.Library("xnf_test_cpp", "DEF")
    lib.define("twice(Tensor x) -> Tensor")
    lib.impl("twice", lambda x: x * 2, "CPU")
    with pytest.raises(xnf.OperatorNotFound, match="xnf_test_cpp::twice"):
        torch.ops.xnf_test_cpp.twice(xnf.to_xla(torch.ones(2)))


def test_float_to_integer_conversion_matches_cpu_out_of_range():
    # XLA saturates; PyTorch CPU truncates through int32/int64 as x86 does.
    x = torch.tensor([-5.3, 300.7, 1e10, float("nan"), float("inf"), -float("inf"), -300.2, 70000.5])
    for dtype in (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64):
        assert torch.equal(cpu(xnf.to_xla(x).to(dtype)), x.to(dtype)), dtype


def test_nonzero_of_a_scalar():
    for v in (0.0, 2.5):
        torch.testing.assert_close(cpu(torch.nonzero(xnf.to_xla(torch.tensor(v)))), torch.nonzero(torch.tensor(v)))


def _cpu_dispatch_after_import(prelude: str, env: dict) -> list[str]:
    code = (
        f"{prelude}\nimport jax, xla_native_functions as xnf\n"
        "print(jax.config.values['jax_cpu_enable_async_dispatch'])\n"
        "print([l for l in xnf.metrics_report().splitlines() if 'JAX CPU executions' in l][0])"
    )
    env = {k: v for k, v in os.environ.items() if k != ASYNC_DISPATCH_ENV} | env
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


def test_import_runs_cpu_executions_inline_unless_told_or_too_late():
    # Note [Inline CPU execution]: a setting of the JAX CPU client, fixed once it exists.
    assert _cpu_dispatch_after_import("", {}) == ["False", "  JAX CPU executions: inline"]
    kept, line = _cpu_dispatch_after_import("", {ASYNC_DISPATCH_ENV: "1"})
    assert kept == "True" and f"{ASYNC_DISPATCH_ENV} is set" in line
    late, line = _cpu_dispatch_after_import("import jax.numpy as jnp; jnp.zeros(1)", {})
    assert late == "True" and "existed before import" in line


def _schedule_after_import(prelude: str, env: dict) -> list[str]:
    code = (
        f"{prelude}\nimport os, xla_native_functions as xnf\n"
        "print(os.environ.get('XLA_FLAGS', ''))\n"
        "print([l for l in xnf.metrics_report().splitlines() if 'XLA CPU schedule' in l][0])"
    )
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"} | env
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


def test_import_prefers_the_sequential_schedule_unless_told_or_too_late():
    # Note [Sequential XLA CPU schedule]: an XLA flag, read when JAX's CPU client is made.
    assert _schedule_after_import("", {}) == [
        f"{SCHEDULER_FLAG}=false",
        "  XLA CPU schedule: memory-optimized, run in order",
    ]
    flags, line = _schedule_after_import("", {"XLA_FLAGS": f"{SCHEDULER_FLAG}=true"})
    assert flags == f"{SCHEDULER_FLAG}=true" and "as XLA_FLAGS sets it" in line
    flags, line = _schedule_after_import("import jax.numpy as jnp; jnp.zeros(1)", {})
    assert flags == "" and "existed before import" in line


_FAULTS_OF_TRAINING_STEPS = """
import resource, torch, xla_native_functions as xnf
torch.manual_seed(0)
model = xnf.to_xla(torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                                       torch.nn.ReLU(), torch.nn.Linear(1024, 10)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = xnf.to_xla(torch.randn(16, 512)), xnf.to_xla(torch.randn(16, 10))

@xnf.compile
def step():
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    return loss.detach()

for _ in range(10):
    step()
per_step = []  # the quietest of three windows: a rare step still grows the heap
for _ in range(3):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(5):
        step()
    per_step.append((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) // 5)
print(min(per_step))
"""

_FAULTS_OF_MALLOC_STEPS = """
import ctypes, resource, xla_native_functions as xnf
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]

def faults_of_a_step(sizes):
    # buffers allocated, written and freed together, as an execution's outputs and temporaries
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    buffers = [libc.malloc(n) for n in sizes]
    for b, n in zip(buffers, sizes):
        ctypes.memset(b, 1, n)
    for b in buffers:
        libc.free(b)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

print(*[faults_of_a_step([12 << 20, 6 << 20, 48 << 20, 12 << 20, 3 << 20]) for _ in range(4)])
print([l for l in xnf.metrics_report().splitlines() if 'host allocator' in l][0])
"""


def _run_with(code: str, env: dict) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != MALLOC_DEFAULTS_ENV} | env
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.splitlines()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt is glibc's")
def test_freed_buffers_stay_mapped_for_the_next_step():
    # Note [Host allocator]: with glibc's defaults the 48 MB buffer is mapped afresh, and
    # the 81 MB freed together exceed the trim threshold, so every step faults its pages in.
    faults, line = _run_with(_FAULTS_OF_MALLOC_STEPS, {})
    assert faults.split()[1:] == ["0", "0", "0"] and line == "  host allocator: freed memory kept mapped up to 1 GB"
    faults, line = _run_with(_FAULTS_OF_MALLOC_STEPS, {MALLOC_DEFAULTS_ENV: "1"})
    assert min(int(f) for f in faults.split()) > 1000 and f"{MALLOC_DEFAULTS_ENV} is set" in line


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt is glibc's")
def test_replayed_training_steps_do_not_fault_their_buffers_in():
    # Each step frees about 12 MB of parameters, gradients and temporaries at once.
    assert int(_run_with(_FAULTS_OF_TRAINING_STEPS, {})[0]) < 20


@pytest.mark.parametrize("first_calls_on_cpu", [True, False])
def test_traced_calls_leave_no_arrays_in_reference_cycles(first_calls_on_cpu, monkeypatch):
    """The graphs a trace records and the programs that run them free their arrays as
    soon as they are dropped: an array held by a reference cycle would stay until the
    garbage collector ran (a model's old weights, every intermediate of a step)."""
    import gc

    import jax

    monkeypatch.setattr(xnf.config, "first_calls_on_cpu", first_calls_on_cpu)
    model = xnf.to_xla(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = xnf.to_xla(torch.randn(4, 32))

    def step():
        opt.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        return loss.detach()

    traced = xnf.compile(step, replay=False)
    gc.collect()
    gc.disable()
    try:
        for _ in range(4):
            traced().item()
        xnf.wait_for_background_compiles()
        traced().item()
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        cyclic = [type(o).__name__ for o in gc.garbage if isinstance(o, jax.Array)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert cyclic == []


def test_jax_caches_are_cleared_near_the_limit_of_memory_mappings(monkeypatch):
    # Note [Mappings of compiled code]: with the cap made small, the next compile is
    # "near" it, and everything goes on working after the caches are cleared.
    from xla_native_functions.runtime.platform.backend import compiled_code_guard

    monkeypatch.setattr(compiled_code_guard, "cap", 8)
    monkeypatch.setattr(compiled_code_guard, "CHECK_EVERY", 1)
    monkeypatch.setattr(compiled_code_guard, "clears", 0)
    x = torch.arange(1013.0).reshape(1, 1013)  # a shape no other test compiles for
    ours = xnf.to_xla(x)
    torch.testing.assert_close(cpu(ours.sin() * 3), x.sin() * 3)
    assert compiled_code_guard.clears >= 1
    torch.testing.assert_close(cpu(ours.sin() * 3), x.sin() * 3)  # recompiled after the clear
    assert "JAX caches cleared" in xnf.metrics_report()


@pytest.mark.parametrize("frontend", ["compile", "torch.compile"])
@pytest.mark.parametrize("convs,linears,library", [(3, 1, True), (1, 3, False), (0, 2, False)])
def test_library_fusions_go_to_graphs_with_more_convolutions_than_products(convs, linears, library, frontend,
                                                                           monkeypatch):
    """Note [XLA CPU library fusions]: a ResNet-like graph gets them, a vision transformer's
    (one patch convolution, many matrix products) and an MLP's do not; compile()'s graphs
    and the torch.compile backend's (forward and backward) alike."""
    from xla_native_functions.runtime.frontends import dynamo
    from xla_native_functions.runtime.platform import backend

    chosen = []

    def record(op_counts):
        chosen.append(backend.graph_compiler_options(op_counts))
        return chosen[-1]

    monkeypatch.setattr(graph if frontend == "compile" else dynamo, "graph_compiler_options", record)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        *[torch.nn.Conv2d(2, 2, 3, padding=1) for _ in range(convs)],
        torch.nn.Flatten(1),
        *[torch.nn.Linear(2 * 4 * 4 if i == 0 else 8, 8) for i in range(linears)],
    )
    x = torch.randn(2, 2, 4, 4)
    if frontend == "compile":
        ours = xnf.to_xla(copy.deepcopy(model))
        out = xnf.compile(lambda m, a: m(a))(ours, xnf.to_xla(x))
        torch.testing.assert_close(xnf.to_torch(out), model(x), rtol=1e-5, atol=1e-5)
    else:
        torch._dynamo.reset()
        ours = torch.compile(copy.deepcopy(model), backend="xla_native")
        ours(x).sum().backward()
        model(x).sum().backward()
        for a, b in zip(ours.parameters(), model.parameters()):
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-5)
    assert chosen and all(bool(options) == library for options in chosen)
    assert len(chosen) == (1 if frontend == "compile" else 2)


_GUARD_CALLS_OF_A_BACKWARD = """
import torch, xla_native_functions as xnf
from torch.utils.backend_registration import _DummyDeviceGuard
calls = []
device_type = _DummyDeviceGuard.type_
_DummyDeviceGuard.type_ = lambda self: calls.append(1) or device_type(self)
ref = torch.randn(4, 3, requires_grad=True)
x = xnf.to_xla(ref.detach()).requires_grad_()
(x.sin() @ x.t()).sum().backward()
(ref.sin() @ ref.t()).sum().backward()
torch.testing.assert_close(xnf.to_torch(x.grad), ref.grad)
print(len(calls))
print([l for l in xnf.metrics_report().splitlines() if 'device guard' in l][0])
try:
    print(torch.Generator(device="jax").device)
except Exception as error:
    print(type(error).__name__, [l for l in xnf.metrics_report().splitlines() if 'generators' in l][0])
"""


def _guard_after_import(env: dict) -> tuple[int, str, str]:
    """(Python guard calls of a backward pass, metrics_report()'s guard line, what
    torch.Generator(device="jax") gave)."""
    env = {k: v for k, v in os.environ.items() if k not in (PYTHON_GUARD_ENV, "CXX")} | env
    out = subprocess.run([sys.executable, "-c", _GUARD_CALLS_OF_A_BACKWARD], env=env, capture_output=True, text=True,
                         check=True).stdout.splitlines()
    return int(out[0]), out[1], out[2]


@pytest.mark.skipif(
    shutil.which("c++") is None and shutil.which("g++") is None, reason="no C++ compiler to build the guard"
)
def test_native_device_guard_replaces_python_calls(tmp_path):
    # Note [Native device guard]: built into an empty cache, then PyTorch never asks the
    # Python guard during a backward pass; without it, it does, and the answer is the same.
    # The same library makes the device's generators (Note [Generators of our device]).
    calls, line, generator = _guard_after_import({CACHE_DIR_ENV: str(tmp_path)})
    assert calls == 0 and line == "  device guard: C++ (Note [Native device guard])" and generator == "jax:0"
    built = [p.suffix for p in tmp_path.iterdir() if p.name != "jax-compilation-cache"]
    assert built == [".so"]  # no partial file left behind
    calls, line, generator = _guard_after_import({PYTHON_GUARD_ENV: "1", CACHE_DIR_ENV: str(tmp_path)})
    assert calls > 0 and f"Python ({PYTHON_GUARD_ENV} is set)" in line
    assert generator == (
        f"NotImplementedError   device generators and pinned memory: unavailable: {PYTHON_GUARD_ENV} is set"
    )


def test_python_device_guard_stays_when_the_native_one_cannot_be_built(tmp_path):
    missing = str(tmp_path / "no-such-compiler")
    calls, line, generator = _guard_after_import({"CXX": missing, CACHE_DIR_ENV: str(tmp_path / "cache")})
    assert calls > 0
    assert "device guard: Python: the C++ guard was not built" in line and "no-such-compiler" in line
    assert "unavailable: the C++ library was not built" in generator


_CACHE_HITS_OF_A_FORWARD = """
import copy, jax, torch, xla_native_functions as xnf
hits = []
jax.monitoring.register_event_listener(lambda event, **kw: hits.append(event) if event.endswith("cache_hits") else None)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.GELU(), torch.nn.Linear(7, 3))
x = torch.randn(6, 5)
out = xnf.to_torch(xnf.to_xla(copy.deepcopy(model))(xnf.to_xla(x)))
torch.testing.assert_close(out, model(x), rtol=1e-6, atol=1e-6)
print(len(hits))
print([l for l in xnf.metrics_report().splitlines() if 'compilation cache' in l][0])
"""


def _cache_after_import(env: dict) -> tuple[int, str]:
    inherited = {
        k: v for k, v in os.environ.items() if k not in (NO_COMPILATION_CACHE_ENV, "JAX_COMPILATION_CACHE_DIR")
    }
    # no C++ build into the fresh cache directories; every signature compiles in the
    # caller, so the counts do not depend on the background compiles of first calls
    env = inherited | {PYTHON_GUARD_ENV: "1", "XLA_NATIVE_FUNCTIONS_FIRST_CALLS_ON_CPU": "0"} | env
    out = subprocess.run([sys.executable, "-c", _CACHE_HITS_OF_A_FORWARD], env=env, capture_output=True, text=True,
                         check=True).stdout.splitlines()
    return int(out[0]), out[1]


def test_compiled_executables_are_reused_by_later_processes(tmp_path):
    # Note [Persistent compilation cache]: the first process compiles and writes every
    # executable, even the eager ops' fast compiles; the second loads them all.
    hits, line = _cache_after_import({CACHE_DIR_ENV: str(tmp_path)})
    cache = tmp_path / "jax-compilation-cache"
    assert hits == 0 and line == f"  persistent compilation cache: {cache}"
    written = sorted(p.name for p in cache.iterdir())
    assert len(written) >= 4  # addmm, gelu, ... of the forward above
    hits, _ = _cache_after_import({CACHE_DIR_ENV: str(tmp_path)})
    assert hits == len(written) and sorted(p.name for p in cache.iterdir()) == written


def test_compilation_cache_stays_off_when_asked_or_unwritable(tmp_path):
    hits, line = _cache_after_import({CACHE_DIR_ENV: str(tmp_path), NO_COMPILATION_CACHE_ENV: "1"})
    assert hits == 0 and line == f"  persistent compilation cache: off ({NO_COMPILATION_CACHE_ENV} is set)"
    assert not (tmp_path / "jax-compilation-cache").exists()
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    hits, line = _cache_after_import({CACHE_DIR_ENV: str(blocker)})
    assert hits == 0 and line.startswith(
        f"  persistent compilation cache: off (cannot create {blocker}/jax-compilation-cache"
    )


def test_compilation_cache_directory_chosen_for_jax_is_kept(tmp_path):
    chosen = tmp_path / "users-jax-cache"
    _, line = _cache_after_import({CACHE_DIR_ENV: str(tmp_path), "JAX_COMPILATION_CACHE_DIR": str(chosen)})
    assert line == f"  persistent compilation cache: {chosen} (JAX's setting, with JAX's thresholds)"
    assert not (tmp_path / "jax-compilation-cache").exists()
