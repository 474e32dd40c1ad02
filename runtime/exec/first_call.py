"""The first calls of an eager op signature, answered by PyTorch's own CPU kernel while
its XLA executable compiles in a background thread.

Note [First calls on PyTorch CPU]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Eager mode runs every op through a `jax.jit` executable of its own, compiled once per op
and input signature (runtime/exec/eager.py). A fresh process compiles one for every
signature a program uses: the first SGD step of an EfficientNet-B0-sized network has 446
of them, and XLA CPU took 59-71 s to compile them on this 2-core machine (a depthwise
convolution's backward 0.3 s each); with the persistent compilation cache filled, tracing,
lowering and reading the cache still took 17-21 s of its first step (docs/performance.md,
"First call and caches"). PyTorch's first step of the same network took 2 s.

So the executable of a generated (`full_codegen`) aten op, of the training-mode batch
norm node (`batch_norm_with_update`, answered by `_native_batch_norm_legit` on clones of
the running statistics), of the tracer's strided read of a view (`strided_read`, an
`as_strided` of the flat buffer, met when a compiled graph is interpreted: Note [First
calls of compiled graphs] in graph_first_call.py) and of a foreach op's chunk
(runtime/supported/foreach.py, answered element by element) checks, at the moment JAX
starts tracing it for a new signature, whether this call may be answered another way; if
so it raises `FirstCall` before anything is traced, and `tiered_executable`'s wrapper
answers the call with PyTorch's CPU kernel for the same aten overload, on zero-copy DLPack
views of the operands' host buffers (a view operand read with `as_strided`), and copies
the results into fresh XLA buffers. The same signature goes to one background thread,
which lowers and compiles the executable for the operands' shapes and dtypes (or loads it
from the persistent cache) without running it; JAX's caches keep the trace, the lowering
and the executable, so the op's next call runs it (no new trace) and from then on takes
JAX's C++ fast path as before (the thread empties the function's C++ cache once a
signature is compiled, and so does a call that compiles at once: an entry whose call
raised FirstCall would send every later call of its signature through JAX's Python
path). A signature never pays both: until its executable is ready, further calls go to
PyTorch as well. Calls that hit JAX's cache never enter the check: the hot path is one
Python frame more (the wrapper), nothing else.

What stays the same: results are PyTorch CPU's own (the ops match PyTorch's semantics, so
compiled and first-call results agree within floating-point rounding); every result is a
fresh contiguous buffer, as the executable's are, so dtypes, shapes, strides and aliasing
of the tensors made from them are unchanged; an in-place op's result is cast to self's
dtype and written by the same code as the executable's. Before PyTorch runs, the op's
shape function runs on the operands' shapes and dtypes, as at trace time; if it raises,
if PyTorch raises, or if PyTorch's result disagrees with the shape function in shape or
dtype, the call compiles at once instead and raises or returns what the executable does,
so errors are the executable's own. Random ops (a lowering taking a key: our RNG stream),
other runtime-internal nodes, supported and custom ops, operands that are tracers (an op inside
a JAX transformation) or on another platform than CPU, and arrays split over devices all
compile as before. Calls from several threads are safe: the decision is made per call
from JAX's cache, the pending set is locked, and the background thread traces with no
trace of its own (Note [Per-thread trace] in runtime/core/context.py).

The background thread runs at the lowest CPU priority (nice 19: at normal priority it
took the zoo ResNet's cold first step from 0.97 s to 3.9 s), and it starts on a burst of
new signatures only once the caller has met no new one for 30 ms, or after 2 s (Note
[Compiles after the burst] at _Worker): the EfficientNet-sized first step went from 5.6
to 2.0 s cold and from 2.4 to 1.6 s warm, and all its signatures were compiled after 41 s
instead of 98 (two runs half an hour apart, load 9-10 and 5-6: partly the machine).

A compiled graph's interpretation answers its nodes this way under `quiet()`: their
signatures are not handed to the background thread, whose compiles would compete with
the graph's own (measured there).

`config.first_calls_on_cpu = False` turns this off: every new signature compiles before
its first call returns, as before. The background thread is a daemon; at exit it stops
taking work and finishes the compile in hand; a forked child starts with none.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import queue
import threading
import time
from typing import Any

import jax
import torch

from ...shape_fns.common import NUMPY_TO_TORCH, TensorMeta
from ...shape_fns.storage_size import check_result_sizes, check_storage_size
from ..core.context import context, pytorch_kernels
from ..core.convert import X64, numpy_of
from ..core.ir import OPT_TENSOR, SCALAR, STATIC_KINDS, TENSOR, TENSOR_LIST, Node
from ..core.placement import local_devices
from ..platform.config import config
from ..platform.executable_cache import eager_jit
from .eager import (ViewOperand, check_in_place_result, eager_executable, lower_checked, operand, operand_opt,
                    operands, wrap)
from .eager import run_node as eager_run_node


class FirstCall(BaseException):
    """Raised where JAX would start tracing an eager executable for a new signature
    whose call PyTorch CPU may answer (Note [First calls on PyTorch CPU]). Not an
    Exception: JAX's API boundary filters the traceback of every Exception passing
    through it, which cost about 5 ms per first call."""


class _Local(threading.local):
    compiling = False  # this thread compiles whatever it traces
    answering = False  # this thread runs a PyTorch kernel for a first call
    quiet = False  # first calls hand no signature to the background thread (graph_first_call.py)


_local = _Local()


class FirstCallStats:
    """Counts, for tests and metrics_report(): calls answered by PyTorch CPU, signatures
    compiled in the background, calls that compiled at once instead; compiled graphs'
    calls answered by interpretation and graphs compiled in the background (Note [First
    calls of compiled graphs] in graph_first_call.py)."""

    def __init__(self):
        self.on_cpu = 0
        self.background_compiles = 0
        self.compiled_at_once = 0
        self.graphs_interpreted = 0
        self.graph_background_compiles = 0


stats = FirstCallStats()


def _check_new_signature() -> None:
    """In an executable's traced body: raise FirstCall unless this thread compiles."""
    if config.first_calls_on_cpu and not _local.compiling:
        raise FirstCall


