"""Shape functions of shape ops: view, reshape-like, permute, expand, cat, transpose,
(un)squeeze, slice, select, clone."""

from __future__ import annotations

import math

from .common import TensorMeta, expand_shape, normalize_dim, promote_dtypes


def _infer_size(size, numel: int) -> tuple[int, ...]:
    """`size` with its one -1 resolved so that it holds `numel` elements (ATen's infer_size)."""
    size = tuple(size)
    infer_at = None
    known = 1
    for i, s in enumerate(size):
        if s == -1:
            if infer_at is not None:
                raise RuntimeError("only one dimension can be inferred")
            infer_at = i
        elif s < 0:
            raise RuntimeError(f"invalid shape dimension {s} at index {i} of shape {list(size)}")
        else:
            known *= s
    if infer_at is None:
        if known == numel:
            return size
    elif known == 0:
        if numel == 0:
            raise RuntimeError(
                f"cannot reshape tensor of 0 elements into shape {list(size)} because the "
                "unspecified dimension size -1 can be any value and is ambiguous"
            )
    elif numel % known == 0:
        return size[:infer_at] + (numel // known,) + size[infer_at + 1 :]
    raise RuntimeError(f"shape '{list(size)}' is invalid for input of size {numel}")


def view_output_shape(self, size):
    return TensorMeta(_infer_size(size, self.numel()), self.dtype)


def _unsafe_view_output_shape(self, size):
    return TensorMeta(_infer_size(size, self.numel()), self.dtype)


def permute_output_shape(self, dims):
    if len(dims) != self.ndim:
        raise RuntimeError(
            "permute(sparse_coo): number of dimensions in the tensor input does not match the "
            "length of the desired ordering of dimensions i.e. input.dim() = "
            f"{self.ndim} is not equal to len(dims) = {len(dims)}"
        )
    dims = [normalize_dim(d, self.ndim) for d in dims]
    if len(set(dims)) != len(dims):
        raise RuntimeError("permute(): duplicate dims are not allowed.")
    return TensorMeta(tuple(self.shape[d] for d in dims), self.dtype)


def expand_output_shape(self, size, *, implicit=False):
    return TensorMeta(expand_shape(self.shape, size), self.dtype)


def cat_output_shape(tensors, dim=0):
    if len(tensors) == 0:
        raise ValueError("torch.cat(): expected a non-empty list of Tensors")
    for i, t in enumerate(tensors):
        if t.ndim == 0:
            raise RuntimeError(f"zero-dimensional tensor (at position {i}) cannot be concatenated")
    dtype = promote_dtypes(*tensors)
    # Legacy empty tensors of shape (0,) are skipped whatever the other shapes.
    kept = [(i, t) for i, t in enumerate(tensors) if t.shape != (0,)]
    if not kept:
        return TensorMeta((0,), dtype)
    first = kept[0][1]
    d = normalize_dim(dim, first.ndim)
    total = 0
    for i, t in kept:
        if t.ndim != first.ndim:
            raise RuntimeError(f"Tensors must have same number of dimensions: got {first.ndim} and {t.ndim}")
        for j, (expected, got) in enumerate(zip(first.shape, t.shape)):
            if j != d and expected != got:
                raise RuntimeError(
                    f"Sizes of tensors must match except in dimension {d}. Expected size "
                    f"{expected} but got size {got} for tensor number {i} in the list."
                )
        total += t.shape[d]
    return TensorMeta(first.shape[:d] + (total,) + first.shape[d + 1 :], dtype)


def t_output_shape(self):
    if self.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {self.ndim}D")
    return TensorMeta(self.shape[::-1], self.dtype)


def transpose_int_output_shape(self, dim0, dim1):
    d0, d1 = normalize_dim(dim0, self.ndim), normalize_dim(dim1, self.ndim)
    shape = list(self.shape)
    if shape:
        shape[d0], shape[d1] = shape[d1], shape[d0]
    return TensorMeta(tuple(shape), self.dtype)


def unsqueeze_output_shape(self, dim):
    d = normalize_dim(dim, self.ndim + 1)
    return TensorMeta(self.shape[:d] + (1,) + self.shape[d:], self.dtype)


def squeeze_dim_output_shape(self, dim):
    d = normalize_dim(dim, self.ndim)
    if self.ndim == 0 or self.shape[d] != 1:
        return TensorMeta(self.shape, self.dtype)
    return TensorMeta(self.shape[:d] + self.shape[d + 1 :], self.dtype)


def slice_Tensor_output_shape(self, dim=0, start=None, end=None, step=1):
    if self.ndim == 0:
        raise IndexError("slice() cannot be applied to a 0-dim tensor.")
    d = normalize_dim(dim, self.ndim)
    if step <= 0:
        raise RuntimeError("slice step must be positive")
    start, end, step = slice(start, end, step).indices(self.shape[d])
    length = math.ceil(max(end - start, 0) / step)
    return TensorMeta(self.shape[:d] + (length,) + self.shape[d + 1 :], self.dtype)


def select_int_output_shape(self, dim, index):
    d = select_dim(self, dim, index)
    return TensorMeta(self.shape[:d] + self.shape[d + 1 :], self.dtype)


def select_dim(self, dim, index):
    """The dimension `select(self, dim, index)` takes out, with PyTorch's checks."""
    if self.ndim == 0:
        raise IndexError("select() cannot be applied to a 0-dim tensor.")
    d = normalize_dim(dim, self.ndim)
    size = self.shape[d]
    if not -size <= index < size:
        raise IndexError(
            f"select(): index {index} out of range for tensor of size {list(self.shape)} at dimension {d}"
        )
    return d


def clone_output_shape(self, *, memory_format=None):
    return TensorMeta(self.shape, self.dtype)

