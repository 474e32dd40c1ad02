"""The per-op path: from an aten call on XlaTensors to a cached JAX executable (eagerly)
or an IR node (while tracing), and back. Everything here is on the hot path of every
op: keep it flat (shared/FACTS.md has the budget)."""

from __future__ import annotations

import math
import sys
import traceback
import warnings
from pathlib import Path
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import torch

from ..shape_fns.common import NUMPY_TO_TORCH, TensorMeta, TORCH_TO_NUMPY
from . import state
from .config import config
from .inference import composite_implicit, decompose, inference_mode_enabled, made_in_mode
from .ir import OPT_TENSOR, SCALAR, STATIC_KINDS, TENSOR, TENSOR_LIST, Node, Value
from .metrics import metrics
from .tensor import Storage, XlaTensor, from_array, tensor_on
from .views import (is_whole, non_overlapping_and_dense, overlapping, strided_read, strided_read_jit, strided_write_jit,
                    view_meta)


class _X64:
    """Re-entrant `jax.enable_x64(True)`: PyTorch's int64/float64 need JAX's x64 mode,
    scoped to our calls so other JAX code in the process is not affected. (One reused
    jax context object is not re-entrant, and nesting happens: an op implementation may
    call other ops.)"""

    __slots__ = ("depth", "cm")

    def __init__(self):
        self.depth = 0
        self.cm = jax.enable_x64(True)

    def __enter__(self):
        if not self.depth:
            self.cm.__enter__()
        self.depth += 1

    def __exit__(self, *exc):
        self.depth -= 1
        if not self.depth:
            self.cm.__exit__(*exc)


X64 = _X64()

class _Registry(dict):
    """aten overload -> handler. The per-op path looks handlers up by id(op) in
    `by_id`, kept in step with the dict, because hashing an OpOverload runs Python."""

    def __init__(self):
        super().__init__()
        self.by_id: dict[int, Any] = {}

    def __setitem__(self, op: Any, handler: Any) -> None:
        super().__setitem__(op, handler)
        self.by_id[id(op)] = handler
        metrics.ops_by_id[id(op)] = op  # names the per-op call counts

    def __delitem__(self, op: Any) -> None:
        super().__delitem__(op)
        del self.by_id[id(op)]

    def update(self, other: Any = (), **kwargs: Any) -> None:
        for op, handler in dict(other, **kwargs).items():
            self[op] = handler


_REGISTRY = _Registry()
_HANDLERS = _REGISTRY.by_id
_CALLS = metrics.calls_by_id
_SECTIONS: dict[str, str] = {}


class OperatorNotFound(NotImplementedError):
    """An aten operator that no manifest section lists."""


# ---------------------------------------------------------------- arguments


def value(t: Any) -> Any:
    """The JAX value of a tensor argument (eager)."""
    if t.__class__ is XlaTensor:
        if t._whole:
            v = t._store.value
            if v.__class__ is Value:
                from .lazy import materialize

                v = materialize(t._store)
            return v
        return read_view(t)
    return foreign_value(t)


def value_opt(t: Any) -> Any:
    return None if t is None else value(t)


def values(ts: Any) -> list[Any]:
    return [None if t is None else value(t) for t in ts]


# Note [Fused view reads]
# An eager op reading a view (a reshape, transpose, expand or leading slice of a
# storage) used to run a strided read of the storage first, one more executable call
# (about 10 us in a model) plus an array that the op reads once. An operand of an eager
# executable is instead the storage's array with the view's layout as static data
# (`ViewOperand`, a JAX pytree: the array is the dynamic leaf, the layout part of the
# tree structure that keys jit's cache), and the executable reads the view itself,
# where XLA fuses the read into the op (a reshape or transpose is often free). Only
# views starting at offset 0 take this way: the layouts a model uses are then as fixed
# as its shapes, while a loop over slices at ever new offsets (x[:, i]) would compile
# every consuming op anew for each offset; those views are read by one strided read,
# cached on the view tensor. Every other user of a tensor's value (host reads, writes,
# supported ops computing on values) keeps reading arrays through `value`.


class ViewOperand:
    """A view of `base` (size, stride, offset), read inside the executable that takes it."""

    __slots__ = ("base", "layout")

    def __init__(self, base: Any, layout: tuple) -> None:
        self.base = base
        self.layout = layout

    def read(self) -> Any:
        return strided_read(self.base, *self.layout)


jax.tree_util.register_pytree_node(
    ViewOperand, lambda v: ((v.base,), v.layout), lambda layout, leaves: ViewOperand(leaves[0], layout)
)


