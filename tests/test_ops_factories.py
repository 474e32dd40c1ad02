"""Range factories (linspace, logspace), empty_permuted, the *_copy forms of views,
rearranging ops (rot90, block_diag, _chunk_cat, pixel/channel shuffle) and complex
parts (complex, polar, angle, _conj_physical, _conj, frexp) against PyTorch CPU:
values bit for bit where PyTorch's rounding is reproduced, dtypes and shapes, eager
and compiled, shape functions against meta, and CPU's errors."""

from __future__ import annotations

import random
import re

import pytest
import torch

import xla_native_functions as xnf
from lowering_harness import T, as_meta, assert_same, ints, on_device, to_meta_arg
from xla_native_functions.runtime.core.tensor import DEVICE
from xla_native_functions.shape_fns import complex_ops as shape_complex
from xla_native_functions.shape_fns import factories as shape_factories
from xla_native_functions.shape_fns import shuffle as shape_shuffle
from xla_native_functions.shape_fns import view_copy as shape_view_copy

aten = torch.ops.aten

SHAPE_MODULES = [shape_factories, shape_view_copy, shape_shuffle, shape_complex]


def _shape_fn(op):
    name = op._schema.name.split("::")[1] + (f"_{op._overloadname}" if op._overloadname != "default" else "")
    for module in SHAPE_MODULES:
        fn = getattr(module, f"{name}_output_shape", None)
        if fn is not None:
            return fn
    raise KeyError(name)


def _meta(x):
    if isinstance(x, torch.Tensor):
        return x.to("meta")
    if isinstance(x, list) and x and isinstance(x[0], torch.Tensor):
        return [v.to("meta") for v in x]
    return x


# ------------------------------------------------------------ linspace / logspace

# PyTorch CPU's linspace is start + step*i (first half) and end - step*(steps-1-i)
# (second half), each a fused multiply-add; integer dtypes truncate. These sweeps pin
# the exact bits, which a plain start + i*step misses for about 1 value in 20.
_RNG = random.Random(0)
LINSPACE_CASES = []
for dtype in (torch.int64, torch.float32, torch.float64, torch.int8, torch.uint8, torch.float16, torch.bfloat16):
    for _ in range(12):
        if _RNG.random() < 0.5:
            s, e = _RNG.randint(-60, 60), _RNG.randint(-60, 60)
        else:
            s, e = _RNG.uniform(-60, 60), _RNG.uniform(-60, 60)
        if dtype == torch.uint8:
            s, e = abs(s), abs(e)
        LINSPACE_CASES.append((s, e, _RNG.randint(2, 120), dtype))
LINSPACE_CASES += [
    (-18, 18, 46, torch.int64),
    (50, 1, 50, torch.int64),
    (25, -38, 46, torch.int64),
    (-2.5, 10.7, 5, torch.int64),
]
# Half types: products that round to a tie (which a fused multiply-add misses),
# subnormal results, indices that bfloat16 rounds (past 256), and ends that round
# through float32 first.
LINSPACE_CASES += [
    (37, -3, 196, torch.float16),
    (51.180794854303926, -10.058407332678463, 53, torch.float16),
    (48, -58, 7, torch.bfloat16),
    (-3e-6, 5e-5, 77, torch.float16),
    (-0.5, 300.0, 601, torch.bfloat16),
    (1 + 2**-11 + 2**-40, 2.0, 3, torch.float16),
    (1 + 2**-8 + 2**-40, 2.0, 3, torch.bfloat16),
]
LINSPACE_CASES += [
    (3.5, 9.0, 0, torch.float32),
    (3.5, 9.0, 1, torch.int64),
    (0.0, 1.0, 1, torch.bool),
    (1.0, 2.0, 0, torch.bool),
]


@pytest.mark.parametrize("start,end,steps,dtype", LINSPACE_CASES)
def test_linspace_bits(start, end, steps, dtype):
    ref = torch.linspace(start, end, steps, dtype=dtype)
    ours = xnf.to_torch(torch.linspace(start, end, steps, dtype=dtype, device=DEVICE))
    assert ours.dtype == ref.dtype and ours.shape == ref.shape
    assert torch.equal(ours, ref), (ours, ref)


