"""JAX interop: move values between torch and JAX, run torch code as JAX functions,
and call JAX functions from torch code.

Torch code becomes JAX by running it on XlaTensors whose storages hold JAX tracers
(Note [Tracer-backed tensors] in runtime/frontends/dynamo.py): every op dispatches to its
lowering exactly as in eager mode, and JAX sees one traceable function, so
`jax.jit`, `jax.grad` and `jax.vmap` apply to it.

Note [x64 in interop]
PyTorch's int64/float64 need JAX's x64 mode, which this package enables only around
its own JAX calls: an int64 array used outside x64 may silently become int32.
The functions here enter it themselves: `jax_function`'s function, `jax_jit`'s wrapper
and the JAX function passed to `call_jax` all run under it. Arrays they return keep
their dtypes, but JAX code of yours that goes on computing on 64-bit arrays must run
inside `with xla_native_functions.x64():` too (float32 code need not).
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import torch
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from ..core.context import context, untraced
from ..core.convert import X64, cpu_to_jax, jax_to_cpu, shared_array
from ..core.tensor import XlaTensor, from_array
from ..exec.eager import value
from ..exec.keys import graph_seed, keys_from
from ..exec.sharding import argument_shardings, constrain_outputs, place_argument

__all__ = ["call_jax", "jax_function", "jax_jit", "to_jax", "to_torch_tensor", "x64"]


def x64():
    """The context manager under which this package runs JAX (re-entrant); see Note [x64 in interop]."""
    return X64


def _is_array(x: Any) -> bool:
    return isinstance(x, (jax.Array, np.ndarray))


# ---------------------------------------------------------------- values


def _tensor_to_jax(t: torch.Tensor) -> jax.Array:
    if isinstance(t, XlaTensor):
        trace = context.trace
        if trace is not None:
            return trace.host_value(t)
        return value(t)  # reads the storage: no op, so no autograd record to avoid
    shared = shared_array(t)
    return cpu_to_jax(t) if shared is None else shared


def to_jax(obj: Any) -> Any:
    """torch -> JAX. Tensors (ours or CPU) become `jax.Array`s: ours without a copy,
    CPU tensors through DLPack (zero-copy where JAX accepts the buffer, so do not
    mutate the tensor while JAX uses the array). A module becomes a dict of its
    parameters and buffers by name (what `jax_function` takes). Pytrees are mapped."""
    if isinstance(obj, torch.nn.Module):
        return {name: _tensor_to_jax(t) for name, t in _named_state(obj).items()}
    if isinstance(obj, torch.Tensor):
        return _tensor_to_jax(obj)
    return tree_map(lambda x: _tensor_to_jax(x) if isinstance(x, torch.Tensor) else x, obj)


def to_torch_tensor(obj: Any, device: str = "jax") -> Any:
    """JAX -> torch. Arrays (in any pytree) become tensors on this package's device
    (`device="jax"`, no copy) or PyTorch CPU tensors (`device="cpu"`, through DLPack)."""
    if device not in ("jax", "cpu"):
        raise ValueError(f"device must be 'jax' or 'cpu', not {device!r}")

    def convert(x):
        if not _is_array(x):
            return x
        with X64:
            arr = jnp.asarray(x)
        if device == "jax":
            return from_array(arr)
        return jax_to_cpu(arr)

    return tree_map(convert, obj)


def _named_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    # Tied tensors appear once, under their first name; functional calls tie the
    # other names to it, so a gradient or update is never split between aliases.
    out = dict(module.named_parameters())
    out.update(module.named_buffers())
    return out


# ---------------------------------------------------------------- torch code as JAX


def _run_on_arrays(fn: Callable, args: Any, kwargs: Any, key: Any = None) -> Any:
    """Run torch code on tensors wrapping the given arrays (concrete or tracers) and
    return its outputs as arrays; with a JAX `key`, random ops derive theirs from it."""
    keys = contextlib.nullcontext() if key is None else keys_from(None, key=key)
    with untraced(), X64, keys:
        targs, tkwargs = tree_map(lambda x: from_array(jnp.asarray(x)) if _is_array(x) else x, (args, kwargs))
        out = fn(*targs, **tkwargs)
        return tree_map(lambda t: value(t) if isinstance(t, XlaTensor) else t, out)


def jax_function(obj: torch.nn.Module | Callable, *, with_key: bool = False) -> tuple[Callable, dict[str, jax.Array]]:
    """A torch module or function as a pure JAX function of (parameters, inputs).

    Returns `(fn, params)`: `params` maps parameter and buffer names to `jax.Array`s
    (empty for a plain function) and `fn(params, *inputs, **kwargs)` runs the module
    with those values (`torch.func.functional_call`) on JAX arrays, returning its
    outputs with every tensor replaced by a `jax.Array`. `fn` is pure JAX:
    `jax.jit(fn)`, `jax.grad(loss_of(fn))` and `jax.vmap(fn, ...)` work on it.

    Random ops (dropout, `rand_like`): with `with_key=True`, `fn(params, key, *inputs,
    **kwargs)` takes a JAX PRNG key (`jax.random.key(0)` or `jax.random.PRNGKey(0)`)
    and derives every random op's key from it, as JAX code does, so a jitted `fn`
    draws new numbers for each new key. Without it each op draws its key from
    PyTorch's CPU generator when the op runs, which under `jax.jit` is once, at
    tracing: the compiled function then repeats its numbers.

    Contract: outputs keep PyTorch's dtypes (see Note [x64 in interop]); in-place
    updates of buffers (BatchNorm running statistics in training mode) are not
    returned."""
    if isinstance(obj, torch.nn.Module):
        module = obj
        params = to_jax(module)

        def call(state_tensors, *a, **k):
            return torch.func.functional_call(module, state_tensors, a, k)

        def fn(params, *args, **kwargs):
            return _run_on_arrays(call, (params,) + args, kwargs)

        def fn_with_key(params, key, *args, **kwargs):
            return _run_on_arrays(call, (params,) + args, kwargs, key=_checked_key(key))

        return (fn_with_key if with_key else fn), params

    def pure(params, *args, **kwargs):
        return _run_on_arrays(obj, args, kwargs)

    def pure_with_key(params, key, *args, **kwargs):
        return _run_on_arrays(obj, args, kwargs, key=_checked_key(key))

    return functools.wraps(obj)(pure_with_key if with_key else pure), {}


def _checked_key(key: Any) -> Any:
    if isinstance(key, (jax.Array, jax.core.Tracer)) and (
        jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key) or (key.dtype == jnp.uint32 and key.shape == (2,))
    ):
        return key
    raise TypeError(
        f"a function from jax_function(..., with_key=True) takes a JAX PRNG key after the parameters, "
        f"fn(params, key, *inputs); got {type(key).__name__}"
        + (f" of dtype {key.dtype} and shape {tuple(key.shape)}" if hasattr(key, "dtype") else "")
        + ": pass jax.random.key(seed) or jax.random.PRNGKey(seed) (or jax.random.split of one)"
    )


class _StaticKey:
    """The non-array part of a call (tree structure and Python values), and the default
    dtype the call's factories take: a jit static argument."""

    __slots__ = ("spec", "leaves", "default_dtype", "_hash")

    def __init__(self, spec: Any, leaves: tuple):
        self.spec = spec
        self.leaves = leaves
        self.default_dtype = torch.get_default_dtype()
        self._hash = hash((str(spec), leaves, self.default_dtype))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: Any) -> bool:
        return (isinstance(other, _StaticKey) and self.leaves == other.leaves and self.spec == other.spec
                and self.default_dtype == other.default_dtype)


