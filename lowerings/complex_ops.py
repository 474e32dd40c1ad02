"""Complex numbers from parts and back: complex, polar, angle, conjugation, frexp."""

from __future__ import annotations

import math

import jax.numpy as jnp
from jax import lax

from ..shape_fns.common import TensorMeta, to_numpy_dtype, to_torch_dtype
from ..shape_fns.complex_ops import angle_output_shape
from .common import opmath


def _meta(x):
    return TensorMeta(tuple(x.shape), to_torch_dtype(x.dtype))


def lower_complex(real, imag):
    shape = jnp.broadcast_shapes(real.shape, imag.shape)
    return lax.complex(jnp.broadcast_to(real, shape), jnp.broadcast_to(imag, shape))


def lower_polar(abs, angle):
    shape = jnp.broadcast_shapes(abs.shape, angle.shape)
    a, t = jnp.broadcast_to(abs, shape), jnp.broadcast_to(angle, shape)
    return lax.complex(a * jnp.cos(t), a * jnp.sin(t))


def lower_angle(self):
    if jnp.iscomplexobj(self):
        return jnp.arctan2(jnp.imag(self), jnp.real(self))
    out = to_numpy_dtype(angle_output_shape(_meta(self)).dtype)
    x = opmath(self.astype(out))
    # Real inputs: pi for negatives, 0 otherwise, NaN kept.
    res = jnp.where(x < 0, jnp.asarray(math.pi, x.dtype), jnp.zeros((), x.dtype))
    return jnp.where(jnp.isnan(x), x, res).astype(out)


def lower__conj_physical(self):
    return jnp.conj(self) if jnp.iscomplexobj(self) else self


def lower_frexp_Tensor(self):
    # On the bits: XLA's CPU arithmetic flushes subnormals to zero, which PyTorch's
    # frexp decomposes exactly.
    x = self if self.dtype == jnp.float64 else self.astype(jnp.float32)
    if x.dtype == jnp.float64:
        uint, frac_bits, bias = jnp.uint64, 52, 1022
    else:
        uint, frac_bits, bias = jnp.uint32, 23, 126
    width = 64 if uint == jnp.uint64 else 32
    exp_max = (1 << (width - 1 - frac_bits)) - 1
    frac_mask = uint((1 << frac_bits) - 1)
    exp_mask = uint(exp_max)
    bits = lax.bitcast_convert_type(x, uint)
    sign = bits & uint(1 << (width - 1))
    field = ((bits >> uint(frac_bits)) & exp_mask).astype(jnp.int32)
    frac = bits & frac_mask
    # Subnormals: normalize the fraction so its leading one sits at the implicit bit.
    top = (width - 1) - lax.clz(frac).astype(jnp.int32)
    shift = jnp.clip(frac_bits - top, 0, frac_bits).astype(uint)
    sub_frac = (frac << shift) & frac_mask
    subnormal = (field == 0) & (frac != 0)
    exponent = jnp.where(subnormal, top - (bias + frac_bits - 1), field - bias)
    frac = jnp.where(subnormal, sub_frac, frac)
    mantissa = lax.bitcast_convert_type(sign | (uint(bias) << uint(frac_bits)) | frac, x.dtype)
    special = ((field == 0) & ~subnormal) | (field == exp_max)
    mantissa = jnp.where(special, x, mantissa)
    exponent = jnp.where(special, 0, exponent)
    return mantissa.astype(self.dtype), exponent.astype(jnp.int32)