LOGSPACE_CASES = []
for dtype in (torch.int64, torch.float32, torch.int8, torch.uint8, torch.float16, torch.bfloat16):
    for _ in range(10):
        s, e = _RNG.uniform(-3, 3), _RNG.uniform(-3, 3)
        if dtype == torch.uint8:
            s, e = abs(s), abs(e)  # a negative Scalar for uint8 raises in PyTorch
        LOGSPACE_CASES.append((s, e, _RNG.randint(2, 120), _RNG.choice([10.0, 2.0, 1.1, 3.0]), dtype))
LOGSPACE_CASES += [
    (-2.05, 2.75, 49, 3.0, torch.int64),
    (1.55, 3.0, 95, 10.0, torch.uint8),
    (2.5, 4.0, 1, 10.0, torch.int64),
]


@pytest.mark.parametrize("start,end,steps,base,dtype", LOGSPACE_CASES)
def test_logspace_bits(start, end, steps, base, dtype):
    ref = torch.logspace(start, end, steps, base, dtype=dtype)
    ours = xnf.to_torch(torch.logspace(start, end, steps, base, dtype=dtype, device=DEVICE))
    assert ours.dtype == ref.dtype and torch.equal(ours, ref), (ours, ref)


def test_logspace_float64_close():
    # XLA's float64 pow differs from libm's by an ulp at times.
    ref = torch.logspace(-2.4, 1.7, 101, 1.1, dtype=torch.float64)
    ours = xnf.to_torch(torch.logspace(-2.4, 1.7, 101, 1.1, dtype=torch.float64, device=DEVICE))
    torch.testing.assert_close(ours, ref, rtol=1e-15, atol=0)


@pytest.mark.parametrize("fn", [torch.linspace, torch.logspace])
@pytest.mark.parametrize("dtype", [None, torch.int64, torch.float64])
def test_tensor_overloads(fn, dtype):
    start, end = torch.tensor(-2.5, dtype=torch.float64), torch.tensor(3)
    for a, b in ((start, end), (start, 3), (-2.5, end)):
        ref = fn(a, b, 7, dtype=dtype)
        ours = xnf.to_torch(
            fn(
                xnf.to_xla(a) if isinstance(a, torch.Tensor) else a,
                xnf.to_xla(b) if isinstance(b, torch.Tensor) else b,
                7,
                dtype=dtype,
                device=DEVICE,
            )
        )
        assert ours.dtype == ref.dtype and torch.equal(ours, ref)


def test_linspace_compiled_uses_scalars_as_operands():
    f = xnf.compile(lambda s, e: torch.linspace(s, e, 9, dtype=torch.int64, device=DEVICE))
    for s, e in ((0, 10), (-18, 18), (50, 1)):
        assert torch.equal(xnf.to_torch(f(s, e)), torch.linspace(s, e, 9, dtype=torch.int64))


def test_linspace_out():
    out = torch.empty(5, device=DEVICE)
    torch.linspace(0, 1, 5, out=out)
    assert torch.equal(xnf.to_torch(out), torch.linspace(0, 1, 5))


@pytest.mark.parametrize(
    "call,exc",
    [
        (lambda d: torch.linspace(0, 1, -1, device=d), RuntimeError),
        (lambda d: torch.linspace(0, 1, 3, dtype=torch.bool, device=d), (RuntimeError, NotImplementedError)),
        (lambda d: torch.logspace(0, 1, 3, dtype=torch.bool, device=d), (RuntimeError, NotImplementedError)),
        (lambda d: torch.linspace(torch.zeros(2, device=d), 1, 3, device=d), RuntimeError),
    ],
)
def test_range_errors(call, exc):
    with pytest.raises(exc):
        call("cpu")
    with pytest.raises(exc):
        call(DEVICE)


# ------------------------------------------------------------ arange

# Integer ranges run on the device (IntegerRange in runtime/supported/tensor_ops.py);
# the others are PyTorch's CPU result. Both must give PyTorch's values and dtype.
ARANGE_CASES = [
    ((8,), {}),
    ((0,), {}),
    ((2, 9), {}),
    ((5, 5), {}),
    ((10, -5, -3), {}),
    ((-7, 7, 4), {}),
    ((0, 7, 2), {"dtype": torch.int32}),
    ((0, 300, 7), {"dtype": torch.uint8}),  # wraps past 255, as PyTorch's cast does
    ((1, 6), {"dtype": torch.int8}),
    ((2**40, 2**40 + 5), {}),
    ((2**60, 2**60 + 3), {}),  # beyond 2**53: PyTorch's CPU path
    ((0, 5), {"dtype": torch.float32}),
    ((0.5, 3), {}),
    ((0, 1, 0.1), {"dtype": torch.float64}),
    ((3,), {"dtype": torch.bfloat16}),
]


