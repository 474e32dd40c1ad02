"""Lowerings of matrix products: mm, addmm, bmm, _grouped_mm, _scaled_mm.

HIGHEST precision keeps float32 products in float32 on every backend (matching
PyTorch CPU); float16/bfloat16 accumulate in float32 as PyTorch's CPU kernels do.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
from jax import lax

from ..shape_fns.common import to_numpy_dtype
from ..shape_fns.linalg import SCALED_MM_FLOAT8, scaled_mm_rowwise
from .common import cast, opmath

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


# Note [Grouped matrix products]
# _grouped_mm multiplies groups of rows (or columns, or a slice of the contraction) by
# one matrix each: mixture-of-experts layers sort their tokens by expert and multiply
# each expert's run of rows by its weight (its backward groups the contraction).
# `offs` holds the groups' ends along the grouped dimension: group g is
# [offs[g-1], offs[g]), with offs[-1] read as 0. The group sizes are data, and XLA's
# shapes are static. Small products compute every group's product over the whole
# grouped dimension and keep each row's own (G times the arithmetic, as JAX's own
# ragged_dot does off TPUs). Larger ones run a loop over each group's range, cut at
# tile boundaries (_TILE rows), multiplying one tile by the group's matrix per step:
# about (rows + G * _TILE) rows of arithmetic. (Eight experts, 512 rows of 256 by
# 1024: 13.0 against 3.7 ms.) As in PyTorch's own loop, groups are taken in order, a
# later group's rows overwrite an earlier one's where decreasing offsets make them
# overlap, and each group of the contraction sums its own range. Rows outside every
# group are zeros (PyTorch leaves them unset). Products are selected, never multiplied
# by a zero mask, so a NaN or inf in one expert's weight stays out of other experts'
# rows.

_TILE = 32


def _group_ranges(offs, length):
    ends = jnp.clip(offs.astype(jnp.int64), 0, length)
    return jnp.concatenate([jnp.zeros((1,), jnp.int64), ends[:-1]]), ends


def _tiled(groups, length, *product_dims):
    """Whether the loop over tiles beats every group's full product (measured on XLA CPU)."""
    tiles = -(-length // _TILE)
    return 2 * (tiles + groups) * _TILE <= groups * length and groups * length * math.prod(product_dims) >= 2**21


def _for_each_piece(offs, length, out, visit):
    """out = visit(out, group, start, end) for the pieces [start, end) that tile
    boundaries cut each group's range into, group by group, in order; a piece lies in
    the tile starting at start // _TILE * _TILE, and may be empty."""
    starts, ends = _group_ranges(offs, length)

    def step(state):
        group, pos, out = state
        start = jnp.maximum(pos, starts[group])
        end = jnp.minimum(ends[group], (start // _TILE + 1) * _TILE)
        done = end >= ends[group]
        return jnp.where(done, group + 1, group), jnp.where(done, 0, end), visit(out, group, start, end)

    first = (jnp.zeros((), jnp.int64), jnp.zeros((), jnp.int64), out)
    return lax.while_loop(lambda state: state[0] < offs.shape[0], step, first)[2]


def _in_piece(start, end):
    """The tile holding piece [start, end), and which of its positions the piece covers."""
    first = start // _TILE * _TILE
    pos = first + jnp.arange(_TILE)
    return first, (pos >= start) & (pos < end)


def _grouped_rows(a, b, offs):
    """Row i of a (m, k) times b[group of i] (g, k, n)."""
    m = a.shape[0]
    if not _tiled(b.shape[0], m, a.shape[1], b.shape[2]):
        starts, ends = _group_ranges(offs, m)
        rows = jnp.arange(m)
        member = (starts[:, None] <= rows) & (rows < ends[:, None])
        group = jnp.max(jnp.where(member, jnp.arange(offs.shape[0])[:, None], -1), axis=0, initial=-1)
        products = jnp.einsum("mk,gkn->mgn", a, b, precision=_HIGHEST)
        out = jnp.take_along_axis(products, jnp.maximum(group, 0)[:, None, None], axis=1)[:, 0]
        return jnp.where(group[:, None] >= 0, out, 0)
    tiles = -(-m // _TILE)
    a = jnp.pad(a, ((0, tiles * _TILE - m), (0, 0)))

    def visit(out, group, start, end):
        first, keep = _in_piece(start, end)
        product = jnp.matmul(lax.dynamic_slice_in_dim(a, first, _TILE), b[group], precision=_HIGHEST)
        kept = jnp.where(keep[:, None], product, lax.dynamic_slice_in_dim(out, first, _TILE))
        return lax.dynamic_update_slice_in_dim(out, kept, first, 0)

    return _for_each_piece(offs, m, jnp.zeros((tiles * _TILE, b.shape[2]), a.dtype), visit)[:m]


def _grouped_contraction(a, b, offs):
    """out[g] = a[:, group g] @ b[group g, :] for a (m, k) and b (k, n)."""
    k, groups = min(a.shape[1], b.shape[0]), offs.shape[0]
    a, b = a[:, :k], b[:k]
    if not _tiled(groups, k, a.shape[0], b.shape[1]):
        starts, ends = _group_ranges(offs, k)
        cols = jnp.arange(k)
        mine = (starts[:, None] <= cols) & (cols < ends[:, None])
        a_parts = jnp.where(mine[:, None, :], a[None], 0)
        b_parts = jnp.where(mine[:, :, None], b[None], 0)
        return jnp.matmul(a_parts, b_parts, precision=_HIGHEST)
    tiles = -(-k // _TILE)
    a = jnp.pad(a, ((0, 0), (0, tiles * _TILE - k)))
    b = jnp.pad(b, ((0, tiles * _TILE - k), (0, 0)))

    def visit(out, group, start, end):
        first, keep = _in_piece(start, end)
        a_part = jnp.where(keep[None, :], lax.dynamic_slice_in_dim(a, first, _TILE, axis=1), 0)
        b_part = jnp.where(keep[:, None], lax.dynamic_slice_in_dim(b, first, _TILE), 0)
        return out.at[group].add(jnp.matmul(a_part, b_part, precision=_HIGHEST))

    return _for_each_piece(offs, k, jnp.zeros((groups, a.shape[0], b.shape[1]), a.dtype), visit)


def lower__grouped_mm(self, mat2, offs=None, bias=None, out_dtype=None):
    if self.ndim == 3 and mat2.ndim == 3:
        return _matmul(self, mat2).astype(self.dtype)
    a, b = opmath(self), opmath(mat2)
    if self.ndim == 2 and mat2.ndim == 3:  # rows of `self` in groups, one matrix of mat2 each
        out = _grouped_rows(a, b, offs)
    elif self.ndim == 3:  # columns of mat2 in groups, one matrix of `self` each
        out = _grouped_rows(b.T, a.transpose(0, 2, 1), offs).T
    else:  # the contraction in groups: one product per group
        out = _grouped_contraction(a, b, offs)
    return out.astype(self.dtype)


def lower__scaled_mm(self, mat2, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None,
                     use_fast_accum=False):
    """As PyTorch CPU: float32 sums of the float8 products, scaled, plus bias; a float8
    result asked for by `out_dtype` is divided by `scale_result` (which is ignored
    otherwise, as there). Operands of one float8 type with one scale each take its oneDNN
    kernel, which scales the sums and converts without saturating (beyond
    float8_e4m3fn's range is NaN); mixed operands or row-wise scales its fallback, which
    scales the operands and casts (float8_e4m3fn saturates at +-448)."""
    f32 = jnp.float32
    a, b = self.astype(f32), mat2.astype(f32)
    rowwise = scaled_mm_rowwise(self, mat2, scale_a, scale_b)
    fallback = rowwise or self.dtype != mat2.dtype
    if rowwise:
        scale_a, scale_b = scale_a.astype(f32), scale_b.astype(f32)
    else:
        scale_a, scale_b = scale_a.astype(f32).reshape(()), scale_b.astype(f32).reshape(())
    if fallback:
        out = jnp.matmul(a * scale_a, b * scale_b, precision=_HIGHEST)
    else:
        out = jnp.matmul(a, b, precision=_HIGHEST) * (scale_a * scale_b)
    if bias is not None:
        out = out + bias.astype(f32).reshape(-1)
    if scale_result is not None and out_dtype in SCALED_MM_FLOAT8:
        out = out / scale_result.astype(f32).reshape(())
    result = self.dtype if out_dtype is None else to_numpy_dtype(out_dtype)
    return cast(out, result) if fallback else out.astype(result)
