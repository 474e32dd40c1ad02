"""Operators outside aten: lowerings registered at run time (`register_lowering`), and
the manifest's entries of other libraries (`torchvision::nms`), registered when their
library is loaded. (Below the frontends: the dispatch entry asks it about operators
without a handler, the api layer re-exports `register_lowering`.)

Note [Run-time lowerings]
`register_lowering("mylib::op", lowering)` makes an IR node class for the operator at
run time, with the same argument kinds as a generated one (Note [Argument kinds] in
runtime/core/ir.py), and registers a handler for its OpOverload in the dispatch registry:
eagerly it runs a cached `jax.jit` executable of the lowering (static attributes in
the cache key, Scalars as runtime operands), while tracing (`compile()`,
`lazy_mode()`) it records a node, which the graph lowers like any other, and the
`torch.compile` backend dispatches it inside its graphs. The output shapes and dtypes
come from `shape_fn`, or from the operator's own fake (meta) kernel, run on meta
tensors once per input signature. Autograd is the operator's: a formula registered
with `torch.library.register_autograd` runs its ops on our tensors.

Note [Library operators]
A manifest entry of another namespace is generated like an aten one, but its
OpOverload exists only once its library is imported, which importing this package
does not do. At import, the entries whose operators exist are registered; the others
wait, and are registered the first time one of their operators reaches the backend
(`missing_op` in runtime/frontends/dispatch.py asks `library_op_handler`), or when the `torch.compile` backend compiles
a graph (`register_loaded_library_ops`), so importing the library after this package
is enough. An operator whose schema differs from the one the package was generated
for is not registered (calling it raises OperatorNotFound saying so).
"""

from __future__ import annotations

import inspect
import keyword
import re
import warnings
from typing import Any, Callable

import numpy as np
import torch

from ...shape_fns.common import NUMPY_TO_TORCH, TensorMeta
from ..core.context import context
from ..core.convert import X64
from ..core.ir import ATTR, ATTR_LIST, OPT_TENSOR, SCALAR, TENSOR, TENSOR_LIST, Node
from ..platform.call_site import user_call_site
from .eager import attr_list, eager_executable, operand, operand_opt, operands, scalar_operand, wrap
from .registry import REGISTRY, SECTIONS

REGISTERED = "registered"  # the section of an operator with a run-time lowering

# qualified name ("mylib::op" or "mylib::op.overload") -> where it was registered
_REGISTERED_AT: dict[str, str] = {}
# Note [Library operators]: qualified name -> (schema, handler) of entries not yet registered
_PENDING: dict[str, tuple[str, Callable]] = {}
# qualified name -> why a manifest entry is not registered
_UNAVAILABLE: dict[str, str] = {}


def qualified_name(op: torch._ops.OpOverload) -> str:
    """`torchvision::nms` for a default overload, `mylib::op.overload` otherwise."""
    name = op._schema.name
    return name if op._overloadname == "default" else f"{name}.{op._overloadname}"


# ---------------------------------------------------------------- the schema


def _arg_kind(t: Any) -> str:
    kind = t.kind()
    if kind == "TensorType":
        return TENSOR
    if kind == "NumberType":
        return SCALAR
    if kind == "OptionalType":
        inner = _arg_kind(t.getElementType())
        return {TENSOR: OPT_TENSOR}.get(inner, inner)
    if kind == "ListType":
        elem = t.getElementType()
        if elem.kind() == "OptionalType":
            elem = elem.getElementType()
        return TENSOR_LIST if elem.kind() == "TensorType" else ATTR_LIST
    return ATTR


def _python_name(name: str) -> str:
    return name + "_" if keyword.iskeyword(name) else name


def _returns_kind(op: torch._ops.OpOverload) -> str:
    returns = op._schema.returns
    kinds = [r.type.kind() for r in returns]
    if len(kinds) == 1 and kinds[0] == "ListType" and returns[0].type.getElementType().kind() == "TensorType":
        return "list"
    if not kinds or any(k != "TensorType" for k in kinds):
        return ""
    return "tensor" if len(kinds) == 1 else "tuple"


def _lookup(name: str) -> torch._ops.OpOverload | None:
    """The OpOverload of `ns::op` or `ns::op.overload`, if its library is loaded; never
    imports anything."""
    qualified, _, overload = name.partition(".")
    ns, _, op = qualified.partition("::")
    try:
        torch._C._get_schema(qualified, overload)
    except RuntimeError:
        return None
    return getattr(getattr(getattr(torch.ops, ns), op), overload or "default")