@pytest.mark.parametrize("args,kwargs", ARANGE_CASES, ids=[f"{a}-{k}" for a, k in ARANGE_CASES])
def test_arange_matches_cpu(args, kwargs):
    expected = torch.arange(*args, **kwargs)
    eager = xnf.to_torch(torch.arange(*args, **kwargs, device=DEVICE))
    compiled = xnf.to_torch(xnf.compile(lambda: torch.arange(*args, **kwargs, device=DEVICE))())
    for ours in (eager, compiled):
        assert ours.dtype == expected.dtype and torch.equal(ours, expected)


def test_arange_in_a_compiled_step_follows_its_arguments():
    # The length is part of the graph; start and step are its scalar inputs, so a graph
    # compiled for one start must not give its values to another.
    f = xnf.compile(lambda x, start, step: x + torch.arange(start, start + step * x.shape[0], step, device=DEVICE))
    for n, start, step in ((3, 0, 1), (5, 0, 1), (5, 7, 1), (5, 7, 3), (5, -2, 3), (3, 0, 1)):
        x = torch.ones(n, dtype=torch.int64)
        expected = x + torch.arange(start, start + step * n, step)
        assert torch.equal(xnf.to_torch(f(xnf.to_xla(x), start, step)), expected)


@pytest.mark.parametrize("args", [(0, 5, 0), (5, 0, 1), (0, 5, -1)])
def test_arange_errors(args):
    with pytest.raises(RuntimeError) as cpu:
        torch.arange(*args)
    with pytest.raises(RuntimeError) as ours:
        torch.arange(*args, device=DEVICE)
    assert str(ours.value) == str(cpu.value)


# ------------------------------------------------------------ empty, empty_permuted


def test_empty_gives_the_requested_shape_and_dtype():
    for size, dtype in (((2, 3), None), ((0,), torch.uint8), ((4,), torch.int64), ((), torch.bfloat16)):
        out = torch.empty(size, dtype=dtype, device=DEVICE)
        assert out.shape == size and out.dtype == (dtype or torch.get_default_dtype())
        assert xnf.to_torch(out).shape == size


def test_empty_permuted():
    out = torch.empty_permuted((2, 3, 4), (2, 0, 1), dtype=torch.int64, device=DEVICE)
    assert out.shape == (2, 3, 4) and out.dtype == torch.int64
    meta = shape_factories.empty_permuted_output_shape((2, 3, 4), (2, 0, 1), dtype=torch.int64)
    assert meta == as_meta(torch.empty_permuted((2, 3, 4), (2, 0, 1), dtype=torch.int64, device="meta"))
    with pytest.raises(RuntimeError, match="Duplicate dim"):
        shape_factories.empty_permuted_output_shape((2, 3), (0, 0))
    with pytest.raises(RuntimeError, match="does not match the length"):
        shape_factories.empty_permuted_output_shape((2, 3), (0,))


# ------------------------------------------------------------ ops against CPU

