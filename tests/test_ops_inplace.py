"""In-place ops listed on their own (no functional form they could be derived from):
polygamma_, conj_physical_, resize_as_, rrelu_with_noise / rrelu_with_noise_ and
rrelu's backward, against PyTorch CPU: values, dtypes, the returned object is the
input, writes through a strided view reach the base; eager and compiled; and addbmm_
with a broadcast `self`, where CPU's result is an artefact of its kernel."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import xla_native_functions as xnf
from lowering_harness import T, as_meta, assert_params_match_schema, call_lowering, ints, to_meta_arg
from xla_native_functions.lowerings import rrelu as lower_rrelu
from xla_native_functions.registry import REGISTRY
from xla_native_functions.shape_fns import rrelu as shape_rrelu

aten = torch.ops.aten


def _listed(*ops):
    """A mark for tests of ops the manifest does not list yet: they fail with
    OperatorNotFound until it does, and must pass once it does (strict)."""
    missing = [str(op) for op in ops if op not in REGISTRY]
    return pytest.mark.xfail(
        bool(missing),
        reason=f"{', '.join(missing)} not in the manifest: the generator cannot list an in-place op "
        "beside its functional form (class-name clash, or a functional form with no kernel of its own)",
        raises=xnf.OperatorNotFound,
        strict=True,
    )


def raised_on_ours(error, fn):
    """The `error` fn() raises; OperatorNotFound (a RuntimeError too) passes through,
    so an op missing from the manifest counts as such."""
    with pytest.raises(error) as info:
        fn()
    if isinstance(info.value, xnf.OperatorNotFound):
        raise info.value
    return info.value


def strided_copy(x):
    """(base, view): `view` holds x's values, a strided view into a larger buffer."""
    if x.dim() == 0:
        base = torch.zeros(3, dtype=x.dtype)
        base[1] = x
        return base, base[1]
    base = torch.ones(*x.shape[:-1], 2 * x.shape[-1] + 1, dtype=x.dtype)
    view = base[..., 1::2]
    view.copy_(x)
    return base, view


def ours_view(x):
    """strided_copy(x) on our device."""
    base = xnf.to_xla(strided_copy(x)[0])
    return base, (base[..., 1::2] if x.dim() else base[1])


def check_inplace(fn, x, tol=None, exact_dtype=True):
    """`fn(t)` mutates `t` and returns it, on a plain tensor and on a strided view,
    like PyTorch CPU."""
    tol = tol or {}
    expected = x.clone()
    assert fn(expected) is expected
    base_cpu, view_cpu = strided_copy(x)
    fn(view_cpu)

    ours = xnf.to_xla(x.clone())
    assert fn(ours) is ours
    got = xnf.to_torch(ours)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    torch.testing.assert_close(got, expected, equal_nan=True, **tol)

    base, view = ours_view(x)
    assert fn(view) is view
    torch.testing.assert_close(xnf.to_torch(base), base_cpu, equal_nan=True, **tol)


# ------------------------------------------------------------------ polygamma_


@_listed(aten.polygamma_.default)
@pytest.mark.parametrize("n", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_polygamma_(n, dtype):
    # Away from the poles at 0, -1, -2, ... where float32 rounding dominates.
    x = torch.cat([T(12, dtype=dtype, low=0.1, high=8), T(6, dtype=dtype, low=-2.9, high=-2.1)])
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {}
    check_inplace(lambda t: t.polygamma_(n), x.reshape(3, 6), tol)


@_listed(aten.polygamma_.default)
def test_polygamma_0d_and_empty():
    check_inplace(lambda t: t.polygamma_(1), torch.tensor(2.5, dtype=torch.float64))
    check_inplace(lambda t: t.polygamma_(1), torch.empty(0, 3))


@_listed(aten.polygamma_.default)
def test_polygamma_compiled():
    x = T(2, 5, low=0.5, high=4, dtype=torch.float64)
    ours = xnf.to_xla(x.clone())
    out = xnf.compile(lambda t: t.polygamma_(3))(ours)
    assert out is ours
    torch.testing.assert_close(xnf.to_torch(ours), x.clone().polygamma_(3))


@_listed(aten.polygamma_.default)
def test_polygamma_int_self_cannot_hold_the_result():
    x = ints(4, low=1)
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        x.clone().polygamma_(1)
    ours = raised_on_ours(RuntimeError, lambda: xnf.to_xla(x.clone()).polygamma_(1))
    assert "result type Float can't be cast to the desired output type Long" in str(ours)


# ------------------------------------------------------------------ conj_physical_


@_listed(aten.conj_physical_.default)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bool, torch.complex64])
def test_conj_physical_(dtype):
    check_inplace(lambda t: t.conj_physical_(), T(3, 4, dtype=dtype))


