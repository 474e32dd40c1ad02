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