def operand(t: Any) -> Any:
    """A tensor argument of an eager executable: its array, or for a view from offset 0
    its storage's array and layout (Note [Fused view reads])."""
    if t.__class__ is XlaTensor and not t._whole and t.storage_offset() == 0:
        v = t._store.value
        if v.__class__ is Value:
            from .lazy import materialize

            v = materialize(t._store)
        return ViewOperand(v, (tuple(t.shape), tuple(t.stride()), 0))
    return value(t)


def operand_opt(t: Any) -> Any:
    return None if t is None else operand(t)


def operands(ts: Any) -> list[Any]:
    return [None if t is None else operand(t) for t in ts]


def _read_operand(kind: str, a: Any) -> Any:
    if a.__class__ is ViewOperand:
        return a.read()
    if kind == TENSOR_LIST:
        return [x.read() if x.__class__ is ViewOperand else x for x in a]
    return a


def attr_list(x: Any) -> Any:
    return None if x is None else tuple(x)


_INT_OPERANDS: dict[int, Any] = {}
_FLOAT_OPERANDS: dict[tuple[float, float], Any] = {}


def scalar_operand(x: Any) -> Any:
    """A Python number as the weakly typed JAX scalar that jax.jit would make of it (the
    same abstract value, so the same trace), made once per value: jit converts a Python
    number on every call, about 1 us, while it takes an array as it is. Every number
    goes this way, since jit keeps separate executables for numbers and arrays."""
    cls = x.__class__
    if cls is int:
        operand = _INT_OPERANDS.get(x)
        if operand is None:
            if not -(2**63) <= x < 2**63:
                return x  # jit raises its overflow error
            operand = _device_scalar(x, _INT_OPERANDS, x)
        return operand
    if cls is float:
        if x != x:
            return _device_scalar(x, None, None)
        key = (x, math.copysign(1.0, x))  # 0.0 and -0.0 compare equal
        operand = _FLOAT_OPERANDS.get(key)
        if operand is None:
            operand = _device_scalar(x, _FLOAT_OPERANDS, key)
        return operand
    return x


# jit's own conversion of a Python number, kept as the weakly typed array it makes:
# about 11 us, where jax.device_put(x) takes 30 (AdamW's step sizes are new numbers
# every step).
_number_to_array = jax.jit(lambda x: x)


def _device_scalar(x: Any, cache: dict | None, key: Any) -> Any:
    with X64:
        operand = _number_to_array(x)
    if isinstance(operand, jax.core.Tracer):
        return x  # inside a JAX transformation (a torch.compile graph): nothing to keep
    if cache is not None:
        if len(cache) >= 4096:
            cache.clear()
        cache[key] = operand
    return operand


def foreign_value(x: Any) -> Any:
    """A non-XlaTensor argument: a Python number stays a number (a weakly typed JAX
    scalar once traced); a CPU tensor is accepted where PyTorch accepts one, zero-dim."""
    if isinstance(x, torch.Tensor):
        if x.dim() == 0 and x.device.type == "cpu":
            return cpu_to_jax(x)
        raise RuntimeError(
            f"Expected all tensors to be on the same device, but found at least two devices, jax:0 and {x.device}! "
            "Move the tensor with xla_native_functions.to_xla(t) first."
        )
    return scalar_operand(x)


def read_view(t: XlaTensor) -> Any:
    if state.tracing:
        from .lazy import traced_value

        return traced_value(t)
    store = t._store
    cache = t._cache
    if cache is not None and cache[0] == store.version:
        return cache[1]
    base = store.value
    layout = (tuple(t.shape), tuple(t.stride()), t.storage_offset())
    if base.__class__ is Value:
        from .lazy import materialize

        base = materialize(store)
    with X64:
        out = strided_read_jit(base, *layout)
    t._cache = (store.version, out)
    return out


def cpu_to_jax(t: torch.Tensor) -> jax.Array:
    if t.dim() > 64:
        raise RuntimeError("only tensors with up to 64 dims are supported")  # NumPy's limit, and PyTorch's
    t = t.detach().resolve_conj().resolve_neg()
    if t.dtype == torch.bfloat16:
        arr = t.contiguous().view(torch.int16).numpy().view(TORCH_TO_NUMPY[torch.bfloat16])
    else:
        arr = t.contiguous().numpy()
    with X64:
        return jnp.asarray(arr)