# Generated ops whose PyTorch CPU kernel gives other values than ours, by design: their
# first calls compile.
_COMPILED_FIRST_CALLS = {
    "_grouped_mm": "PyTorch leaves the rows outside every group unset; ours are zeros",
    "mkldnn_rnn_layer_backward": "PyTorch's kernel reads the oneDNN workspace of its own forward, which ours "
                                 "does not make (an empty one)",
}


def answerable(cls: type[Node]) -> bool:
    """Whether PyTorch CPU can answer `cls`'s first calls: a generated aten op, or a
    runtime node with a PyTorch form here, never one taking a random key."""
    return ((cls.section == "full_codegen" and cls.name not in _COMPILED_FIRST_CALLS)
            or cls.name in _INTERNAL_ON_TORCH) and not cls.needs_key


def tiered_executable(cls: type[Node], in_place: bool = False) -> Any:
    """The eager executable of `cls` (eager.eager_executable) whose first calls of each
    signature run on PyTorch CPU while it compiles in the background, where the op allows
    (Note [First calls on PyTorch CPU])."""
    if not answerable(cls):
        return eager_executable(cls, in_place)
    static = tuple(i for i, k in enumerate(cls.arg_kinds) if k in STATIC_KINDS)

    def run(*args):
        _check_new_signature()
        return lower_checked(cls, args, in_place)

    # the name eager_executable gives it: the persistent cache's entries stay valid
    run.__name__ = f"{'donating' if in_place else 'eager'}_{cls.name}"
    jitted = eager_jit(run, static_argnums=static, donate_argnums=0 if in_place else ())

    def call(*args):
        try:
            return jitted(*args)
        except FirstCall:
            pass
        return _first_call(jitted, cls, in_place, args)

    call.__name__ = run.__name__
    call.__wrapped__ = jitted
    call.lower = functools.partial(_compiling, jitted.lower)  # lowering traces: never a first call
    call.clear_cache = jitted.clear_cache
    call._cache_size = jitted._cache_size
    return call


_NODE_EXECUTABLES: dict[type, Any] = {}
_UNWRAP = {TENSOR_LIST: operands, OPT_TENSOR: operand_opt, TENSOR: operand}


def run_node(cls: type[Node], args: tuple[Any, ...], key: Any = None) -> Any:
    """eager.run_node, whose eager executables answer first calls on PyTorch CPU where
    the node allows (Note [First calls on PyTorch CPU])."""
    if context.trace is not None or not answerable(cls):
        return eager_run_node(cls, args, key)
    exe = _NODE_EXECUTABLES.get(cls)
    if exe is None:
        exe = _NODE_EXECUTABLES[cls] = tiered_executable(cls)
    with X64:
        return wrap(exe(*[_UNWRAP[k](a) if k in _UNWRAP else a for k, a in zip(cls.arg_kinds, args)]))


