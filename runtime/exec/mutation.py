"""Views and writes: view ops make tensors on their base's storage; in-place and out=
ops compute the functional op and write its result through the target's view (Note
[Views and mutation] in core/tensor.py), with PyTorch's checks on overlapping memory."""

from __future__ import annotations

import math
import sys
import threading
import warnings
from typing import Any, Callable

import jax
import numpy as np
import torch

from ...shape_fns.common import NUMPY_TO_TORCH, TORCH_TO_NUMPY
from ..core.context import context
from ..core.convert import X64, jax_to_cpu, current_array
from ..core.inference import inference_mode_enabled, made_in_mode, made_like
from ..core.ir import Node
from ..core.tensor import Storage, XlaTensor, contiguous_strides, reinterpreting_view_on, same_layout, tensor_on
from ..core.views import (is_whole, memory_numel, non_overlapping_and_dense, overlapping, reinterpreted_write_jit,
                          strided_write_jit, view_meta)
from ..platform.config import config
from .eager import check_in_place_result, value
from .graph import copy_array



def make_view(cls: type[Node], args: tuple[Any, ...]) -> Any:
    """A view op: a new tensor on the same storage (Note [Views and mutation])."""
    base = args[0]
    store = base._store
    storage_shape = store.shape()
    reinterprets = base._reinterprets
    numel = math.prod(storage_shape)
    if reinterprets:
        numel = memory_numel(numel, store.dtype(), base.dtype)
    layout = view_meta(cls.name, cls.op, base, tuple(base.shape), tuple(base.stride()), base.storage_offset(), numel,
                       args)
    if isinstance(layout, list):
        return [alias(store, base.dtype, *lo, storage_shape, reinterprets, base=base) for lo in layout]
    return alias(store, base.dtype, *layout, storage_shape, reinterprets, base=base)


def alias(store: Storage, dtype: torch.dtype, size, stride, offset, storage_shape=None, reinterprets: bool = False,
          *, base: torch.Tensor) -> XlaTensor:
    """A view of `base` on its storage `store` with this layout; `reinterprets`: a view of
    the storage's memory as `dtype`, another dtype than the storage's (Note [Views and
    mutation]). It is an inference tensor exactly when `base` is one (Note [Inference
    mode] in core/inference.py)."""
    make = reinterpreting_view_on if reinterprets else tensor_on
    view = (stride, offset)
    if not reinterprets and is_whole(size, stride, offset, store.shape() if storage_shape is None else storage_shape):
        view = None
    inference = base.is_inference()
    if inference is not inference_mode_enabled():  # only across the edge of an inference_mode block
        return made_in_mode(inference, make, store, size, dtype, view)
    return make(store, size, dtype, view)


def of_kind(base: torch.Tensor, result: XlaTensor) -> XlaTensor:
    """`result`, a new tensor that an operator PyTorch makes a view of `base` returns
    here (a conjugate), as a tensor of `base`'s kind: ADInplaceOrView treats it as a
    view, and gives it `base`'s version counter if `base` is normal."""
    if result.is_inference() is base.is_inference():
        return result
    return made_like(base, same_layout, result)


def write_into(t: Any, new: Any, check_cast: bool = True) -> None:
    """Write `new` (a JAX value; an IR Value while this thread traces) into tensor `t`,
    through its view if it is one."""
    if not isinstance(t, XlaTensor):
        # An in-place op on a CPU tensor that reached us through an XlaTensor operand
        # (cpu_tensor.copy_(xla_tensor)).
        with torch._C._DisableTorchDispatch():
            t.copy_(_to_cpu_value(new))
        return
    trace = context.trace
    if trace is not None:
        trace.write(t, new, check_cast)
        return
    new_dtype = NUMPY_TO_TORCH[new.dtype]
    check_in_place_result(tuple(t.shape), t.dtype, tuple(new.shape), new_dtype, check_cast)
    store = t._store
    if store.owner is not None:
        refuse_write_under_trace(store)
    with X64:
        if t._whole:
            store.array = new if new_dtype == t.dtype else new.astype(TORCH_TO_NUMPY[t.dtype])
        else:
            if overlapping(tuple(t.shape), tuple(t.stride())):
                raise RuntimeError(_INTERNAL_OVERLAP_MESSAGE)
            base = store.array
            if base is None or store.pending is not None:
                base = current_array(store)
            layout = (tuple(t.shape), tuple(t.stride()), t.storage_offset())
            if t._reinterprets:
                store.array = reinterpreted_write_jit(base, new, t.dtype, *layout)
            else:
                store.array = strided_write_jit(base, new, *layout)
    store.version += 1
    t._cache = None