@_listed(aten.conj_physical_.default)
def test_conj_physical_compiled():
    z = T(5, dtype=torch.complex64)
    ours = xnf.to_xla(z.clone())
    assert xnf.compile(lambda t: t.conj_physical_())(ours) is ours
    torch.testing.assert_close(xnf.to_torch(ours), z.conj_physical())


# ------------------------------------------------------------------ resize_as_


def _layout(t):
    return tuple(t.shape), tuple(t.stride()), t.storage_offset()


@_listed(aten.resize_as_.default)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_resize_as_same_shape_keeps_the_view(dtype):
    # Same sizes: PyTorch leaves the tensor alone, so a strided view keeps its strides.
    x = T(4, 5, dtype=dtype)
    check_inplace(lambda t: t.resize_as_(torch.empty(4, 5, device=t.device)), x)
    base, view = ours_view(x)
    _, view_cpu = strided_copy(x)
    view.resize_as_(xnf.to_xla(torch.empty(4, 5)))
    view_cpu.resize_as_(torch.empty(4, 5))
    assert _layout(view) == _layout(view_cpu)


@_listed(aten.resize_as_.default)
def test_resize_as_shrinks_onto_the_same_storage():
    x = torch.arange(20.0).reshape(4, 5)
    tmpl = torch.empty(2, 3)
    check_inplace(lambda t: t.resize_as_(tmpl.to(t.device)), x)
    # A resized view is contiguous from its offset; writes through it reach the base.
    base_cpu, view_cpu = strided_copy(x)
    view_cpu.resize_as_(tmpl).mul_(-1)
    base, view = ours_view(x)
    view.resize_as_(xnf.to_xla(tmpl)).mul_(-1)
    assert _layout(view) == _layout(view_cpu)
    torch.testing.assert_close(xnf.to_torch(base), base_cpu)


@_listed(aten.resize_as_.default)
def test_resize_as_grows():
    # New elements are uninitialised in PyTorch: only the old ones are compared.
    x = torch.arange(6, dtype=torch.int64)
    cpu = x.clone().resize_as_(torch.empty(3, 4))
    ours = xnf.to_xla(x.clone())
    assert ours.resize_as_(xnf.to_xla(torch.empty(3, 4))) is ours
    assert _layout(ours) == _layout(cpu)
    assert torch.equal(xnf.to_torch(ours).flatten()[:6], x)


@_listed(aten.resize_as_.default)
@pytest.mark.parametrize("memory_format", [None, torch.contiguous_format, torch.preserve_format, torch.channels_last])
def test_resize_as_memory_format(memory_format):
    # A channels-last template (a permuted NHWC tensor on both sides).
    tmpl_cpu = torch.empty(2, 4, 5, 3).permute(0, 3, 1, 2)
    tmpl = xnf.to_xla(torch.empty(2, 4, 5, 3)).permute(0, 3, 1, 2)
    assert tmpl.stride() == tmpl_cpu.stride()
    x = torch.arange(150.0)
    cpu = x.clone().resize_as_(tmpl_cpu, memory_format=memory_format)
    ours = xnf.to_xla(x.clone()).resize_as_(tmpl, memory_format=memory_format)
    assert _layout(ours) == _layout(cpu)
    assert torch.equal(xnf.to_torch(ours), cpu)


@_listed(aten.resize_as_.default)
def test_resize_as_compiled():
    x = torch.arange(20.0)
    ours = xnf.to_xla(x.clone())
    out = xnf.compile(lambda t, s: t.resize_as_(s).add_(1))(ours, xnf.to_xla(torch.empty(2, 3)))
    assert out is ours
    assert _layout(ours) == ((2, 3), (3, 1), 0)
    torch.testing.assert_close(xnf.to_torch(ours), x[:6].reshape(2, 3) + 1)


# ------------------------------------------------------------------ rrelu_with_noise


@_listed(aten.rrelu_with_noise.default, aten.rrelu_with_noise_.default)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("bounds", [{}, {"lower": 0.1, "upper": 0.6}])
def test_rrelu_eval_is_leaky_relu_with_the_mean_slope(dtype, bounds):
    x = T(3, 7, dtype=dtype)
    expected = F.rrelu(x, training=False, **bounds)
    ours = xnf.to_xla(x)
    got = F.rrelu(ours, training=False, **bounds)
    assert got.dtype == dtype
    torch.testing.assert_close(xnf.to_torch(got), expected)
    check_inplace(lambda t: F.rrelu(t, training=False, inplace=True, **bounds), x)


