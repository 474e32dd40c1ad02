"""Window factories (hann, hamming, bartlett, blackman, kaiser: every overload) and the
deprecated torch.range, asked for our device (`device="jax"`) and made inside
`default_env()`, against PyTorch CPU: type, dtype, shape and values; CPU's errors."""

from __future__ import annotations

import warnings

import pytest
import torch

import xla_native_functions as xnf
from xla_native_functions.runtime.core.tensor import DEVICE, XlaTensor

# Compared with PyTorch's native windows, which multiply by float16-rounded scalars
# (in-place mul_.Scalar); PyTorch's kernels answering first calls of the decomposed ops
# (Note [First calls on PyTorch CPU]) differ from those in the last bit.
pytestmark = pytest.mark.usefixtures("compiled_first_calls")

# (factory, positional arguments after window_length): every overload of each.
WINDOW_OVERLOADS = [
    ("hann_window", ()), ("hann_window", (False,)), ("hann_window", (True,)),
    ("hamming_window", ()), ("hamming_window", (False,)), ("hamming_window", (True, 0.5)),
    ("hamming_window", (False, 0.5, 0.3)),
    ("bartlett_window", ()), ("bartlett_window", (False,)),
    ("blackman_window", ()), ("blackman_window", (False,)),
    ("kaiser_window", ()), ("kaiser_window", (False,)), ("kaiser_window", (True, 5.0)),
    ("kaiser_window", (False, 0.5)), ("kaiser_window", (False, -3.0)),
]
LENGTHS = [0, 1, 2, 7, 64]
DTYPES = [None, torch.float64, torch.bfloat16, torch.float16]


def _check(out, expected):
    assert type(out) is XlaTensor and out.device == DEVICE
    assert out.dtype == expected.dtype and out.shape == expected.shape
    torch.testing.assert_close(xnf.to_torch(out), expected)


@pytest.mark.parametrize("name,extra", WINDOW_OVERLOADS, ids=lambda v: str(v))
@pytest.mark.parametrize("how", ["device", "env"])
def test_window_factories_match_cpu(name, extra, how):
    factory = getattr(torch, name)
    for n in LENGTHS:
        for dtype in DTYPES:
            kwargs = {} if dtype is None else {"dtype": dtype}
            expected = factory(n, *extra, **kwargs)
            if how == "device":
                out = factory(n, *extra, device="jax", **kwargs)
            else:
                with xnf.default_env():
                    out = factory(n, *extra, **kwargs)
            _check(out, expected)


def test_kaiser_window_default_dtype_follows_torch():
    torch.set_default_dtype(torch.float64)
    try:
        expected = torch.kaiser_window(9, False, 4.0)
        _check(torch.kaiser_window(9, False, 4.0, device="jax"), expected)
    finally:
        torch.set_default_dtype(torch.float32)


def test_kaiser_window_out_forms():
    aten = torch.ops.aten.kaiser_window
    for overload, extra in [(aten.out, ()), (aten.periodic_out, (False,)), (aten.beta_out, (False, 3.0))]:
        out = torch.empty(0, device="jax")
        result = overload(6, *extra, out=out)
        assert result is out
        expected = overload(6, *extra, out=torch.empty(0))
        torch.testing.assert_close(xnf.to_torch(out), expected)


@pytest.mark.parametrize("kwargs,error", [
    ({"dtype": torch.int64}, (RuntimeError, "kaiser_window expects floating point dtypes")),
    ({"dtype": torch.complex64}, (NotImplementedError, "not implemented for 'ComplexFloat'")),
])
def test_kaiser_window_errors_match_cpu(kwargs, error):
    exc, message = error
    with pytest.raises(exc, match=message):
        torch.kaiser_window(8, **kwargs)
    with pytest.raises(exc, match=message):
        torch.kaiser_window(8, device="jax", **kwargs)


def test_kaiser_window_negative_length_raises_as_cpu():
    with pytest.raises(RuntimeError, match="requires non-negative window_length"):
        torch.kaiser_window(-1)
    with pytest.raises(RuntimeError, match="requires non-negative window_length"):
        torch.kaiser_window(-1, device="jax")


RANGES = [
    ((1, 4), {}), ((1, 4, 0.5), {}), ((0, 1, 0.1), {}), ((4, 1, -1), {}), ((1, 4), {"dtype": torch.int64}),
    ((-2.5, 3.5, 1.5), {"dtype": torch.float64}), ((0, 10, 3), {"dtype": torch.int32}), ((2, 2), {}),
    ((0, 3), {"dtype": torch.bfloat16}),
]


@pytest.mark.parametrize("args,kwargs", RANGES, ids=str)
@pytest.mark.parametrize("how", ["device", "env"])
def test_range_matches_cpu(args, kwargs, how):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch.range is deprecated
        expected = torch.range(*args, **kwargs)
        if how == "device":
            out = torch.range(*args, device="jax", **kwargs)
        else:
            with xnf.default_env():
                out = torch.range(*args, **kwargs)
    _check(out, expected)


@pytest.mark.parametrize("args,message", [
    ((1, 4, 0), "step must be nonzero"),
    ((4, 1), "upper bound and lower bound inconsistent with step sign"),
])
def test_range_errors_match_cpu(args, message):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with pytest.raises(RuntimeError, match=message):
            torch.range(*args)
        with pytest.raises(RuntimeError, match=message):
            torch.range(*args, device="jax")


def test_range_out_form():
    out = torch.empty(0, device="jax")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        torch.ops.aten.range.out(0, 2, 0.5, out=out)
        expected = torch.range(0, 2, 0.5)
    torch.testing.assert_close(xnf.to_torch(out), expected)


def test_windows_inside_compiled_function():
    # A window made inside a compile()d step: recorded into the step's program.
    def step(x):
        return x * torch.hann_window(8, device=x.device) + torch.kaiser_window(8, device=x.device)

    x = torch.randn(8)
    compiled = xnf.compile(step)
    for _ in range(3):
        out = compiled(xnf.to_xla(x))
    torch.testing.assert_close(xnf.to_torch(out), step(x))


def test_unlisted_factory_still_names_the_manifest_in_env():
    # A factory with no PyTorch kernel to compose it from other ops still raises
    # OperatorNotFound under the environment.
    with xnf.default_env():
        with pytest.raises(xnf.OperatorNotFound):
            torch.ops.aten._sparse_coo_tensor_with_dims(1, 1, [2, 2], dtype=torch.float32)
