"""Strided reads and writes of a storage, and the metadata of view ops.
See Note [Views and mutation] in tensor.py."""

from __future__ import annotations

import math

import jax
import torch

from ...lowerings.storage import lower_memory_as, lower_memory_write, lower_strided_read, lower_strided_write
from ..platform.executable_cache import eager_jit
from .tensor import contiguous_strides


# The eager reads and writes of views (the lowerings of the internal nodes strided_read
# and strided_write, which traced graphs record).
strided_read_jit = eager_jit(lower_strided_read, static_argnums=(1, 2, 3))
strided_write_jit = eager_jit(lower_strided_write, static_argnums=(2, 3, 4))


# A view of its storage's memory as another dtype (a `_reinterprets` tensor, Note [Views
# and mutation] in tensor.py) reads the storage's array as PyTorch's memory holds it,
# its elements as the view's dtype (memory_as), and writes it by memory_write (Note
# [Memory as another dtype] in lowerings/storage.py). Traced graphs record the same
# internal nodes.


def reinterpreted_read(base: jax.Array, dtype, size, stride, offset) -> jax.Array:
    return lower_strided_read(lower_memory_as(base, dtype), size, stride, offset)


reinterpreted_read_jit = eager_jit(reinterpreted_read, static_argnums=(1, 2, 3, 4))
reinterpreted_write_jit = eager_jit(lower_memory_write, static_argnums=(2, 3, 4, 5))


def memory_numel(store_numel: int, store_dtype: torch.dtype, dtype: torch.dtype) -> int:
    """Whole elements of `dtype` in a storage of `store_numel` elements of `store_dtype`."""
    return store_numel * store_dtype.itemsize // dtype.itemsize


def _fast_view_meta(name: str, size, stride, offset, args) -> tuple | None:
    """Sizes and strides of the most frequent views, computed as PyTorch's view kernels do;
    None when the general path below must decide (including every error case)."""
    ndim = len(size)
    if name in ("alias", "detach"):
        return size, stride, offset
    if name == "t" and ndim == 2:
        return size[::-1], stride[::-1], offset
    if name == "transpose_int":
        d0, d1 = args[1], args[2]
        if -ndim <= d0 < ndim and -ndim <= d1 < ndim:
            d0, d1 = d0 % ndim, d1 % ndim
            sz, st = list(size), list(stride)
            sz[d0], sz[d1] = sz[d1], sz[d0]
            st[d0], st[d1] = st[d1], st[d0]
            return tuple(sz), tuple(st), offset
    if name == "view" and stride == contiguous_strides(size):
        new = list(args[1])
        numel = math.prod(size)
        if new.count(-1) == 1:
            rest = math.prod(n for n in new if n != -1)
            if rest and numel % rest == 0:
                new[new.index(-1)] = numel // rest
        if -1 not in new and math.prod(new) == numel:
            return tuple(new), contiguous_strides(tuple(new)), offset
    if name == "unsqueeze":
        d = args[1]
        if -ndim - 1 <= d <= ndim:
            d = d % (ndim + 1)
            new_stride = stride[d] * size[d] if d < ndim else 1
            return size[:d] + (1,) + size[d:], stride[:d] + (new_stride,) + stride[d:], offset
    if name == "expand":
        new = tuple(args[1])
        lead = len(new) - ndim
        if lead >= 0 and all(n >= -1 for n in new):
            out_size, out_stride = [], []
            for i, n in enumerate(new):
                j = i - lead
                if j < 0:
                    if n == -1:
                        return None
                    out_size.append(n)
                    out_stride.append(0)
                elif n == -1 or n == size[j]:
                    out_size.append(size[j])
                    out_stride.append(stride[j])
                elif size[j] == 1:
                    out_size.append(n)
                    out_stride.append(0)
                else:
                    return None
            return tuple(out_size), tuple(out_stride), offset
    if name == "select_int":
        d, index = args[1], args[2]
        if -ndim <= d < ndim and -size[d % ndim] <= index < size[d % ndim]:
            d %= ndim
            index %= size[d]
            return size[:d] + size[d + 1:], stride[:d] + stride[d + 1:], offset + index * stride[d]
    if name == "slice_Tensor":
        d, start, end, step = args[1], args[2], args[3], args[4]
        if -ndim <= d < ndim and step > 0:
            d %= ndim
            return _slice(size, stride, offset, d, 0 if start is None else start, size[d] if end is None else end, step)
    if name == "split_Tensor":
        split_size, d = args[1], args[2]
        if split_size > 0 and -ndim <= d < ndim and size[d % ndim] > 0:
            d %= ndim
            return [
                _slice(size, stride, offset, d, start, start + split_size, 1) for start in range(0, size[d], split_size)
            ]
    if name == "squeeze_dim" and ndim and -ndim <= args[1] < ndim:
        d = args[1] % ndim
        if size[d] != 1:
            return size, stride, offset
        return size[:d] + size[d + 1:], stride[:d] + stride[d + 1:], offset
    if name == "permute":
        dims = [d % ndim if ndim else d for d in args[1]]
        if sorted(dims) == list(range(ndim)):
            return tuple(size[d] for d in dims), tuple(stride[d] for d in dims), offset
    return None