f234, f34 = T(2, 3, 4), T(3, 4)
OPS = [
    ("alias_copy", aten.alias_copy.default, (f34,), {}),
    ("diagonal_copy", aten.diagonal_copy.default, (f234, 1, -1, 0), {}),
    ("permute_copy", aten.permute_copy.default, (f234, [2, 0, 1]), {}),
    ("split_copy", aten.split_copy.Tensor, (f234, 2, 2), {}),
    ("split_with_sizes_copy", aten.split_with_sizes_copy.default, (f234, [1, 2], 1), {}),
    ("squeeze_copy", aten.squeeze_copy.default, (T(2, 1, 3, 1),), {}),
    ("squeeze_copy_dim", aten.squeeze_copy.dim, (T(2, 1, 3), -2), {}),
    ("squeeze_copy_dims", aten.squeeze_copy.dims, (T(2, 1, 3, 1), [1, 3, 0]), {}),
    ("t_copy", aten.t_copy.default, (f34,), {}),
    ("transpose_copy", aten.transpose_copy.int, (f234, 0, -1), {}),
    ("unbind_copy", aten.unbind_copy.int, (f234, 1), {}),
    ("unfold_copy", aten.unfold_copy.default, (f234, 2, 2, 1), {}),
    ("unsqueeze_copy", aten.unsqueeze_copy.default, (ints(3, 4), -1), {}),
    ("view_copy", aten.view_copy.default, (f234, [4, -1]), {}),
    ("rot90", aten.rot90.default, (f234, 3, [2, 0]), {}),
    ("rot90_int", aten.rot90.default, (ints(3, 4), -1, [0, 1]), {}),
    ("block_diag", aten.block_diag.default, ([T(), ints(3), T(2, 2, dtype=torch.float64)],), {}),
    ("chunk_cat", aten._chunk_cat.default, ([T(2, 5), T(2, 3, 2)], 1, 2), {}),
    ("pixel_shuffle", aten.pixel_shuffle.default, (T(2, 8, 3, 2), 2), {}),
    ("pixel_unshuffle", aten.pixel_unshuffle.default, (T(1, 2, 4, 6), 2), {}),
    ("channel_shuffle", aten.channel_shuffle.default, (T(2, 6, 3), 3), {}),
    ("complex", aten.complex.default, (T(3, 1, dtype=torch.float64), T(4, dtype=torch.float64)), {}),
    ("polar", aten.polar.default, (T(3, low=0, high=2), T(3)), {}),
    ("angle", aten.angle.default, (torch.tensor([-1.5, 0.0, 2.0, float("nan"), -0.0]),), {}),
    ("angle_int", aten.angle.default, (ints(5),), {}),
    ("angle_complex", aten.angle.default, (T(4, dtype=torch.complex64),), {}),
    ("conj_physical", aten._conj_physical.default, (T(4, dtype=torch.complex128),), {}),
    ("frexp", aten.frexp.Tensor, (torch.tensor([0.0, -3.5, 1e-310, 1024.0, float("inf")], dtype=torch.float64),), {}),
    ("fill_tensor", aten.fill.Tensor, (f34, torch.tensor(2.5, dtype=torch.float64)), {}),
    ("fill_tensor_truncates", aten.fill.Tensor, (ints(3, 4), torch.tensor(-2.7)), {}),
    ("fill_tensor_wraps", aten.fill.Tensor, (torch.zeros(3, dtype=torch.uint8), torch.tensor(-1.0)), {}),
    ("fill_tensor_bool", aten.fill.Tensor, (torch.zeros(3, dtype=torch.bool), torch.tensor(0.5)), {}),
]


@pytest.mark.parametrize("name,op,args,kwargs", OPS, ids=[c[0] for c in OPS])
def test_op_matches_cpu(name, op, args, kwargs):
    ref = op(*args, **kwargs)
    ours = xnf.to_torch(on_device(op, args, kwargs, DEVICE))
    if isinstance(ref, (list, tuple)):
        ours, ref = tuple(ours), tuple(ref)
    assert_same(ours, ref)


@pytest.mark.parametrize("name,op,args,kwargs", OPS, ids=[c[0] for c in OPS])
def test_op_compiled(name, op, args, kwargs):
    ref = op(*args, **kwargs)
    moved = [
        xnf.to_xla(a)
        if isinstance(a, torch.Tensor)
        else [xnf.to_xla(t) for t in a]
        if isinstance(a, list) and a and isinstance(a[0], torch.Tensor)
        else a
        for a in args
    ]
    ours = xnf.to_torch(xnf.compile(lambda *xs: op(*xs, **kwargs))(*moved))
    if isinstance(ref, (list, tuple)):
        ours, ref = tuple(ours), tuple(ref)
    assert_same(ours, ref)


@pytest.mark.parametrize("name,op,args,kwargs", OPS, ids=[c[0] for c in OPS])
def test_shape_fn_matches_meta(name, op, args, kwargs):
    ours = _shape_fn(op)(*map(to_meta_arg, args), **kwargs)
    expected = as_meta(op(*map(_meta, args), **kwargs))
    assert as_meta_tuple(ours) == as_meta_tuple(expected)


def as_meta_tuple(x):
    return tuple(x) if isinstance(x, (list, tuple)) else x


def test_copies_do_not_alias():
    base = xnf.to_xla(torch.zeros(3, 4))
    copy = aten.t_copy.default(base)
    base.add_(1)
    assert torch.equal(xnf.to_torch(copy), torch.zeros(4, 3))