def host_tensor(arr: np.ndarray) -> torch.Tensor:
    """A CPU tensor sharing `arr`'s memory, also inside the environment (which moves the
    tensors torch.tensor and torch.from_numpy create to our device)."""
    if not torch._C._len_torch_dispatch_stack():
        return torch.from_numpy(arr)
    with torch._C._DisableTorchDispatch():
        return torch.from_numpy(arr)


_NUMPY_BFLOAT16 = TORCH_TO_NUMPY[torch.bfloat16]


def jax_to_cpu(a: jax.Array) -> torch.Tensor:
    arr = np.asarray(a)
    if arr.dtype == _NUMPY_BFLOAT16:
        return host_tensor(arr.view(np.int16).copy()).view(torch.bfloat16)
    return host_tensor(arr.copy())


# ---------------------------------------------------------------- results


def wrap(out: Any) -> Any:
    if isinstance(out, (tuple, list)):  # including named tuples (jnp.linalg.qr's)
        return tuple(None if o is None else from_array(o) for o in out)
    return from_array(out)


def eager_executable(cls: type[Node], in_place: bool = False):
    """One jax.jit function per op. JAX's own cache (keyed by the static attributes and
    the operands' shapes and dtypes) is the per-op executable cache. The shape function
    runs once per new signature, at trace time, to raise PyTorch's errors for invalid
    input and to check the lowering's output against it.

    `in_place`: the executable of the op's in-place form for a `self` (argument 0) whose
    buffer it may reuse (Note [Donated in-place updates]): it returns the result cast to
    self's dtype, and raises PyTorch's errors for a result that cannot be written into
    self at trace time, before anything is donated."""
    static = tuple(i for i, k in enumerate(cls.arg_kinds) if k in STATIC_KINDS)

    def run(*args):
        return lower_checked(cls, args, in_place)

    run.__name__ = f"{'donating' if in_place else 'eager'}_{cls.name}"
    if in_place:
        return jax.jit(run, static_argnums=static, donate_argnums=0)
    return jax.jit(run, static_argnums=static)


def lower_checked(cls: type[Node], args: Any, in_place: bool = False) -> Any:
    """The body of an op's executable, at trace time: read view operands, run the shape
    function (PyTorch's errors), lower, check the lowering against the shape function;
    `in_place`, check and cast the result as a write into args[0]."""
    kinds = cls.arg_kinds
    args = [_read_operand(k, a) for k, a in zip(kinds, args)]
    metas = cls.output_shape(*[_trace_time_meta(k, a) for k, a in zip(kinds, args)])
    out = cls.lower(*args)
    _check_output(cls, out, metas)
    if in_place:
        self_dtype = NUMPY_TO_TORCH[args[0].dtype]
        check_in_place_result(tuple(args[0].shape), self_dtype, tuple(out.shape), NUMPY_TO_TORCH[out.dtype])
        out = out.astype(args[0].dtype)
    return out


def _trace_time_meta(kind: str, a: Any) -> Any:
    if kind in STATIC_KINDS or a is None:
        return a
    if kind == TENSOR_LIST:
        return [None if x is None else TensorMeta(tuple(x.shape), NUMPY_TO_TORCH[x.dtype]) for x in a]
    if kind == SCALAR or getattr(getattr(a, "aval", None), "weak_type", False):
        return a  # from a Python number: shape functions use its type only (Note [Type promotion])
    return TensorMeta(tuple(a.shape), NUMPY_TO_TORCH[a.dtype])


def _check_output(cls: type[Node], out: Any, metas: Any) -> None:
    outs = out if isinstance(out, (tuple, list)) else (out,)
    expected = metas if isinstance(metas, (tuple, list)) else (metas,)
    if len(outs) != len(expected):
        raise AssertionError(f"lower_{cls.name} returned {len(outs)} outputs, {cls.name}_output_shape {len(expected)}")
    for i, (o, m) in enumerate(zip(outs, expected)):
        if o is None and m is None:
            continue
        got = (tuple(o.shape), NUMPY_TO_TORCH[np.dtype(o.dtype)])
        if m is None or got != (tuple(m.shape), m.dtype):
            raise AssertionError(
                f"lower_{cls.name} output {i} is {got[0]} {got[1]}, but {cls.name}_output_shape says "
                f"{None if m is None else (m.shape, m.dtype)}: fix whichever disagrees with PyTorch"
            )


_EXECUTABLES: dict[type[Node], Any] = {}
_lazy: Any = None  # the runtime.lazy module, bound by install()


