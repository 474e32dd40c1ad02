"""Convolutions XLA CPU's kernel runs slowly, written as matrix products in
lowerings/conv.py: few output positions (the weights times the input windows), kernel
equal to stride (the weights times the input's blocks), transposed convolutions with
kernel equal to stride, and the gradients of transposed convolutions. Values and
gradients against PyTorch CPU, in float32 and float64, for 1-3 spatial dims, strides,
dilations and padding; which way each shape takes."""

from __future__ import annotations

import jax
import numpy as np
import pytest
import torch

import xla_native_functions as xnf
from lowering_harness import assert_conv_matches_cpu, assert_values_and_gradients_match_cpu
from xla_native_functions.lowerings import conv as lower_conv

CASES = [
    # (input shape, weight shape, stride, padding, dilation)
    ((8, 32, 2, 2), (48, 32, 3, 3), 1, 1, 1),  # ResNet-18's last stage at 64x64 images
    ((2, 16, 4, 4), (24, 16, 3, 3), 2, 1, 1),  # the strided convolution into it
    ((2, 8, 5, 3), (4, 8, 3, 2), (2, 1), (1, 0), 1),
    ((2, 8, 6, 6), (4, 8, 3, 3), 2, 1, 2),  # dilated
    ((3, 8, 2, 2), (8, 8, 1, 1), 1, 0, 1),  # 1x1
    ((2, 4, 1, 1), (6, 4, 3, 3), 1, 1, 1),  # one output position, kernel over padding
    ((2, 6, 7), (5, 6, 3), 2, 1, 1),  # 1d: 4 positions
    ((1, 3, 3, 3, 3), (4, 3, 3, 3, 3), 2, 1, 1),  # 3d: 8 positions
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shapes", CASES, ids=lambda c: "x".join(map(str, c[0])))
def test_values_and_gradients_match_cpu(shapes, dtype):
    assert_conv_matches_cpu(*shapes, 1, dtype)


def _primitives(x_shape, w_shape, stride, padding):
    n = len(x_shape) - 2
    jaxpr = jax.make_jaxpr(lambda x, w: lower_conv.lower_convolution(
        x, w, None, (stride,) * n, (padding,) * n, (1,) * n, False, (0,) * n, 1))(
        np.zeros(x_shape, np.float32), np.zeros(w_shape, np.float32))
    return {str(e.primitive) for e in jaxpr.jaxpr.eqns}


def test_only_few_output_positions_take_the_product():
    assert "conv_general_dilated" not in _primitives((8, 512, 2, 2), (512, 512, 3, 3), 1, 1)
    assert "conv_general_dilated" not in _primitives((8, 64, 8, 8), (64, 64, 3, 3), 2, 1)  # 4x4 outputs
    assert "conv_general_dilated" in _primitives((8, 64, 5, 5), (64, 64, 3, 3), 1, 1)  # 25 outputs
    assert "conv_general_dilated" in _primitives((8, 64, 56, 56), (64, 64, 3, 3), 1, 1)


def test_grouped_and_transposed_convolutions_keep_xla_kernel_and_match_cpu():
    torch.manual_seed(0)
    x, w = torch.randn(2, 8, 2, 2), torch.randn(8, 2, 3, 3)
    torch.testing.assert_close(
        xnf.to_torch(torch.nn.functional.conv2d(xnf.to_xla(x), xnf.to_xla(w), padding=1, groups=4)),
        torch.nn.functional.conv2d(x, w, padding=1, groups=4), atol=1e-5, rtol=1e-5)
    wt = torch.randn(8, 4, 3, 3)  # kernel 3, stride 2: overlapping blocks
    torch.testing.assert_close(
        xnf.to_torch(torch.nn.functional.conv_transpose2d(xnf.to_xla(x), xnf.to_xla(wt), stride=2)),
        torch.nn.functional.conv_transpose2d(x, wt, stride=2), atol=1e-5, rtol=1e-5)


PATCHES = [
    # (input shape, weight shape, stride == kernel)
    ((2, 3, 16, 16), (16, 3, 4, 4), 4),  # the zoo ViT's patch embedding
    ((2, 3, 17, 19), (8, 3, 4, 4), 4),  # positions past the last whole patch
    ((2, 4, 8, 6), (6, 4, 2, 3), (2, 3)),
    ((2, 3, 9), (5, 3, 3), 3),  # 1d
    ((1, 2, 6, 6, 6), (4, 2, 2, 2, 2), 2),  # 3d
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shapes", PATCHES, ids=lambda c: "x".join(map(str, c[0])))
def test_kernel_equal_to_stride_matches_cpu(shapes, dtype):
    """Note [Convolutions with kernel equal to stride]."""
    xs, ws, stride = shapes
    assert_conv_matches_cpu(xs, ws, stride, 0, 1, 1, dtype)


def test_kernel_equal_to_stride_takes_the_product_unpadded_only():
    def primitives(w_shape, stride, padding, groups=1):
        jaxpr = jax.make_jaxpr(lambda x, w: lower_conv.lower_convolution(
            x, w, None, stride, padding, (1, 1), False, (0, 0), groups))(
            np.zeros((2, 4, 64, 64), np.float32), np.zeros(w_shape, np.float32))
        return {str(e.primitive) for e in jaxpr.jaxpr.eqns}

    patches = primitives((8, 4, 16, 16), (16, 16), (0, 0))  # 16 output positions, but no windows
    assert "conv_general_dilated" not in patches and "concatenate" not in patches
    assert "conv_general_dilated" in primitives((8, 4, 4, 4), (4, 4), (1, 1))  # padded: 256 positions
    assert "conv_general_dilated" in primitives((8, 2, 4, 4), (4, 4), (0, 0), groups=2)
    assert "conv_general_dilated" in primitives((8, 4, 1, 1), (1, 1), (0, 0))  # 1x1: XLA's kernel


TRANSPOSED = [
    ((2, 6, 4, 5), (6, 3, 2, 2), 2),  # a UNet's up-sampling
    ((2, 4, 3, 3), (4, 5, 3, 3), 3),
    ((2, 4, 3, 2), (4, 5, 2, 1), (2, 1)),
    ((2, 4, 5), (4, 3, 4), 4),  # 1d
    ((1, 3, 2, 3, 2), (3, 2, 2, 2, 2), 2),  # 3d
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shapes", TRANSPOSED, ids=lambda c: "x".join(map(str, c[0])))
def test_transposed_with_kernel_equal_to_stride_matches_cpu(shapes, dtype):
    xs, ws, stride = shapes
    torch.manual_seed(0)
    inputs = torch.randn(xs, dtype=dtype), torch.randn(ws, dtype=dtype), torch.randn(ws[1], dtype=dtype)
    fn = getattr(torch.nn.functional, f"conv_transpose{len(xs) - 2}d")
    assert_values_and_gradients_match_cpu(lambda x, w, b: fn(x, w, b, stride=stride), inputs)


def test_transposed_takes_the_product_only_with_kernel_equal_to_stride():
    def primitives(w_shape, stride, padding):
        jaxpr = jax.make_jaxpr(lambda x, w: lower_conv.lower_convolution(
            x, w, None, stride, padding, (1, 1), True, (0, 0), 1))(
            np.zeros((2, 4, 6, 6), np.float32), np.zeros(w_shape, np.float32))
        return {str(e.primitive) for e in jaxpr.jaxpr.eqns}

    assert "conv_general_dilated" not in primitives((4, 3, 2, 2), (2, 2), (0, 0))
    assert "conv_general_dilated" in primitives((4, 3, 4, 4), (2, 2), (1, 1))
    assert "conv_general_dilated" in primitives((4, 3, 3, 3), (2, 2), (0, 0))


@pytest.mark.parametrize("case", [
    # (input, weight, stride, padding, output_padding, dilation, groups)
    ((2, 4, 6, 5), (4, 3, 4, 4), 2, 1, 0, 1, 1),  # a GAN decoder's up-sampling
    ((2, 4, 5, 5), (4, 3, 3, 3), 2, 1, 1, 1, 2),  # groups, output_padding
    ((2, 4, 5, 5), (4, 3, 3, 3), 1, 0, 2, 3, 1),  # output_padding beyond the stride (dilation 3)
    ((2, 4, 7), (4, 2, 5), 3, 2, 1, 1, 1),
], ids=["k4s2p1", "groups", "output-padding-beyond-stride", "1d"])
def test_transposed_gradients_match_cpu(case):
    """Note [Gradients of transposed convolutions]: as forward-convolution gradients."""
    xs, ws, stride, padding, output_padding, dilation, groups = case
    torch.manual_seed(0)
    x, w = torch.randn(xs, dtype=torch.float64), torch.randn(ws, dtype=torch.float64)
    fn = torch.nn.functional.__dict__[f"conv_transpose{x.dim() - 2}d"]
    kwargs = dict(stride=stride, padding=padding, output_padding=output_padding, dilation=dilation, groups=groups)
    ref = [t.clone().requires_grad_() for t in (x, w)]
    ours = [xnf.to_xla(t).requires_grad_() for t in (x, w)]
    out_ref, out = fn(*ref, **kwargs), fn(*ours, **kwargs)
    grad = torch.randn(out_ref.shape, dtype=torch.float64)
    out_ref.backward(grad)
    out.backward(xnf.to_xla(grad))
    torch.testing.assert_close(xnf.to_torch(out), out_ref.detach(), atol=1e-10, rtol=1e-10)
    for mine, theirs in zip(ours, ref):
        torch.testing.assert_close(xnf.to_torch(mine.grad), theirs.grad, atol=1e-10, rtol=1e-10)


def test_transposed_backward_convolves_no_dilated_input():
    jaxpr = jax.make_jaxpr(lambda g, x, w: lower_conv.lower_convolution_backward(
        g, x, w, None, (2, 2), (1, 1), (1, 1), True, (0, 0), 1, (True, True, False)))(
        np.zeros((2, 3, 12, 12), np.float32), np.zeros((2, 4, 6, 6), np.float32), np.zeros((4, 3, 4, 4), np.float32))
    convs = [e for e in jaxpr.jaxpr.eqns if str(e.primitive) == "conv_general_dilated"]
    assert convs and all(set(e.params["lhs_dilation"]) == {1} for e in convs), convs