# Note [Donated in-place updates]
# An in-place op (p.add_(g), exp_avg.lerp_(g, w)) computes the functional op and
# replaces its storage's value. For a large tensor a new buffer costs more than the
# arithmetic: allocating, faulting in and writing 10 MB, then freeing the old 10 MB, took
# add_ 3-4x PyTorch's time. When nothing else can observe the old array, the in-place
# stub instead runs an executable that donates `self`'s buffer (jax.jit donate_argnums),
# and XLA writes the result into it. The old array must have no other owner: the
# storage holds the only Python reference (an array handed out by to_jax, another
# storage holding the same array after a copy_, a cached result: no donation), and no
# other operand of the op reads the same storage (x.add_(x.t())). Buffers shared with
# NumPy, DLPack or host memory are PjRt's to protect: it copies instead of donating a
# buffer with external references. Below config.donate_min_bytes (1 MB) a fresh buffer
# costs no more (add_ with donation: 1.4x faster at 4 MB, 2.3x at 16 MB, even at 1 MB,
# slower at 256 KB). Another thread may be about to read the old array, so `donate`
# takes it out of the storage before counting its references again (Note [Threads and
# storages] in core/sharing.py): a thread that took it first shows in the count and gets
# the buffer undonated (a copy is donated), one that comes later waits for the write.


def donatable(self: Any, others: tuple[Any, ...]) -> bool:
    """Whether `self`'s buffer may be donated to an in-place op reading `others`."""
    if self.__class__ is not XlaTensor or not self._whole or context.trace is not None:
        return False
    if self.nbytes < config.donate_min_bytes:  # the storage's size, as self is whole
        return False
    store = self._store
    v = store.array
    if v is None or isinstance(v, jax.core.Tracer) or store.owner is not None:
        return False
    del v
    # references: the storage's, and getrefcount's argument
    if sys.getrefcount(store.array) != 2:
        return False
    for t in others:
        if t.__class__ is XlaTensor and t._store is store:
            return False
        if isinstance(t, (list, tuple)) and any(x.__class__ is XlaTensor and x._store is store for x in t):
            return False
    return True


def refuse_write_under_trace(store: Storage) -> None:
    """An eager write into a storage that a trace holds: the trace of another thread
    would overwrite it when it runs, or has read the value it replaces (Note [Per-thread
    trace] in core/context.py). A trace of this thread set aside (untraced()) lets it."""
    owner = store.owner
    if owner.active and owner.thread != threading.get_ident():
        raise RuntimeError(
            "this tensor is used by a traced call in another thread (compile() or lazy_mode()), whose result would "
            "overwrite this write or depends on the value it replaces: write it in that thread, or after its traced "
            "call returns (or its mark_step() runs)"
        )


def take_buffer(store: Storage) -> tuple[Any, Any]:
    """Take a storage's array out to donate it: (the array, the array to donate). Once
    the slot is empty no other thread can pick the buffer up (a reader waits for the
    write, Note [Threads and storages] in core/sharing.py); a thread that took it
    before shows in the reference count, and then a copy is donated instead."""
    array = store.array
    store.array = None
    # references: `array` and getrefcount's argument
    if sys.getrefcount(array) > 2:
        with X64:
            return array, copy_array(array)
    return array, array


def donate(self: XlaTensor, exe: Any, *operands: Any) -> XlaTensor:
    """Run `exe`, the donating executable of an in-place op, on self's buffer and the
    other operands; self's storage takes the result."""
    store = self._store
    array, given = take_buffer(store)
    try:
        with X64:
            new = exe(given, *operands)
    except BaseException:  # raised while tracing, before anything was donated
        store.array = array
        raise
    del array, given
    store.array = new
    store.version += 1
    self._cache = None
    return self


def update_in_place(self: XlaTensor, new: Any) -> XlaTensor:
    """`self`'s storage takes `new`, the result of a donating executable."""
    store = self._store
    if store.owner is not None:
        refuse_write_under_trace(store)
    store.array = new
    store.version += 1
    self._cache = None
    return self


def _to_cpu_value(new: Any) -> torch.Tensor:
    trace = context.trace
    if trace is not None:
        new = trace.materialize_value(new)
    return jax_to_cpu(new)


def restride_inplace(self: Any, view: XlaTensor) -> Any:
    """An in-place view op (t_, squeeze_): `self` becomes `view`, a view of its own
    storage, keeping its identity and autograd state."""
    with torch._C._DisableTorchDispatch():
        self.data = view  # TensorImpl::shallow_copy_from: sizes, strides, offset
    self._store, self._whole, self._cache, self._reinterprets = view._store, view._whole, None, view._reinterprets
    return self


