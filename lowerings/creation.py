"""Lowerings of creation ops: full, scalar_tensor. layout, device and pin_memory are
accepted and ignored (the runtime owns placement)."""

from __future__ import annotations

import torch

from ..shape_fns.common import promote_dtypes, to_numpy_dtype
from .common import filled, scalar_to


def lower_full(size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None):
    # Without dtype PyTorch infers it from the Python type of fill_value (bool -> bool,
    # int -> int64, float -> default dtype): exactly what promote_dtypes reads from a
    # weakly typed scalar.
    out = dtype if dtype is not None else promote_dtypes(fill_value)
    return filled(size, fill_value, to_numpy_dtype(out))


def lower_scalar_tensor(s, *, dtype=None, layout=None, device=None, pin_memory=None):
    out = dtype if dtype is not None else torch.get_default_dtype()
    return scalar_to(s, to_numpy_dtype(out))
