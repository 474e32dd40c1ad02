"""Internal nodes of the runtime's storage model (Note [Views and mutation] in
runtime/core/tensor.py): reading and writing a view of a storage, a storage's memory
read as another dtype and written back, the cast of a value written into a tensor of
another dtype, and the value `copy_` writes."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from ..shape_fns.common import NUMPY_TO_TORCH, to_numpy_dtype
from ..shape_fns.storage_size import check_storage_size
from .common import cast


def _slice_plan(numel: int, size, stride, offset):
    """How to read a strided view with slices, reshapes and a transpose instead of a
    gather: possible when the non-broadcast dims, ordered by stride, nest without
    overlap (each stride a multiple of the next, each extent within the next stride),
    which covers transposes, slices with steps, selects and diagonals."""
    dims = [(i, n, s) for i, (n, s) in enumerate(zip(size, stride)) if n != 1 and s != 0]
    dims.sort(key=lambda d: -d[2])
    for (_, _, sa), (_, nb, sb) in zip(dims, dims[1:]):
        if sb <= 0 or sa % sb or nb * sb > sa:
            return None
    if dims and dims[-1][2] <= 0:
        return None
    length = dims[0][1] * dims[0][2] if dims else 1
    block = [dims[0][1]] if dims else [1]
    block += [a[2] // b[2] for a, b in zip(dims, dims[1:])]
    block += [dims[-1][2]] if dims else [1]
    return dims, length, tuple(block), max(0, offset + length - numel)


def lower_strided_read(base, size, stride, offset):
    """The view (size, stride, offset) of `base` read as a flat buffer."""
    check_storage_size(size, NUMPY_TO_TORCH[base.dtype])  # an expanded view may not fit: Note [Overflowing sizes]
    flat = base.reshape(-1)
    if math.prod(size) == 0:
        return jnp.zeros(size, base.dtype)
    plan = _slice_plan(flat.shape[0], size, stride, offset)
    if plan is None:
        index = offset + sum(
            jnp.arange(n, dtype=jnp.int64).reshape([n if j == i else 1 for j in range(len(size))]) * s
            for i, (n, s) in enumerate(zip(size, stride))
        )
        return flat[index]
    dims, length, block, pad = plan
    if pad:
        flat = jnp.pad(flat, (0, pad))
    seg = jax.lax.slice(flat, (offset,), (offset + length,)).reshape(block)
    index = (slice(None),) + tuple(slice(0, d[1]) for d in dims[1:]) + (0,)
    picked = seg[index] if dims else seg.reshape(())
    order = [d[0] for d in dims]
    picked = jnp.transpose(picked, sorted(range(len(order)), key=lambda k: order[k]))
    kept = sorted(order)
    shape = [size[i] if i in kept else 1 for i in range(len(size))]
    return jnp.broadcast_to(picked.reshape(shape), size)


def _dense_order(numel: int, size, stride, offset) -> tuple | None:
    """The dims of a view covering all `numel` elements of its storage exactly once,
    outermost first; None for any other view."""
    if offset != 0 or math.prod(size) != numel:
        return None
    order = tuple(sorted(range(len(size)), key=lambda d: (-stride[d], d)))
    step = 1
    for d in reversed(order):
        if size[d] != 1 and stride[d] != step:
            return None
        step *= size[d]
    return order


def lower_strided_write(base, src, size, stride, offset):
    """`base` with the view (size, stride, offset) replaced by `src` (broadcast to size)."""
    check_storage_size(size, NUMPY_TO_TORCH[base.dtype])
    src = jnp.broadcast_to(src.astype(base.dtype), size)
    order = _dense_order(base.size, size, stride, offset)
    if order is not None:  # the whole storage in another order (Note [Result layouts]): no scatter
        return jnp.transpose(src, order).reshape(base.shape)
    flat = base.reshape(-1)
    index = offset + sum(
        jnp.arange(n, dtype=jnp.int64).reshape([n if j == i else 1 for j in range(len(size))]) * s
        for i, (n, s) in enumerate(zip(size, stride))
    )
    return flat.at[jnp.asarray(index).reshape(-1)].set(src.reshape(-1)).reshape(base.shape)


def lower_cast_to(self, dtype):
    """A value written into a tensor of another dtype, cast as the write casts it."""
    return self.astype(to_numpy_dtype(dtype))


def lower_copy_to(src, shape, dtype):
    """`src` broadcast to a shape and cast to a dtype: the value copy_ writes."""
    return jnp.broadcast_to(cast(src, to_numpy_dtype(dtype)), shape)


def lower_complex_as_pairs(self):
    """view_as_real's values: real and imaginary parts side by side in a last dim of 2."""
    return jnp.stack([jnp.real(self), jnp.imag(self)], axis=-1)


