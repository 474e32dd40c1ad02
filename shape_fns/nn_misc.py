"""Shape functions of _trilinear, _euclidean_dist, embedding_renorm and the fused weight
norm (_weight_norm_interface) with its backward."""

from __future__ import annotations

import torch

from .common import TensorMeta, broadcast_shapes, require_kernel_dtype, scalar_type_name


def _trilinear_output_shape(i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim=1):
    total = i1.ndim + len(expand1)
    for x, expand, name in ((i1, expand1, "i1"), (i2, expand2, "i2"), (i3, expand3, "i3")):
        if x.ndim + len(expand) != total:
            raise RuntimeError(
                f"expand dimensions of {name} do not match: got {x.ndim + len(expand)}, expected {total}"
            )
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
        raise RuntimeError(
            f"embedding_renorm_(): Expected 2-D tensor for argument #1 'self' (got {self.ndim}-D tensor)"
        )
    if indices.dtype not in (torch.int64, torch.int32):
        raise RuntimeError(
            "embedding_renorm_(): Expected tensor for argument #2 'indices' to have one of the following scalar "
            f"types: Long, Int; but got {indices.dtype} instead"
        )
    return TensorMeta(tuple(self.shape), self.dtype)


def _weight_norm_checks(v, dim, kernel, dtyped):
    """PyTorch CPU's checks of the fused weight norm, in its order; `dtyped`: (tensor,
    dtype it must have) pairs, checked after the kernel's dtype dispatch."""
    if v.ndim == 0:
        raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
    if dim not in (0, v.ndim - 1):
        raise RuntimeError("fused kernels can only be applied for first or last dim (dim == 0 || dim == v.dim() - 1)")
    require_kernel_dtype(kernel, v.dtype, "float")
    for t, dtype in dtyped:
        if t.dtype != dtype:
            raise RuntimeError(f"expected scalar type {scalar_type_name(dtype)} but found {scalar_type_name(t.dtype)}")


def _norms_dtype(dtype):
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _check_per_dim(v, dim, **per_dim):
    # PyTorch CPU does not check these sizes: its kernel reads and writes out of bounds.
    for name, t in per_dim.items():
        if t.numel() != v.shape[dim]:
            raise RuntimeError(f"{name} has {t.numel()} elements, but v has {v.shape[dim]} along dim {dim}")


def _weight_norm_interface_output_shape(v, g, dim=0):
    _weight_norm_checks(v, dim, "weight_norm_kernel", [(g, v.dtype)])
    _check_per_dim(v, dim, g=g)
    return TensorMeta(v.shape, v.dtype), TensorMeta(g.shape, _norms_dtype(v.dtype))


def _weight_norm_interface_backward_output_shape(grad_w, saved_v, saved_g, saved_norms, dim):
    _weight_norm_checks(saved_v, dim, "weight_norm_backward_kernel",
                        [(grad_w, saved_v.dtype), (saved_g, saved_v.dtype), (saved_norms, _norms_dtype(saved_v.dtype))])
    if grad_w.shape != saved_v.shape:
        raise RuntimeError(f"grad_w has shape {list(grad_w.shape)}, but saved_v has {list(saved_v.shape)}")
    _check_per_dim(saved_v, dim, saved_g=saved_g, saved_norms=saved_norms)
    return TensorMeta(saved_v.shape, saved_v.dtype), TensorMeta(saved_g.shape, saved_g.dtype)
