"""rrelu's backward. The forward (rrelu_with_noise and its in-place form) draws random
slopes, so it is a `supported` op in runtime/supported/random.py; its backward is a
plain function of the gradient, the input and the recorded slopes."""

from __future__ import annotations

from .activation import lower_leaky_relu_backward
from .common import opmath, promote_operands


def lower_rrelu_with_noise_backward(grad_output, self, noise, lower, upper, training, self_is_result):
    # In training the forward recorded each element's slope in `noise` (1 where the
    # input was positive); otherwise the forward was leaky_relu with the mean slope.
    if training:
        (n, g), out = promote_operands("mul_Tensor", noise, grad_output)
        return (opmath(n) * opmath(g)).astype(out)
    return lower_leaky_relu_backward(grad_output, self, (lower + upper) / 2, self_is_result)