def foreach_call(exe: Any, cls: type[Node], in_place: bool, donated: list, dynamic: list, static: tuple) -> list:
    """`exe(donated, dynamic, static)`, a foreach op's executable over a part of its
    elements (runtime/supported/foreach.py, whose traced body calls
    check_new_signature()), with first calls answered element by element on PyTorch."""
    try:
        return exe(donated, dynamic, static)
    except FirstCall:
        pass
    args = (donated, dynamic, static)
    try:
        hash(static)
        key = (id(exe), tuple(_leaf_signature(a) for a in donated),
               tuple(tuple(_leaf_signature(a) for a in element) for element in dynamic), static)
    except (_NotEligible, TypeError):
        key = None

    def on_torch():
        given = iter(donated)
        outs = []
        for dyn, (stat, donates) in zip(dynamic, static):
            dyn, stat = iter(dyn), iter(stat)
            element = [next(stat) if k in STATIC_KINDS else next(given) if i == 0 and donates else next(dyn)
                       for i, k in enumerate(cls.arg_kinds)]
            outs.append(_on_torch(cls, in_place, tuple(element)))
        return outs

    def copies():
        return ([_private_copy(a) for a in donated], [[_private_copy(a) for a in element] for element in dynamic],
                static)

    return _answer(exe, args, key, on_torch, copies)


def check_new_signature() -> None:
    """For a traced body of an executable whose caller answers FirstCall."""
    _check_new_signature()


@contextlib.contextmanager
def quiet():
    """First calls in this block are answered on PyTorch without handing their
    signatures to the background thread (Note [First calls of compiled graphs])."""
    before = _local.quiet
    _local.quiet = True
    try:
        yield
    finally:
        _local.quiet = before


# ---------------------------------------------------------------- one first call

_PENDING, _READY, _FAILED = "pending", "ready", "failed"
_signatures: dict[Any, str] = {}
_MAX_SIGNATURES = 1 << 16
_REFUSED = object()
_lock = threading.Lock()