def run_node(cls: type[Node], args: tuple[Any, ...]) -> Any:
    """Run a handwritten node class (used by `supported` ops) in either mode."""
    if state.tracing:
        return trace(cls, args)
    exe = _EXECUTABLES.get(cls)
    if exe is None:
        exe = _EXECUTABLES[cls] = eager_executable(cls)
    unwrap = {TENSOR_LIST: operands, OPT_TENSOR: operand_opt, TENSOR: operand}
    with X64:
        return wrap(exe(*[unwrap[k](a) if k in unwrap else a for k, a in zip(cls.arg_kinds, args)]))


def trace(cls: type[Node], args: tuple[Any, ...]) -> Any:
    return _lazy.record(cls, args)


# ---------------------------------------------------------------- views and mutation


def make_view(cls: type[Node], args: tuple[Any, ...]) -> Any:
    """A view op: a new tensor on the same storage (Note [Views and mutation])."""
    base = args[0]
    store = base._store
    storage_shape = _storage_shape(store)
    layout = view_meta(cls.name, cls.op, base, tuple(base.shape), tuple(base.stride()), base.storage_offset(),
                       math.prod(storage_shape), args)
    if isinstance(layout, list):
        return [_alias(store, base.dtype, *lo, storage_shape, base=base) for lo in layout]
    return _alias(store, base.dtype, *layout, storage_shape, base=base)


def _storage_shape(store: Storage) -> tuple[int, ...]:
    return store.value.shape if store.value.__class__ is not Value else store.value.meta.shape


def _alias(store: Storage, dtype: torch.dtype, size, stride, offset, storage_shape=None, *, base: Any) -> XlaTensor:
    """A view of `base` on its storage, an inference tensor exactly when `base` is one
    (Note [Inference mode])."""
    view = None if is_whole(size, stride, offset, _storage_shape(store) if storage_shape is None else storage_shape) \
        else (stride, offset)
    inference = base.is_inference()
    if inference is not inference_mode_enabled():
        return made_in_mode(inference, tensor_on, store, size, dtype, view)
    return tensor_on(store, size, dtype, view)


def write_into(t: Any, new: Any, check_cast: bool = True) -> None:
    """Write `new` (a JAX value, or an IR Value while tracing) into tensor `t`, through
    its view if it is one."""
    if not isinstance(t, XlaTensor):
        # An in-place op on a CPU tensor that reached us through an XlaTensor operand
        # (cpu_tensor.copy_(xla_tensor)).
        with torch._C._DisableTorchDispatch():
            t.copy_(_to_cpu_value(new))
        return
    new_dtype = new.meta.dtype if new.__class__ is Value else NUMPY_TO_TORCH[new.dtype]
    new_shape = tuple(new.meta.shape if new.__class__ is Value else new.shape)
    check_in_place_result(tuple(t.shape), t.dtype, new_shape, new_dtype, check_cast)
    store = t._store
    if state.tracing:
        from .lazy import record_write

        record_write(t, new)
        return
    with X64:
        if t._whole:
            store.value = new if new_dtype == t.dtype else new.astype(TORCH_TO_NUMPY[t.dtype])
        else:
            if overlapping(tuple(t.shape), tuple(t.stride())):
                raise RuntimeError(_INTERNAL_OVERLAP_MESSAGE)
            base = store.value
            if base.__class__ is Value:
                from .lazy import materialize

                base = materialize(store)
            store.value = strided_write_jit(base, new, tuple(t.shape), tuple(t.stride()), t.storage_offset())
    store.version += 1
    t._cache = None


def check_in_place_result(shape: tuple, dtype: torch.dtype, new_shape: tuple, new_dtype: torch.dtype,
                          check_cast: bool = True) -> None:
    """PyTorch's errors for writing a result of (new_shape, new_dtype) into a tensor."""
    if check_cast and new_dtype != dtype and not torch.can_cast(new_dtype, dtype):
        raise RuntimeError(f"result type {_type_name(new_dtype)} can't be cast to the desired output type {_type_name(dtype)}")
    if new_shape != shape:
        raise RuntimeError(f"output with shape {list(shape)} doesn't match the broadcast shape {list(new_shape)}")


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
# slower at 256 KB).


def donatable(self: Any, others: tuple[Any, ...]) -> bool:
    """Whether `self`'s buffer may be donated to an in-place op reading `others`."""
    if self.__class__ is not XlaTensor or not self._whole or state.tracing:
        return False
    if self.nbytes < config.donate_min_bytes:  # the storage's size, as self is whole
        return False
    store = self._store
    v = store.value
    if v.__class__ is Value or isinstance(v, jax.core.Tracer):
        return False
    del v
    # references: the storage's, and getrefcount's argument
    if sys.getrefcount(store.value) != 2:
        return False
    for t in others:
        if t.__class__ is XlaTensor and t._store is store:
            return False
        if isinstance(t, (list, tuple)) and any(x.__class__ is XlaTensor and x._store is store for x in t):
            return False
    return True


