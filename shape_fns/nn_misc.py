"""Shape functions of _trilinear, _euclidean_dist and embedding_renorm."""

from __future__ import annotations

import torch

from .common import TensorMeta, broadcast_shapes, scalar_type_name


def _trilinear_output_shape(i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim=1):
    total = i1.ndim + len(expand1)
    for x, expand, name in ((i1, expand1, "i1"), (i2, expand2, "i2"), (i3, expand3, "i3")):
        if x.ndim + len(expand) != total:
            raise RuntimeError(f"expand dimensions of {name} do not match: got {x.ndim + len(expand)}, expected {total}")
    if not (i1.dtype == i2.dtype == i3.dtype):
        raise RuntimeError(
            f"expected scalar type {scalar_type_name(i1.dtype)} but found "
            f"{scalar_type_name(i2.dtype if i2.dtype != i1.dtype else i3.dtype)}"
        )
    shapes = []
    for x, expand in ((i1, expand1), (i2, expand2), (i3, expand3)):
        shape = list(x.shape)
        for d in sorted(e % total for e in expand):
            shape.insert(d, 1)
        shapes.append(tuple(shape))
    full = broadcast_shapes(*shapes)
    summed = {d % total for d in sumdim}
    return TensorMeta(tuple(s for i, s in enumerate(full) if i not in summed), i1.dtype)


def _euclidean_dist_output_shape(x1, x2):
    if x1.ndim < 2 or x2.ndim < 2:
        raise RuntimeError("_euclidean_dist expects inputs with at least 2 dimensions")
    if x1.shape[-1] != x2.shape[-1]:
        raise RuntimeError(
            f"X1 and X2 must have the same number of columns. X1: {x1.shape[-1]} X2: {x2.shape[-1]}"
        )
    if x1.dtype != x2.dtype:
        raise RuntimeError(f"expected scalar type {scalar_type_name(x1.dtype)} but found {scalar_type_name(x2.dtype)}")
    batch = broadcast_shapes(tuple(x1.shape[:-2]), tuple(x2.shape[:-2]))
    return TensorMeta(batch + (x1.shape[-2], x2.shape[-2]), x1.dtype)


def embedding_renorm_output_shape(self, indices, max_norm, norm_type):
    if self.ndim != 2:
        raise RuntimeError(f"embedding_renorm_(): Expected 2-D tensor for argument #1 'self' (got {self.ndim}-D tensor)")
    if indices.dtype not in (torch.int64, torch.int32):
        raise RuntimeError(
            "embedding_renorm_(): Expected tensor for argument #2 'indices' to have one of the following scalar "
            f"types: Long, Int; but got {indices.dtype} instead"
        )
    return TensorMeta(tuple(self.shape), self.dtype)
