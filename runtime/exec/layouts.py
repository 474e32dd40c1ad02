"""Note [Result layouts]
PyTorch gives a new tensor the memory layout of its inputs, and code depends on it:
`x.permute(0, 2, 1).relu().permute(0, 2, 1).view(-1)` works on PyTorch because relu's
result is laid out as its permuted input, so the second permute makes it contiguous
again. Our lowerings compute results as arrays in logical order; the ops below then
lay their result out as PyTorch's CPU kernels do:

- Pointwise ops (tagged `pointwise`, functional forms) follow TensorIterator: inputs
  of one shape that are all contiguous, all channels-last or all of one dense layout
  give that layout; otherwise the dims are ordered by the inputs' strides, the first
  input deciding where it can (`pointwise_strides`).
- `clone`, `_to_copy` (`.to()`, `.cpu()`), the `*_like` factories and `native_dropout`
  take `memory_format`: `preserve_format` (the default) keeps a dense input's strides
  and orders any other input's dims by its strides; `contiguous_format`,
  `channels_last` and `channels_last_3d` are what they name.
- Convolutions, batch and group norms, pooling, upsampling, `constant_pad_nd` and their
  backward ops give channels-last results for channels-last inputs (PyTorch's CPU
  kernels allocate in the input's `suggest_memory_format`); `cat` does where all its
  inputs are channels-last.
- `empty.memory_format`, `empty_permuted`, `empty_strided` and `new_empty_strided`
  have the layout asked for.

A result whose layout is not row-major is held in a storage whose array is the result
in the layout's order (one transpose, an op like any other: recorded in traces, fused
by XLA), and is a view of it with PyTorch's strides. `empty_strided` with strides that
leave gaps or overlap gets a flat storage of the size PyTorch allocates. Other ops
(reductions, matrix products, softmax, layer norm) give row-major results, as
PyTorch's do for the layouts tested in tests/test_result_layouts.py."""

from __future__ import annotations

from typing import Any, Callable

import torch

from ..core.tensor import XlaTensor, contiguous_strides, reinterpreting_view_on, tensor_on
from ..core.views import is_whole, non_overlapping_and_dense
from .eager import run_node
from .registry import node

_CHANNELS_LAST_RANK = {torch.channels_last: 4, torch.channels_last_3d: 5}


# ---------------------------------------------------------------- rules


def memory_format_strides(size: tuple, memory_format: Any) -> tuple:
    """The strides of a new tensor of `size` in `memory_format` (not preserve_format)."""
    rank = _CHANNELS_LAST_RANK.get(memory_format)
    if rank is None:
        if memory_format not in (None, torch.contiguous_format):
            raise RuntimeError(f"unsupported memory format {memory_format}")
        return contiguous_strides(size)
    if len(size) != rank:
        dims = "rank 4 tensor to use channels_last" if rank == 4 else "rank 5 tensor to use channels_last_3d"
        raise RuntimeError(f"required {dims} format")
    # channels last: (N, spatial..., C) in memory
    return _strides_in_order(size, (0,) + tuple(range(2, rank)) + (1,))


def _strides_in_order(size: tuple, order: tuple) -> tuple:
    """Dense strides with the dims laid out in `order`, outermost first."""
    strides = [0] * len(size)
    step = 1
    for d in reversed(order):
        strides[d] = step
        step *= max(size[d], 1)
    return tuple(strides)


def memory_order(strides: tuple) -> tuple:
    """The dims of a dense layout in memory, outermost first (ties in index order)."""
    return tuple(sorted(range(len(strides)), key=lambda d: (-strides[d], d)))


def _is_channels_last(size: tuple, stride: tuple) -> bool:
    """c10's is_channels_last_contiguous (4-d) and is_channels_last_3d_contiguous (5-d)."""
    if len(size) not in (4, 5):
        return False
    order = (1,) + tuple(range(len(size) - 1, 1, -1)) + (0,)  # innermost first
    expected = 1
    for d in order:
        if size[d] != 1:
            if stride[d] != expected:
                return False
            expected *= size[d]
    return True


def _is_contiguous(size: tuple, stride: tuple) -> bool:
    expected = 1
    for n, s in zip(reversed(size), reversed(stride)):
        if n != 1:
            if s != expected:
                return False
            expected *= n
    return True