def update_in_place(self: XlaTensor, new: Any) -> XlaTensor:
    """`self`'s storage takes `new`, the result of a donating executable."""
    store = self._store
    store.value = new
    store.version += 1
    self._cache = None
    return self


def _to_cpu_value(new: Any) -> torch.Tensor:
    if new.__class__ is Value:
        from .lazy import materialize_value

        new = materialize_value(new)
    return jax_to_cpu(new)


def _type_name(dtype: torch.dtype) -> str:
    return {
        torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
        torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte",
        torch.bool: "Bool", torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble",
    }.get(dtype, str(dtype))


def restride_inplace(self: Any, view: XlaTensor) -> Any:
    """An in-place view op (t_, squeeze_): `self` becomes `view`, a view of its own
    storage, keeping its identity and autograd state."""
    with torch._C._DisableTorchDispatch():
        self.data = view  # TensorImpl::shallow_copy_from: sizes, strides, offset
    self._store, self._whole, self._cache = view._store, view._whole, None
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
                write_into(t, _result_value(r))
        return None
    write_into(self, _result_value(result))
    return self


def write_list_inplace(self: list, compute: Callable[[], Any]) -> None:
    """An in-place foreach op: `compute()` runs its functional form, which may write
    tensors of `self` in place itself, donating their buffers (Note [Foreach ops])."""
    state.foreach_into = self
    try:
        result = compute()
    finally:
        state.foreach_into = None
    return write_inplace(self, result)


# out= ops whose PyTorch kernels reject an output that is one of the inputs
# (`assert_no_overlap`); elementwise kernels accept it, since that is the in-place form.
OUT_MUST_NOT_BE_AN_INPUT = frozenset({"cat", "gather", "index_select", "kthvalue", "masked_select", "take"})


NO_OVERLAP, FULL_OVERLAP, PARTIAL_OVERLAP, TOO_HARD = range(4)


def overlap_status(a: XlaTensor, b: XlaTensor) -> int:
    """How the memory of two tensors overlaps, as ATen's get_overlap_status decides it:
    the same memory in the same layout is a full overlap; layouts that do not fill a
    block of memory (a column, an expanded view) are too hard to compare."""
    if a is b:
        return FULL_OVERLAP
    if a._store is not b._store or not a.numel() or not b.numel():
        return NO_OVERLAP
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


def check_out_overlap(outs: tuple[Any, ...], inputs: tuple[Any, ...], op: str) -> None:
    """PyTorch's checks that an out= tensor shares no memory with the op's inputs (a full
    overlap is accepted unless `op` rejects it); as in PyTorch, layouts too hard to
    compare are let through."""
    flat = [t for x in inputs for t in (x if isinstance(x, (tuple, list)) else (x,)) if isinstance(t, XlaTensor)]
    for o in outs:
        if not isinstance(o, XlaTensor) or not o.numel():
            continue
        if op in OUT_MUST_NOT_BE_AN_INPUT and not o._whole and overlapping(tuple(o.shape), tuple(o.stride())):
            # these kernels check before resizing the output (assert_no_internal_overlap)
            raise RuntimeError(_INTERNAL_OVERLAP_MESSAGE)
        for t in flat:
            status = overlap_status(o, t)
            if status == PARTIAL_OVERLAP or (status == FULL_OVERLAP and op in OUT_MUST_NOT_BE_AN_INPUT):
                raise RuntimeError(_OVERLAP_MESSAGE)


_INTERNAL_OVERLAP_MESSAGE = (
    "unsupported operation: more than one element of the written-to tensor refers to a single memory location. "
    "Please clone() the tensor before performing the operation."
)
_OVERLAP_MESSAGE = (
    "unsupported operation: some elements of the input tensor and the written-to tensor refer to a single memory "
    "location. Please clone() the tensor before performing the operation."
)


# out= ops whose PyTorch kernels want the out tensor in exactly the result's dtype
# (other ops accept any dtype the result can be cast to).
OUT_DTYPE_MUST_MATCH = frozenset({"amax", "amin", "aminmax", "complex", "gather", "multinomial", "polar"})