@_listed(aten.rrelu_with_noise.default)
def test_rrelu_with_noise_eval_leaves_noise_alone():
    x, noise = T(6), T(6)
    ours_noise = xnf.to_xla(noise.clone())
    got = aten.rrelu_with_noise(xnf.to_xla(x), ours_noise, 0.2, 0.4, False)
    torch.testing.assert_close(xnf.to_torch(got), aten.rrelu_with_noise(x, noise.clone(), 0.2, 0.4, False))
    assert torch.equal(xnf.to_torch(ours_noise), noise)


def _check_train(x, result, noise, lower, upper):
    """rrelu in training: positive elements pass with slope 1; the others are scaled
    by a slope in [lower, upper], and `noise` holds each element's slope."""
    pos = x > 0
    assert torch.equal(noise[pos], torch.ones_like(noise[pos]))
    assert torch.equal(result[pos], x[pos])
    slopes = noise[~pos]
    assert bool(((slopes >= lower) & (slopes <= upper)).all()), slopes
    torch.testing.assert_close(result[~pos], x[~pos] * slopes)


@_listed(aten.rrelu_with_noise.default)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rrelu_with_noise_train(dtype):
    x = T(400, dtype=dtype)
    noise = xnf.to_xla(torch.zeros(400, dtype=dtype))
    torch.manual_seed(3)
    result = aten.rrelu_with_noise(xnf.to_xla(x), noise, 0.1, 0.3, True)
    got, got_noise = xnf.to_torch(result), xnf.to_torch(noise)
    assert got.dtype == dtype and got.shape == x.shape
    _check_train(x, got, got_noise, 0.1, 0.3)
    # The slopes are spread over the interval, not one value.
    assert got_noise[x <= 0].std() > 0.03
    # Same seed, same numbers.
    noise2 = xnf.to_xla(torch.zeros(400, dtype=dtype))
    torch.manual_seed(3)
    again = aten.rrelu_with_noise(xnf.to_xla(x), noise2, 0.1, 0.3, True)
    assert torch.equal(xnf.to_torch(again), got) and torch.equal(xnf.to_torch(noise2), got_noise)


@_listed(aten.rrelu_with_noise_.default)
def test_rrelu_with_noise_train_inplace_through_a_view():
    x = T(2, 30)
    base_cpu, _ = strided_copy(x)
    base, view = ours_view(x)
    noise = xnf.to_xla(torch.zeros(2, 30))
    assert aten.rrelu_with_noise_(view, noise, 0.2, 0.5, True) is view
    got_base = xnf.to_torch(base)
    # Filler elements untouched, the view's elements hold the result.
    filler = torch.ones_like(base_cpu, dtype=torch.bool)
    filler[..., 1::2] = False
    assert torch.equal(got_base[filler], base_cpu[filler])
    _check_train(x, got_base[..., 1::2], xnf.to_torch(noise), 0.2, 0.5)


@_listed(aten.rrelu_with_noise.default, aten.rrelu_with_noise_.default)
def test_rrelu_train_compiled():
    x = T(50)
    noise = xnf.to_xla(torch.zeros(50))
    f = xnf.compile(lambda t, n: aten.rrelu_with_noise(t, n, 0.1, 0.3, True))
    _check_train(x, xnf.to_torch(f(xnf.to_xla(x), noise)), xnf.to_torch(noise), 0.1, 0.3)
    ours = xnf.to_xla(x.clone())
    assert xnf.compile(lambda t: F.rrelu(t, training=False, inplace=True))(ours) is ours
    torch.testing.assert_close(xnf.to_torch(ours), F.rrelu(x, training=False))


@_listed(aten.rrelu_with_noise.default)
@pytest.mark.parametrize(
    "x, noise, training, lower, upper, error",
    [
        (T(3, 4), T(2), True, 0.1, 0.3, RuntimeError),  # noise of another shape
        (T(3, 4), T(2), False, 0.1, 0.3, RuntimeError),
        (T(3, 4), T(3, 4, dtype=torch.float64), True, 0.1, 0.3, RuntimeError),  # noise of another dtype
        (ints(3), ints(3), True, 0.1, 0.3, NotImplementedError),  # integer input
        (ints(3), ints(3), False, 0.1, 0.3, NotImplementedError),
        (-T(3, low=0.1, high=1), T(3), True, 0.5, 0.3, RuntimeError),  # lower > upper
    ],
)
def test_rrelu_with_noise_errors(x, noise, training, lower, upper, error):
    with pytest.raises(error) as cpu:
        aten.rrelu_with_noise(x, noise.clone(), lower, upper, training)
    ours = raised_on_ours(
        error, lambda: aten.rrelu_with_noise(xnf.to_xla(x), xnf.to_xla(noise), lower, upper, training)
    )
    assert str(ours).split(".")[0] == str(cpu.value).split(".")[0]