def pointwise_strides(shape: tuple, operands: list[tuple[tuple, tuple]]) -> tuple | None:
    """The strides of a TensorIterator output of `shape` whose inputs have these (size,
    stride); None where they are row-major (at::TensorIteratorBase's fast setup, then
    reorder_dimensions)."""
    ndim = len(shape)
    if ndim < 2 or not operands or 0 in shape:  # (an empty result's strides are left row-major)
        return None
    if all(size == shape for size, _ in operands):
        if all(_is_contiguous(size, stride) for size, stride in operands):
            return None
        if all(_is_channels_last(size, stride) for size, stride in operands):
            return memory_format_strides(shape, torch.channels_last if ndim == 4 else torch.channels_last_3d)
        first = operands[0][1]
        if all(stride == first for _, stride in operands) and non_overlapping_and_dense(shape, first):
            return tuple(first)
    # every operand's strides over the output's dims, 0 where it broadcasts
    aligned = []
    for size, stride in operands:
        lead = ndim - len(size)
        aligned.append([0] * lead + [0 if n == 1 and shape[lead + i] != 1 else s
                                     for i, (n, s) in enumerate(zip(size, stride))])
    order = _dims_by_strides(shape, aligned)
    if order == list(range(ndim - 1, -1, -1)):
        return None
    return _strides_in_order(shape, tuple(reversed(order)))


def _dims_by_strides(shape: tuple, aligned: list[list[int]]) -> list[int]:
    """The dims innermost first: PyTorch's insertion sort, in which the first operand
    whose strides for two dims differ (neither broadcast) orders them, and equal strides
    put the smaller dim inner."""

    def should_swap(d0: int, d1: int) -> int:
        for stride in aligned:
            s0, s1 = stride[d0], stride[d1]
            if s0 == 0 or s1 == 0:
                continue
            if s0 != s1:
                return -1 if s0 < s1 else 1
            if shape[d0] > shape[d1]:
                return 1
        return 0

    perm = list(range(len(shape) - 1, -1, -1))
    for i in range(1, len(shape)):
        d1 = i
        for d0 in range(i - 1, -1, -1):
            c = should_swap(perm[d0], perm[d1])
            if c > 0:
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif c < 0:
                break
    return perm


def suggested_memory_format(size: tuple, stride: tuple) -> Any:
    """c10's suggest_memory_format: channels_last (or channels_last_3d) for a 4-d (5-d)
    tensor whose strides order its dims as that format does, else contiguous_format."""
    rank = len(size)
    if rank not in (4, 5) or stride[1] == 0:
        return torch.contiguous_format
    smallest = 0
    for d in (1, 3, 2, 0) if rank == 4 else (1, 4, 3, 2, 0):
        if size[d] == 0 or stride[d] < smallest or (d == 0 and smallest == stride[1]):
            return torch.contiguous_format
        smallest = stride[d] * (size[d] if size[d] > 1 else 1)
    return torch.channels_last if rank == 4 else torch.channels_last_3d


def preserved_strides(size: tuple, stride: tuple) -> tuple | None:
    """preserve_format's strides for a copy of a tensor (size, stride): its own if it is
    dense, else its dims ordered by its strides (at::infer_dense_strides); None for
    row-major."""
    if _is_contiguous(size, stride):
        return None
    if non_overlapping_and_dense(size, stride):
        return tuple(stride)
    return pointwise_strides(size, [(size, stride)]) if len(size) >= 2 else None


def requested_strides(size: tuple, stride: tuple, memory_format: Any) -> tuple | None:
    """The strides of a copy or `*_like` of a tensor (size, stride) in `memory_format`."""
    if memory_format is None or memory_format is torch.preserve_format:
        return preserved_strides(size, stride)
    strides = memory_format_strides(size, memory_format)
    return None if strides == contiguous_strides(size) else strides


# ---------------------------------------------------------------- results


def with_strides(t: Any, strides: tuple) -> Any:
    """A tensor holding t's values laid out with dense `strides` (Note [Result layouts])."""
    size = tuple(t.shape)
    if not isinstance(t, XlaTensor):  # a copy to the host
        with torch._C._DisableTorchDispatch():
            out = torch.empty_strided(size, strides, dtype=t.dtype).copy_(t)
        if not out.is_inference():  # a new tensor, unwritten as PyTorch's copy is
            torch._C._autograd._unsafe_set_version_counter((out,), (0,))
        return out
    if t.numel() < 2 or strides == tuple(t.stride()):
        return t
    order = memory_order(strides)
    physical = run_node(node("permute_copy"), (t, order))
    return tensor_on(physical._store, size, t.dtype, (strides, 0))


def _tensor_operands(args: tuple, kwargs: dict) -> list[tuple[tuple, tuple]]:
    found = []
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            found.append((tuple(a.shape), tuple(a.stride())))
    return found


