"""Values between PyTorch CPU and JAX, and host reads of our tensors' values.

JAX runs 32-bit unless told otherwise; PyTorch's int64/float64 need its x64 mode, which
this package enters only around its own JAX calls (`X64`).
"""

from __future__ import annotations

import threading

import jax
import jax.numpy as jnp
from jax._src import config as jax_config
from jax._src.array import ArrayImpl
import numpy as np
import torch

from ...shape_fns.common import NUMPY_TO_TORCH, TORCH_TO_NUMPY, to_numpy_dtype
from ..platform.executable_cache import eager_jit
from .context import context
from .sharing import wait_for_write
from .tensor import NO_VALUE_MESSAGE
from .views import strided_read_jit


# JAX's x64 setting itself (internal to JAX), whose swap_local and set_local are what
# the context manager jax.enable_x64(True) calls: called directly, an x64 scope costs
# 0.1 us, against 0.6 us through jax.enable_x64 (a 16x16 add takes 11 us).
_X64_SETTING = jax_config.enable_x64


class _X64(threading.local):
    """Re-entrant `jax.enable_x64(True)`: PyTorch's int64/float64 need JAX's x64 mode,
    scoped to our calls so other JAX code in the process is not affected. (Nesting
    happens: an op implementation may call other ops.) JAX's setting is per thread, and
    so is the nesting depth."""

    def __init__(self):
        self.depth = 0
        self.before = None

    def __enter__(self):
        depth = self.depth  # one read and one write of the thread's state each way
        if not depth:
            self.before = _X64_SETTING.swap_local(True)
        self.depth = depth + 1

    def __exit__(self, *exc):
        depth = self.depth - 1
        self.depth = depth
        if not depth:
            _X64_SETTING.set_local(self.before)


X64 = _X64()

# The generated op stubs' x64 scope, `before = swap_x64(True)` ... `restore_x64(before)`
# in try/finally: X64's __enter__ and __exit__ cost 0.4 us more per eager op.
swap_x64 = _X64_SETTING.swap_local
restore_x64 = _X64_SETTING.set_local


# Dtypes torch does not show NumPy (bfloat16, the float8 types) pass between the two as
# integers of their width, viewed as ml_dtypes' types on the NumPy side.
_AS_BITS = {torch.bfloat16: torch.int16, torch.float8_e4m3fn: torch.uint8, torch.float8_e5m2: torch.uint8,
            torch.float8_e4m3fnuz: torch.uint8, torch.float8_e5m2fnuz: torch.uint8}
_FROM_BITS = {TORCH_TO_NUMPY[d]: (d, TORCH_TO_NUMPY[bits]) for d, bits in _AS_BITS.items()}


def numpy_of(t: torch.Tensor) -> np.ndarray:
    """A NumPy array on a contiguous CPU tensor's memory, of its dtype."""
    bits = _AS_BITS.get(t.dtype)
    return t.numpy() if bits is None else t.view(bits).numpy().view(TORCH_TO_NUMPY[t.dtype])


def cpu_to_jax(t: torch.Tensor) -> jax.Array:
    if t.dim() > 64:
        raise RuntimeError("only tensors with up to 64 dims are supported")  # NumPy's limit, and PyTorch's
    if t.dtype not in TORCH_TO_NUMPY:
        to_numpy_dtype(t.dtype)  # raises, naming the dtype
    arr = numpy_of(t.detach().resolve_conj().resolve_neg().contiguous())
    with X64:
        return _from_host(arr)


# The copy of a host array into a buffer of XLA's own (one an in-place op can donate:
# device_put's buffers are not reliably donated, and it shares memory NumPy does not
# own, like a torch tensor's). One executable per shape, as jnp.asarray compiles, but
# counted against config.eager_cache_bytes (Note [Memory of eager executables]).
_from_host = eager_jit(lambda a: jnp.array(a, copy=True))


def host_tensor(arr: np.ndarray) -> torch.Tensor:
    """A CPU tensor sharing `arr`'s memory, also inside the environment (which moves the
    tensors torch.tensor and torch.from_numpy create to our device)."""
    if not torch._C._len_torch_dispatch_stack():
        return torch.from_numpy(arr)
    with torch._C._DisableTorchDispatch():
        return torch.from_numpy(arr)


def to_host(a: jax.Array) -> np.ndarray:
    """An array's values on the host. An array spread over several processes' devices
    (docs/distributed.md, "Several processes") is read from this process's copy when it
    is replicated; split, no process holds all of it."""
    if a.__class__ is not np.ndarray and not getattr(a, "is_fully_addressable", True):
        if not a.is_fully_replicated:
            raise RuntimeError("this tensor's values are split over several processes' devices, so no process holds "
                               "them all: lay it out replicated first (t.full_tensor(), or redistribute(t, mesh, "
                               "[Replicate()] * mesh.ndim)) to read it")
        a = a.addressable_data(0)
    return np.asarray(a)


def jax_to_cpu(a: jax.Array) -> torch.Tensor:
    arr = to_host(a)
    if arr.size == 0:  # NumPy gives an empty array zero strides; PyTorch's are row-major
        return torch.empty(arr.shape, dtype=NUMPY_TO_TORCH[arr.dtype])
    bits = _FROM_BITS.get(arr.dtype)
    if bits is not None:
        return host_tensor(arr.view(bits[1]).copy()).view(bits[0])
    return host_tensor(arr.copy())


# ---------------------------------------------------------------- sharing memory
# Where the memory can be shared instead of copied: the Dynamo backend's graph inputs
# and outputs, and interop's to_jax of CPU tensors.

_NUMPY_SHOWN = {torch.float32, torch.float64, torch.float16, torch.int64, torch.int32, torch.int16, torch.int8,
                torch.uint8, torch.bool, torch.complex64, torch.complex128}
