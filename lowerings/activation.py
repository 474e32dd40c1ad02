"""Lowerings of activation functions and their backward ops: elu, hardtanh,
leaky_relu, silu, hardsigmoid, hardswish, softplus, mish, log_sigmoid, glu, prelu,
logit, and the backward ops of sigmoid and tanh.

Formulas follow PyTorch CPU's kernels (aten/src/ATen/native/cpu/Activation.cpp),
including which side of a threshold a boundary value falls on, computed in the
opmath type (float32 for float16/bfloat16). Scalar arguments are runtime values.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from ..shape_fns.activation import native_dropout_backward_dtype
from ..shape_fns.common import normalize_dim, promote_dtypes, to_numpy_dtype
from .common import opmath, promote_operands, scalar_to


def _cast(value, like):
    return scalar_to(value, like.dtype)


def _zero(like):
    return jnp.zeros((), like.dtype)


def lower_elu(self, alpha=1, scale=1, input_scale=1):
    (x,), out = promote_operands("elu", self)
    x = opmath(x)
    neg = jnp.expm1(x * _cast(input_scale, x)) * (_cast(alpha, x) * _cast(scale, x))
    return jnp.where(x <= 0, neg, x * _cast(scale, x)).astype(out)


def lower_elu_backward(grad_output, alpha, scale, input_scale, is_result, self_or_result):
    (g, y), out = promote_operands("elu_backward", grad_output, self_or_result)
    g, y = opmath(g), opmath(y)
    negcoef = _cast(alpha, y) * _cast(scale, y)
    negiptcoef = _cast(input_scale, y)
    if is_result:
        neg = g * negiptcoef * (y + negcoef)
    else:
        neg = g * negiptcoef * negcoef * jnp.exp(y * negiptcoef)
    return jnp.where(y <= 0, neg, g * _cast(scale, y)).astype(out)


def lower_hardtanh(self, min_val=-1, max_val=1):
    (x,), out = promote_operands("hardtanh", self)
    x = opmath(x)
    return jnp.minimum(jnp.maximum(x, _cast(min_val, x)), _cast(max_val, x)).astype(out)


def lower_hardtanh_backward(grad_output, self, min_val, max_val):
    (g, x), out = promote_operands("hardtanh_backward", grad_output, self)
    g, x = opmath(g), opmath(x)
    outside = (x <= _cast(min_val, x)) | (x >= _cast(max_val, x))
    return jnp.where(outside, _zero(g), g).astype(out)


def lower_leaky_relu(self, negative_slope=0.01):
    (x,), out = promote_operands("leaky_relu", self)
    x = opmath(x)
    return jnp.where(x > 0, x, x * _cast(negative_slope, x)).astype(out)


def lower_leaky_relu_backward(grad_output, self, negative_slope, self_is_result):
    # With self_is_result and a negative slope PyTorch raises; the slope is a runtime
    # value here, so that call computes from the (then ambiguous) result instead.
    (g, x), out = promote_operands("leaky_relu_backward", grad_output, self)
    g, x = opmath(g), opmath(x)
    return jnp.where(x > 0, g, g * _cast(negative_slope, g)).astype(out)


def lower_silu(self):
    (x,), out = promote_operands("silu", self)
    x = opmath(x)
    return (x / (1 + jnp.exp(-x))).astype(out)


def lower_sigmoid_backward(grad_output, output):
    (g, y), out = promote_operands("sigmoid_backward", grad_output, output)
    g, y = opmath(g), opmath(y)
    if jnp.issubdtype(y.dtype, jnp.complexfloating):
        y = jnp.conj(y)
    return (g * (1 - y) * y).astype(out)


def lower_tanh_backward(grad_output, output):
    (g, y), out = promote_operands("tanh_backward", grad_output, output)
    g, y = opmath(g), opmath(y)
    if jnp.issubdtype(y.dtype, jnp.complexfloating):
        y = jnp.conj(y)
    return (g * (1 - y * y)).astype(out)


def lower_hardsigmoid(self):
    (x,), out = promote_operands("hardsigmoid", self)
    x = opmath(x)
    return (jnp.clip(x + 3, 0, 6) / 6).astype(out)


def lower_hardsigmoid_backward(grad_output, self):
    (g, x), out = promote_operands("hardsigmoid_backward", grad_output, self)
    g, x = opmath(g), opmath(x)
    return jnp.where((x > -3) & (x < 3), g / 6, _zero(g)).astype(out)


def lower_hardswish(self):
    (x,), out = promote_operands("hardswish", self)
    x = opmath(x)
    return (x * jnp.clip(x + 3, 0, 6) / 6).astype(out)


def lower_hardswish_backward(grad_output, self):
    (g, x), out = promote_operands("hardswish_backward", grad_output, self)
    g, x = opmath(g), opmath(x)
    y = jnp.where(x <= -3, _zero(g), jnp.where(x >= 3, g, g * (x / 3 + 0.5)))
    return y.astype(out)


def lower_softplus(self, beta=1, threshold=20):
    (x,), out = promote_operands("softplus", self)
    x = opmath(x)
    bx = x * _cast(beta, x)
    return jnp.where(bx > _cast(threshold, x), x, jnp.log1p(jnp.exp(bx)) / _cast(beta, x)).astype(out)


def lower_softplus_backward(grad_output, self, beta, threshold):
    (g, x), out = promote_operands("softplus_backward", grad_output, self)
    g, x = opmath(g), opmath(x)
    bx = x * _cast(beta, x)
    z = jnp.exp(bx)
    return jnp.where(bx > _cast(threshold, x), g, g * z / (z + 1)).astype(out)


def lower_mish(self):
    (x,), out = promote_operands("mish", self)
    x = opmath(x)
    return (x * jnp.tanh(jnp.log1p(jnp.exp(x)))).astype(out)


def lower_log_sigmoid_forward(self):
    (x,), out = promote_operands("log_sigmoid_forward", self)
    x = opmath(x)
    z = jnp.exp(-jnp.abs(x))
    return (jnp.minimum(x, 0) - jnp.log1p(z)).astype(out), z.astype(out)


def lower_log_sigmoid_backward(grad_output, self, buffer):
    (g, x, z), out = promote_operands("log_sigmoid_backward", grad_output, self, buffer)
    g, x, z = opmath(g), opmath(x), opmath(z)
    negative = x < 0
    max_deriv = negative.astype(x.dtype)
    sign = jnp.where(negative, 1, -1).astype(x.dtype)
    return ((max_deriv - sign * (z / (1 + z))) * g).astype(out)


def _halves(x, dim):
    dim = normalize_dim(dim, x.ndim)
    half = x.shape[dim] // 2
    return lax.slice_in_dim(x, 0, half, axis=dim), lax.slice_in_dim(x, half, 2 * half, axis=dim), dim


def lower_glu(self, dim=-1):
    (x,), out = promote_operands("glu", self)
    a, b, _ = _halves(opmath(x), dim)
    return (a * lax.logistic(b)).astype(out)


def lower_glu_backward(grad_output, self, dim):
    (g, x), out = promote_operands("glu_backward", grad_output, self)
    g = opmath(g)
    a, b, dim = _halves(opmath(x), dim)
    s = lax.logistic(b)
    grad_a = g * s
    grad_b = g * a * s * (1 - s)
    return jnp.concatenate([grad_a, grad_b], axis=dim).astype(out)


def lower__prelu_kernel(self, weight):
    (x, w), out = promote_operands("_prelu_kernel", self, weight)
    x, w = opmath(x), opmath(w)
    return jnp.where(x > 0, x, w * x).astype(out)


def lower__prelu_kernel_backward(grad_output, self, weight):
    # Both gradients have the broadcast shape; prelu's composite sums grad_weight.
    (g, x, w), out = promote_operands("_prelu_kernel_backward", grad_output, self, weight)
    g, x, w = opmath(g), opmath(x), opmath(w)
    g, x, w = jnp.broadcast_arrays(g, x, w)
    positive = x > 0
    grad_input = jnp.where(positive, g, w * g)
    grad_weight = jnp.where(positive, _zero(g), x * g)
    return grad_input.astype(out), grad_weight.astype(out)


def lower_logit(self, eps=None):
    (x,), out = promote_operands("logit", self)
    x = opmath(x)
    if eps is not None and eps >= 0:
        x = jnp.clip(x, _cast(eps, x), _cast(1 - eps, x))
    return jnp.log(x / (1 - x)).astype(out)


def lower_logit_backward(grad_output, self, eps=None):
    (g, x), out = promote_operands("logit_backward", grad_output, self)
    g, x = opmath(g), opmath(x)
    grad = g / (x * (1 - x))
    if eps is None or eps < 0:
        y = jnp.where((x < 0) | (x > 1), jnp.full((), jnp.nan, x.dtype), grad)
    else:
        y = jnp.where((x < _cast(eps, x)) | (x > _cast(1 - eps, x)), _zero(x), grad)
    return y.astype(out)


# threshold, the shrink functions and celu, with the few nn ops that share their file
# (renorm, dist, native_dropout_backward). NaN inputs propagate as in PyTorch's kernels:
# softshrink multiplies the "zero" branch by x, so a NaN stays NaN.


def lower_threshold(self, threshold, value):
    (x,), out = promote_operands("threshold", self)
    # The bounds are cast to self's dtype first (truncating for integer tensors).
    return jnp.where(x <= _cast(threshold, x), _cast(value, x), x).astype(out)


def _inside(x, lambd, like):
    # The kernels compare in opmath but with lambd rounded to the input dtype first.
    lam = opmath(_cast(lambd, like))
    return (x >= -lam) & (x <= lam)


def lower_hardshrink(self, lambd=0.5):
    (x,), out = promote_operands("hardshrink", self)
    like = x
    x = opmath(x)
    return jnp.where(_inside(x, lambd, like), _zero(x), x).astype(out)


def lower_hardshrink_backward(grad_out, self, lambd):
    (g, x), out = promote_operands("hardshrink_backward", grad_out, self)
    like = x
    g, x = opmath(g), opmath(x)
    return jnp.where(_inside(x, lambd, like), _zero(g), g).astype(out)


def lower_softshrink(self, lambd=0.5):
    (x,), out = promote_operands("softshrink", self)
    x = opmath(x)
    lam = _cast(lambd, x)
    y = jnp.where(x > lam, x - lam, jnp.where(x < -lam, x + lam, x * 0))
    return y.astype(out)


def lower_softshrink_backward(grad_output, self, lambd):
    (g, x), out = promote_operands("softshrink_backward", grad_output, self)
    like = x
    g, x = opmath(g), opmath(x)
    return jnp.where(_inside(x, lambd, like), _zero(g), g).astype(out)


def lower_celu(self, alpha=1.0):
    # PyTorch: elu(x, alpha, scale=1, input_scale=1/alpha), 1/alpha taken in double.
    inv = 1.0 / jnp.asarray(alpha, jnp.float64)
    (x,), out = promote_operands("celu", self)
    x = opmath(x)
    neg = jnp.expm1(x * _cast(inv, x)) * _cast(alpha, x)
    return jnp.where(x <= 0, neg, x).astype(out)


def lower_renorm(self, p, dim, maxnorm):
    from .statistics import lower_linalg_vector_norm

    (x,), out = promote_operands("renorm", self)
    d = normalize_dim(dim, x.ndim)
    others = [i for i in range(x.ndim) if i != d]
    norm = lower_linalg_vector_norm(x, p, others, True)
    norm = opmath(norm)
    limit = _cast(maxnorm, norm)
    factor = jnp.where(norm > limit, limit / (norm + jnp.asarray(1e-7, norm.dtype)), jnp.ones((), norm.dtype))
    return (opmath(x) * factor).astype(out)


def lower_dist(self, other, p=2):
    from .statistics import lower_linalg_vector_norm

    (x, y), out = promote_operands("dist", self, other)
    diff = x - y
    norm = lower_linalg_vector_norm(diff, p)  # real for complex operands, as PyTorch's
    return norm.astype(jnp.finfo(out).dtype if jnp.issubdtype(out, jnp.complexfloating) else out)


def lower_native_dropout_backward(grad_output, mask, scale):
    # grad * mask * scale: the product keeps the promoted dtype of grad and mask (integer
    # arithmetic for integer grads), and the Python float scale then makes an integral
    # product floating (the default dtype).
    masked_dtype = to_numpy_dtype(promote_dtypes(grad_output, mask))
    masked = grad_output.astype(masked_dtype) * mask.astype(masked_dtype)
    out = to_numpy_dtype(native_dropout_backward_dtype(grad_output, mask))
    return (opmath(masked.astype(out)) * scale).astype(out)