def write_out(outs: tuple[Any, ...], result: Any, inputs: tuple[Any, ...] = (), op: str = "") -> Any:
    if len(outs) == 1 and isinstance(outs[0], list):  # a foreach op's out list: its schema returns nothing
        write_out(tuple(outs[0]), result, inputs, op)
        return None
    if inputs:
        check_out_overlap(outs, inputs, op)
    results = result if isinstance(result, (tuple, list)) else (result,)
    if op in OUT_DTYPE_MUST_MATCH:
        for o, r in zip(outs, results):
            if o.dtype != r.dtype:
                raise RuntimeError(f"Expected out tensor to have dtype {r.dtype}, but got {o.dtype} instead")
    for o, r in zip(outs, results):
        if isinstance(o, XlaTensor) and tuple(o.shape) != tuple(r.shape):
            resize_out(o, tuple(r.shape))
        write_into(o, _result_value(r))
    return outs[0] if len(outs) == 1 else tuple(outs)


def resize_out(out: XlaTensor, shape: tuple[int, ...]) -> None:
    """PyTorch resizes an out= tensor of the wrong shape (with a warning unless it was
    empty). `out` gets a new storage, to be written whole."""
    if out.numel():
        warnings.warn(
            f"An output with one or more elements was resized since it had shape {list(out.shape)}, which does not "
            f"match the required output shape {list(shape)}. This behavior is deprecated, and in a future PyTorch "
            "release outputs will not be resized unless they have zero elements. You can explicitly reuse an out "
            "tensor t by resizing it, inplace, to zero elements with t.resize_(0).",
            UserWarning,
            stacklevel=4,
        )
    restride_inplace(out, XlaTensor(Storage(None), shape, out.dtype))


def _result_value(t: Any) -> Any:
    if state.tracing:
        from .lazy import traced_value

        return traced_value(t)
    return value(t)


# ---------------------------------------------------------------- fallback and dispatch


def _to_cpu_arg(x: Any) -> Any:
    if isinstance(x, XlaTensor):
        with X64:
            return jax_to_cpu(_result_value(x) if not state.tracing else _materialized(x))
    if isinstance(x, (list, tuple)):
        return type(x)(_to_cpu_arg(y) for y in x)
    return x


def _materialized(x: XlaTensor) -> Any:
    from .lazy import materialize_value, traced_value

    return materialize_value(traced_value(x))


