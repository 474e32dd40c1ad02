"""Complex numbers from parts and back: complex, polar, angle, conjugation, frexp; and the
values of complex functions where XLA's differ from PyTorch CPU's (Note [Complex special
values])."""

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


# Note [Complex special values]
# PyTorch CPU computes complex abs, exp, sqrt and the inverse trigonometric and
# hyperbolic functions with the C library (std::abs, std::exp, ...), which follows
# C99's Annex G for infinities, NaNs and signed zeros; XLA's complex functions do not
# everywhere, and the differences are not only at infinity: sqrt(-4 - 0j) is -2j (the
# signed zero picks the side of the branch cut, and conjugating a negative real number
# gives one), where XLA gives 2j. The functions below are XLA's with those cases put
# right; real inputs take the plain function. Where PyTorch's own kernels give NaN for
# an infinite or overflowing input (its reciprocal, rsqrt and sigmoid divide naively,
# its expm1 multiplies inf by sin(0)), ours may give the limit instead; those are not
# followed.


def _is_real(x) -> bool:
    return not jnp.iscomplexobj(x)


def abs_value(x):
    """|x|; for complex x, hypot's rule: an infinite part makes it inf, even beside a NaN."""
    if _is_real(x):
        return jnp.abs(x)
    infinite = jnp.isinf(jnp.real(x)) | jnp.isinf(jnp.imag(x))
    return jnp.where(infinite, jnp.inf, jnp.abs(x)).astype(jnp.real(x).dtype)


def exp(x):
    """e**x; for complex x, exp(-inf + iy) is a zero (of y's sign) also for y infinite or NaN."""
    if _is_real(x):
        return jnp.exp(x)
    re, im = jnp.real(x), jnp.imag(x)
    vanishes = (re == -jnp.inf) & ~jnp.isfinite(im)
    zero = lax.complex(jnp.zeros_like(re), _signed_zero(re, im))
    return jnp.where(vanishes, zero, jnp.exp(x))


def exp2(x):
    """2**x; for complex x, exp(x * ln 2) with the parts scaled apart (a complex product
    with (ln 2 + 0j) turns inf * 0 into NaN)."""
    if _is_real(x):
        return jnp.exp2(x)
    ln2 = jnp.asarray(math.log(2.0), jnp.real(x).dtype)
    return exp(lax.complex(jnp.real(x) * ln2, jnp.imag(x) * ln2))


def power(x, e):
    """x ** e for complex x by std::pow's formula, exp(e * log(x)), as PyTorch CPU computes
    it: 0 ** 0 is NaN there, and a power whose exponent overflows goes to 0 or inf, not
    NaN. complex64 computes in complex128: XLA's float32 log and exp compound errors that
    the C library's complex64 ones do not."""
    wide = jnp.complex128
    return exp(jnp.asarray(e).astype(wide) * jnp.log(x.astype(wide))).astype(x.dtype)


def sqrt(x):
    """The square root; for complex x, the imaginary part takes the sign of x's (so a -0
    imaginary part selects the lower side of the branch cut), and an infinite imaginary
    part gives inf + that infinity whatever the real part."""
    if _is_real(x):
        return jnp.sqrt(x)
    re, im = jnp.real(x), jnp.imag(x)
    root = jnp.sqrt(x)
    root = lax.complex(jnp.real(root), jnp.copysign(jnp.imag(root), im))
    return jnp.where(jnp.isinf(im), lax.complex(jnp.full_like(re, jnp.inf), im), root)


def _signed_zero(like, sign_of):
    return jnp.copysign(jnp.zeros((), like.dtype), sign_of)


def _conjugate_symmetric(fn, odd, special=None):
    """fn(x) for an fn with fn(conj z) = conj fn(z) (acos, acosh), and also fn(-z) = -fn(z)
    if `odd` (asin, atan, atanh, asinh), whose results keep to one half-plane (odd ones:
    one quadrant) for arguments in the upper one: computed at re + i|im| (|re| + i|im|
    if odd), the signs then taken from x's parts, signed zeros included.
    `special(re, im)` gives C99's values where they differ still: (where, value)."""

    def wrapped(x):
        if _is_real(x):
            return fn(x)
        re, im = jnp.real(x), jnp.imag(x)
        y = fn(lax.complex(jnp.abs(re) if odd else re, jnp.abs(im)))
        out_re = jnp.where(jnp.signbit(re), -jnp.real(y), jnp.real(y)) if odd else jnp.real(y)
        out_im = jnp.where(jnp.signbit(im), -jnp.imag(y), jnp.imag(y))
        out = lax.complex(out_re, out_im)
        if special is None:
            return out
        where, value = special(re, im)
        return jnp.where(where, value, out)

    return wrapped


# atan(NaN + i*inf) is NaN + 0i, and its mirror image atanh(inf + i*NaN) is 0 + i*NaN (the
# zeros of the other part's sign)
atan = _conjugate_symmetric(
    jnp.arctan, True, lambda re, im: (jnp.isnan(re) & jnp.isinf(im), lax.complex(re, _signed_zero(re, im))))
atanh = _conjugate_symmetric(
    jnp.arctanh, True, lambda re, im: (jnp.isinf(re) & jnp.isnan(im), lax.complex(_signed_zero(re, re), im)))
asinh = _conjugate_symmetric(jnp.arcsinh, True)
asin = _conjugate_symmetric(jnp.arcsin, True)
acos = _conjugate_symmetric(jnp.arccos, False)
acosh = _conjugate_symmetric(jnp.arccosh, False)
