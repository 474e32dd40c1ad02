"""Shape functions of the ops in lowerings/rearrange.py."""

from __future__ import annotations


from .common import TensorMeta, expand_shape, normalize_dim, promote_dtypes


def _dims(dims, ndim, op):
    out = [normalize_dim(d, ndim) for d in dims]
    if len(set(out)) != len(out):
        raise RuntimeError(
            f"dims has duplicates, original flip dims size={len(dims)}, but unique flip dims size={len(set(out))}"
        )
    return out


def flip_output_shape(self, dims):
    _dims(dims, self.ndim, "flip")
    return TensorMeta(self.shape, self.dtype)


def repeat_output_shape(self, repeats):
    if len(repeats) < self.ndim:
        raise RuntimeError(
            "Number of dimensions of repeat dims can not be smaller than number of dimensions of tensor"
        )
    if any(r < 0 for r in repeats):
        raise RuntimeError(f"Trying to create tensor with negative dimension {min(repeats)}: {list(repeats)}")
    lead = len(repeats) - self.ndim
    shape = (1,) * lead + self.shape
    return TensorMeta(tuple(s * r for s, r in zip(shape, repeats)), self.dtype)


def roll_output_shape(self, shifts, dims=()):
    if len(shifts) == 0:
        raise RuntimeError("`shifts` required")
    if len(dims) == 0 and len(shifts) != 1:
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims:{len(dims)}")
    if len(dims) and len(dims) != len(shifts):
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims:{len(dims)}")
    if self.ndim == 0 and len(dims):
        raise IndexError(f"Dimension specified as {dims[0]} but tensor has no dimensions")
    for d in dims:
        normalize_dim(d, self.ndim)
    return TensorMeta(self.shape, self.dtype)


def _triangle(op, self):
    if self.ndim < 2:
        raise RuntimeError(f"{op}: input tensor must have at least 2 dimensions")
    return TensorMeta(self.shape, self.dtype)


def tril_output_shape(self, diagonal=0):
    return _triangle("tril", self)


def triu_output_shape(self, diagonal=0):
    return _triangle("triu", self)


def narrow_copy_output_shape(self, dim, start, length):
    if self.ndim == 0:
        raise RuntimeError("narrow() cannot be applied to a 0-dim tensor.")
    if dim >= self.ndim:
        raise RuntimeError("Expected dim < static_cast<int64_t>(self_sizes.size()) to be true, but got false.")
    d = normalize_dim(dim, self.ndim)
    size = self.shape[d]
    if not -size <= start <= size:
        raise IndexError(
            f"start out of range (expected to be in range of [{-size}, {size}], but got {start})"
        )
    if start < 0:
        start += size
    if length < 0 or start > size - length:
        raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size ({size}).")
    return TensorMeta(self.shape[:d] + (length,) + self.shape[d + 1 :], self.dtype)


def diag_embed_output_shape(self, offset=0, dim1=-2, dim2=-1):
    ndim = self.ndim + 1
    d1, d2 = normalize_dim(dim1, ndim), normalize_dim(dim2, ndim)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    n = self.shape[-1] if self.ndim else 1
    m = n + abs(offset)
    rest = list(self.shape[:-1])
    shape = []
    for i in range(ndim):
        shape.append(m if i in (d1, d2) else rest.pop(0))
    return TensorMeta(tuple(shape), self.dtype)


def expand_copy_output_shape(self, size, *, implicit=False):
    return TensorMeta(expand_shape(self.shape, size), self.dtype)


def stack_output_shape(tensors, dim=0):
    if len(tensors) == 0:
        raise RuntimeError("stack expects a non-empty TensorList")
    first = tensors[0]
    for i, t in enumerate(tensors):
        if t.shape != first.shape:
            raise RuntimeError(
                f"stack expects each tensor to be equal size, but got {list(first.shape)} at entry 0 "
                f"and {list(t.shape)} at entry {i}"
            )
    d = normalize_dim(dim, first.ndim + 1)
    return TensorMeta(first.shape[:d] + (len(tensors),) + first.shape[d:], promote_dtypes(*tensors))


def squeeze_output_shape(self):
    return TensorMeta(tuple(s for s in self.shape if s != 1), self.dtype)


def squeeze_kept_dims(shape, dim):
    """The dims squeeze.dims keeps: all but the listed dims of size 1."""
    ndim = len(shape)
    drop = set()
    for d in dim:
        d = normalize_dim(d, ndim)
        if ndim and shape[d] == 1:
            drop.add(d)
    return tuple(i for i in range(ndim) if i not in drop)


def squeeze_dims_output_shape(self, dim):
    return TensorMeta(tuple(self.shape[i] for i in squeeze_kept_dims(self.shape, dim)), self.dtype)


def as_strided_output_shape(self, size, stride, storage_offset=None):
    if len(size) != len(stride):
        raise RuntimeError("mismatch in length of strides and shape")
    for s in size:
        if s < 0:
            raise RuntimeError(f"Trying to create tensor with negative dimension {s}: {list(size)}")
    for s in stride:
        if s < 0:
            raise RuntimeError(
                f"as_strided: Negative strides are not supported at the moment, got strides: {list(stride)}"
            )
    if storage_offset is not None and storage_offset < 0:
        raise RuntimeError(f"Tensor: invalid storage offset {storage_offset}")
    return TensorMeta(tuple(size), self.dtype)


def diagonal_output_shape(self, offset=0, dim1=0, dim2=1):
    d1, d2 = normalize_dim(dim1, self.ndim), normalize_dim(dim2, self.ndim)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    a, b = self.shape[d1], self.shape[d2]
    n = max(min(a, b - offset), 0) if offset >= 0 else max(min(a + offset, b), 0)
    rest = tuple(s for i, s in enumerate(self.shape) if i not in (d1, d2))
    return TensorMeta(rest + (n,), self.dtype)


def unfold_count(n, size, step):
    return (n - size) // step + 1


def unfold_output_shape(self, dimension, size, step):
    d = normalize_dim(dimension, self.ndim)
    n = self.shape[d] if self.ndim else 1
    if size > n:
        raise RuntimeError(f"maximum size for tensor at dimension {d} is {n} but size is {size}")
    if step <= 0:
        raise RuntimeError(f"step is {step} but must be > 0")
    if size < 0:
        raise RuntimeError(f"size is {size} but must be >= 0")
    if self.ndim == 0:
        return TensorMeta((size,), self.dtype)
    count = unfold_count(n, size, step)
    return TensorMeta(self.shape[:d] + (count,) + self.shape[d + 1 :] + (size,), self.dtype)


def select_backward_output_shape(grad_output, input_sizes, dim, index):
    return TensorMeta(tuple(input_sizes), grad_output.dtype)


def slice_backward_output_shape(grad_output, input_sizes, dim, start, end, step):
    return TensorMeta(tuple(input_sizes), grad_output.dtype)


def diagonal_backward_output_shape(grad_output, input_sizes, offset, dim1, dim2):
    return TensorMeta(tuple(input_sizes), grad_output.dtype)


def unfold_backward_output_shape(grad_in, input_sizes, dim, size, step):
    return TensorMeta(tuple(input_sizes), grad_in.dtype)