def _resolve(op: Any) -> torch._ops.OpOverload:
    """The OpOverload that `register_lowering` was given, by name or as an object."""
    if isinstance(op, torch._ops.OpOverload):
        return op
    opoverload = getattr(op, "_opoverload", None)  # a torch.library.custom_op
    if isinstance(opoverload, torch._ops.OpOverload):
        return opoverload
    if isinstance(op, torch._ops.OpOverloadPacket):
        overloads = op.overloads()
        if overloads == ["default"]:
            return op.default
        raise ValueError(
            f"'{op._qualified_op_name}' has the overloads {', '.join(overloads)}: register one of them, like "
            f"'{op._qualified_op_name}.{overloads[0]}'"
        )
    if not isinstance(op, str):
        raise TypeError(f"register_lowering takes an operator name like 'mylib::op', or its OpOverload; got {op!r}")
    if not re.fullmatch(r"\w+::\w+(\.\w+)?", op):
        raise ValueError(f"'{op}' is not an operator name: name it 'namespace::name' or 'namespace::name.overload'")
    found = _lookup(op)
    if found is not None:
        return found
    if "." not in op:
        overloads = sorted(n for n in torch._C._dispatch_get_all_op_names() if n.startswith(f"{op}."))
        if overloads:
            raise ValueError(f"'{op}' has the overloads {', '.join(overloads)}: register one of them by that name")
    raise ValueError(
        f"no operator '{op}' is registered with torch: define it first (torch.library.custom_op, or import the "
        "library that defines it), then register its lowering"
    )


def _has_fake_kernel(op: torch._ops.OpOverload) -> bool:
    from torch._library.custom_ops import _maybe_get_opdef
    from torch._library.utils import can_generate_trivial_fake_impl

    opdef = _maybe_get_opdef(op)
    if opdef is not None:  # a custom_op always has a Meta kernel, which raises without a fake function
        return opdef._abstract_fn is not None or can_generate_trivial_fake_impl(op)
    return any(torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), key)
               for key in ("Meta", "CompositeExplicitAutograd", "CompositeImplicitAutograd"))


def _signature_problems(fn: Callable, positional: list[str], kwonly: list[str]) -> list[str]:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return ["its signature cannot be read (inspect.signature fails); pass a Python function"]
    problems = []
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        problems.append("it uses *args/**kwargs; list the schema's parameters explicitly")
    have_pos = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    have_kw = [p.name for p in params if p.kind == p.KEYWORD_ONLY]
    if have_pos != positional:
        problems.append(
            f"its positional parameters are ({', '.join(have_pos)}), the schema's are ({', '.join(positional)})"
        )
    if have_kw != kwonly:
        problems.append(
            f"its keyword-only parameters are ({', '.join(have_kw)}), the schema's are ({', '.join(kwonly)})"
        )
    return problems


# ---------------------------------------------------------------- output metadata


_META_DTYPE = {bool: torch.bool, int: torch.int64, float: torch.get_default_dtype(), complex: torch.complex64}


def _python_scalar(x: Any) -> Any:
    """A Scalar argument as the fake kernel wants it: a Python number. At JAX trace time
    a Scalar is a traced value; one of its type stands in (a runtime operand cannot
    change output shapes or dtypes: its value is not part of the executable's key)."""
    if x is None or isinstance(x, (bool, int, float, complex)):
        return x
    kind = np.dtype(x.dtype).kind
    return {"b": True, "i": 1, "u": 1, "f": 1.0, "c": 1j}[kind]


def _meta_tensor(m: Any) -> Any:
    if m is None:
        return None
    if isinstance(m, TensorMeta):
        return torch.empty(m.shape, dtype=m.dtype, device="meta")
    if isinstance(m, (bool, int, float, complex)):  # a Python number given for a Tensor argument
        return torch.empty((), dtype=_META_DTYPE[type(m)], device="meta")
    return torch.empty(tuple(m.shape), dtype=NUMPY_TO_TORCH[np.dtype(m.dtype)], device="meta")  # a JAX value


def _meta_args(kinds: tuple[str, ...], metas: tuple[Any, ...]) -> list[Any]:
    out = []
    for kind, m in zip(kinds, metas):
        if kind in (TENSOR, OPT_TENSOR):
            out.append(_meta_tensor(m))
        elif kind == TENSOR_LIST:
            out.append([_meta_tensor(x) for x in m])
        elif kind == SCALAR:
            out.append(_python_scalar(m))
        elif kind == ATTR_LIST and m is not None:
            out.append(list(m))
        else:
            out.append(m)
    return out


