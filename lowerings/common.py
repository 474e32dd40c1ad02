"""Helpers shared by the lowerings: PyTorch type promotion applied to JAX operands."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from ..shape_fns.common import elementwise_dtypes, to_numpy_dtype


def promote_operands(op: str, *operands: Any) -> tuple[tuple[Any, ...], np.dtype]:
    """Cast the operands of elementwise op `op` to its compute dtype (Note [Type
    promotion]) and return them with the NumPy dtype of its result."""
    compute, result = elementwise_dtypes(op, *operands)
    compute_np = to_numpy_dtype(compute)
    cast = tuple(None if x is None else jnp.asarray(x, compute_np) for x in operands)
    return cast, to_numpy_dtype(result)


def opmath(x: Any) -> Any:
    """Upcast float16/bfloat16 to float32, the type PyTorch CPU kernels compute them in
    (its "opmath" type), so a lowering rounds once at the end as PyTorch does."""
    if x is not None and x.dtype in (jnp.float16, jnp.bfloat16):
        return x.astype(jnp.float32)
    return x