_ARRAY = object()


def jax_jit(fn: Callable | None = None, **jit_kwargs: Any) -> Callable:
    """Decorator: run a torch function as one `jax.jit` program.

    Tensor arguments (ours or CPU, anywhere in pytrees) are the program's operands;
    `nn.Module` arguments contribute their parameters and buffers as operands; other
    values are static (a new value compiles again). Results are this package's
    tensors, or CPU tensors when every tensor argument was a CPU tensor. Tensors the
    function captures from outside its arguments are baked in as constants; input
    tensors it mutates in place get their new values written back. Random ops draw new
    numbers at every call, from a seed operand drawn from PyTorch's CPU generator
    (`torch.manual_seed` reproduces them); a function that draws none leaves the
    generator as it was."""
    if fn is None:
        return functools.partial(jax_jit, **jit_kwargs)
    draws: dict[_StaticKey, bool] = {}  # whether the function traced for these statics drew random numbers

    def pure(arrays: list, key: _StaticKey, seed: Any):
        def call():
            leaves = []
            it = iter(arrays)
            tensors = []
            for leaf in key.leaves:
                if leaf is _ARRAY:
                    t = from_array(next(it))
                    tensors.append(t)
                    leaves.append(t)
                else:
                    leaves.append(leaf)
            modules = [x for x in leaves if isinstance(x, _ModuleSlot)]
            swaps = []
            for slot in modules:
                names = slot.names
                swaps.append(torch.nn.utils.stateless._reparametrize_module(
                    slot.module, {n: from_array(next(it)) for n in names}, tie_weights=True))
            for s in swaps:
                s.__enter__()
            try:
                leaves = [x.module if isinstance(x, _ModuleSlot) else x for x in leaves]
                versions = [t._store.version for t in tensors]
                args, kwargs = tree_unflatten(leaves, key.spec)
                out = fn(*args, **kwargs)
            finally:
                for s in reversed(swaps):
                    s.__exit__(None, None, None)
            mutated = [i for i, t in enumerate(tensors) if t._store.version != versions[i]]
            out_arrays = tree_map(lambda t: value(t) if isinstance(t, XlaTensor) else t, out)
            return out_arrays, {i: value(tensors[i]) for i in mutated}

        def drew() -> None:
            draws[key] = True

        with untraced(), keys_from(seed, drew):
            return call()

    # Layouts over devices (docs/distributed.md): inputs are put in theirs before the
    # call, outputs constrained to theirs inside the program.
    in_shardings = jit_kwargs.pop("in_shardings", None)
    out_shardings = jit_kwargs.pop("out_shardings", None)
    if out_shardings is not None:
        body = pure

        def pure(arrays: list, key: _StaticKey, seed: Any):
            out, mutated = body(arrays, key, seed)
            return constrain_outputs(out, out_shardings), mutated

    jitted = jax.jit(pure, static_argnums=(1,), **jit_kwargs)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        leaves, spec = tree_flatten((args, kwargs))
        shardings = None if in_shardings is None else argument_shardings(args, kwargs, in_shardings)
        arrays = []
        static = []
        tensor_leaves = []
        module_arrays = []
        any_ours = False
        all_cpu = True
        for leaf in leaves:
            if isinstance(leaf, torch.Tensor):
                any_ours = any_ours or isinstance(leaf, XlaTensor)
                all_cpu = all_cpu and not isinstance(leaf, XlaTensor)
                arrays.append(_tensor_to_jax(leaf) if shardings is None or shardings[len(static)] is None
                              else place_argument(_tensor_to_jax(leaf), shardings[len(static)]))
                tensor_leaves.append(leaf)
                static.append(_ARRAY)
            elif isinstance(leaf, torch.nn.Module):
                if shardings is not None and shardings[len(static)] is not None:
                    raise TypeError("jax_jit: in_shardings gives a module argument a sharding: lay its parameters out "
                                    "instead (xla_native_functions.distributed), and give None for the module")
                named = _named_state(leaf)
                slot = _ModuleSlot(leaf, tuple(named))
                static.append(slot)
                module_arrays += [_tensor_to_jax(t) for t in named.values()]
                any_ours = any_ours or any(isinstance(t, XlaTensor) for t in named.values())
            else:
                static.append(leaf)
        to_cpu = all_cpu and not any_ours
        key = _StaticKey(spec, tuple(static))
        first = key not in draws
        # Before the first call it is not known whether the function draws: a seed is
        # drawn, and PyTorch's generator put back if it does not.
        state = torch.default_generator.get_state() if first else None
        seed = graph_seed() if draws.get(key, True) else 0
        with X64:
            out, mutated = jitted(arrays + module_arrays, key, seed)
        if first and not draws.setdefault(key, False):  # its trace set True if it drew
            torch.default_generator.set_state(state)
        for i, new in mutated.items():
            with torch.no_grad():
                tensor_leaves[i].copy_(
                    jax_to_cpu(new) if not isinstance(tensor_leaves[i], XlaTensor) else from_array(new)
                )
        return tree_map(lambda a: (jax_to_cpu(a) if to_cpu else from_array(a)) if isinstance(a, jax.Array) else a, out)

    return wrapper