def lower_pairs_as_complex(self):
    """view_as_complex's values: a last dim of 2 read as (real, imaginary). Built by
    lax.complex, not re + 1j * im, whose product turns an infinite imaginary part into
    a NaN real one."""
    return jax.lax.complex(self[..., 0], self[..., 1])


# Note [Memory as another dtype]
# PyTorch's memory is bytes, which a view may read as any dtype (x.view(torch.int32) of
# float32, view_as_real, view_as_complex); a storage here holds an array of one dtype.
# memory_as reads the storage's array as the flat sequence of `dtype` elements its bytes
# make in PyTorch's memory (a complex element is its real part, then its imaginary part;
# a bool is one byte, 0 or 1). memory_write replaces the elements of a view of that
# sequence and gives the storage's array with those bytes. Both move bits as unsigned
# integers, never as floats, whose operations may rewrite a NaN's payload
# (float8_e5m2's, on XLA CPU); bytes past the last whole element (a float32 view of 6
# bytes reads one element) stay as they were.


def _unsigned(itemsize: int):
    return {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint64}[itemsize]


def _unit(dtype):
    """The scalar a dtype's bits are made of: a complex type's real part, else itself."""
    dtype = np.dtype(dtype)
    return np.dtype(jnp.finfo(dtype).dtype) if jnp.issubdtype(dtype, jnp.complexfloating) else dtype


def as_real_layout(size, stride, offset) -> tuple:
    """view_as_real's layout of a complex view: a trailing dim of the two parts, strides
    and offset counted in reals."""
    return tuple(size) + (2,), tuple(2 * s for s in stride) + (1,), 2 * offset


def as_complex_layout(size, stride, offset) -> tuple | None:
    """view_as_complex's layout of a view as reals, or None if its parts are not pairs
    of one element (PyTorch raises for such a view)."""
    if not size or size[-1] != 2 or stride[-1] != 1 or offset % 2 or any(s % 2 for s in stride[:-1]):
        return None
    return tuple(size[:-1]), tuple(s // 2 for s in stride[:-1]), offset // 2


def _to_bits(flat):
    """A flat array as the unsigned integers of its units (complex elements as two)."""
    if jnp.iscomplexobj(flat):
        flat = lower_complex_as_pairs(flat).reshape(-1)
    if flat.dtype == jnp.bool_:
        return flat.astype(jnp.uint8)
    return jax.lax.bitcast_convert_type(flat, _unsigned(flat.dtype.itemsize))


def _from_bits(bits, dtype):
    """Unsigned integers as the flat array of `dtype` they are the units of."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return bits != 0
    unit = _unit(dtype)
    values = jax.lax.bitcast_convert_type(bits, unit)
    return lower_pairs_as_complex(values.reshape(-1, 2)) if unit != dtype else values


def _resized(bits, itemsize: int):
    """Flat unsigned integers as unsigned integers of another width (whole ones only)."""
    if bits.dtype.itemsize > itemsize:
        return jax.lax.bitcast_convert_type(bits, _unsigned(itemsize)).reshape(-1)
    if bits.dtype.itemsize < itemsize:
        k = itemsize // bits.dtype.itemsize
        n = bits.shape[0] // k
        return jax.lax.bitcast_convert_type(bits[: n * k].reshape(n, k), _unsigned(itemsize))
    return bits


def lower_memory_as(base, dtype):
    """`base`'s memory read as flat `dtype` elements (Note [Memory as another dtype])."""
    target = np.dtype(to_numpy_dtype(dtype))
    flat = base.reshape(-1)
    if flat.dtype == target:
        return flat
    bits = _resized(_to_bits(flat), _unit(target).itemsize)
    if target != _unit(target):  # whole complex elements only
        bits = bits[: bits.shape[0] // 2 * 2]
    return _from_bits(bits, target)


def lower_memory_write(base, src, dtype, size, stride, offset):
    """`base` with the view (size, stride, offset) of its memory read as `dtype` replaced
    by `src` (broadcast to size): Note [Memory as another dtype]."""
    target = np.dtype(to_numpy_dtype(dtype))
    unit = _unit(target)
    check_storage_size(size, dtype)
    flat = base.reshape(-1)
    old = _to_bits(flat)
    memory = _resized(old, unit.itemsize)
    written = _to_bits(jnp.broadcast_to(cast(src, target), size).reshape(-1))
    if unit != target:  # a complex view's parts: view_as_real's layout of it
        size, stride, offset = as_real_layout(size, stride, offset)
    written = written.reshape(size)
    memory = lower_strided_write(memory, written, size, stride, offset)
    new = _resized(memory, old.dtype.itemsize)
    new = jnp.concatenate([new, old[new.shape[0]:]])
    return _from_bits(new, flat.dtype).reshape(base.shape)
