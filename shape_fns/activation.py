"""Shape functions of the activations in lowerings/activation.py: the (broadcast)
input shape, dtype by promotion kind, and PyTorch CPU's dtype checks."""

from __future__ import annotations

import torch

from .common import (
    TensorMeta,
    broadcast_shapes,
    elementwise_dtypes,
    normalize_dim,
    promote_dtypes,
    require_kernel_dtype,
    scalar_type_name,
)
from .common import checked_meta


def _float(op, *operands, kernel, complex_ok=False):
    return checked_meta(op, *operands, kernel=kernel, categories="float complex" if complex_ok else "float")


def _same_dtype(expected, *others):
    for x in others:
        if x.dtype != expected.dtype:
            raise RuntimeError(
                f"Found dtype {scalar_type_name(x.dtype)} but expected {scalar_type_name(expected.dtype)}"
            )


def elu_output_shape(self, alpha=1, scale=1, input_scale=1):
    return _float("elu", self, kernel="elu_cpu")


def elu_backward_output_shape(grad_output, alpha, scale, input_scale, is_result, self_or_result):
    return _float("elu_backward", grad_output, self_or_result, kernel="elu_backward_cpu")


def hardtanh_output_shape(self, min_val=-1, max_val=1):
    # PyTorch rejects unsigned types only for a negative bound; bounds are runtime
    # values here, so unsigned types are rejected outright.
    if self.dtype is torch.bool:
        raise RuntimeError("Bool inputs not supported for hardtanh")
    if self.dtype is torch.uint8:
        raise RuntimeError("cannot do hardtanh on an unsigned type with negative limits")
    return checked_meta("hardtanh", self, kernel="hardtanh_cpu", categories="int float")


def hardtanh_backward_output_shape(grad_output, self, min_val, max_val):
    return _float("hardtanh_backward", grad_output, self, kernel="hardtanh_backward_cpu")


def leaky_relu_output_shape(self, negative_slope=0.01):
    return _float("leaky_relu", self, kernel="leaky_relu_cpu")


def leaky_relu_backward_output_shape(grad_output, self, negative_slope, self_is_result):
    return _float("leaky_relu_backward", grad_output, self, kernel="leaky_relu_backward_cpu")


def silu_output_shape(self):
    return _float("silu", self, kernel="silu_cpu", complex_ok=True)


def sigmoid_backward_output_shape(grad_output, output):
    return _float("sigmoid_backward", grad_output, output, kernel="sigmoid_backward_cpu", complex_ok=True)


def tanh_backward_output_shape(grad_output, output):
    return _float("tanh_backward", grad_output, output, kernel="tanh_backward_cpu", complex_ok=True)


def hardsigmoid_output_shape(self):
    return _float("hardsigmoid", self, kernel="hardsigmoid_cpu")


def hardsigmoid_backward_output_shape(grad_output, self):
    return _float("hardsigmoid_backward", grad_output, self, kernel="hardsigmoid_backward")


def hardswish_output_shape(self):
    return _float("hardswish", self, kernel="hardswish_cpu")


def hardswish_backward_output_shape(grad_output, self):
    return _float("hardswish_backward", grad_output, self, kernel="hardswish_backward_cpu")


def softplus_output_shape(self, beta=1, threshold=20):
    return _float("softplus", self, kernel="softplus_cpu")


def softplus_backward_output_shape(grad_output, self, beta, threshold):
    return _float("softplus_backward", grad_output, self, kernel="softplus_backward_cpu")


def mish_output_shape(self):
    return _float("mish", self, kernel="mish_cpu")


def log_sigmoid_forward_output_shape(self):
    out = _float("log_sigmoid_forward", self, kernel="log_sigmoid_cpu")
    return out, out


def log_sigmoid_backward_output_shape(grad_output, self, buffer):
    _same_dtype(grad_output, self, buffer)
    return _float("log_sigmoid_backward", grad_output, self, buffer, kernel="log_sigmoid_backward_cpu")


def _glu_check(self, dim):
    if self.ndim == 0:
        raise RuntimeError("glu does not support 0-dimensional tensors")
    d = normalize_dim(dim, self.ndim)
    if self.shape[d] % 2:
        raise RuntimeError(f"Halving dimension must be even, but dimension {d} is size {self.shape[d]}")
    return d


def glu_output_shape(self, dim=-1):
    d = _glu_check(self, dim)
    meta = _float("glu", self, kernel="glu_cpu")
    shape = list(self.shape)
    shape[d] //= 2
    return TensorMeta(tuple(shape), meta.dtype)