_NUMPY_SHOWN_ARRAYS = frozenset(np.dtype(TORCH_TO_NUMPY[d]) for d in _NUMPY_SHOWN)
# From this size on, handing a result buffer to torch through DLPack (5 to 30 us,
# whatever the size) beats copying it (about 0.6 ms per MB here).
_HANDOVER_BYTES = 1 << 16


def numpy_view(t: torch.Tensor) -> np.ndarray | None:
    """A NumPy view of a CPU tensor's memory, or None where NumPy cannot show it as it
    is (conjugate or negative bits, dtypes NumPy lacks). `jax.jit` reads such an
    argument in place, for 2 to 3 us whatever its size; making a JAX array of it first
    costs 18 to 60 us."""
    if t.is_conj() or t.is_neg():
        return None
    t = t.detach()
    if t.dtype in _NUMPY_SHOWN or t.dtype in _AS_BITS:
        return numpy_of(t)
    return None


def shared_array(t: torch.Tensor) -> jax.Array | None:
    """A JAX array on the CPU tensor's own memory (DLPack), or None where XLA would copy
    it (DLPack copies a buffer XLA cannot use in place, an unaligned one, say) or where
    the tensor is not contiguous: DLPack would give a permuted tensor (a transpose) as
    an array in another layout than row-major, which `uncommitted` cannot pass on."""
    if t.is_conj() or t.is_neg() or not t.is_contiguous():
        return None
    try:
        with X64:
            arr = jax.dlpack.from_dlpack(t.detach())
    except Exception:
        return None
    return arr if arr.unsafe_buffer_pointer() == t.data_ptr() else None


def uncommitted(arr: jax.Array) -> jax.Array:
    """`arr` on the same buffer, not committed to its device. `jax.jit` keys its
    executables on which arguments are committed, and a NumPy argument is not: a
    function called with NumPy views and later with DLPack arrays of the same tensors
    (committed) would be lowered and compiled twice.

    An array in another layout than row-major (what DLPack makes of a transposed
    tensor) is copied to row-major first: `jax.jit` honours the layout of a committed
    array only, and reads an uncommitted one's buffer as row-major."""
    if arr.ndim > 1 and arr.format.layout.major_to_minor != tuple(range(arr.ndim)):
        arr = jnp.array(arr, copy=True)
    return ArrayImpl(arr.aval, arr.sharding, arr._arrays, committed=False)


def handover_copies(dtype: np.dtype, size: int) -> bool:
    """Whether `jax_to_cpu_handover` copies a result of this dtype and element count."""
    return dtype in _NUMPY_SHOWN_ARRAYS and size * dtype.itemsize < _HANDOVER_BYTES


def jax_to_cpu_handover(a: jax.Array) -> torch.Tensor:
    """A CPU tensor of a fresh result buffer that JAX no longer refers to: small ones are
    copied through NumPy (1 to 3 us), larger ones handed over by DLPack without a copy."""
    if handover_copies(a.dtype, a.size):
        return torch.from_numpy(np.array(a))
    if a.dtype.itemsize == 1 and a.dtype in _FROM_BITS:  # float8, which DLPack does not carry
        return jax_to_cpu(a)
    return torch.from_dlpack(a)


def host_array(t) -> np.ndarray:
    """A tensor's values as a read-only NumPy array, for reads on the host (`.cpu()`,
    `.item()`, `to_torch`, data-dependent ops). While this thread traces, the trace
    gives the value (running what it recorded, and telling compile() what was read).
    A view of a concrete storage is applied to the storage's buffer with NumPy strides,
    as PyTorch reads a CPU view, instead of running a strided read in JAX: a call into
    XLA costs more than the copy that follows."""
    trace = context.trace
    if trace is not None:
        return np.asarray(trace.host_value(t))
    store = t._store
    base = store.array
    if base is None or store.pending is not None:
        base = current_array(store)
    host = to_host(base)
    if t._whole:
        return host
    shape = tuple(t.shape)
    if t._reinterprets:  # the storage's bytes as t's dtype (whole elements)
        memory = np.ascontiguousarray(host).reshape(-1).view(np.uint8)
        itemsize = t.dtype.itemsize
        host = memory[: memory.size // itemsize * itemsize].view(TORCH_TO_NUMPY[t.dtype])
    if 0 in shape:  # PyTorch lets an empty view's offset lie past the storage's end
        return np.empty(shape, host.dtype)
    if host.flags.c_contiguous:
        itemsize = host.itemsize
        return np.ndarray(shape, host.dtype, buffer=host.reshape(-1), offset=t.storage_offset() * itemsize,
                          strides=tuple(s * itemsize for s in t.stride()))
    with X64:
        return np.asarray(strided_read_jit(base, shape, tuple(t.stride()), t.storage_offset()))


def current_array(store) -> jax.Array:
    """The array of a storage that a trace holds (or that has none): Note [Per-thread
    trace] in context.py. The thread of that trace runs what it recorded; any other
    thread reads the array from before the trace, as if it ran first, and waits for a
    write in flight in another thread (Note [Threads and storages] in sharing.py)."""
    while True:
        trace = store.owner
        if trace is not None and trace is context.trace:
            return trace.materialize(store)
        array = store.array
        if array is not None:
            return array
        if not wait_for_write(store):
            break
    array = store.array  # a write that ended before the wait began
    if array is not None:
        return array
    if store.owner is not None:
        raise RuntimeError(
            "this tensor is made by ops that another thread is recording (compile() or lazy_mode()) and that have "
            "not run yet: read it in that thread, or after its traced call returns or mark_step() runs"
        )
    raise RuntimeError(NO_VALUE_MESSAGE)