def _pointwise(handler: Callable[..., Any], swapped: bool = False) -> Callable[..., Any]:
    """`swapped`: the op is its second operand's op on the first (rsub is `other - self`),
    so the second decides the layout first."""

    def operands_of(args: tuple, kwargs: dict) -> list[tuple[tuple, tuple]]:
        found = _tensor_operands(args, kwargs)
        return found[::-1] if swapped else found

    def run(*args, **kwargs):
        for a in args:
            if a.__class__ is XlaTensor and not a._whole:
                break
        else:  # whole storages are row-major, and so is their result
            if not kwargs:
                return handler(*args)
        if kwargs:
            out = handler(*args, **kwargs)
            if out.__class__ is not XlaTensor or out.dim() < 2:
                return out
            strides = pointwise_strides(tuple(out.shape), operands_of(args, kwargs))
            return out if strides is None else with_strides(out, strides)
        operands = operands_of(args, kwargs)
        shape = _broadcast_shape([size for size, _ in operands])
        strides = None if shape is None else pointwise_strides(shape, operands)
        if strides is None:
            return handler(*args)
        order = memory_order(strides)
        out = handler(*[_in_order(a, order) for a in args])
        if not (out.__class__ is XlaTensor and out._whole and tuple(out.shape) == tuple(shape[d] for d in order)):
            raise AssertionError(f"{handler.__name__}'s result is not its operands' broadcast shape")
        return tensor_on(out._store, shape, out.dtype, (strides, 0))

    run.__wrapped__ = handler
    return run


def _pointwise_in_place(handler: Callable[..., Any]) -> Callable[..., Any]:
    """An in-place pointwise op on a tensor laid out over the whole of its storage in
    another order (a channels-last activation) computes in memory order on the storage
    itself, as the op on a row-major tensor does, instead of writing a logical-order
    result back through the view."""

    def run(self, *args, **kwargs):
        if self.__class__ is not XlaTensor or self._whole or kwargs or self._reinterprets or self.dim() < 2:
            return handler(self, *args, **kwargs)
        order = memory_order(tuple(self.stride()))
        physical = _in_order(self, order)
        if not physical._whole or any(a.__class__ is XlaTensor and a.dim() > self.dim() for a in args):
            return handler(self, *args)
        handler(physical, *[_in_order(a, order) for a in args])
        return self

    run.__wrapped__ = handler
    return run


def _broadcast_shape(sizes: list[tuple]) -> tuple | None:
    """The shape the sizes broadcast to; None if they do not (the op raises PyTorch's error)."""
    ndim = max(len(size) for size in sizes)
    shape = [1] * ndim
    for size in sizes:
        for i, n in enumerate(size, ndim - len(size)):
            if n != shape[i]:
                if shape[i] != 1 and n != 1:
                    return None
                if shape[i] == 1:
                    shape[i] = n
    return tuple(shape)


def _in_order(a: Any, order: tuple) -> Any:
    """Operand `a` as a view with the result's dims in memory order (`order`, outermost
    first), a lower rank padded with broadcast dims: the op computes its result in the
    order PyTorch lays it out, reading the view inside its executable, and no transpose
    of the result is needed (Note [Result layouts]). A zero-dim operand stays one, since
    type promotion treats it apart."""
    if a.__class__ is not XlaTensor or a.dim() == 0:
        return a
    lead = len(order) - a.dim()
    size = (1,) * lead + tuple(a.shape)
    stride = (0,) * lead + tuple(a.stride())
    size = tuple(size[d] for d in order)
    stride = tuple(stride[d] for d in order)
    offset = a.storage_offset()
    if a._reinterprets:
        return reinterpreting_view_on(a._store, size, a.dtype, (stride, offset))
    if is_whole(size, stride, offset, a._store.shape()):
        return tensor_on(a._store, size, a.dtype)
    return tensor_on(a._store, size, a.dtype, (stride, offset))


def _like(handler: Callable[..., Any]) -> Callable[..., Any]:
    """The ops of `_LIKE`: the layout of args[0], or the `memory_format` asked for."""

    def run(*args, **kwargs):
        out = handler(*args, **kwargs)
        source = args[0]
        memory_format = kwargs.get("memory_format")
        if memory_format is None and source.__class__ is XlaTensor and source._whole:
            return out
        if source.dim() < 2 or source.is_nested:
            return out
        strides = requested_strides(tuple(source.shape), tuple(source.stride()), memory_format)
        if strides is None:
            return out
        if isinstance(out, tuple):  # native_dropout's result and mask, sort's values and indices
            return tuple(with_strides(o, strides) for o in out)
        return with_strides(out, strides)

    run.__wrapped__ = handler
    return run