def _slice(size, stride, offset, d: int, start: int, end: int, step: int) -> tuple:
    """aten.slice's layout: bounds wrap once and clamp to the dim, as PyTorch's kernel."""
    n = size[d]
    start = start + n if start < 0 else start
    end = end + n if end < 0 else end
    start = min(max(start, 0), n)
    end = min(max(end, start), n)
    return (size[:d] + ((end - start + step - 1) // step,) + size[d + 1:],
            stride[:d] + (stride[d] * step,) + stride[d + 1:], offset + start * stride[d])


def view_meta(name: str, op: str, tensor, size, stride, offset, storage_numel: int, args) -> tuple:
    """(size, stride, storage_offset) of a view op's result, or a list of them for ops
    returning several views. Uncommon views run PyTorch's own view kernel on a meta
    tensor of the same layout, which also raises PyTorch's errors."""
    fast = _fast_view_meta(name, size, stride, offset, args)
    if fast is not None:
        return fast
    meta = torch.empty(storage_numel, dtype=tensor.dtype, device="meta").as_strided(size, stride, offset)
    op_name, _, overload = op.partition(".")
    aten_op = getattr(getattr(torch.ops.aten, op_name), overload or "default")
    schema_args = aten_op._schema.arguments
    positional = [a for spec, a in zip(schema_args[1:], args[1:]) if not spec.kwarg_only]
    keywords = {spec.name: a for spec, a in zip(schema_args[1:], args[1:]) if spec.kwarg_only}
    out = aten_op(meta, *positional, **keywords)
    if isinstance(out, (list, tuple)):
        return [(tuple(o.shape), tuple(o.stride()), o.storage_offset()) for o in out]
    return tuple(out.shape), tuple(out.stride()), out.storage_offset()


def is_whole(size, stride, offset, storage_shape) -> bool:
    return offset == 0 and tuple(size) == tuple(storage_shape) and tuple(stride) == contiguous_strides(tuple(size))


def overlapping(size, stride) -> bool:
    """True when two elements of the view share memory (an expanded dim)."""
    return any(s == 0 and n > 1 for n, s in zip(size, stride))


def non_overlapping_and_dense(size, stride) -> bool:
    """Whether the view's elements fill a block of memory exactly, in some order of its
    dims (c10's is_non_overlapping_and_dense: contiguous or permuted)."""
    if len(size) == 1:
        return size[0] < 2 or stride[0] == 1
    expected = 1
    for s, n in sorted((s, n) for n, s in zip(size, stride) if n >= 2):  # smallest stride first
        if s != expected:
            return False
        expected *= n
    return True
