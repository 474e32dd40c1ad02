"""Lowerings of PyTorch's FFT primitives: _fft_r2c, _fft_c2r and _fft_c2c.

torch.fft.* decompose into these three with already wrapped dims and an integer
normalization (0: none, 1: 1/sqrt(n), 2: 1/n, n being the product of the signal sizes).
Each multi-dimensional transform is applied one dim at a time (transforms over
different dims commute), which lifts XLA's limit of three FFT dims per op. Transforms
are computed unscaled and scaled once at the end, so each mode costs one multiply.
"""

from __future__ import annotations

import math

import jax.numpy as jnp

_COMPLEX = {jnp.dtype(jnp.float32): jnp.complex64, jnp.dtype(jnp.float64): jnp.complex128}


def _scale(x, normalization, n):
    if normalization == 1:
        return x * jnp.asarray(1 / math.sqrt(n), x.real.dtype)
    if normalization == 2:
        return x * jnp.asarray(1 / n, x.real.dtype)
    return x


def _c2c(x, dims, forward):
    for d in dims:
        # norm="backward" leaves forward transforms unscaled, norm="forward" inverse ones.
        x = jnp.fft.fft(x, axis=d, norm="backward") if forward else jnp.fft.ifft(x, axis=d, norm="forward")
    return x


def lower__fft_r2c(self, dim, normalization, onesided):
    n = math.prod(self.shape[d] for d in dim)
    last = dim[-1]
    if onesided:
        out = jnp.fft.rfft(self, axis=last, norm="backward")
    else:
        out = jnp.fft.fft(self.astype(_COMPLEX[self.dtype]), axis=last, norm="backward")
    return _scale(_c2c(out, dim[:-1], True), normalization, n)


def lower__fft_c2r(self, dim, normalization, last_dim_size):
    n = last_dim_size * math.prod(self.shape[d] for d in dim[:-1])
    out = _c2c(self, dim[:-1], False)
    out = jnp.fft.irfft(out, n=last_dim_size, axis=dim[-1], norm="forward")
    return _scale(out, normalization, n)


def lower__fft_c2c(self, dim, normalization, forward):
    n = math.prod(self.shape[d] for d in dim)
    return _scale(_c2c(self, dim, forward), normalization, n)