# ------------------------------------------------------------------ rrelu's backward


def _backward_cases():
    g, x, noise = (
        T(3, 4, dtype=torch.float64),
        T(3, 4, dtype=torch.float64),
        T(3, 4, dtype=torch.float64, low=0.1, high=0.3),
    )
    return [
        ("train", (g, x, noise, 0.1, 0.3, True, False)),
        ("train_equal_bounds", (g, x, noise, 0.2, 0.2, True, False)),
        ("eval", (g, x, noise, 0.1, 0.3, False, False)),
        ("eval_self_is_result", (g, x, noise, 0.1, 0.3, False, True)),
        ("train_f32_grad", (g.float(), x, noise, 0.1, 0.3, True, False)),
        ("eval_f32", (g.float(), x.float(), noise.float(), 0.1, 0.3, False, False)),
        ("train_broadcast_grad", (g[:1], x, noise, 0.1, 0.3, True, False)),
    ]


BACKWARD = aten.rrelu_with_noise_backward.default


@pytest.mark.parametrize("args", [a for _, a in _backward_cases()], ids=[i for i, _ in _backward_cases()])
def test_rrelu_with_noise_backward(args):
    expected = BACKWARD(*args)
    got = call_lowering(lower_rrelu.lower_rrelu_with_noise_backward, BACKWARD, args, {})
    assert got.dtype == expected.dtype
    torch.testing.assert_close(got, expected)
    meta = as_meta(BACKWARD(*[a.to("meta") if isinstance(a, torch.Tensor) else a for a in args]))
    assert shape_rrelu.rrelu_with_noise_backward_output_shape(*map(to_meta_arg, args)) == meta
    on_ours = BACKWARD(*[xnf.to_xla(a) if isinstance(a, torch.Tensor) else a for a in args])
    torch.testing.assert_close(xnf.to_torch(on_ours), expected)


def test_rrelu_with_noise_backward_signature():
    for fn in (lower_rrelu.lower_rrelu_with_noise_backward, shape_rrelu.rrelu_with_noise_backward_output_shape):
        assert_params_match_schema(fn, BACKWARD._schema)


@_listed(aten.rrelu_with_noise.default)
@pytest.mark.parametrize("training", [False, True])
def test_rrelu_gradient(training):
    x = T(4, 6, dtype=torch.float64)
    ours = xnf.to_xla(x).requires_grad_()
    y = F.rrelu(ours, 0.1, 0.3, training=training)
    y.sum().backward()
    grad = xnf.to_torch(ours.grad)
    if training:
        # The gradient is each element's slope: y / x.
        torch.testing.assert_close(grad, xnf.to_torch(y.detach()) / x)
    else:
        cpu = x.clone().requires_grad_()
        F.rrelu(cpu, 0.1, 0.3, training=False).sum().backward()
        torch.testing.assert_close(grad, cpu.grad)


# ------------------------------------------------------------------ addbmm_


def test_addbmm_inplace_with_a_broadcast_self_raises_like_meta():
    # CPU resizes `self` to the result's shape here and copies the broadcast old value
    # over its own storage: right for a [1] or [p] self, garbage for [n, 1]. The meta
    # kernel (torch.compile), addmm_ and baddbmm_ refuse a self that would need to
    # change shape, and so do we.
    b1, b2 = T(4, 5, 6), T(4, 6, 10)
    for shape in [(1,), (), (10,), (5, 1)]:
        with pytest.raises(RuntimeError, match=r"doesn't match the broadcast shape \[5, 10\]"):
            torch.empty(shape, device="meta").addbmm_(b1.to("meta"), b2.to("meta"))
        with pytest.raises(RuntimeError, match=r"doesn't match the broadcast shape \[5, 10\]"):
            xnf.to_xla(T(*shape)).addbmm_(xnf.to_xla(b1), xnf.to_xla(b2))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
def test_addbmm_inplace_through_a_view(dtype):
    b1, b2 = T(4, 5, 6, dtype=dtype), T(4, 6, 10, dtype=dtype)
    # float32 sums of 24 products of values up to 9: the summation order shows.
    tol = {"rtol": 1e-4, "atol": 1e-4} if dtype == torch.float32 else {}
    check_inplace(lambda t: t.addbmm_(b1.to(t.device), b2.to(t.device), beta=2, alpha=3), T(5, 10, dtype=dtype), tol)
