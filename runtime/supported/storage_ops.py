"""Ops that address a tensor's storage (as_strided_copy, as_strided_scatter) or change
its own sizes and storage (resize_, set_)."""

from __future__ import annotations

import math

import jax.numpy as jnp

from ...shape_fns.common import cpp_type_name, to_numpy_dtype
from ...shape_fns.storage_size import contiguous_nbytes_overflow, numel_overflows
from ..core.convert import X64
from ..core.tensor import Storage, XlaTensor, contiguous_strides, same_layout
from ..exec.eager import value
from ..exec.layouts import memory_format_strides
from ..exec.registry import handler
from ..exec.mutation import restride_inplace


def impl_as_strided_copy(self, size, stride, storage_offset=None):
    """`self.as_strided(...)` copied: it addresses self's storage, in the layout self has
    there (a transposed tensor's memory is its transpose), as PyTorch's does."""
    import torch

    view = handler(torch.ops.aten.as_strided.default)(self, size, stride, storage_offset)
    return handler(torch.ops.aten.clone.default)(view, memory_format=torch.contiguous_format)


def impl_as_strided_scatter(self, src, size, stride, storage_offset=None):
    """A copy of `self` in self's layout (preserve_format, storage offset 0) with `src`
    written through the as_strided view of the copy's memory, as PyTorch's does."""
    import torch

    aten = torch.ops.aten
    out = handler(aten.clone.default)(self)
    target = handler(aten.as_strided.default)(out, size, stride, storage_offset)
    if tuple(target.shape) != tuple(src.shape):
        raise RuntimeError(f"expected src to have a size equal to the slice of self. src size = {list(src.shape)}, "
                           f"slice size = {list(target.shape)}")
    handler(aten.copy_.default)(target, src)
    return out


def impl_resize_(self, size, *, memory_format=None):
    import torch

    size = tuple(size)
    if any(s < 0 for s in size):
        raise RuntimeError(f"Trying to create tensor with negative dimension {min(size)}: {list(size)}")
    # PyTorch's order: the new sizes' element count, then the storage they need
    # (Note [Overflowing sizes]; an XLA array of that size would abort the process).
    if numel_overflows(size):
        raise RuntimeError("numel: integer multiplication overflow")
    if contiguous_nbytes_overflow(size, self.dtype.itemsize, self.storage_offset()):
        raise RuntimeError(f"Storage size calculation overflowed with sizes={list(size)}")
    if memory_format is None and tuple(self.shape) == size:
        return self  # as PyTorch: same sizes, no format asked for, strides kept
    if memory_format in (torch.channels_last, torch.channels_last_3d):
        strides = memory_format_strides(size, memory_format)  # PyTorch's error for another rank
    elif memory_format in (None, torch.contiguous_format, torch.preserve_format):
        strides = contiguous_strides(size)
    else:
        raise RuntimeError(f"resize_ with memory_format {memory_format} is not supported for a {len(size)}-d size")
    if self._reinterprets:
        raise RuntimeError(
            "resize_ of a view of a tensor as another dtype (view_as_real, .real, .imag, view_as_complex, "
            "x.view(dtype)) is not supported: resize the tensor it views, or clone() the view first"
        )
    store = self._store
    offset = self.storage_offset()
    needed = offset + math.prod(size)
    capacity = math.prod(store.shape())
    if needed > capacity:
        # PyTorch grows the storage in place; here `self` gets a grown copy of it, so
        # other tensors still on the old storage no longer alias `self`.
        whole = XlaTensor(store, store.shape(), self.dtype)
        with X64:
            flat = jnp.ravel(value(whole))
            store = Storage(jnp.concatenate([flat, jnp.zeros(needed - capacity, flat.dtype)]))
    restride_inplace(self, XlaTensor(store, size, self.dtype, strides, offset))
    return self


def impl_resize_as_(self, the_template, *, memory_format=None):
    import torch
    from torch._prims_common import suggest_memory_format

    size = tuple(the_template.shape)
    if memory_format is None:
        return impl_resize_(self, size)
    if memory_format is torch.preserve_format:
        memory_format = suggest_memory_format(the_template)
    return impl_resize_(self, size, memory_format=memory_format)


def _check_set_source(self, source):
    if not isinstance(source, XlaTensor):
        raise RuntimeError(f"Expected a tensor on the {self.device} device to set {self.device} tensor to, got one on "
                           f"{source.device}: move it first (source.to(\"{self.device}\"))")
    if source.dtype != self.dtype:
        raise RuntimeError(f"Could not set tensor of type {cpp_type_name(source.dtype)} to a tensor of type "
                           f"{cpp_type_name(self.dtype)}")
    if source._reinterprets:
        raise RuntimeError("set_ to a view of a tensor as another dtype (view_as_real, .real, .imag, view_as_complex, "
                           "x.view(dtype)) is not supported: clone() the view first")


def impl_set__source_Tensor(self, source):
    """`self` becomes another view of `source`'s storage, with its sizes, strides and offset."""
    _check_set_source(self, source)
    return restride_inplace(self, same_layout(source))


def impl_set_(self):
    """`self` becomes empty, on a storage of its own."""
    with X64:
        store = Storage(jnp.zeros((0,), to_numpy_dtype(self.dtype)))
    return restride_inplace(self, XlaTensor(store, (0,), self.dtype))