def glu_backward_output_shape(grad_output, self, dim):
    _glu_check(self, dim)
    compute, _ = elementwise_dtypes("glu_backward", grad_output, self)
    require_kernel_dtype("glu_backward_cpu", compute, "float")
    return TensorMeta(self.shape, compute)


def _prelu_check(self, weight):
    _same_dtype(self, weight)


def _prelu_kernel_output_shape(self, weight):
    _prelu_check(self, weight)
    return _float("_prelu_kernel", self, weight, kernel="prelu_cpu")


def _prelu_kernel_backward_output_shape(grad_output, self, weight):
    _prelu_check(self, weight)
    meta = _float("_prelu_kernel_backward", grad_output, self, weight, kernel="prelu_backward_cpu")
    return meta, meta


def logit_output_shape(self, eps=None):
    return _float("logit", self, kernel="logit_cpu")


def logit_backward_output_shape(grad_output, self, eps=None):
    return _float("logit_backward", grad_output, self, kernel="logit_backward_cpu")



def _concrete(value):
    """A Scalar argument's value when it is known while shapes are computed (a Python
    number), else None (a traced runtime value: its checks cannot run here)."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def threshold_output_shape(self, threshold, value):
    return checked_meta("threshold", self, kernel="threshold_cpu", categories="int float")


def hardshrink_output_shape(self, lambd=0.5):
    return _float("hardshrink", self, kernel="hardshrink_cpu")


def hardshrink_backward_output_shape(grad_out, self, lambd):
    return _float("hardshrink_backward", grad_out, self, kernel="shrink_backward_cpu")


def softshrink_output_shape(self, lambd=0.5):
    meta = _float("softshrink", self, kernel="softshrink_check")
    # A traced lambd (a runtime value) cannot be checked here.
    lam = _concrete(lambd)
    if lam is not None and lam < 0:
        limit = "3.40282e+38" if meta.dtype is not torch.float64 else "1.79769e+308"
        raise RuntimeError(
            f"lambda must be in range [0, {limit}] for input dtype {scalar_type_name(meta.dtype)}, but found {lam}"
        )
    return meta


def softshrink_backward_output_shape(grad_output, self, lambd):
    return _float("softshrink_backward", grad_output, self, kernel="shrink_backward_cpu")


def celu_output_shape(self, alpha=1.0):
    if _concrete(alpha) == 0:
        raise RuntimeError("ZeroDivisionError")
    return _float("celu", self, kernel="elu_cpu")


def _norm_input(op, *operands):
    compute, _ = elementwise_dtypes(op, *operands)
    if not (compute.is_floating_point or compute.is_complex):
        raise RuntimeError(
            f"linalg.vector_norm: Expected a floating point or complex tensor as input. Got {scalar_type_name(compute)}"
        )
    return compute


def renorm_output_shape(self, p, dim, maxnorm):
    normalize_dim(dim, self.ndim)
    if self.ndim < 2:
        raise RuntimeError(f"renorm: input needs at least 2 dimensions, got {self.ndim} dimensions")
    # p and maxnorm are runtime values inside a traced program; checked when known.
    if _concrete(p) is not None and p <= 0:
        raise RuntimeError("renorm: non-positive-norm not supported")
    if _concrete(maxnorm) is not None and maxnorm < 0:
        raise RuntimeError(f"renorm: expected maxnorm to be >= 0 but got {maxnorm}")
    dtype = _norm_input("renorm", self)
    return TensorMeta(self.shape, dtype)


def dist_output_shape(self, other, p=2):
    if self.dtype is torch.bool and other.dtype is torch.bool:
        raise RuntimeError(
            "Subtraction, the `-` operator, with two bool tensors is not supported. "
            "Use the `^` or `logical_xor()` operator instead."
        )
    broadcast_shapes(self.shape, other.shape)
    compute, _ = elementwise_dtypes("dist", self, other)
    if not (compute.is_floating_point or compute.is_complex):
        raise RuntimeError(
            f"norm(): input dtype should be either floating point or complex. Got {scalar_type_name(compute)} instead."
        )
    if compute.is_complex:
        compute = {torch.complex64: torch.float32, torch.complex128: torch.float64}[compute]
    return TensorMeta((), compute)


def native_dropout_backward_dtype(grad_output, mask):
    dtype = promote_dtypes(grad_output, mask)
    return dtype if (dtype.is_floating_point or dtype.is_complex) else torch.get_default_dtype()


def native_dropout_backward_output_shape(grad_output, mask, scale):
    return TensorMeta(broadcast_shapes(grad_output.shape, mask.shape), native_dropout_backward_dtype(grad_output, mask))
