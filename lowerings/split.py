"""Ops returning several views of one tensor."""

from __future__ import annotations

import jax


def lower_split_Tensor(self, split_size, dim=0):
    dim = dim % max(self.ndim, 1)
    n = self.shape[dim]
    starts = range(0, n, split_size) if split_size else [0]
    return tuple(
        jax.lax.slice_in_dim(self, s, min(s + split_size, n) if split_size else n, axis=dim) for s in starts
    )


def lower_split_with_sizes(self, split_sizes, dim=0):
    dim = dim % max(self.ndim, 1)
    starts = [sum(split_sizes[:i]) for i in range(len(split_sizes))]
    return tuple(jax.lax.slice_in_dim(self, s, s + n, axis=dim) for s, n in zip(starts, split_sizes))


def lower_unsafe_split_Tensor(self, split_size, dim=0):
    return lower_split_Tensor(self, split_size, dim)


def lower_unbind_int(self, dim=0):
    dim = dim % max(self.ndim, 1)
    return tuple(jax.lax.index_in_dim(self, i, axis=dim, keepdims=False) for i in range(self.shape[dim]))