def test_grad_through_rot90_and_pixel_shuffle():
    x = T(1, 4, 2, 3, dtype=torch.float64).requires_grad_()
    xd = xnf.to_xla(x.detach()).requires_grad_()
    for t, f in ((x, None), (xd, None)):
        torch.rot90(torch.pixel_shuffle(t, 2), 1, [2, 3]).pow(2).sum().backward()
    torch.testing.assert_close(xnf.to_torch(xd.grad), x.grad)


@pytest.mark.parametrize(
    "op,args",
    [
        (aten.rot90.default, (T(3), 1, [0, 1])),
        (aten.rot90.default, (T(3, 3), 1, [0, 0])),
        (aten.rot90.default, (T(3, 3), 1, [0, 1, 2])),
        (aten.block_diag.default, ([T(2, 2, 2)],)),
        (aten.pixel_shuffle.default, (T(1, 3, 2, 2), 2)),
        (aten.pixel_unshuffle.default, (T(1, 1, 3, 4), 2)),
        (aten.channel_shuffle.default, (T(1, 4, 2), 3)),
        (aten.complex.default, (T(2), T(2, dtype=torch.float64))),
        (aten.complex.default, (ints(2), ints(2))),
        (aten.frexp.Tensor, (ints(2),)),
        (aten.view_copy.default, (T(2, 3), [4, -1])),
        (aten.permute_copy.default, (T(2, 3), [0, 0])),
        (aten.unfold_copy.default, (T(3), 0, 4, 1)),
        (aten.fill.Tensor, (T(3), T(2))),
    ],
)
def test_errors_like_cpu(op, args):
    with pytest.raises(Exception) as cpu:
        op(*args)
    with pytest.raises(type(cpu.value)):
        _shape_fn(op)(*map(to_meta_arg, args))
    moved = [
        xnf.to_xla(a)
        if isinstance(a, torch.Tensor)
        else [xnf.to_xla(t) for t in a]
        if isinstance(a, list) and a and isinstance(a[0], torch.Tensor)
        else a
        for a in args
    ]
    with pytest.raises(type(cpu.value)):
        op(*moved)


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_conj_and_the_ffts_that_use_it(mode):
    # torch.fft.ifft/hfft/ihfft of real input decompose through aten._conj.
    z, r = T(5, dtype=torch.complex64), T(8, dtype=torch.float64)
    fns = (torch.conj, torch.fft.ifft, torch.fft.hfft, torch.fft.ihfft)
    for fn, x in zip(fns, (z, r, r, r)):
        run = fn if mode == "eager" else xnf.compile(fn)
        ours, ref = xnf.to_torch(run(xnf.to_xla(x))), fn(x)
        assert ours.dtype == ref.dtype and ours.shape == ref.shape
        torch.testing.assert_close(ours, ref.resolve_conj())


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_view_as_real_and_complex(mode):
    z, r = T(2, 3, dtype=torch.complex128), T(4, 2, dtype=torch.float32)
    for fn, x in (
        (torch.view_as_real, z),
        (torch.view_as_complex, r),
        (lambda t: torch.view_as_real(torch.view_as_complex(t)) * 2, r),
    ):
        run = fn if mode == "eager" else xnf.compile(fn)
        ours, ref = xnf.to_torch(run(xnf.to_xla(x))), fn(x)
        assert ours.dtype == ref.dtype and ours.shape == ref.shape
        torch.testing.assert_close(ours, ref)


