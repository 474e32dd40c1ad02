"""Shape function of rrelu's backward (lowerings/rrelu.py)."""

from __future__ import annotations

from .activation import leaky_relu_backward_output_shape
from .pointwise import mul_Tensor_output_shape


def rrelu_with_noise_backward_output_shape(grad_output, self, noise, lower, upper, training, self_is_result):
    if training:
        return mul_Tensor_output_shape(noise, grad_output)
    return leaky_relu_backward_output_shape(grad_output, self, None, self_is_result)