def _channels_last_of(sources: tuple[int, ...], ranks: tuple[int, ...], batch_at: int | None = None) -> Any:
    """Convolutions, batch and group norms, pooling, upsampling and padding: results of
    the input's rank are channels-last when an input at `sources` of one of `ranks` is
    (PyTorch's CPU kernels allocate them in the input's suggest_memory_format).
    `batch_at`: the input whose batch of one keeps a 3d convolution's results
    contiguous (PyTorch CPU runs those on a kernel without channels-last layouts)."""

    def wrap(handler: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args, **kwargs):
            out = handler(*args, **kwargs)
            if batch_at is not None and args[batch_at].dim() == 5 and args[batch_at].shape[0] == 1:
                return out
            for i in sources:
                a = args[i] if i < len(args) else None
                if a.__class__ is XlaTensor and not a._whole and a.dim() in ranks:
                    memory_format = suggested_memory_format(tuple(a.shape), tuple(a.stride()))
                    if memory_format is not torch.contiguous_format:
                        return _in_format(out, memory_format, a.dim())
            return out

        run.__wrapped__ = handler
        return run

    return wrap


def _in_format(out: Any, memory_format: Any, rank: int) -> Any:
    if isinstance(out, tuple):
        return tuple(_in_format(o, memory_format, rank) for o in out)
    if out.__class__ is not XlaTensor or out.dim() != rank:
        return out
    return with_strides(out, memory_format_strides(tuple(out.shape), memory_format))


def _cat(handler: Callable[..., Any]) -> Callable[..., Any]:
    """cat: the memory format its inputs share (at::native's compute_output_memory_format)."""

    def run(tensors, *args, **kwargs):
        out = handler(tensors, *args, **kwargs)
        if all(t.__class__ is not XlaTensor or t._whole for t in tensors) or out.dim() not in (4, 5):
            return out
        formats = {suggested_memory_format(tuple(t.shape), tuple(t.stride())) for t in tensors if t.dim() == out.dim()}
        if len(formats) != 1 or torch.contiguous_format in formats:
            return out
        return _in_format(out, formats.pop(), out.dim())

    run.__wrapped__ = handler
    return run


def _empty_in_format(handler: Callable[..., Any]) -> Callable[..., Any]:
    def run(size, *args, memory_format=None, **kwargs):
        out = handler(size, *args, **kwargs)
        if memory_format is None or memory_format is torch.contiguous_format:
            return out
        if memory_format is torch.preserve_format:
            raise RuntimeError("preserve memory format is unsupported by the contiguous operator")
        return with_strides(out, memory_format_strides(tuple(out.shape), memory_format))

    run.__wrapped__ = handler
    return run


def _empty_permuted(handler: Callable[..., Any]) -> Callable[..., Any]:
    def run(size, physical_layout, *args, **kwargs):
        out = handler(size, physical_layout, *args, **kwargs)
        return with_strides(out, _strides_in_order(tuple(out.shape), tuple(physical_layout)))

    run.__wrapped__ = handler
    return run


def _empty_strided(handler: Callable[..., Any], stride_at: int) -> Callable[..., Any]:
    """empty_strided and new_empty_strided: any strides, gaps and overlaps included."""

    def run(*args, **kwargs):
        out = handler(*args, **kwargs)
        size, stride = tuple(out.shape), tuple(args[stride_at])
        if len(stride) != len(size) or out.numel() == 0 or stride == contiguous_strides(size):
            return out
        if non_overlapping_and_dense(size, stride):
            return with_strides(out, stride)
        extent = 1 + sum((n - 1) * s for n, s in zip(size, stride))
        flat = handler(*args[:stride_at - 1], (extent,), (1,), *args[stride_at + 1:], **kwargs)
        return tensor_on(flat._store, size, out.dtype, (stride, 0))

    run.__wrapped__ = handler
    return run


_aten = torch.ops.aten
# tagged pointwise, but PyTorch CPU fills a contiguous copy of the input
_ROW_MAJOR_POINTWISE = frozenset({"masked_fill", "mvlgamma"})
# ops whose results PyTorch allocates like their first argument (preserve_format): copies,
# *_like factories, and ops that write into a copy of their input or sort along a dim
_LIKE = frozenset({"clone", "_to_copy", "empty_like", "zeros_like", "ones_like", "full_like", "rand_like",
                   "randn_like", "randint_like", "native_dropout", "fill", "flip", "sort", "index_fill", "index_put",
                   "put", "select_scatter", "slice_scatter", "diagonal_scatter"})


