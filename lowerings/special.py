"""Lowerings of the special functions PyTorch exposes as aten ops (erfc, erfinv,
lgamma, digamma, polygamma, mvlgamma, the Bessel family, ndtri, zeta, ...) where
jax.scipy.special can express them; special_bessel_y0/y1, special_modified_bessel_k0/k1,
their scaled forms and special_airy_ai have no JAX counterpart and are not lowered.

Integer inputs compute in the default float dtype (INT_TO_FLOAT); float16/bfloat16
compute in float32 like PyTorch CPU.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import jax.scipy.special as jss
from jax import lax

from ..shape_fns.common import to_numpy_dtype
from ..shape_fns.special import ldexp_power_dtype, ldexp_Tensor_output_shape
from .common import opmath, promote_operands


def _unary(op, fn, self):
    (x,), out = promote_operands(op, self)
    return fn(opmath(x)).astype(out)


def _binary(op, fn, self, other):
    (x, y), out = promote_operands(op, self, other)
    return fn(opmath(x), opmath(y)).astype(out)


def lower_erfc(self):
    return _unary("erfc", lax.erfc, self)


def lower_erfinv(self):
    return _unary("erfinv", lax.erf_inv, self)


def lower_lgamma(self):
    return _unary("lgamma", lax.lgamma, self)


def digamma(x):
    # PyTorch: digamma(+-0) is -+inf (the limit from that side), where JAX gives NaN.
    return jnp.where(x == 0, jnp.copysign(jnp.asarray(jnp.inf, x.dtype), -x), lax.digamma(x))


def lower_digamma(self):
    return _unary("digamma", digamma, self)


def lower_polygamma(n, self):
    if n == 0:
        return _unary("polygamma", digamma, self)
    return _unary("polygamma", lambda x: jss.polygamma(n, x), self)


def lower_mvlgamma(self, p):
    # sum_{j<p} lgamma(x - j/2) + p(p-1)/4 log(pi). PyTorch raises for an element
    # <= (p-1)/2 in older versions; 2.13 returns inf there, as this does.
    def fn(x):
        terms = lax.lgamma(x[..., None] - jnp.arange(p, dtype=x.dtype) / 2)
        return terms.sum(-1) + jnp.asarray(p * (p - 1) / 4 * math.log(math.pi), x.dtype)

    return _unary("mvlgamma", fn, self)


def lower_i0(self):
    return _unary("i0", jss.i0, self)


def lower_special_i0e(self):
    return _unary("special_i0e", jss.i0e, self)


def lower_special_i1(self):
    return _unary("special_i1", jss.i1, self)


def lower_special_i1e(self):
    return _unary("special_i1e", jss.i1e, self)


def lower_special_modified_bessel_i0(self):
    return _unary("special_modified_bessel_i0", jss.i0, self)


def lower_special_modified_bessel_i1(self):
    return _unary("special_modified_bessel_i1", jss.i1, self)


def lower_special_ndtri(self):
    return _unary("special_ndtri", jss.ndtri, self)


def lower_special_log_ndtr(self):
    return _unary("special_log_ndtr", jss.log_ndtr, self)


def lower_special_erfcx(self):
    return _unary("special_erfcx", jss.erfcx, self)


def lower_special_entr(self):
    return _unary("special_entr", jss.entr, self)


def lower_sinc(self):
    return _unary("sinc", jnp.sinc, self)


def spherical_bessel_j0(x):
    # sin(x)/x, its Taylor series near 0 (no cancellation), 0 at infinity.
    small = jnp.abs(x) < 0.5
    x2 = x * x
    series = 1 + x2 * (-1 / 6 + x2 * (1 / 120 + x2 * (-1 / 5040 + x2 * (1 / 362880 + x2 * (-1 / 39916800)))))
    direct = jnp.sin(x) / jnp.where(small, 1, x)
    return jnp.where(jnp.isinf(x), jnp.zeros((), x.dtype), jnp.where(small, series, direct))


def lower_special_spherical_bessel_j0(x):
    return _unary("special_spherical_bessel_j0", spherical_bessel_j0, x)


def xlog1py(x, y):
    prod = x * jnp.log1p(y)
    return jnp.where(jnp.isnan(y), y, jnp.where(x == 0, jnp.zeros((), x.dtype), prod))


def lower_special_xlog1py(self, other):
    return _binary("special_xlog1py", xlog1py, self, other)


def lower_special_xlog1py_self_scalar(self, other):
    return _binary("special_xlog1py_self_scalar", xlog1py, self, other)


def lower_special_xlog1py_other_scalar(self, other):
    return _binary("special_xlog1py_other_scalar", xlog1py, self, other)


def zeta(x, q):
    # Hurwitz zeta. Cephes (PyTorch) gives inf at the poles q = 0, -1, -2, ...; JAX
    # gives NaN there. For other q < 0 with an integral x PyTorch still sums its
    # series where JAX returns NaN (not matched).
    pole = (q <= 0) & (q == jnp.floor(q)) & (x > 1)
    return jnp.where(pole, jnp.asarray(jnp.inf, x.dtype), jss.zeta(x, q))


def lower_special_zeta(self, other):
    return _binary("special_zeta", zeta, self, other)


def lower_special_zeta_self_scalar(self, other):
    return _binary("special_zeta_self_scalar", zeta, self, other)


def lower_special_zeta_other_scalar(self, other):
    return _binary("special_zeta_other_scalar", zeta, self, other)


def lower_ldexp_Tensor(self, other):
    # PyTorch: self * pow(2.0, other); the power is floating (the default dtype for an
    # integral exponent) and then promotes with self.
    power_dtype = to_numpy_dtype(ldexp_power_dtype(other))
    out = to_numpy_dtype(ldexp_Tensor_output_shape(self, other).dtype)
    power = jnp.power(jnp.asarray(2.0, opmath(jnp.zeros((), power_dtype)).dtype), opmath(other.astype(power_dtype)))
    power = power.astype(power_dtype)
    return (opmath(self.astype(out)) * opmath(power.astype(out))).astype(out)