def _cache_key(kinds: tuple[str, ...], metas: tuple[Any, ...]) -> Any:
    key = []
    for kind, m in zip(kinds, metas):
        if kind == SCALAR:
            key.append(type(_python_scalar(m)))
        elif kind == TENSOR_LIST:
            key.append(tuple(_meta_key(x) for x in m))
        elif kind in (TENSOR, OPT_TENSOR):
            key.append(_meta_key(m))
        else:
            key.append(m)
    return tuple(key)


def _meta_key(m: Any) -> Any:
    if m is None or isinstance(m, TensorMeta):
        return m
    if isinstance(m, (bool, int, float, complex)):
        return type(m)
    return (tuple(m.shape), np.dtype(m.dtype))


def _to_meta(out: Any, what: str) -> Any:
    if out is None:
        return None
    if isinstance(out, TensorMeta):
        return out
    if isinstance(out, torch.Tensor):
        return TensorMeta(tuple(out.shape), out.dtype)
    raise TypeError(f"{what} returned {type(out).__name__}, where it should return tensors (meta tensors)")


def _output_shape_fn(name: str, kinds: tuple[str, ...], kwonly: tuple[str, ...], returns: str, meta_fn: Callable,
                     what: str) -> Callable:
    cache: dict[Any, Any] = {}
    n_positional = len(kinds) - len(kwonly)

    def output_shape(*metas: Any) -> Any:
        try:
            key = _cache_key(kinds, metas)
            hit = cache.get(key)
        except TypeError:  # an unhashable attribute
            key, hit = None, None
        if hit is not None:
            return hit
        args = _meta_args(kinds, metas)
        with torch._C._DisableTorchDispatch(), torch.no_grad():
            out = meta_fn(*args[:n_positional], **dict(zip(kwonly, args[n_positional:])))
        if returns == "tensor":
            result = _to_meta(out, what)
        else:
            if not isinstance(out, (tuple, list)):
                raise TypeError(f"{what} returned {type(out).__name__}; the schema of {name} returns several tensors")
            result = (
                type(out)(_to_meta(o, what) for o in out) if returns == "tuple" else [_to_meta(o, what) for o in out]
            )
        if key is not None:
            cache[key] = result
        return result

    return output_shape


def _array_meta(kind: str, a: Any) -> Any:
    """An argument of a lowering as output_shape takes it."""
    if a is None or kind in (ATTR, ATTR_LIST, SCALAR):
        return a
    if kind == TENSOR_LIST:
        return [None if x is None else TensorMeta(tuple(x.shape), NUMPY_TO_TORCH[np.dtype(x.dtype)]) for x in a]
    if isinstance(a, (bool, int, float, complex)):
        return a
    return TensorMeta(tuple(a.shape), NUMPY_TO_TORCH[np.dtype(a.dtype)])


# ---------------------------------------------------------------- the node class and handler


def _make_node_class(op: torch._ops.OpOverload, lowering: Callable, shape_fn: Callable | None) -> type[Node]:
    qualname = qualified_name(op)
    schema_args = op._schema.arguments
    kinds = tuple(_arg_kind(a.type) for a in schema_args)
    names = tuple(_python_name(a.name) for a in schema_args)
    kwonly = tuple(n for n, a in zip(names, schema_args) if a.kwarg_only)
    n_positional = len(names) - len(kwonly)
    returns = _returns_kind(op)
    what = (f"the shape function {getattr(shape_fn, '__qualname__', shape_fn)!r} of {qualname}" if shape_fn is not None
            else f"the fake (meta) kernel of {qualname}")
    # the operator takes keyword arguments by their schema names, a shape function by its parameter names
    meta_kwonly = kwonly if shape_fn is not None else tuple(a.name for a in schema_args if a.kwarg_only)
    output_shape = _output_shape_fn(qualname, kinds, meta_kwonly, returns, shape_fn or op, what)
    lowering_name = getattr(lowering, "__qualname__", repr(lowering))

    def lower(*args: Any) -> Any:
        out = lowering(*args[:n_positional], **dict(zip(kwonly, args[n_positional:])))
        _check_lowering_output(
            qualname, lowering_name, what, out, output_shape(*[_array_meta(k, a) for k, a in zip(kinds, args)])
        )
        return out

    identifier = re.sub(r"\W", "_", qualname)
    return type(
        "".join(p[:1].upper() + p[1:] for p in identifier.split("_") if p) or "CustomOp",
        (Node,),
        dict(__slots__=(), op=qualname, name=identifier, section=REGISTERED, arg_names=names, arg_kinds=kinds,
             returns=returns, lower=staticmethod(lower), output_shape=staticmethod(output_shape)),
    )


