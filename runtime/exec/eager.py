"""Running one op eagerly: tensor arguments to JAX operands, one cached `jax.jit`
executable per op, results back to tensors. Everything here is on the hot path of
every op: keep it flat (docs/performance.md has the budget)."""

from __future__ import annotations

import math
from typing import Any

import jax
import numpy as np
import torch

from ...shape_fns.common import NUMPY_TO_TORCH, TensorMeta, scalar_type_name
from ...shape_fns.storage_size import check_result_sizes
from ..core.context import context
from ..core.convert import X64, cpu_to_jax, current_array
from ..core.ir import OPT_TENSOR, SCALAR, STATIC_KINDS, TENSOR, TENSOR_LIST, Node
from ..core.tensor import XlaTensor, from_array
from ...lowerings.storage import lower_strided_read
from ..core.views import reinterpreted_read_jit, strided_read_jit
from ..platform.executable_cache import eager_jit
from .keys import next_key


# ---------------------------------------------------------------- arguments


def value(t: Any) -> Any:
    """The JAX value of a tensor argument (eager)."""
    if t.__class__ is XlaTensor:
        if t._whole:
            store = t._store
            v = store.array
            if v is None or store.pending is not None:
                v = current_array(store)
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
        return lower_strided_read(self.base, *self.layout)


jax.tree_util.register_pytree_node(
    ViewOperand, lambda v: ((v.base,), v.layout), lambda layout, leaves: ViewOperand(leaves[0], layout)
)


def operand(t: Any) -> Any:
    """A tensor argument of an eager executable: its array, or for a view from offset 0
    its storage's array and layout (Note [Fused view reads])."""
    if t.__class__ is XlaTensor:
        store = t._store
        if t._whole:
            v = store.array
            return v if v is not None and store.pending is None else current_array(store)
        if t.storage_offset() == 0 and not t._reinterprets:
            v = store.array
            if v is None or store.pending is not None:
                v = current_array(store)
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
_number_to_array = eager_jit(lambda x: x)


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
    store = t._store
    cache = t._cache
    if cache is not None and cache[0] == store.version:
        return cache[1]
    base = store.array
    layout = (tuple(t.shape), tuple(t.stride()), t.storage_offset())
    if base is None or store.pending is not None:
        base = current_array(store)
    with X64:
        if t._reinterprets:
            out = reinterpreted_read_jit(base, t.dtype, *layout)
        else:
            out = strided_read_jit(base, *layout)
    t._cache = (store.version, out)
    return out


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
        return eager_jit(run, static_argnums=static, donate_argnums=0)
    return eager_jit(run, static_argnums=static)


def lower_checked(cls: type[Node], args: Any, in_place: bool = False) -> Any:
    """The body of an op's executable, at trace time: read view operands, run the shape
    function (PyTorch's errors), lower, check the lowering against the shape function;
    `in_place`, check and cast the result as a write into args[0]."""
    kinds = cls.arg_kinds
    args = [_read_operand(k, a) for k, a in zip(kinds, args)]
    metas = cls.output_shape(*[_trace_time_meta(k, a) for k, a in zip(kinds, args)])
    check_result_sizes(metas)  # before XLA aborts on them: Note [Overflowing sizes]
    with jax.named_scope(scope_name(cls)):  # Note [Op names in programs]
        out = cls.lower(*args)
        _check_output(cls, out, metas)
        if in_place:
            self_dtype = NUMPY_TO_TORCH[args[0].dtype]
            check_in_place_result(tuple(args[0].shape), self_dtype, tuple(out.shape), NUMPY_TO_TORCH[out.dtype])
            out = out.astype(args[0].dtype)
    return out


# Note [Op names in programs]
# Every lowering runs inside a JAX named scope called after its operator (`aten::abs`,
# `aten::add.Tensor`, `torchvision::nms`; the runtime's own nodes, such as the strided
# reads and writes of views, `xnf::strided_read`), in eager executables and in compiled
# graphs alike. JAX records the scope in each equation's name stack, so jaxprs,
# StableHLO locations, the `op_name` metadata of XLA's HLO (dumps, profiles) and
# `xla_native_functions.hlo()` say which operator every instruction came from. Scopes
# are metadata only: the instructions, and the persistent cache's key (which strips
# debug information), are unchanged. They cost nothing per call: lowerings run only
# while JAX traces.
_SCOPES: dict[type, str] = {}
_MANIFEST_SECTIONS = ("full_codegen", "supported", "fallback")


def scope_name(cls: type[Node]) -> str:
    """The named scope of a node class's lowering (Note [Op names in programs])."""
    name = _SCOPES.get(cls)
    if name is None:
        op = cls.op or cls.__name__
        if "::" in op:
            name = op
        elif cls.section in _MANIFEST_SECTIONS:
            name = "aten::" + op
        else:
            name = "xnf::" + op
        _SCOPES[cls] = name
    return name


_SCOPED: dict[type, Any] = {}


def scoped_lowering(cls: type[Node]) -> Any:
    """`cls.lower` inside its named scope, for graphs that call lowerings in turn."""
    fn = _SCOPED.get(cls)
    if fn is None:
        name = scope_name(cls)
        lower = cls.lower

        def fn(*args: Any) -> Any:
            with jax.named_scope(name):
                return lower(*args)

        _SCOPED[cls] = fn
    return fn


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


def run_node(cls: type[Node], args: tuple[Any, ...], key: Any = None) -> Any:
    """Run an IR node class (used by `supported` ops) in this thread's mode. A node whose
    lowering takes a random key gets `key` (a key tensor), or a new one."""
    if cls.needs_key:
        args = args + (next_key() if key is None else key,)
    trace = context.trace
    if trace is not None:
        return trace.record(cls, args)
    exe = _EXECUTABLES.get(cls)
    if exe is None:
        exe = _EXECUTABLES[cls] = eager_executable(cls)
    unwrap = {TENSOR_LIST: operands, OPT_TENSOR: operand_opt, TENSOR: operand}
    with X64:
        return wrap(exe(*[unwrap[k](a) if k in unwrap else a for k, a in zip(cls.arg_kinds, args)]))


def check_in_place_result(shape: tuple, dtype: torch.dtype, new_shape: tuple, new_dtype: torch.dtype,
                          check_cast: bool = True) -> None:
    """PyTorch's errors for writing a result of (new_shape, new_dtype) into a tensor."""
    if check_cast and new_dtype != dtype and not torch.can_cast(new_dtype, dtype):
        raise RuntimeError(
            f"result type {scalar_type_name(new_dtype)} can't be cast to the desired output type "
            f"{scalar_type_name(dtype)}"
        )
    if new_shape != shape:
        raise RuntimeError(f"output with shape {list(shape)} doesn't match the broadcast shape {list(new_shape)}")