def _compiling(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """fn(*args, **kwargs), with whatever it traces compiled in this thread."""
    before = _local.compiling
    _local.compiling = True
    try:
        return fn(*args, **kwargs)
    finally:
        _local.compiling = before


def _compile_now(jitted: Any, args: tuple) -> Any:
    stats.compiled_at_once += 1
    try:
        return _compiling(jitted, *args)
    finally:
        # The call that raised FirstCall left its signature a C++ cache entry that sends
        # every later call through JAX's Python path (as in _Worker.run): a signature
        # compiled before and then evicted (jax.clear_caches(), the eager budget of Note
        # [Memory of eager executables]) ran each eager op 4x slower from then on.
        jitted._clear_cache()


def _first_call(jitted: Any, cls: type[Node], in_place: bool, args: tuple) -> Any:
    key = _signature(jitted, cls.arg_kinds, args)
    return _answer(jitted, args, key, lambda: _on_torch(cls, in_place, args),
                   lambda: _private_copies(cls.arg_kinds, args, in_place))


def _answer(jitted: Any, args: tuple, key: Any, on_torch: Any, copies: Any) -> Any:
    """`jitted(*args)`'s result from PyTorch (`on_torch()`), the signature `key` handed
    to the background thread with `copies()` of the arguments; or compiled at once."""
    if key is None or _local.answering:
        # tracers, other platforms, split arrays: nothing to run PyTorch on; or PyTorch's
        # kernel came back to us (a tensor on our device): the executable answers
        return _compile_now(jitted, args)
    with _lock:
        state = _signatures.get(key)
    if state is not None and state is not _PENDING:
        # compiled in the background (and still missing JAX's cache: evicted since), or failed
        return _compile_now(jitted, args)
    _local.answering = True
    try:
        out = on_torch()
    except Exception:
        out = _REFUSED
    finally:
        _local.answering = False
    if out is _REFUSED:
        # PyTorch or the shape function refused: the executable raises its own error, or
        # computes what PyTorch CPU cannot (a dtype it lacks)
        return _compile_now(jitted, args)
    stats.on_cpu += 1
    if state is None and not _local.quiet:
        with _lock:
            submit = key not in _signatures
            if submit:
                if len(_signatures) >= _MAX_SIGNATURES:  # ever-new shapes: forget the settled ones
                    for settled in [k for k, v in _signatures.items() if v is not _PENDING]:
                        del _signatures[settled]
                _signatures[key] = _PENDING
        if submit:
            _worker.submit(key, jitted, copies())
    return out


def _leaf_signature(a: Any) -> Any:
    if a is None:
        return None
    if a.__class__ is ViewOperand:
        base = a.base
        if not _concrete_on_default_device(base):
            raise _NotEligible
        return ("view", base.shape, base.dtype, a.layout)
    if isinstance(a, jax.Array):
        if not _concrete_on_default_device(a):
            raise _NotEligible
        return (a.shape, a.dtype, a.weak_type)
    if isinstance(a, (bool, int, float, complex)):
        return (a.__class__, a)
    raise _NotEligible


class _NotEligible(Exception):
    pass


def _concrete_on_default_device(a: Any) -> bool:
    """Whether `a` is a concrete array on the default device (jax:0), where PyTorch's
    results are put: an op on another device compiles."""
    if isinstance(a, jax.core.Tracer):
        return False
    devices = a.devices()
    return len(devices) == 1 and next(iter(devices)) == local_devices()[0]


def _signature(jitted: Any, kinds: tuple, args: tuple) -> Any:
    try:
        parts = []
        for kind, a in zip(kinds, args):
            if kind in STATIC_KINDS:
                if a.__class__ is torch.device and a.index:
                    return None  # a factory on another device than jax:0: compiled
                hash(a)
                parts.append(a)
            elif kind == TENSOR_LIST:
                parts.append(None if a is None else tuple(_leaf_signature(x) for x in a))
            else:
                parts.append(_leaf_signature(a))
        return (id(jitted), tuple(parts))
    except (_NotEligible, TypeError):
        return None


def _private_copy(a: Any) -> Any:
    """An operand's stand-in for the background compile: its shape and dtype only (the
    thread lowers and compiles, JAX's caches keep the result for the caller's next call,
    and nothing runs there: no copy, nothing a later in-place op could donate away)."""
    if a is None or a.__class__ in (bool, int, float, complex):
        return a
    if a.__class__ is ViewOperand:
        return ViewOperand(_spec(a.base), a.layout)
    return _spec(a)


def _spec(a: Any) -> Any:
    return jax.ShapeDtypeStruct(a.shape, a.dtype, weak_type=a.weak_type)


def _private_copies(kinds: tuple, args: tuple, in_place: bool) -> tuple:
    out = []
    for kind, a in zip(kinds, args):
        if kind in STATIC_KINDS:
            out.append(a)
        elif kind == TENSOR_LIST:
            out.append(None if a is None else [_private_copy(x) for x in a])
        else:
            out.append(_private_copy(a))
    return tuple(out)


# ---------------------------------------------------------------- PyTorch's answer

# Note [One thread for first calls]
# PyTorch's CPU kernels run on an OpenMP team, whose threads spin at each barrier. On
# this 2-core machine, shared and loaded (load average 6 to 8), first calls of an
# EfficientNet-B0-sized step (1,900 ops) on PyTorch's default two threads took 28-32 s
# per step, one thread 1.8-1.9 s (OMP_WAIT_POLICY=PASSIVE before import: 0.75-1.25 s,
# but it must be set before torch is imported). A descheduled team member stalls the
# other at every op. So a first call runs its kernel with one thread, and the caller's
# setting is restored at once (OpenMP keeps it per calling thread).

_TORCH_OPS: dict[type, Any] = {}


def _batch_norm_with_update(input, weight, bias, running_mean, running_var, training, momentum, eps):
    # The running statistics are views of XLA buffers, which PyTorch's kernel must not
    # write: it updates clones (the functional aten form, which returns new ones, is a
    # slow composite on CPU: 54 ms per call in an EfficientNet step).
    if training and running_mean is not None and running_var is not None:
        new_mean, new_var = running_mean.clone(), running_var.clone()
        out, mean, invstd = torch.ops.aten._native_batch_norm_legit(input, weight, bias, new_mean, new_var, True,
                                                                   momentum, eps)
        return out, mean, invstd, new_mean, new_var
    if training and (running_mean is not None or running_var is not None):
        raise _NotEligible
    return (*torch.ops.aten.native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps),
            None, None)