def _check_lowering_output(qualname: str, lowering_name: str, what: str, out: Any, expected: Any) -> None:
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    metas = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    if len(outs) != len(metas):
        raise TypeError(f"the lowering {lowering_name} of {qualname} returned {len(outs)} outputs, {what} "
                        f"{len(metas)}: return what the operator returns")
    for i, (o, m) in enumerate(zip(outs, metas)):
        if o is None and m is None:
            continue
        got = (tuple(o.shape), NUMPY_TO_TORCH[np.dtype(o.dtype)]) if hasattr(o, "shape") else type(o).__name__
        if m is None or got != (m.shape, m.dtype):
            want = None if m is None else (m.shape, m.dtype)
            raise TypeError(f"the lowering {lowering_name} of {qualname} returned output {i} as {got}, but {what} "
                            f"says {want}: fix whichever disagrees with the operator's PyTorch implementation")


def _make_handler(op: torch._ops.OpOverload, cls: type[Node]) -> Callable:
    schema_args = op._schema.arguments
    names = [a.name for a in schema_args]
    defaults = [a.default_value if a.has_default_value() else inspect.Parameter.empty for a in schema_args]
    kinds = cls.arg_kinds
    count = len(names)
    unwrap = {TENSOR: operand, OPT_TENSOR: operand_opt, TENSOR_LIST: operands, SCALAR: scalar_operand,
              ATTR_LIST: attr_list}
    unwraps = [unwrap.get(k) for k in kinds]
    executable = eager_executable(cls)
    as_list = cls.returns == "list"

    def bind(args: tuple, kwargs: dict) -> tuple:
        if not kwargs and len(args) == count:
            return args
        bound = list(args[:count])
        for i in range(len(bound), count):
            if names[i] in kwargs:
                bound.append(kwargs[names[i]])
            elif defaults[i] is not inspect.Parameter.empty:
                bound.append(defaults[i])
            else:
                raise TypeError(f"{cls.op}() is missing the argument '{names[i]}'")
        return tuple(bound)

    def handler(*args: Any, **kwargs: Any) -> Any:
        bound = bind(args, kwargs)
        trace = context.trace
        if trace is not None:
            out = trace.record(cls, bound)
        else:
            with X64:
                out = wrap(executable(*[a if u is None else u(a) for u, a in zip(unwraps, bound)]))
        return list(out) if as_list else out

    handler.__name__ = cls.name
    return handler


# ---------------------------------------------------------------- public API


def register_lowering(op: Any, lowering: Callable, *, shape_fn: Callable | None = None, replace: bool = False) -> None:
    """Run the operator `op` (outside aten) on JAX with `lowering`, a pure JAX function.

    `op` is a qualified name, `"mylib::op"` or `"mylib::op.overload"`, or the operator
    itself (the result of `torch.library.custom_op`, or an OpOverload). `lowering`
    takes the schema's parameters, in order, with their names (keyword-only ones after
    `*`): JAX arrays for tensors (a list for `Tensor[]`, None for an absent `Tensor?`),
    a JAX scalar for `Scalar` arguments (fed at run time: a new value compiles nothing),
    and Python values for everything else (static: each new value compiles once). It
    returns a JAX array per tensor the operator returns, of the shape and dtype PyTorch
    gives it.

    Output shapes and dtypes come from `shape_fn`, a function of the same parameters
    taking and returning meta tensors, or else from the operator's fake kernel
    (`torch.library.register_fake`). The operator then runs eagerly, inside
    `compile()` and `lazy_mode()` traces and in `torch.compile(backend="xla_native")`
    graphs; backward runs the formula of `torch.library.register_autograd`.
    `replace=True` replaces an earlier registration (or the manifest's entry).
    See docs/custom_ops.md.
    """
    overload = _resolve(op)
    qualname = qualified_name(overload)
    if overload.namespace == "aten":
        raise ValueError(
            f"'{qualname}' is an aten operator: aten operators are listed in native_functions.yaml (README, "
            "\"Adding an op\"); register_lowering is for operators of other namespaces"
        )
    if not callable(lowering):
        raise TypeError(f"the lowering of {qualname} must be a function, not {type(lowering).__name__}")
    if shape_fn is not None and not callable(shape_fn):
        raise TypeError(f"the shape_fn of {qualname} must be a function, not {type(shape_fn).__name__}")
    schema = overload._schema
    if not replace:
        if qualname in _REGISTERED_AT:
            raise ValueError(
                f"a lowering of '{qualname}' is already registered (at {_REGISTERED_AT[qualname]}); "
                "pass replace=True to replace it"
            )
        if overload in REGISTRY or qualname in _PENDING:
            raise ValueError(
                f"'{qualname}' is listed in native_functions.yaml (section {SECTIONS.get(qualname)}); "
                "pass replace=True to use this lowering instead"
            )
    if schema.is_mutable:
        raise ValueError(
            f"'{qualname}' writes into its arguments ({schema}); a lowering only returns new values, so "
            "register_lowering takes functional operators only"
        )
    if not _returns_kind(overload):
        raise ValueError(
            f"'{qualname}' returns {', '.join(str(r.type) for r in schema.returns) or 'nothing'} ({schema}); "
            "register_lowering takes operators that return tensors"
        )
    if shape_fn is None and not _has_fake_kernel(overload):
        raise ValueError(
            f"'{qualname}' has no fake (meta) kernel to give its output shapes: register one with "
            f"torch.library.register_fake('{qualname}'), or pass shape_fn= to register_lowering"
        )
    positional = [_python_name(a.name) for a in schema.arguments if not a.kwarg_only]
    kwonly = [_python_name(a.name) for a in schema.arguments if a.kwarg_only]
    expected = ", ".join(positional + (["*"] + kwonly if kwonly else []))
    for fn, role in ((lowering, "lowering"), (shape_fn, "shape_fn")):
        problems = [] if fn is None else _signature_problems(fn, positional, kwonly)
        if problems:
            raise TypeError(
                f"the {role} {getattr(fn, '__qualname__', fn)!r} does not match the schema of {qualname} ({schema}): "
                + "; ".join(problems) + f". Expected: def {getattr(fn, '__name__', role)}({expected})"
            )
    cls = _make_node_class(overload, lowering, shape_fn)
    _PENDING.pop(qualname, None)
    _UNAVAILABLE.pop(qualname, None)
    REGISTRY[overload] = _make_handler(overload, cls)
    SECTIONS[qualname] = REGISTERED
    _REGISTERED_AT[qualname] = user_call_site()


