"""A library of custom operators in the `testlib` namespace, as a user would write them
with `torch.library.custom_op`: CPU implementations (the reference the tests compare
against) and fake kernels. Importing this module registers them with torch.
tests/test_custom_ops.py registers JAX lowerings for them at run time, and generates a
package from a manifest listing some of them (`libraries: {testlib: custom_op_library}`).
"""

from __future__ import annotations

import torch

NS = "testlib"


# Tensor[], Tensor?, int, float and bool attributes, and a Scalar.
@torch.library.custom_op(
    "testlib::mix", mutates_args=(), device_types="cpu",
    schema="(Tensor[] xs, Tensor? bias, int dim, float scale, bool square, Scalar offset) -> Tensor",
)
def mix(xs, bias, dim, scale, square, offset):
    out = torch.stack(xs).sum(0) * scale
    if square:
        out = out * out
    if bias is not None:
        out = out + bias
    return (out + offset).cumsum(dim)


@mix.register_fake
def _(xs, bias, dim, scale, square, offset):
    return torch.empty_like(xs[0])


# Two results of different shapes and dtypes: the first half of `dim` doubled, and
# whether the second half is positive.
@torch.library.custom_op("testlib::halves", mutates_args=(), device_types="cpu")
def halves(x: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    first, second = x.split((x.shape[dim] + 1) // 2, dim)
    return first * 2, second > 0


@halves.register_fake
def _(x, dim):
    first, second = x.split((x.shape[dim] + 1) // 2, dim)
    return torch.empty_like(first), torch.empty_like(second, dtype=torch.bool)


# An autograd formula (torch.library.register_autograd).
@torch.library.custom_op("testlib::scaled_tanh", mutates_args=(), device_types="cpu")
def scaled_tanh(x: torch.Tensor, alpha: float) -> torch.Tensor:
    return torch.tanh(x) * alpha


@scaled_tanh.register_fake
def _(x, alpha):
    return torch.empty_like(x)


def _scaled_tanh_setup(ctx, inputs, output):
    x, alpha = inputs
    ctx.save_for_backward(x)
    ctx.alpha = alpha


def _scaled_tanh_backward(ctx, grad):
    (x,) = ctx.saved_tensors
    t = torch.tanh(x)
    return grad * ctx.alpha * (1 - t * t), None


scaled_tanh.register_autograd(_scaled_tanh_backward, setup_context=_scaled_tanh_setup)


# A keyword-only attribute with a default.
@torch.library.custom_op(
    "testlib::rms_norm", mutates_args=(), device_types="cpu", schema="(Tensor x, *, float eps=1e-06) -> Tensor"
)
def rms_norm(x, *, eps=1e-6):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps)


@rms_norm.register_fake
def _(x, *, eps=1e-6):
    return torch.empty_like(x)


# A list of results.
@torch.library.custom_op("testlib::chunks", mutates_args=(), device_types="cpu", schema="(Tensor x, int n) -> Tensor[]")
def chunks(x, n):
    return [c.clone() for c in x.chunk(n)]


@chunks.register_fake
def _(x, n):
    return [torch.empty_like(c) for c in x.chunk(n)]


# Without a fake kernel: only a shape function can describe its output.
@torch.library.custom_op("testlib::no_fake", mutates_args=(), device_types="cpu")
def no_fake(x: torch.Tensor) -> torch.Tensor:
    return x.flip(0)


# Its body serves every device (no device_types): on JAX tensors its aten ops run
# one by one unless a lowering is registered.
@torch.library.custom_op("testlib::softplus_any", mutates_args=())
def softplus_any(x: torch.Tensor) -> torch.Tensor:
    return torch.log1p(torch.exp(x))


@softplus_any.register_fake
def _(x):
    return torch.empty_like(x)


# Never given a lowering by the tests.
@torch.library.custom_op("testlib::unlowered", mutates_args=(), device_types="cpu")
def unlowered(x: torch.Tensor) -> torch.Tensor:
    return x + 1


@unlowered.register_fake
def _(x):
    return torch.empty_like(x)


# Operators register_lowering refuses: one writing into its argument, one returning a
# number.
@torch.library.custom_op("testlib::add_into", mutates_args=("x",), device_types="cpu")
def add_into(x: torch.Tensor, y: torch.Tensor) -> None:
    x.add_(y)


@torch.library.custom_op("testlib::count_positive", mutates_args=(), device_types="cpu")
def count_positive(x: torch.Tensor) -> int:
    return int((x > 0).sum())


# An operator with two overloads, defined the low-level way.
_lib = torch.library.Library(NS, "FRAGMENT")
_lib.define("twice.a(Tensor x) -> Tensor")
_lib.define("twice.b(Tensor x, int n) -> Tensor")
_lib.impl("twice.a", lambda x: x * 2, "CPU")
_lib.impl("twice.b", lambda x, n: x * 2 * n, "CPU")
_lib.impl("twice.a", lambda x: torch.empty_like(x), "Meta")
_lib.impl("twice.b", lambda x, n: torch.empty_like(x), "Meta")