def fallback(op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run `op` through PyTorch on CPU: inputs copied out, results copied back."""
    metrics.fallback_calls[str(op)] += 1
    if state.trace is not None and state.trace.probe is not None:
        state.trace.probe.fail(f"it calls {op}, which runs on the CPU")
    cpu_args = _to_cpu_arg(args)
    cpu_kwargs = {k: _to_cpu_arg(v) for k, v in kwargs.items()}
    if "device" in cpu_kwargs and cpu_kwargs["device"] is not None:
        cpu_kwargs["device"] = torch.device("cpu")
    with torch._C._DisableTorchDispatch():
        out = op(*cpu_args, **cpu_kwargs)
    # Arguments the op writes into (self of an in-place op, out=, running stats) got
    # the new values on the CPU copies: write them back, and return our tensors.
    written = {}
    for i, a in enumerate(op._schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            ours, theirs = (args[i], cpu_args[i]) if i < len(args) else (kwargs.get(a.name), cpu_kwargs.get(a.name))
            if isinstance(ours, XlaTensor):
                with X64:
                    new = cpu_to_jax(theirs)
                if state.tracing:
                    from .lazy import _input

                    new = _input(new)
                write_into(ours, new, check_cast=False)
                written[id(theirs)] = ours
    if written:
        if isinstance(out, (tuple, list)):
            return type(out)(written.get(id(o)) or _from_cpu_result(o) for o in out)
        if id(out) in written:
            return written[id(out)]
    return _from_cpu_result(out)


def _from_cpu_result(out: Any) -> Any:
    if isinstance(out, torch.Tensor):
        return from_array(cpu_to_jax(out))
    if isinstance(out, (list, tuple)):
        return type(out)(_from_cpu_result(o) for o in out)
    return out


def user_call_site() -> str:
    """The innermost stack frame outside torch, JAX and this package."""
    import sys

    ours = [sys.modules.get(m) for m in ("xla_native_functions", "xla_native_functions.lowerings", "xla_native_functions.shape_fns")]
    skip = (str(Path(torch.__file__).parent), str(Path(jax.__file__).parent), str(Path(__file__).parent)) + tuple(
        str(Path(m.__file__).parent) for m in ours if m is not None and getattr(m, "__file__", None)
    )
    for frame in reversed(traceback.extract_stack()[:-1]):
        if not frame.filename.startswith(skip) and "<frozen" not in frame.filename:
            return f"{frame.filename}:{frame.lineno} ({frame.line or frame.name})"
    if torch._C._current_graph_task_id() != -1:
        return "backward()"
    return "<unknown>"


_warned_fallback: set[str] = set()


def _device_agnostic_custom_op(func: Any) -> Callable[..., Any] | None:
    if not isinstance(func, torch._ops.OpOverload) or func.namespace == "aten":
        return None
    from torch._library.custom_ops import _maybe_get_opdef

    opdef = _maybe_get_opdef(func)
    return None if opdef is None else opdef._backend_fns.get(None)


def missing_op(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if composite_implicit(func):
        # PyTorch decomposes these above the backend, except when they are called below
        # autograd (inside another op's kernel, under no-autograd guards) or under
        # inference mode, which skips autograd's kernels: then they reach us, and
        # PyTorch's own decomposition runs here instead (Note [Inference mode]).
        return decompose(func, args, kwargs)
    if (isinstance(func, torch._ops.OpOverload) and func._schema.name.startswith("aten::_foreach_")
            and torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeExplicitAutograd")):
        # An unlisted foreach op: PyTorch's loop calls the element op on each tensor.
        return per_tensor_loop(func, args, kwargs)
    python_impl = _device_agnostic_custom_op(func)
    if python_impl is not None:
        # A torch.library.custom_op written in Python for every device: its body's aten
        # ops run here like any others.
        return python_impl(*args, **kwargs)
    name = str(func.name()) if hasattr(func, "name") else str(func)
    name = name.removeprefix("aten::")
    if config.allow_cpu_fallback:
        if name not in _warned_fallback:
            _warned_fallback.add(name)
            warnings.warn(f"{name} is not lowered to JAX; running it on PyTorch CPU (allow_cpu_fallback)", stacklevel=3)
        return fallback(func, args, kwargs)
    base, dot, overload = name.partition(".")
    listed = base.rstrip("_") + dot + overload  # in-place forms are derived from the functional op
    hint = (
        f"add '{listed}' to a section of native_functions.yaml "
        "(full_codegen with lower_*/..._output_shape, supported, or fallback) and run `python -m codegen.generate`"
    )
    raise OperatorNotFound(
        f"aten operator '{name}' is not supported by xla_native_functions, called from {user_call_site()}. "
        f"To support it, {hint}; or set xla_native_functions.config.allow_cpu_fallback = True to run it on CPU."
    )


def dispatch(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        key = id(func)
        handler = _HANDLERS.get(key)
        _CALLS[key] = _CALLS.get(key, 0) + 1
        if handler is None:
            metrics.ops_by_id[key] = func  # registered ops are named by the registry
            return missing_op(func, args, kwargs)
        if config.debug_print_each_op or config.debug_accuracy_for_each_op:
            from .debug import debug_call

            return debug_call(func, handler, args, kwargs)
        return handler(*args, **kwargs)
    except Exception as error:
        if torch._C._current_graph_task_id() == -1:
            raise
        return _defer_backward_error(func, args, kwargs, error)


# Note [Errors during backward]
# With PyTorch's Python device guard (used when the C++ one could not be built, Note
# [Native device guard]), an exception raised from __torch_dispatch__ inside the
# autograd engine kills the process: while it unwinds, the stream guard calls back
# into Python with the error still pending, which throws inside a noexcept destructor
# (std::terminate). So during backward an error is kept, the op returns placeholder
# zeros of the right shape (the engine runs on to its end, on values nobody will see),
# and the autograd engine wrapper below raises the kept error from backward() on the
# caller's thread.
_backward_errors: list[BaseException] = []


def _defer_backward_error(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], error: BaseException) -> Any:
    if not _backward_errors:
        node = torch._C._current_autograd_node()
        if node is not None:
            error.add_note(f"raised by {func} in the backward of {node.name()}")
        _backward_errors.append(error)
    if func._schema.is_mutable:
        return next(a for a in args if isinstance(a, torch.Tensor))

    def to_meta(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
        if isinstance(x, (list, tuple)):
            return type(x)(to_meta(y) for y in x)
        return x

    def placeholder(m: Any) -> Any:
        if isinstance(m, torch.Tensor):
            with X64:
                return from_array(jnp.zeros(m.shape, TORCH_TO_NUMPY[m.dtype]))
        if isinstance(m, (list, tuple)):
            return type(m)(placeholder(y) for y in m)
        return m

    try:
        with torch._C._DisableTorchDispatch():
            meta_out = func(*to_meta(args), **{k: to_meta(v) for k, v in kwargs.items()})
    except Exception:
        # No shape to imitate: the engine's own shape check stops the pass instead.
        meta_out = to_meta(next(a for a in args if isinstance(a, torch.Tensor)))
    return placeholder(meta_out)


# Note [Backward on the calling thread]
# PyTorch's autograd engine runs the backward nodes of an accelerator's tensors on a
# worker thread of that device, and the caller sleeps until the pass ends. Our ops are
# Python run under the GIL, so the worker gains nothing, and the two hand-offs cost
# about 200 us per backward() on this 2-vCPU machine (a one-node backward: 322 against
# 114 us). So backward passes run on the calling thread, as for CPU tensors
# (multithreading off for the call, PyTorch's own switch; thread-local, and without
# effect on a CPU-only graph).


class _AutogradEngine:
    """The autograd engine, run on the calling thread (Note [Backward on the calling
    thread]), raising errors kept during backward (Note [Errors during backward]) from
    `run_backward` on the caller's thread."""

    def __init__(self, engine: Any):
        self._engine = engine

    def run_backward(self, *args: Any, **kwargs: Any) -> Any:
        multithreaded = torch._C._is_multithreading_enabled()
        torch._C._set_multithreading_enabled(False)
        try:
            result = self._engine.run_backward(*args, **kwargs)
        except BaseException:
            if _backward_errors:
                raise _backward_errors.pop() from None
            raise
        finally:
            torch._C._set_multithreading_enabled(multithreaded)
        if _backward_errors:
            raise _backward_errors.pop()
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)