# ---------------------------------------------------------------- manifest entries of other libraries


def _register_library_op(qualname: str, op: torch._ops.OpOverload, schema: str, handler: Callable) -> bool:
    if str(op._schema) != schema:
        _UNAVAILABLE[qualname] = (
            f"its schema is now {op._schema}, but the package was generated for {schema}; "
            "run `python -m codegen.generate` again"
        )
        warnings.warn(f"xla_native_functions: {qualname} is not registered: {_UNAVAILABLE[qualname]}", stacklevel=3)
        return False
    REGISTRY[op] = handler
    return True


def install_library_ops(library_ops: dict[str, tuple[str, Callable]], unavailable: dict[str, str]) -> None:
    """Called by the generated package at import (Note [Library operators])."""
    _UNAVAILABLE.update(unavailable)
    for qualname, (schema, handler) in library_ops.items():
        op = _lookup(qualname)
        if op is None:
            _PENDING[qualname] = (schema, handler)
        else:
            _register_library_op(qualname, op, schema, handler)


def library_op_handler(func: Any) -> Callable | None:
    """The handler of a manifest entry whose library was loaded after this package, now
    registered; None for any other operator."""
    if not _PENDING or not isinstance(func, torch._ops.OpOverload):
        return None
    qualname = qualified_name(func)
    pending = _PENDING.pop(qualname, None)
    if pending is None:
        return None
    schema, handler = pending
    return handler if _register_library_op(qualname, func, schema, handler) else None


def register_loaded_library_ops() -> None:
    """Register the waiting manifest entries whose libraries are loaded by now."""
    for qualname in list(_PENDING):
        op = _lookup(qualname)
        if op is not None:
            schema, handler = _PENDING.pop(qualname)
            _register_library_op(qualname, op, schema, handler)


def not_found_message(func: torch._ops.OpOverload, call_site: str) -> str:
    """OperatorNotFound's message for an operator of another namespace."""
    qualname = qualified_name(func)
    fallback = "or set xla_native_functions.config.allow_cpu_fallback = True to run it on CPU"
    why = _UNAVAILABLE.get(qualname)
    if why is not None:
        return (
            f"operator '{qualname}', called from {call_site}, is listed in native_functions.yaml but not registered: "
            f"{why}. Fix that and run `python -m codegen.generate`, or register a lowering at run time with "
            f"xla_native_functions.register_lowering('{qualname}', lowering) (docs/custom_ops.md); {fallback}."
        )
    return (
        f"operator '{qualname}', called from {call_site}, has no lowering to JAX. Register one with "
        f"xla_native_functions.register_lowering('{qualname}', lowering) (docs/custom_ops.md), or list it in "
        f"native_functions.yaml with its library under `libraries:`; {fallback}."
    )