class _ModuleSlot:
    """A module argument of a jax_jit function: static by identity and state names."""

    __slots__ = ("module", "names")

    def __init__(self, module: torch.nn.Module, names: tuple[str, ...]):
        self.module = module
        self.names = names

    def __hash__(self) -> int:
        return hash((id(self.module), self.names))

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, _ModuleSlot) and other.module is self.module and other.names == self.names


# ---------------------------------------------------------------- JAX from torch


class _JaxCall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, fn, spec, to_cpu, holder, *tensors):
        arrays = [_tensor_to_jax(t) for t in tensors]

        def flat_fn(*arrs):
            args, kwargs = _rebuild(spec, arrs)
            return fn(*args, **kwargs)

        with X64:
            out, vjp = jax.vjp(flat_fn, *arrays)
        ctx.vjp = vjp
        ctx.to_cpu = to_cpu
        flat, out_spec = jax.tree_util.tree_flatten(out)
        ctx.out_spec = out_spec
        holder.append(out_spec)
        ctx.out_meta = [(a.shape, a.dtype) for a in flat]
        ctx.in_dtypes = [a.dtype for a in arrays]
        return tuple(_from_array(a, to_cpu) for a in flat)

    @staticmethod
    def backward(ctx, *grads):
        cts = []
        for g, (shape, dtype) in zip(grads, ctx.out_meta):
            with X64:
                cts.append(jnp.zeros(shape, dtype) if g is None else _tensor_to_jax(g).astype(dtype))
        with X64:
            in_grads = ctx.vjp(jax.tree_util.tree_unflatten(ctx.out_spec, cts))
        out = []
        for g in in_grads:
            if g is None or (hasattr(g, "dtype") and g.dtype == jax.dtypes.float0):
                out.append(None)
            else:
                out.append(_from_array(g, ctx.to_cpu))
        return (None, None, None, None) + tuple(out)


