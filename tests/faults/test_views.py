"""Views of complex tensors as reals (`z.real`, `z.imag`, `torch.view_as_real(z)`) share
z's memory, as in PyTorch: writes through them land in z, in eager mode, compile() and
lazy mode, and reading them gives PyTorch's values and layout (Note [Views and
mutation] in runtime/core/tensor.py)."""

from __future__ import annotations

import pytest
import torch

import xla_native_functions as xnf

MODES = ["eager", "compile", "lazy"]


def cpu(t):
    return xnf.to_torch(t)


def calls(mode):
    """How many calls of a step a mode is checked with: compile() traces the first ones
    and replays the last ones."""
    return 4 if mode == "compile" else 1


def run(mode, fn, *args):
    if mode == "eager":
        return fn(*args)
    if mode == "lazy":
        with xnf.lazy_mode():
            return fn(*args)
    return xnf.compile(fn)(*args)


def _in_mode(mode, fn):
    if mode == "compile":
        return xnf.compile(fn)
    return lambda *args: run(mode, fn, *args)


def _complex(dtype, layout):
    torch.manual_seed(0)
    base = torch.randn(4, 6, dtype=dtype)
    if layout == "contiguous":
        return base
    if layout == "transposed":
        return base.t()
    return base[1:, ::2]  # offset and strides


WRITES = {
    "real.fill_(0)": lambda z: z.real.fill_(0),
    "imag[1] = -1": lambda z: z.imag.__setitem__(1, -1),
    "real.mul_(2)": lambda z: z.real.mul_(2),
    "view_as_real[..., 0] = 1": lambda z: torch.view_as_real(z).__setitem__((Ellipsis, 0), 1),
    "imag.add_(real)": lambda z: z.imag.add_(z.real),
    "real.copy_(arange)": lambda z: z.real.copy_(torch.arange(z.shape[-1], dtype=z.real.dtype).to(z.device)),
    "view_as_real.mul_(3)": lambda z: torch.view_as_real(z).mul_(3),
    "imag[:, 0].zero_()": lambda z: z.imag[:, 0].zero_(),
    "view_as_complex(view_as_real).mul_(2j)": lambda z: torch.view_as_complex(torch.view_as_real(z)).mul_(2j),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "strided"])
@pytest.mark.parametrize("name", list(WRITES))
def test_writes_through_real_views_land_in_the_complex_tensor(name, layout, mode):
    write = WRITES[name]
    ref = _complex(torch.complex64, layout)
    ours_base = xnf.to_xla(_complex(torch.complex64, "contiguous"))
    ours = {"contiguous": ours_base, "transposed": ours_base.t(), "strided": ours_base[1:, ::2]}[layout]
    ref_base = ref if layout == "contiguous" else ref._base
    real_before, imag_before = ours.real, ours.imag  # views made before the write see it

    def fn(z):
        write(z)
        return z.abs().sum()

    step = _in_mode(mode, fn)
    for _ in range(calls(mode)):
        torch.testing.assert_close(cpu(step(ours)), fn(ref))
    assert torch.equal(cpu(ours), ref)
    assert torch.equal(cpu(ours_base), ref_base)
    assert torch.equal(cpu(real_before), ref.real)
    assert torch.equal(cpu(imag_before), ref.imag)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "strided"])
def test_real_views_read_and_are_laid_out_as_in_pytorch(dtype, layout):
    ref = _complex(dtype, layout)
    z = xnf.to_xla(_complex(dtype, "contiguous"))
    z = {"contiguous": z, "transposed": z.t(), "strided": z[1:, ::2]}[layout]
    for get in (lambda t: t.real, lambda t: t.imag, torch.view_as_real, lambda t: torch.view_as_real(t)[..., 1],
                lambda t: t.real.t(), lambda t: t.imag[-1], lambda t: torch.view_as_real(t).flatten(-2) if
                t.is_contiguous() else torch.view_as_real(t)[0]):
        ours, expected = get(z), get(ref)
        assert ours.dtype == expected.dtype
        assert ours.shape == expected.shape
        assert ours.stride() == expected.stride()
        assert ours.storage_offset() == expected.storage_offset()
        assert torch.equal(cpu(ours), expected)
        assert torch.equal(cpu(ours * 1), expected * 1)  # read by an eager op
        assert torch.equal(cpu(xnf.compile(lambda t: get(t) + 0)(z)), expected)  # read by a traced one


def test_a_write_into_the_complex_tensor_is_seen_through_its_real_views():
    ref = _complex(torch.complex64, "contiguous")
    z = xnf.to_xla(ref.clone())
    r, i, pairs = z.real, z.imag, torch.view_as_real(z)
    z.mul_(2j)
    z[0] = 5
    ref.mul_(2j)
    ref[0] = 5
    assert torch.equal(cpu(r), ref.real) and torch.equal(cpu(i), ref.imag)
    assert torch.equal(cpu(pairs), torch.view_as_real(ref))


def test_gradients_through_real_and_imag_match_pytorch():
    ref = _complex(torch.complex64, "contiguous").requires_grad_()
    z = xnf.to_xla(ref.detach()).requires_grad_()
    for t in (ref, z):
        (t.real ** 2 + 3 * t.imag).sum().backward()
    torch.testing.assert_close(cpu(z.grad), ref.grad)


def test_compiled_function_returning_a_real_view_is_replayed_right():
    f = xnf.compile(lambda t: torch.view_as_real(t * 2))
    g = xnf.compile(lambda t: t.imag)
    for k in range(4):
        ref = _complex(torch.complex64, "contiguous") + k
        z = xnf.to_xla(ref)
        out = f(z)
        assert out.stride() == torch.view_as_real(ref * 2).stride()
        assert torch.equal(cpu(out), torch.view_as_real(ref * 2))
        im = g(z)
        assert torch.equal(cpu(im), ref.imag)
        im.fill_(7)  # the returned view still writes into z
        assert torch.equal(cpu(z).imag, torch.full(ref.shape, 7.0))


def test_errors_match_pytorch():
    x = xnf.to_xla(torch.ones(3))
    with pytest.raises(RuntimeError, match="view_as_real is only supported for complex tensors"):
        torch.view_as_real(x)
    z = xnf.to_xla(torch.ones(3, dtype=torch.complex64))
    with pytest.raises(RuntimeError, match="resize_ of a view of a tensor as another dtype"):
        z.real.resize_(5)
    with pytest.raises(RuntimeError, match="Tensor must have a last dimension with stride 1"):
        torch.view_as_complex(torch.view_as_real(z).t().contiguous().t())
