"""Lowerings of matrix products: mm, addmm, bmm.

HIGHEST precision keeps float32 products in float32 on every backend (matching
PyTorch CPU); float16/bfloat16 accumulate in float32 as PyTorch's CPU kernels do.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from .common import opmath

_HIGHEST = lax.Precision.HIGHEST


def _matmul(a, b):
    return jnp.matmul(opmath(a), opmath(b), precision=_HIGHEST)


def lower_mm(self, mat2):
    return _matmul(self, mat2).astype(self.dtype)


def lower_addmm(self, mat1, mat2, *, beta=1, alpha=1):
    product = _matmul(mat1, mat2)
    beta = jnp.asarray(beta, product.dtype)
    alpha = jnp.asarray(alpha, product.dtype)
    # With beta == 0 PyTorch ignores self entirely, so NaN/inf in self do not leak in.
    scaled_self = jnp.where(beta == 0, jnp.zeros((), product.dtype), beta * opmath(self))
    return (scaled_self + alpha * product).astype(mat1.dtype)


def lower_bmm(self, mat2):
    return _matmul(self, mat2).astype(self.dtype)