def lists_alias(self: list, others: tuple[Any, ...]) -> bool:
    """Whether an in-place foreach op on `self` must run tensor by tensor, as PyTorch's
    loop does, because a tensor it writes is read later in the loop: two tensors of
    `self` share a storage, or a later argument reads one of them. (Computing all
    results first, then writing, would read the values from before the loop.)"""
    stores = {id(t._store): i for i, t in enumerate(self) if t.__class__ is XlaTensor}
    if len(stores) < len(self):
        return True
    for other in others:
        if isinstance(other, (list, tuple)):
            if any(t.__class__ is XlaTensor and stores.get(id(t._store), j) != j for j, t in enumerate(other)):
                return True
        elif other.__class__ is XlaTensor and id(other._store) in stores:
            return True
    return False


def per_tensor_loop(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A foreach op run as PyTorch's loop over the tensors (its CompositeExplicitAutograd
    kernel, which calls the element op on each, back through this dispatcher)."""
    return func.redispatch(_PER_TENSOR_KEYS, *args, **kwargs)


_PER_TENSOR_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.PrivateUse1)


def write_inplace(self: Any, result: Any) -> Any:
    if isinstance(self, list):  # a foreach op's list: its schema returns nothing
        for t, r in zip(self, result, strict=True):
            if r is not t:  # else written in place already (write_list_inplace)
                write_into(t, result_value(r))
        return None
    write_into(self, result_value(result))
    return self


def round_scalar_to_self(self: Any, value: Any) -> Any:
    """A Scalar argument of an in-place op whose PyTorch kernel converts it to `self`'s
    dtype before computing (the manifest's policy inplace_rounds_scalar_to_self): for a
    float16/bfloat16 `self`, a Python float or int becomes the float that conversion
    gives, through float32 as c10::Half and c10::BFloat16 convert from float only (the
    lowering then takes it exactly). Other dtypes and values pass unchanged. A foreach
    op's list of tensors (of one dtype: see mixed_dtypes) rounds a Scalar, or each of a
    list of Scalars, as its tensors' loop would."""
    if isinstance(self, list):
        if not self:
            return value
        if isinstance(value, (list, tuple)):
            return [round_scalar_to_self(self[0], v) for v in value]
        self = self[0]
    dtype = self.dtype
    if (dtype is torch.float16 or dtype is torch.bfloat16) and value.__class__ in (float, int):
        with np.errstate(over="ignore"):
            wide = np.float64(value) if value.__class__ is float else np.int64(value)
            return float(wide.astype(np.float32).astype(TORCH_TO_NUMPY[dtype]))
    return value


def mixed_dtypes(self: list) -> bool:
    """Whether a foreach op's tensors differ in dtype: one whose Scalar each tensor rounds
    to its own dtype (round_scalar_to_self) then runs PyTorch's loop over the tensors."""
    return len({t.dtype for t in self}) > 1


def write_each_inplace(written: tuple, result: tuple) -> Any:
    """An in-place op that writes several arguments (`written`, in schema order): each
    takes its new value from the functional form's results, in the same order."""
    for target, new in zip(written[1:], result[1:]):
        write_inplace(target, new)
    return write_inplace(written[0], result[0])


def write_list_inplace(self: list, compute: Callable[[], Any]) -> None:
    """An in-place foreach op: `compute()` runs its functional form, which may write
    tensors of `self` in place itself, donating their buffers (Note [Foreach ops])."""
    context.foreach_into = self
    try:
        result = compute()
    finally:
        context.foreach_into = None
    return write_inplace(self, result)


NO_OVERLAP, FULL_OVERLAP, PARTIAL_OVERLAP, TOO_HARD = range(4)


def overlap_status(a: XlaTensor, b: XlaTensor) -> int:
    """How the memory of two tensors overlaps, as ATen's get_overlap_status decides it:
    the same memory in the same layout is a full overlap; layouts that do not fill a
    block of memory (a column, an expanded view) are too hard to compare."""
    if a is b:
        return FULL_OVERLAP
    if a._store is not b._store or not a.numel() or not b.numel():
        return NO_OVERLAP
    if a._reinterprets != b._reinterprets or a.dtype != b.dtype:  # memory seen as two dtypes: not compared
        return TOO_HARD
    size_a, stride_a, size_b, stride_b = tuple(a.shape), a.stride(), tuple(b.shape), b.stride()
    if not non_overlapping_and_dense(size_a, stride_a) or not non_overlapping_and_dense(size_b, stride_b):
        return TOO_HARD
    start_a, start_b = a.storage_offset() * a.element_size(), b.storage_offset() * b.element_size()
    end_a, end_b = start_a + a.numel() * a.element_size(), start_b + b.numel() * b.element_size()
    if (start_a, end_a) == (start_b, end_b):
        return FULL_OVERLAP if stride_a == stride_b else PARTIAL_OVERLAP
    return PARTIAL_OVERLAP if start_a < end_b and start_b < end_a else NO_OVERLAP


def check_in_place_overlap(self: Any, others: tuple[Any, ...], any_overlap: bool) -> None:
    """PyTorch's errors for an in-place op reading memory it writes: its TensorIterator
    ops reject a partial overlap with `self` (x.add_(x[0])), its scatter-like ops
    (`any_overlap`) any overlap. Only operands on self's storage are compared."""
    if self.__class__ is not XlaTensor:
        return
    store = self._store
    for t in others:
        for x in (t if isinstance(t, (list, tuple)) else (t,)):
            if x.__class__ is XlaTensor and x._store is store:
                status = overlap_status(self, x)
                if status == PARTIAL_OVERLAP or (any_overlap and status == FULL_OVERLAP):
                    raise RuntimeError(_OVERLAP_MESSAGE)


def check_out_overlap(outs: tuple[Any, ...], inputs: tuple[Any, ...], distinct_from_inputs: bool) -> None:
    """PyTorch's checks that an out= tensor shares no memory with the op's inputs: a full
    overlap is accepted (it is the in-place form) unless the op's kernel rejects any
    (`distinct_from_inputs`, the manifest's policy); as in PyTorch, layouts too hard to
    compare are let through."""
    flat = [t for x in inputs for t in (x if isinstance(x, (tuple, list)) else (x,)) if isinstance(t, XlaTensor)]
    for o in outs:
        if not isinstance(o, XlaTensor) or not o.numel():
            continue
        if distinct_from_inputs and not o._whole and overlapping(tuple(o.shape), tuple(o.stride())):
            # these kernels check before resizing the output (assert_no_internal_overlap)
            raise RuntimeError(_INTERNAL_OVERLAP_MESSAGE)
        for t in flat:
            status = overlap_status(o, t)
            if status == PARTIAL_OVERLAP or (status == FULL_OVERLAP and distinct_from_inputs):
                raise RuntimeError(_OVERLAP_MESSAGE)


_INTERNAL_OVERLAP_MESSAGE = (
    "unsupported operation: more than one element of the written-to tensor refers to a single memory location. "
    "Please clone() the tensor before performing the operation."
)
_OVERLAP_MESSAGE = (
    "unsupported operation: some elements of the input tensor and the written-to tensor refer to a single memory "
    "location. Please clone() the tensor before performing the operation."
)


def write_out(outs: tuple[Any, ...], result: Any, inputs: tuple[Any, ...] = (), *, exact_dtype: bool = False,
              distinct_from_inputs: bool = False) -> Any:
    """Write an out= op's result into its out tensors, with PyTorch's checks; the flags
    are the op's facts from the manifest's policy (the out tensor must have exactly the
    result's dtype; it must not be one of the inputs)."""
    if len(outs) == 1 and isinstance(outs[0], list):  # a foreach op's out list: its schema returns nothing
        write_out(tuple(outs[0]), result, inputs, exact_dtype=exact_dtype, distinct_from_inputs=distinct_from_inputs)
        return None
    if inputs:
        check_out_overlap(outs, inputs, distinct_from_inputs)
    results = result if isinstance(result, (tuple, list)) else (result,)
    if exact_dtype:
        for o, r in zip(outs, results):
            if o.dtype != r.dtype:
                raise RuntimeError(f"Expected out tensor to have dtype {r.dtype}, but got {o.dtype} instead")
    for o, r in zip(outs, results):
        if isinstance(o, XlaTensor) and tuple(o.shape) != tuple(r.shape):
            resize_out(o, tuple(r.shape))
        write_into(o, result_value(r))
    return outs[0] if len(outs) == 1 else tuple(outs)


def resize_out(out: XlaTensor, shape: tuple[int, ...]) -> None:
    """PyTorch resizes an out= tensor of the wrong shape (with a warning unless it was
    empty) as resize_ does: within its storage, contiguous from its offset, where the
    storage holds that many elements (torch.fft.fftfreq writes its negative half into an
    empty view of its result this way); else `out` gets a new storage, to be written
    whole (PyTorch grows the storage, which other views of it share)."""
    if out.numel():
        warnings.warn(
            f"An output with one or more elements was resized since it had shape {list(out.shape)}, which does not "
            f"match the required output shape {list(shape)}. This behavior is deprecated, and in a future PyTorch "
            "release outputs will not be resized unless they have zero elements. You can explicitly reuse an out "
            "tensor t by resizing it, inplace, to zero elements with t.resize_(0).",
            UserWarning,
            stacklevel=4,
        )
    store, offset = out._store, out.storage_offset()
    if not out._reinterprets and offset + math.prod(shape) <= math.prod(store.shape()):
        restride_inplace(out, XlaTensor(store, shape, out.dtype, contiguous_strides(shape), offset))
    else:
        restride_inplace(out, XlaTensor(Storage(None), shape, out.dtype))


def result_value(t: Any) -> Any:
    """The value of an op's result, to write it: JAX eagerly, IR while tracing."""
    trace = context.trace
    return value(t) if trace is None else trace.value_of(t)