def _from_array(a: jax.Array, to_cpu: bool) -> torch.Tensor:
    return jax_to_cpu(a) if to_cpu else from_array(a)


class _Slot:
    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index


def _rebuild(spec: tuple, arrays: tuple) -> Any:
    leaves, tree = spec
    return tree_unflatten([arrays[x.index] if isinstance(x, _Slot) else x for x in leaves], tree)


def call_jax(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """Call a JAX function from torch code: tensor arguments (in any pytree) are passed
    as `jax.Array`s, array results come back as tensors (this package's, or CPU
    tensors when every tensor argument was a CPU tensor). `fn` runs under x64 (Note
    [x64 in interop]). Differentiable: with grad enabled and an argument that
    requires grad, torch's backward runs `jax.vjp` of `fn`. In compiled mode
    (`xla_native_functions.compile`) the call ends the current trace."""
    leaves, tree = tree_flatten((args, kwargs))
    tensors = []
    spec_leaves = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            spec_leaves.append(_Slot(len(tensors)))
            tensors.append(leaf)
        else:
            spec_leaves.append(leaf)
    to_cpu = bool(tensors) and not any(isinstance(t, XlaTensor) for t in tensors)
    spec = (spec_leaves, tree)
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
    if needs_grad:
        holder: list[Any] = []
        flat = _JaxCall.apply(fn, spec, to_cpu, holder, *tensors)
        return jax.tree_util.tree_unflatten(holder[0], list(flat))
    arrays = [_tensor_to_jax(t) for t in tensors]
    with X64:
        a, k = _rebuild(spec, tuple(arrays))
        out = fn(*a, **k)
    return jax.tree_util.tree_map(lambda x: _from_array(x, to_cpu) if isinstance(x, jax.Array) else x, out)
