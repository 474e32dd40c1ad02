"""Lowerings of the BLAS-like products beyond mm/addmm/bmm: matrix-vector, vector
dot products, outer products and batched products with accumulation.

Like lowerings/linalg.py they use HIGHEST precision (float32 stays float32 on every
backend) and compute float16/bfloat16 in float32. Integer products are exact: XLA
integer dots accumulate in the operand type, as PyTorch's CPU kernels do.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from ..shape_fns.common import promote_dtypes, to_numpy_dtype
from .common import opmath

_HIGHEST = lax.Precision.HIGHEST


def _matmul(a, b):
    return jnp.matmul(opmath(a), opmath(b), precision=_HIGHEST)


def _accumulate(self, product, beta, alpha, out_dtype):
    """beta * self + alpha * product, where beta == 0 drops self (NaN in self does not
    leak, as in PyTorch) and Scalars are converted to the compute type first."""
    beta = jnp.asarray(beta).astype(product.dtype)
    alpha = jnp.asarray(alpha).astype(product.dtype)
    self = opmath(self).astype(product.dtype)
    scaled_self = jnp.where(beta == 0, jnp.zeros((), product.dtype), beta * self)
    return (scaled_self + alpha * product).astype(out_dtype)


def lower_mv(self, vec):
    return _matmul(self, vec).astype(self.dtype)


def lower_dot(self, tensor):
    return _matmul(self, tensor).astype(self.dtype)


def lower_vdot(self, other):
    return _matmul(jnp.conj(self), other).astype(self.dtype)


def lower_addmv(self, mat, vec, *, beta=1, alpha=1):
    return _accumulate(self, _matmul(mat, vec), beta, alpha, mat.dtype)


def lower_baddbmm(self, batch1, batch2, *, beta=1, alpha=1):
    return _accumulate(self, _matmul(batch1, batch2), beta, alpha, batch1.dtype)


def lower_addbmm(self, batch1, batch2, *, beta=1, alpha=1):
    product = jnp.sum(_matmul(batch1, batch2), axis=0)
    return _accumulate(self, product, beta, alpha, batch1.dtype)


def lower_addr(self, vec1, vec2, *, beta=1, alpha=1):
    out_dtype = to_numpy_dtype(promote_dtypes(self, vec1, vec2))
    if out_dtype == jnp.bool_:
        # Boolean addr is logical: (beta and self) or (alpha and vec1 (x) vec2).
        outer = jnp.logical_and(vec1[:, None], vec2[None, :])
        beta = jnp.asarray(beta).astype(jnp.bool_)
        alpha = jnp.asarray(alpha).astype(jnp.bool_)
        return jnp.logical_or(jnp.logical_and(beta, self), jnp.logical_and(alpha, outer))
    compute = opmath(jnp.zeros((), out_dtype)).dtype
    outer = vec1.astype(compute)[:, None] * vec2.astype(compute)[None, :]
    return _accumulate(self.astype(compute), outer, beta, alpha, out_dtype)
