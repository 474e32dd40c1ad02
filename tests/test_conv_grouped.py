"""Grouped and depthwise convolutions (Note [Grouped convolutions] in lowerings/conv.py):
depthwise forwards as a sum over kernel taps, grouped weight gradients as one product
per tap. Values and gradients against PyTorch CPU in float32 and float64, for 1-3
spatial dims, strides, dilations, padding and channel multipliers; and the size of
the gradient's program, which XLA CPU's own expansion made quadratic in the channels."""

from __future__ import annotations

import jax
import numpy as np
import pytest
import torch

from lowering_harness import assert_conv_matches_cpu
from xla_native_functions.lowerings import conv as lower_conv

CASES = [
    # (input shape, weight shape, stride, padding, dilation, groups)
    ((2, 6, 9, 9), (6, 1, 3, 3), 1, 1, 1, 6),  # depthwise
    ((2, 6, 9, 8), (12, 1, 5, 5), 2, 2, 1, 6),  # depthwise, multiplier 2, strided
    ((2, 4, 11, 11), (4, 1, 3, 3), (2, 1), (0, 2), 2, 4),  # dilated, uneven
    ((3, 5, 13), (5, 1, 7), 1, 3, 1, 5),  # 1d
    ((1, 3, 5, 5, 5), (6, 1, 3, 3, 3), 2, 1, 1, 3),  # 3d, multiplier 2
    ((2, 8, 7, 7), (8, 2, 3, 3), 1, 1, 1, 4),  # 2 input channels per group
    ((2, 8, 6, 6), (12, 4, 3, 3), 2, 1, 2, 2),  # grouped, strided and dilated
    ((2, 6, 2, 2), (6, 1, 5, 5), 1, 2, 1, 6),  # kernel over padding, few outputs
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[0])) + f"-g{c[-1]}")
def test_values_and_gradients_match_cpu(case, dtype):
    assert_conv_matches_cpu(*case, dtype)


def test_weight_gradient_of_many_channels_needs_no_channel_pairs():
    """EfficientNet-B0's last depthwise convolution at 64x64 images: 1152 channels, 5x5
    kernel, 2x2 outputs. XLA's expansion of JAX's gradient held a (1152, 1152, 5, 5)
    array, 265 MB of temporaries; the input is 37 kB."""
    x = np.zeros((2, 1152, 2, 2), np.float32)
    w = np.zeros((1152, 1, 5, 5), np.float32)
    g = np.zeros((2, 1152, 2, 2), np.float32)

    def backward(g, x, w):
        return lower_conv.lower_convolution_backward(g, x, w, None, [1], [2], [1], False, [0], 1152,
                                                     [True, True, False])[:2]

    stats = jax.jit(backward).lower(g, x, w).compile().memory_analysis()
    assert stats.temp_size_in_bytes < 4 * 2**20