class _Positional:
    """A PyTorch form of a runtime node taking the node's arguments in order."""

    def __init__(self, fn: Any):
        self.fn = fn
        self._schema = None

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args)


def _strided_read(base, size, stride, offset):
    # the view of the storage's array read as a flat buffer (lowerings/storage.py); a
    # view beyond the buffer makes as_strided raise, and the executable its own error
    check_storage_size(size, base.dtype)
    return base.reshape(-1).as_strided(size, stride, offset)


# runtime-internal nodes (section `internal`) PyTorch computes with other ops
_INTERNAL_ON_TORCH = {"batch_norm_with_update": _Positional(_batch_norm_with_update),
                      "strided_read": _Positional(_strided_read)}


def _torch_op(cls: type[Node]) -> Any:
    internal = _INTERNAL_ON_TORCH.get(cls.name) if cls.section != "full_codegen" else None
    if internal is not None:
        return internal
    op = _TORCH_OPS.get(cls)
    if op is None:
        name, _, overload = cls.op.partition(".")
        op = getattr(getattr(torch.ops.aten, name), overload or "default")
        _TORCH_OPS[cls] = op
    return op


def _to_torch_tensor(a: Any) -> torch.Tensor:
    if a.__class__ is ViewOperand:
        size, stride, offset = a.layout
        return torch.from_dlpack(a.base).reshape(-1).as_strided(size, stride, offset)
    return torch.from_dlpack(a)


_CPU = torch.device("cpu")


def _to_torch(kind: str, a: Any) -> Any:
    if a is None:
        return a
    if kind in STATIC_KINDS:
        # a factory's device is ours: PyTorch makes the result on the CPU (made on our
        # device, it would come back through dispatch to this op)
        return _CPU if a.__class__ is torch.device else a
    if kind == TENSOR_LIST:
        return [None if x is None else _to_torch_tensor(x) for x in a]
    if a.__class__ in (bool, int, float, complex):
        return a
    if kind == SCALAR or (a.__class__ is not ViewOperand and a.weak_type):
        return a.item()  # a Python number, as PyTorch saw it (Note [Argument kinds])
    return _to_torch_tensor(a)


def _meta(kind: str, a: Any) -> Any:
    """What the shape function gets for an operand at trace time (eager._trace_time_meta)."""
    if kind in STATIC_KINDS or a is None:
        return a
    if kind == TENSOR_LIST:
        return [None if x is None else _tensor_meta(x) for x in a]
    if a.__class__ in (bool, int, float, complex):
        return a
    if a.__class__ is not ViewOperand and (kind == SCALAR or a.weak_type):
        return a  # shape functions use its type only
    return _tensor_meta(a)


def _tensor_meta(a: Any) -> TensorMeta:
    if a.__class__ is ViewOperand:
        return TensorMeta(tuple(a.layout[0]), NUMPY_TO_TORCH[a.base.dtype])
    return TensorMeta(tuple(a.shape), NUMPY_TO_TORCH[a.dtype])


def _to_array(t: torch.Tensor) -> Any:
    """A fresh XLA buffer holding `t`'s values (never sharing memory with an operand)."""
    return jax.device_put(numpy_of(t.detach().resolve_conj().resolve_neg().contiguous()).copy())


def _on_torch(cls: type[Node], in_place: bool, args: tuple) -> Any:
    kinds = cls.arg_kinds
    metas = cls.output_shape(*[_meta(k, a) for k, a in zip(kinds, args)])
    check_result_sizes(metas)
    op = _torch_op(cls)
    torch_args = [_to_torch(k, a) for k, a in zip(kinds, args)]
    positional, keywords = [], {}
    schema = op._schema.arguments if op._schema is not None else [None] * len(torch_args)
    for schema_arg, value in zip(schema, torch_args):
        if schema_arg is None:
            positional.append(value)
            continue
        if schema_arg.kwarg_only:
            keywords[schema_arg.name] = value
        else:
            positional.append(value)
    threads = torch.get_num_threads()
    if threads > 1:
        torch.set_num_threads(1)  # Note [One thread for first calls]
    try:
        with torch._C._DisableTorchDispatch(), pytorch_kernels():
            out = op(*positional, **keywords)
    finally:
        if threads > 1:
            torch.set_num_threads(threads)
    many = isinstance(metas, (tuple, list))
    outs = out if isinstance(out, (tuple, list)) else (out,)
    expected = metas if many else (metas,)
    if len(outs) != len(expected):
        raise _NotEligible
    results = []
    for o, m in zip(outs, expected):
        if m is None:
            if o is not None and not (isinstance(o, torch.Tensor) and o.numel() == 0):
                raise _NotEligible
            results.append(None)
            continue
        if not isinstance(o, torch.Tensor) or (tuple(o.shape), o.dtype) != (tuple(m.shape), m.dtype):
            raise _NotEligible
        results.append(o)
    if in_place:
        self_meta = _tensor_meta(args[0])
        check_in_place_result(tuple(self_meta.shape), self_meta.dtype, tuple(results[0].shape), results[0].dtype)
        results[0] = results[0].to(self_meta.dtype)
    with X64:
        arrays = [None if r is None else _to_array(r) for r in results]
    if not many:
        return arrays[0]
    return tuple(arrays) if isinstance(metas, tuple) else arrays