def test_view_as_complex_errors_like_cpu():
    square, pairs, wide = T(3, 3), T(3, 2), T(2, 4)
    cases = {  # name: (CPU tensor, ours); strided views are taken on each side
        "last dim not 2": (square, xnf.to_xla(square)),
        "last dim sliced": (pairs[:, :1], xnf.to_xla(pairs)[:, :1]),
        "last stride 2": (wide[:, ::2], xnf.to_xla(wide)[:, ::2]),
        "integer": (ints(3, 2), xnf.to_xla(ints(3, 2))),
    }
    for cpu_t, ours in cases.values():
        with pytest.raises(RuntimeError) as expected:
            torch.view_as_complex(cpu_t)
        with pytest.raises(RuntimeError, match=re.escape(str(expected.value).split("\n")[0][:30])):
            torch.view_as_complex(ours)
    with pytest.raises(RuntimeError, match="only supported for complex"):
        torch.view_as_real(xnf.to_xla(T(3)))


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_view_as_another_dtype_aliases_where_the_storage_allows(mode):
    """x.view(dtype): of the same dtype, and of a complex tensor as its reals and back,
    views whose writes reach x, as on PyTorch."""

    def step(x, z):
        same = x.view(torch.float32)
        same.mul_(2)
        reals = z[:, 1:].view(torch.float64)  # a strided view: strides and offset in reals
        reals.add_(1)
        back = reals.view(torch.complex128)
        back[0, 0] = 5
        return same.shape, same.stride(), reals.shape, reals.stride(), reals.storage_offset(), back.stride()

    x, z = T(4, 6), T(3, 4, dtype=torch.complex128)
    xo, zo = xnf.to_xla(x), xnf.to_xla(z)
    run = step if mode == "eager" else xnf.compile(step)
    for _ in range(2 if mode == "compiled" else 1):
        layouts = run(xo, zo)
        assert layouts == step(x, z)
        torch.testing.assert_close(xnf.to_torch(xo), x, rtol=0, atol=0)
        torch.testing.assert_close(xnf.to_torch(zo), z, rtol=0, atol=0)


def _float_as_int32(x, z):
    v = x.view(torch.int32)
    v[0, 0] = 0x3F800000 + 5
    v[1:3] += 1
    return v


def _float_as_bytes(x, z):
    v = x.view(torch.uint8)  # each element four bytes: last dim x4, strides in bytes
    v[:, 3] = 0x40
    return v


def _bytes_as_float(x, z):
    b = x.view(torch.uint8)[:, 8:].view(torch.float32)  # a slice of the bytes, offset 8 bytes
    b.mul_(0.5)
    return b


def _reals_as_complex(x, z):
    c = torch.view_as_complex(x.reshape(4, 3, 2))  # a real tensor's memory as complex
    c.mul_(2j)
    return c


def _complex_as_int64(x, z):
    i = z.view(torch.int64)
    i[1] = 0
    return i


def _bfloat16_as_int16(x, z):
    h = x.bfloat16()
    v = h.view(torch.int16)
    v.bitwise_xor_(-32768)  # flips the sign bits
    return h, v


def _bytes_as_bool(x, z):
    b = torch.arange(8, dtype=torch.uint8, device=x.device) % 3
    flags = b.view(torch.bool)
    flags[0] = True  # the other bytes keep their values (2 stays 2)
    return b


def _chain_back(x, z):
    i = x.view(torch.int32).view(torch.int16)
    i[:, 1] = 7
    f = i.view(torch.float32)  # a view of the storage's own dtype again
    f[0] = -1
    return i, f


def _base_written_view_read(x, z):
    v = x.view(torch.int32)
    x.add_(1)
    return v.t().contiguous(), v.sum(), torch.view_as_real(x.view(torch.complex64))


VIEWS_AS = {f.__name__.lstrip("_"): f for f in (
    _float_as_int32, _float_as_bytes, _bytes_as_float, _reals_as_complex, _complex_as_int64, _bfloat16_as_int16,
    _bytes_as_bool, _chain_back, _base_written_view_read)}


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("case", list(VIEWS_AS))
def test_views_as_any_dtype_read_and_write_the_same_memory(case, mode):
    """x.view(dtype) of any other dtype and view_as_complex of a real tensor are views of
    x's memory: values, sizes, strides and offsets as PyTorch's, writes through them land
    in x (Note [Views as another dtype])."""
    fn = VIEWS_AS[case]
    x0, z0 = T(4, 6), T(3, 4, dtype=torch.complex64)
    x, z = x0.clone(), z0.clone()
    expected = fn(x, z)
    xo, zo = xnf.to_xla(x0), xnf.to_xla(z0)
    run = fn if mode == "eager" else xnf.compile(fn)
    for _ in range(3 if mode == "compiled" else 1):  # traced twice, then replayed
        xo.copy_(xnf.to_xla(x0))
        zo.copy_(xnf.to_xla(z0))
        ours = run(xo, zo)
    pairs = zip(*(r if isinstance(r, tuple) else (r,) for r in (expected, ours)))
    for e, o in pairs:
        assert (o.dtype, o.shape, o.stride(), o.storage_offset()) == (e.dtype, e.shape, e.stride(), e.storage_offset())
        assert torch.equal(o.cpu(), e)
    assert torch.equal(xnf.to_torch(xo), x) and torch.equal(xnf.to_torch(zo), z)


