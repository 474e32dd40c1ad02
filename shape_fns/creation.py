"""Shape functions of creation ops: full, scalar_tensor."""

from __future__ import annotations

import torch

from .common import TensorMeta, promote_dtypes


def full_output_shape(size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None):
    size = tuple(size)
    for s in size:
        if s < 0:
            raise RuntimeError(f"Trying to create tensor with negative dimension {s}: {list(size)}")
    return TensorMeta(size, dtype if dtype is not None else promote_dtypes(fill_value))


def scalar_tensor_output_shape(s, *, dtype=None, layout=None, device=None, pin_memory=None):
    return TensorMeta((), dtype if dtype is not None else torch.get_default_dtype())