# ---------------------------------------------------------------- the background compiles


def lowest_priority() -> None:
    """This thread at the lowest CPU priority (nice 19): the caller's work first, the
    background compiles only use what it leaves of the CPU."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):
        pass


class _Worker:
    """One daemon thread compiling the signatures first calls ran on PyTorch."""

    # Note [Compiles after the burst]: while the caller keeps meeting new signatures (a
    # first step), compiling would take the CPU and the GIL from it; the thread waits for
    # QUIET_S without a new one, for at most DEFER_S per burst.
    QUIET_S = 0.03
    DEFER_S = 2.0

    def __init__(self):
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.thread: threading.Thread | None = None
        self.stopping = False
        self.start_lock = threading.Lock()
        self.last_submit = 0.0
        self.burst_start: float | None = None

    def submit(self, key: Any, jitted: Any, args: tuple) -> None:
        if self.stopping:
            with _lock:
                _signatures.pop(key, None)
            return
        self.last_submit = time.monotonic()
        self.queue.put((key, jitted, args))
        if self.thread is None:
            with self.start_lock:
                if self.thread is None:
                    self.thread = threading.Thread(target=self.run, name="xnf-first-call-compiles", daemon=True)
                    self.thread.start()

    def run(self) -> None:
        _local.compiling = True
        lowest_priority()
        while True:
            item = self.queue.get()
            if item is None or self.stopping:
                return
            self.wait_for_quiet()
            key, jitted, args = item
            state = _READY
            try:
                with X64:
                    jitted.lower(*args).compile()
                # Every call that raised FirstCall left JAX's C++ cache an entry for its
                # signature that sends all later calls through Python (about 60 us more
                # per op: an EfficientNet step 1.4x slower once compiled). Emptying this
                # function's C++ cache drops them; its traces and executables stay in
                # JAX's Python caches, so the next call of each signature refills it.
                jitted._clear_cache()
                stats.background_compiles += 1
            except BaseException:  # a trace-time error PyTorch did not raise: compile in the caller
                state = _FAILED
            del args, item
            with _lock:
                _signatures[key] = state

    def wait_for_quiet(self) -> None:
        now = time.monotonic()
        if now - self.last_submit >= self.QUIET_S:
            self.burst_start = None
            return
        if self.burst_start is None:
            self.burst_start = now
        while (not self.stopping and time.monotonic() - self.last_submit < self.QUIET_S
               and time.monotonic() - self.burst_start < self.DEFER_S):
            time.sleep(self.QUIET_S)

    def idle(self) -> bool:
        with _lock:
            return not any(s is _PENDING for s in _signatures.values())

    def stop(self) -> None:
        self.stopping = True
        thread = self.thread
        if thread is not None and thread.is_alive():
            self.queue.put(None)
            thread.join(timeout=30)


_worker = _Worker()
atexit.register(_worker.stop)


# Whether other background compiles are done: graph_first_call.py's
IDLE_CHECKS: list[Any] = []


def wait_for_background_compiles(timeout: float | None = None) -> bool:
    """Block until every signature handed to the background thread, and every graph
    compiled in the background, is compiled (or `timeout` seconds pass); True when none
    is pending."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while not (_worker.idle() and all(idle() for idle in IDLE_CHECKS)):
        if deadline is not None and time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _forget_in_child() -> None:
    global _worker, _lock
    _worker = _Worker()
    _lock = threading.Lock()
    _signatures.clear()


os.register_at_fork(after_in_child=_forget_in_child)