BIT_VIEWS = [  # (storage dtype, view dtype): each element size relation, bool, float8 NaN payloads, complex
    (torch.uint8, torch.float32), (torch.float32, torch.uint8), (torch.uint8, torch.bool), (torch.bool, torch.int16),
    (torch.int8, torch.float8_e5m2), (torch.float8_e5m2, torch.bfloat16), (torch.complex64, torch.float8_e4m3fn),
    (torch.float64, torch.complex64), (torch.complex128, torch.int16), (torch.float16, torch.uint16),
    (torch.uint32, torch.float64), (torch.int64, torch.complex128),
]


@pytest.mark.parametrize("storage,view", BIT_VIEWS, ids=[f"{a}-{b}".replace("torch.", "") for a, b in BIT_VIEWS])
def test_views_as_another_dtype_keep_every_bit(storage, view):
    """Reads give the bits PyTorch's memory holds (NaN payloads included), and writes
    through a view change only the bytes of the elements written."""
    raw = torch.randint(0, 256, (2, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    x = (raw % 2).bool() if storage is torch.bool else raw.view(storage)
    xo = xnf.to_xla(x.clone())
    ref, ours = x.view(view), xo.view(view)
    assert (ours.shape, ours.stride(), ours.storage_offset()) == (ref.shape, ref.stride(), ref.storage_offset())
    if view is torch.bool:
        assert torch.equal(ours.cpu(), ref)  # bytes other than 0 and 1: unspecified (docs/semantics.md)
    else:
        assert torch.equal(ours.cpu().view(torch.uint8), ref.view(torch.uint8))
    fill = torch.zeros((), dtype=view)
    ref[..., ::3] = fill
    ours[..., ::3] = fill.to(ours.device)
    assert torch.equal(xo.cpu().view(torch.uint8), x.view(torch.uint8))


def test_view_as_another_dtype_refuses_like_cpu_or_names_the_limit():
    x = T(4, 6)
    cases = [  # PyTorch's errors for layouts no such view can have
        (lambda t: t[0, 0].view(torch.uint8), "self.dim() cannot be 0 to view Float as Byte"),
        (lambda t: t.t().view(torch.uint8), "self.stride(-1) must be 1 to view Float as Byte"),
        (lambda t: t[:, 1:].view(torch.float64), "self.size(-1) must be divisible by 2 to view Float as Double"),
        (lambda t: t[:, 1:5].view(torch.float64), "self.storage_offset() must be divisible by 2"),
        (lambda t: t[::1, :4].reshape(4, 4)[:, :2].as_strided((2, 2), (3, 1)).view(torch.float64),
         "self.stride(0) must be divisible by 2"),
    ]
    for fn, message in cases:
        with pytest.raises(RuntimeError, match=re.escape(message)):
            fn(x)
        with pytest.raises(RuntimeError, match=re.escape(message)):
            fn(xnf.to_xla(x))


def test_complex_rotary_embedding_grads_match_cpu():
    # Meta's Llama applies rotary embeddings through view_as_complex / view_as_real.
    x = T(2, 4, 8, dtype=torch.float64).requires_grad_()
    freqs = torch.polar(torch.ones(4, 4, dtype=torch.float64), T(4, 4, dtype=torch.float64))

    def rope(t, f):
        return torch.view_as_real(torch.view_as_complex(t.reshape(2, 4, 4, 2)) * f).flatten(2)

    ref = rope(x, freqs)
    (gref,) = torch.autograd.grad((ref * ref).sum(), x)
    xo = xnf.to_xla(x.detach()).requires_grad_()
    ours = rope(xo, xnf.to_xla(freqs))
    (g,) = torch.autograd.grad((ours * ours).sum(), xo)
    torch.testing.assert_close(xnf.to_torch(ours), ref.detach())
    torch.testing.assert_close(xnf.to_torch(g), gref)


def test_fill_in_place_from_a_cpu_scalar_tensor():
    """What a learning-rate scheduler does to a tensor learning rate: fill_ with a
    0-dim tensor, here one on the CPU."""
    ours = xnf.to_xla(torch.zeros(2, 3))
    assert ours.fill_(torch.tensor(0.25)) is ours
    torch.testing.assert_close(xnf.to_torch(ours), torch.full((2, 3), 0.25))
