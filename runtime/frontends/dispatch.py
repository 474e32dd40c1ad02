"""The torch entry: every op on an XlaTensor (and factories asked for our device)
arrives in `dispatch`, which runs its registered handler, or explains what to do about
an op no manifest section lists. Errors raised during backward are carried to the
caller of backward() (Note [Errors during backward])."""

from __future__ import annotations

import warnings
from typing import Any, Callable

import jax.numpy as jnp
import torch

from ...shape_fns.common import TORCH_TO_NUMPY
from ..core.context import context
from ..core.convert import X64, cpu_to_jax
from ..core.inference import composite_implicit, decompose
from ..core.tensor import XlaTensor, from_array, register_dispatcher
from ..exec.custom_ops import library_op_handler, not_found_message
from ..exec.eager import value
from ..exec.fallback import fallback
from ..exec.mutation import per_tensor_loop, resize_out, write_into
from ..exec.registry import CALLS, HANDLERS, OperatorNotFound
from ..platform.call_site import user_call_site
from ..platform.config import config
from ..platform.hook_errors import backward_errors
from ..platform.metrics import metrics
from .debug import debug_call


_warned_fallback: set[str] = set()


def _device_agnostic_custom_op(func: Any) -> Callable[..., Any] | None:
    if not isinstance(func, torch._ops.OpOverload) or func.namespace == "aten":
        return None
    from torch._library.custom_ops import _maybe_get_opdef

    opdef = _maybe_get_opdef(func)
    return None if opdef is None else opdef._backend_fns.get(None)


def missing_op(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    late = library_op_handler(func)  # Note [Library operators] in runtime/exec/custom_ops.py
    if late is not None:
        return late(*args, **kwargs)
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
    if "sparse" in name.partition(".")[0]:
        # Not a missing lowering: no manifest entry or CPU round trip gives our tensors
        # a sparse layout.
        raise OperatorNotFound(
            f"aten operator '{name}', called from {user_call_site()}, makes or reads a sparse tensor "
            "(torch.sparse_coo or a compressed layout), which the jax device does not have. Use dense tensors: "
            "nn.Embedding and nn.EmbeddingBag with sparse=False (and an optimizer for dense gradients in place "
            "of SparseAdam), or x.to_dense() before moving x."
        )
    if config.allow_cpu_fallback:
        if name not in _warned_fallback:
            _warned_fallback.add(name)
            warnings.warn(f"{name} is not lowered to JAX; running it on PyTorch CPU (allow_cpu_fallback)", stacklevel=3)
        return fallback(func, args, kwargs)
    if isinstance(func, torch._ops.OpOverload) and func.namespace != "aten":
        raise OperatorNotFound(not_found_message(func, user_call_site()))
    base, dot, overload = name.partition(".")
    if base.endswith("_") and not base.endswith("__"):  # in-place forms are derived from the functional op
        base = base[:-1]
    listed = base + dot + overload
    hint = (
        f"add '{listed}' to a section of native_functions.yaml "
        "(full_codegen with lower_*/..._output_shape, supported, or fallback) and run `python -m codegen.generate`: "
        f"`python -m codegen.scaffold aten::{listed}` does the first step and writes the stubs (CONTRIBUTING.md)"
    )
    raise OperatorNotFound(
        f"aten operator '{name}' is not supported by xla_native_functions, called from {user_call_site()}. "
        f"To support it, {hint}; or set xla_native_functions.config.allow_cpu_fallback = True to run it on CPU."
    )


def dispatch(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        key = id(func)
        handler = HANDLERS.get(key)
        CALLS[key] = CALLS.get(key, 0) + 1
        if handler is None:
            metrics.ops_by_id[key] = func  # registered ops are named by the registry
            return missing_op(func, args, kwargs)
        if config.debug_print_each_op or config.debug_accuracy_for_each_op:
            return debug_call(func, handler, args, kwargs)
        if kwargs:
            return handler(*args, **kwargs)
        return handler(*args)  # an empty ** still builds a dict: 0.3 us of a 16x16 add's 11
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
# caller's thread. Errors raised by hooks are kept in the same list: Note [Hook errors
# during backward] in runtime/platform/hook_errors.py.
_backward_errors = backward_errors


def take_backward_error() -> BaseException | None:
    """The error an op raised during backward and kept for backward() to raise (Note
    [Errors during backward]), taken away so that it is not raised: the analysis
    (frontends/analyze.py) runs that op on PyTorch CPU instead."""
    return _backward_errors.pop() if _backward_errors else None


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


def install(registry: dict[Any, Any]) -> None:
    """Make this module the entry of every op on our tensors, run backward passes on the
    calling thread, and register kernels for what reaches PyTorch's dispatcher for our
    device without an XlaTensor argument."""
    register_dispatcher(dispatch)
    _install_autograd_engine()
    # Factories asked for device="jax" (torch.zeros(3, device="jax"), torch.tensor(7)
    # put on an XlaTensor's device) have no XlaTensor argument to route them to us:
    # they reach the dispatcher's PrivateUse1 key, where these kernels pick them up.
    lib = torch.library.Library("aten", "IMPL")
    for op in registry:
        if any(a.name == "device" for a in op._schema.arguments) and not any(
            a.type.kind() == "TensorType" for a in op._schema.arguments
        ):
            lib.impl(
                op._schema.name.removeprefix("aten::")
                + ("." + op._overloadname if op._overloadname != "default" else ""),
                _factory_kernel(op),
                "PrivateUse1",
            )
    # PyTorch's CPU kernels that produce a tensor on our device (cpu_tensor.to("jax")
    # inside torch.tensor(data, device=...), a list index moved to an XlaTensor's
    # device) end in a copy that reaches the dispatcher's PrivateUse1 key.
    lib.impl("_copy_from", _copy_from_kernel, "PrivateUse1")
    lib.impl("_copy_from_and_resize", _copy_from_and_resize_kernel, "PrivateUse1")
    # torch.tensor([a, b]) of 0-dim tensors reads each one's value with the Python key
    # excluded (so no tensor subclass takes part in building the data).
    lib.impl("_local_scalar_dense", _local_scalar_dense_kernel, "PrivateUse1")
    _LIBRARY.append(lib)


def _local_scalar_dense_kernel(t: Any) -> Any:
    return dispatch(torch.ops.aten._local_scalar_dense.default, (t,), {})


def _copy_from_kernel(src: torch.Tensor, dst: Any, non_blocking: bool = False) -> Any:
    trace = context.trace
    if isinstance(src, XlaTensor):
        new = value(src) if trace is None else trace.value_of(src)
    else:
        with torch._C._DisableTorchDispatch():
            new = cpu_to_jax(src.expand(dst.shape) if src.shape != dst.shape else src)
        if trace is not None:  # a CPU value enters the trace as a graph input
            new = trace.input(new)
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


def device_kernel_codes() -> tuple:
    """The code of the Python kernels registered at the PrivateUse1 key, which PyTorch
    calls outside `__torch_dispatch__` (Dynamo must run them as plain Python)."""
    return (_factory_kernel(None).__code__, _copy_from_kernel.__code__, _copy_from_and_resize_kernel.__code__,
            _local_scalar_dense_kernel.__code__)
