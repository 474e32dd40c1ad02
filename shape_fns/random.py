"""Shape functions of the runtime's random nodes (lowerings/random.py)."""

from __future__ import annotations

import torch

from .common import TensorMeta, broadcast_shapes, scalar_type_name


def random_normal_output_shape(size, dtype):
    return TensorMeta(tuple(size), dtype)


def random_uniform_output_shape(size, dtype):
    return TensorMeta(tuple(size), dtype)


def random_dropout_output_shape(input, p):
    return TensorMeta(tuple(input.shape), input.dtype), TensorMeta(tuple(input.shape), torch.bool)


def random_sample_output_shape(kind, shape, dtype, params):
    return TensorMeta(tuple(shape), dtype)


def random_integers_output_shape(shape, dtype, low, high):
    return TensorMeta(tuple(shape), dtype)


def random_permutation_output_shape(n, dtype):
    return TensorMeta((n,), dtype)


def random_bernoulli_output_shape(self, p):
    if broadcast_shapes(tuple(self.shape), tuple(p.shape)) != tuple(self.shape):
        raise RuntimeError(f"expand: the shape of p {list(p.shape)} cannot be expanded to {list(self.shape)}")
    return TensorMeta(tuple(self.shape), self.dtype)


def random_normal_affine_output_shape(mean, std, shape, dtype):
    return TensorMeta(tuple(shape), dtype)


def random_multinomial_output_shape(probs, num_samples, replacement):
    return TensorMeta(tuple(probs.shape[:-1]) + (num_samples,), torch.int64)


def random_per_element_output_shape(kind, param, other):
    if other is None:
        return TensorMeta(tuple(param.shape), param.dtype)
    if other.dtype != param.dtype:
        raise RuntimeError(f"Found dtype {scalar_type_name(other.dtype)} but expected {scalar_type_name(param.dtype)}")
    return TensorMeta(broadcast_shapes(tuple(param.shape), tuple(other.shape)), param.dtype)


def _standard_gamma_grad_output_shape(self, output):
    if output.dtype != self.dtype:
        raise RuntimeError(f"Found dtype {scalar_type_name(output.dtype)} but expected {scalar_type_name(self.dtype)}")
    return TensorMeta(broadcast_shapes(tuple(self.shape), tuple(output.shape)), self.dtype)
