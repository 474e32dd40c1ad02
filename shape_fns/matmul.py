"""Shape functions of the BLAS-like products in lowerings/matmul.py."""

from __future__ import annotations

import torch

from .common import (
    TensorMeta,
    broadcast_shapes,
    expand_shape,
    normalize_dim,
    promote_dtypes,
    scalar_type_name,
    to_torch_dtype,
)


def no_bool(dtype: torch.dtype, kernel: str) -> None:
    if dtype is torch.bool:
        raise NotImplementedError(f'"{kernel}" not implemented for \'Bool\'')


def _scalar_kind(x) -> str:
    """'bool', 'int', 'float' or 'complex': the kind of a Scalar given as a Python
    number or as a (weakly typed) JAX scalar."""
    if isinstance(x, bool):
        return "bool"
    if isinstance(x, int):
        return "int"
    if isinstance(x, float):
        return "float"
    if isinstance(x, complex):
        return "complex"
    dtype = to_torch_dtype(x.dtype)
    if dtype is torch.bool:
        return "bool"
    if dtype.is_complex:
        return "complex"
    return "float" if dtype.is_floating_point else "int"


def mv_output_shape(self, vec):
    if self.ndim != 2 or vec.ndim != 1:
        raise RuntimeError(f"vector + matrix @ vector expected, got 1, {self.ndim}, {vec.ndim}")
    if self.shape[1] != vec.shape[0]:
        raise RuntimeError(
            f"size mismatch, got input ({self.shape[0]}), mat ({self.shape[0]}x{self.shape[1]}), vec ({vec.shape[0]})"
        )
    if self.dtype != vec.dtype:
        raise RuntimeError(
            # (the first is the result's, made with vec's dtype)
            f"addmv input tensors must have the same dtype, but got {scalar_type_name(vec.dtype)}, "
            f"{scalar_type_name(self.dtype)}, and {scalar_type_name(vec.dtype)}"
        )
    no_bool(self.dtype, "addmv_impl_cpu")
    return TensorMeta((self.shape[0],), self.dtype)


def _dot(self, other, what):
    if self.ndim != 1 or other.ndim != 1:
        raise RuntimeError(f"1D tensors expected, but got {self.ndim}D and {other.ndim}D tensors")
    if self.dtype != other.dtype:
        raise RuntimeError(
            f"{what} : expected both vectors to have same dtype, but found {scalar_type_name(self.dtype)} and "
            f"{scalar_type_name(other.dtype)}"
        )
    if self.shape[0] != other.shape[0]:
        raise RuntimeError(
            f"inconsistent tensor size, expected tensor [{self.shape[0]}] and src [{other.shape[0]}] "
            "to have the same number of elements, but got "
            f"{self.shape[0]} and {other.shape[0]} elements respectively"
        )
    no_bool(self.dtype, what)
    return TensorMeta((), self.dtype)


def dot_output_shape(self, tensor):
    return _dot(self, tensor, "dot")


def vdot_output_shape(self, other):
    return _dot(self, other, "vdot")


def addmv_output_shape(self, mat, vec, *, beta=1, alpha=1):
    out = mv_output_shape(mat, vec)
    if not (self.dtype == mat.dtype == vec.dtype):
        raise RuntimeError(
            f"addmv input tensors must have the same dtype, but got {scalar_type_name(self.dtype)}, "
            f"{scalar_type_name(mat.dtype)}, and {scalar_type_name(vec.dtype)}"
        )
    if self.ndim > 1 or broadcast_shapes(self.shape, out.shape) != out.shape:
        raise RuntimeError(
            f"size mismatch, got input ({', '.join(map(str, self.shape))}), "
            f"mat ({mat.shape[0]}x{mat.shape[1]}), vec ({vec.shape[0]})"
        )
    return out


def bmm_dims(batch1, batch2):
    """(b, n, m) of a batched product of (b, n, k) and (b, k, m), checked as PyTorch does."""
    for name, m in (("batch1", batch1), ("batch2", batch2)):
        if m.ndim != 3:
            raise RuntimeError(f"{name} must be a 3D tensor")
    b, n, k = batch1.shape
    if batch2.shape[:2] != (b, k):
        raise RuntimeError(
            "Expected size for first two dimensions of batch2 tensor to be: "
            f"[{b}, {k}] but got: [{batch2.shape[0]}, {batch2.shape[1]}]."
        )
    return b, n, batch2.shape[2]


def _same_dtypes(self, batch1, batch2):
    if not (self.dtype == batch1.dtype == batch2.dtype):
        raise RuntimeError(
            f"Input dtypes must be the same, got: input {_lower(self.dtype)}, "
            f"batch1: {_lower(batch1.dtype)}, batch2: {_lower(batch2.dtype)}"
        )


def _lower(dtype):
    return str(dtype).removeprefix("torch.")


def baddbmm_output_shape(self, batch1, batch2, *, beta=1, alpha=1):
    shape = bmm_dims(batch1, batch2)
    _same_dtypes(self, batch1, batch2)
    no_bool(batch1.dtype, "baddbmm")
    expand_shape(self.shape, shape)
    return TensorMeta(shape, batch1.dtype)


def addbmm_output_shape(self, batch1, batch2, *, beta=1, alpha=1):
    # PyTorch reads batch1.size(1) and batch2.size(2) before checking ranks.
    normalize_dim(1, batch1.ndim)
    normalize_dim(2, batch2.ndim)
    _, n, p = bmm_dims(batch1, batch2)
    _same_dtypes(self, batch1, batch2)
    no_bool(batch1.dtype, "addbmm")
    expand_shape(self.shape, (n, p))
    return TensorMeta((n, p), batch1.dtype)


def addr_output_shape(self, vec1, vec2, *, beta=1, alpha=1):
    if vec1.ndim != 1:
        raise RuntimeError(f"addr: Expected 1-D argument vec1, but got {vec1.ndim}-D")
    if vec2.ndim != 1:
        raise RuntimeError(f"addr: Expected 1-D argument vec2, but got {vec2.ndim}-D")
    dtype = promote_dtypes(self, vec1, vec2)
    shape = (vec1.shape[0], vec2.shape[0])
    expand_shape(self.shape, shape)
    if dtype is torch.bool:
        if _scalar_kind(beta) not in ("bool", "int"):
            raise RuntimeError("Boolean beta only supported for Boolean results.")
        if _scalar_kind(alpha) not in ("bool", "int"):
            raise RuntimeError("Boolean alpha only supported for Boolean results.")
    else:
        if _scalar_kind(beta) == "bool":
            raise RuntimeError("Boolean beta only supported for Boolean results.")
        if _scalar_kind(alpha) == "bool":
            raise RuntimeError("Boolean alpha only supported for Boolean results.")
        if not (dtype.is_floating_point or dtype.is_complex):
            for name, s in (("beta", beta), ("alpha", alpha)):
                if _scalar_kind(s) in ("float", "complex"):
                    raise RuntimeError(
                        f"For integral input tensors, argument {name} must not be a floating point number."
                    )
    return TensorMeta(shape, dtype)