def _install_autograd_engine() -> None:
    from torch.autograd.variable import Variable

    if not isinstance(Variable._execution_engine, _AutogradEngine):
        Variable._execution_engine = _AutogradEngine(Variable._execution_engine)


_LIBRARY: list[Any] = []


def install(registry: dict[Any, Any], sections: dict[str, str]) -> None:
    from . import index_checks, lazy, tensor

    global _lazy
    _lazy = lazy  # lazy imports this module: bound here, not at the top
    tensor._dispatch = dispatch
    _install_autograd_engine()
    _REGISTRY.update(index_checks.install(registry))
    from .supported.foreach import enable_foreach_optimizers

    enable_foreach_optimizers()
    _SECTIONS.update(sections)
    # Factories asked for device="jax" (torch.zeros(3, device="jax"), torch.tensor(7)
    # put on an XlaTensor's device) have no XlaTensor argument to route them to us:
    # they reach the dispatcher's PrivateUse1 key, where these kernels pick them up.
    lib = torch.library.Library("aten", "IMPL")
    for op in registry:
        if any(a.name == "device" for a in op._schema.arguments) and not any(
            a.type.kind() == "TensorType" for a in op._schema.arguments
        ):
            lib.impl(op._schema.name.removeprefix("aten::") + ("." + op._overloadname if op._overloadname != "default" else ""),
                     _factory_kernel(op), "PrivateUse1")
    # PyTorch's CPU kernels that produce a tensor on our device (cpu_tensor.to("jax")
    # inside torch.tensor(data, device=...), a list index moved to an XlaTensor's
    # device) end in a copy that reaches the dispatcher's PrivateUse1 key.
    lib.impl("_copy_from", _copy_from_kernel, "PrivateUse1")
    lib.impl("_copy_from_and_resize", _copy_from_and_resize_kernel, "PrivateUse1")
    _LIBRARY.append(lib)


def _copy_from_kernel(src: torch.Tensor, dst: Any, non_blocking: bool = False) -> Any:
    if isinstance(src, XlaTensor):
        new = value(src) if not state.tracing else _result_value(src)
    else:
        with torch._C._DisableTorchDispatch():
            new = cpu_to_jax(src.expand(dst.shape) if src.shape != dst.shape else src)
        if state.tracing:  # a CPU value enters the trace as a graph input
            new = _lazy._input(new)
    write_into(dst, new, check_cast=False)
    return dst


def _copy_from_and_resize_kernel(src: torch.Tensor, dst: Any) -> Any:
    if tuple(dst.shape) != tuple(src.shape):
        resize_out(dst, tuple(src.shape))
    return _copy_from_kernel(src, dst)


def _factory_kernel(op: Any) -> Any:
    def kernel(*args, **kwargs):
        return dispatch(op, args, kwargs)

    return kernel