# op -> (the arguments whose channels-last format its results take, the ranks where
# PyTorch CPU's kernel does so), checked against PyTorch CPU in
# tests/test_result_layouts.py. Not here, since PyTorch gives contiguous results:
# avg_pool3d, adaptive pooling in 3d, and upsampling's 3d gradients.
_BOTH, _2D, _3D = (4, 5), (4,), (5,)
_CHANNELS_LAST_FROM = {
    "convolution": ((0, 1), _BOTH, 0), "convolution_backward": ((1, 2), _BOTH, 1),
    "native_batch_norm": ((0,), _BOTH), "_native_batch_norm_legit": ((0,), _BOTH),
    "_native_batch_norm_legit_functional": ((0,), _BOTH), "_native_batch_norm_legit_no_training": ((0,), _BOTH),
    "_batch_norm_with_update": ((0,), _BOTH), "native_batch_norm_backward": ((1,), _BOTH),
    "native_group_norm": ((0,), _BOTH), "native_group_norm_backward": ((1,), _BOTH),
    "constant_pad_nd": ((0,), _BOTH), "pixel_shuffle": ((0,), _2D), "pixel_unshuffle": ((0,), _2D),
    "max_pool2d_with_indices": ((0,), _2D), "max_pool2d_with_indices_backward": ((1,), _2D),
    "max_pool3d_with_indices": ((0,), _3D), "max_pool3d_with_indices_backward": ((1,), _3D),
    "avg_pool2d": ((0,), _2D), "avg_pool2d_backward": ((1,), _2D),
    "_adaptive_avg_pool2d": ((0,), _2D), "_adaptive_avg_pool2d_backward": ((1,), _2D),
    "adaptive_max_pool2d": ((0,), _2D), "adaptive_max_pool2d_backward": ((1,), _2D),
    "upsample_nearest2d": ((0,), _2D), "_upsample_nearest_exact2d": ((0,), _2D),
    "upsample_bilinear2d": ((0,), _2D), "upsample_bicubic2d": ((0,), _2D), "_upsample_bilinear2d_aa": ((0,), _2D),
    "_upsample_bicubic2d_aa": ((0,), _2D), "upsample_nearest3d": ((0,), _3D), "_upsample_nearest_exact3d": ((0,), _3D),
    "upsample_trilinear3d": ((0,), _3D),
    "upsample_nearest2d_backward": ((0,), _2D), "_upsample_nearest_exact2d_backward": ((0,), _2D),
    "upsample_bilinear2d_backward": ((0,), _2D), "upsample_bicubic2d_backward": ((0,), _2D),
    "_upsample_bilinear2d_aa_backward": ((0,), _2D), "_upsample_bicubic2d_aa_backward": ((0,), _2D),
}
# TensorIterator ops without the pointwise tag
_UNTAGGED_POINTWISE = frozenset({"floor_divide", "complex", "polar", "hardswish"})


def _rule(op: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]] | None:
    schema = op._schema
    name = schema.name.removeprefix("aten::")
    out_variant = any(a.kwarg_only and a.is_out for a in schema.arguments)
    if name in _CHANNELS_LAST_FROM and not out_variant:  # (batch norms update their statistics in place)
        return _channels_last_of(*_CHANNELS_LAST_FROM[name])
    if schema.is_mutable:
        in_place = name.endswith("_") and not out_variant
        return _pointwise_in_place if in_place and torch.Tag.pointwise in op.tags else None
    if op is _aten.cat.default:
        return _cat
    if name in _LIKE:
        return _like
    if op is _aten.native_dropout_backward.default:
        return _pointwise
    if len(schema.returns) != 1:
        return None
    if op is _aten.empty.memory_format:
        return _empty_in_format
    if op is _aten.empty_permuted.default:
        return _empty_permuted
    if op is _aten.empty_strided.default:
        return lambda h: _empty_strided(h, 1)
    if op is _aten.new_empty_strided.default:
        return lambda h: _empty_strided(h, 2)
    if name == "rsub":
        return lambda handler: _pointwise(handler, swapped=True)
    pointwise = torch.Tag.pointwise in op.tags or name in _UNTAGGED_POINTWISE
    if pointwise and str(schema.returns[0].type) == "Tensor" and name not in _ROW_MAJOR_POINTWISE:
        return _pointwise
    return None


def install(registry: dict[Any, Any]) -> dict[Any, Any]:
    """The registry with the handler of every op in Note [Result layouts]'s table
    wrapped to lay its result out as PyTorch does."""
    out = dict(registry)
    for op, handler in registry.items():
        rule = _rule(op) if hasattr(op, "_schema") else None
        if rule is not None:
            out[op] = rule(handler)
            out[op].around = rule  # the same rule around another handler (exec/sharding.py)
    return out
