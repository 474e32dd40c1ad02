"""XlaTensor: a torch.Tensor backed by JAX.

Note [Views and mutation]
Tensors share a Storage, exactly as PyTorch tensors share memory: a Storage holds
one array (a jax.Array; a JAX tracer inside a JAX transformation) in the shape of the
tensor that created it, and every tensor on it has PyTorch's size, stride and storage offset
into that value read as a flat, contiguous buffer. A tensor that spans its whole
storage contiguously (`_whole`) reads the value directly; any other view reads it
through a strided gather (runtime/core/views.py; inside the consuming op's executable for
views from offset 0, Note [Fused view reads] in runtime/exec/eager.py) and writes
through a strided scatter, so a write through any view lands in the base and in every
other view of it, as in PyTorch. View ops compute new sizes and strides only (no JAX
work); mutation replaces the storage's value and bumps its version, which invalidates
cached view values. The new value always has the old one's shape and dtype: a tensor
that needs another (resize_ beyond the storage) gets a new Storage, so compile()'s
replay guards a storage's identity, not its array's shape.

While a trace records (Note [Per-thread trace] in core/context.py), the storages it
reads or writes also hold their IR value (`pending`) and the trace that owns it
(`owner`); the trace's sync writes the results into `array` and clears both. A
storage the trace wrote has no array until then (`array` None), so nothing can read a
value from before the write: the owning thread runs the trace to read it, any other
thread is refused.
"""

from __future__ import annotations

import contextlib
from typing import Any

import jax
import torch
from torch.utils.backend_registration import _DummyBackendModule, _setup_privateuseone_for_python_backend

from ...shape_fns.common import NUMPY_TO_TORCH
from ..platform.device_guard import install_native_device_guard

DEVICE_NAME = "jax"


class _DeviceModule(_DummyBackendModule):
    """`torch.jax`: PyTorch's placeholder device module, plus what activation
    checkpointing asks of it: it saves and restores each device's random state and
    re-enters its autocast state (off: autocast has no kernels here). Our random numbers
    are drawn from PyTorch's CPU generator (runtime/supported/random.py), so the device
    has no random state of its own."""

    def device(self, index: Any) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def get_rng_state(self, device: Any = None) -> torch.Tensor:
        return torch.empty(0, dtype=torch.uint8)

    def set_rng_state(self, new_state: torch.Tensor, device: Any = None) -> None:
        pass

    def get_amp_supported_dtype(self) -> list[torch.dtype]:
        return []  # no autocast kernels: torch.autocast("jax") warns and stays off


def _register_device() -> torch.device:
    # A renamed PrivateUse1 device must also be registered as a Python backend, or
    # autograd aborts the process on backward() ("PyTorch is not linked with support for
    # jax devices").
    if torch._C._get_privateuse1_backend_name() != DEVICE_NAME:
        _setup_privateuseone_for_python_backend(DEVICE_NAME, backend_module=_DeviceModule())
        install_native_device_guard()  # Note [Native device guard]
    return torch.device(DEVICE_NAME, 0)


DEVICE = _register_device()


class Storage:
    """Shared memory of a family of views; see Note [Views and mutation]."""

    __slots__ = ("array", "pending", "owner", "version", "__weakref__")
    # The device of every tensor on this storage. A storage anywhere else (another
    # device, a sharding over several) is a PlacedStorage: Note [Placed storage] in
    # core/placement.py.
    device = DEVICE

    def __init__(self, array: Any):
        self.array = array
        self.pending = None  # the IR Value the owning trace gave this storage
        self.owner = None  # that trace
        self.version = 0

    def shape(self) -> tuple[int, ...]:
        return tuple(self.array.shape if self.pending is None else self.pending.meta.shape)


_NO_KWARGS: dict[str, Any] = {}
_dispatch: Any = None
# Makes the storage of an array that may live elsewhere than the default device, once
# core/placement.py has placed a tensor there (None until then: every array is on it).
_placed_storage: Any = None


def register_placed_storage(make: Any) -> None:
    """Arrays get their storage from `make(array)` (core/placement.py, which this layer
    cannot import)."""
    global _placed_storage
    _placed_storage = make


def storage_of(array: Any) -> Storage:
    """The new storage of an array (Note [Placed storage] in core/placement.py)."""
    return Storage(array) if _placed_storage is None else _placed_storage(array)


def register_dispatcher(dispatch: Any) -> None:
    """Every op on an XlaTensor goes to `dispatch(func, args, kwargs)`: the torch entry
    of the frontends layer, which registers itself here at install (this layer cannot
    import it)."""
    global _dispatch
    _dispatch = dispatch


_CONTIGUOUS_STRIDES: dict[tuple[int, ...], tuple[int, ...]] = {}


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    try:
        return _CONTIGUOUS_STRIDES[shape]  # every view op asks: memoised
    except (KeyError, TypeError):  # TypeError: a list, or symbolic sizes
        pass
    strides = []
    acc = 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(s, 1)
    strides = tuple(reversed(strides))
    if isinstance(shape, tuple) and all(type(s) is int for s in shape):
        if len(_CONTIGUOUS_STRIDES) >= 4096:
            _CONTIGUOUS_STRIDES.clear()
        _CONTIGUOUS_STRIDES[shape] = strides
    return strides


class XlaTensor(torch.Tensor):
    _store: Storage
    _whole: bool
    _cache: Any  # (storage version, value) of a view's last read

    @staticmethod
    def __new__(cls, store: Storage, shape, dtype: torch.dtype, strides=None, offset: int = 0, requires_grad: bool = False):
        if strides is None:
            r = torch.Tensor._make_wrapper_subclass(cls, shape, dtype=dtype, device=store.device, requires_grad=requires_grad)
            r._whole = True
        else:
            r = torch.Tensor._make_wrapper_subclass(
                cls, shape, strides=strides, storage_offset=offset, dtype=dtype, device=store.device,
                requires_grad=requires_grad
            )
            r._whole = False
        r._store = store
        r._cache = None
        return r

    def __init__(self, *args, **kwargs):
        pass

    # Every op reaches __torch_dispatch__, which returns XlaTensors itself. The default
    # __torch_function__, run in Python ahead of dispatch for every torch call, would
    # only re-wrap those results: 3-5 us per call (x.sum(1): 31 against 14 us).
    __torch_function__ = torch._C._disabled_torch_function_impl

    @property
    def data(self):
        return torch.Tensor.data.__get__(self)

    @data.setter
    def data(self, new: torch.Tensor) -> None:
        # torch copies sizes, strides and offset into this TensorImpl (and rejects a
        # tensor of another device), but our storage lives on the Python object.
        torch.Tensor.data.__set__(self, new)
        self._store, self._whole, self._cache = new._store, new._whole, None

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return _dispatch(func, args, kwargs or _NO_KWARGS)

    def __repr__(self, *, tensor_contents=None) -> str:
        if isinstance(self._store.array, jax.core.Tracer):  # inside jax.jit/grad/vmap (interop)
            return f"XlaTensor(<traced by JAX>, size={tuple(self.shape)}, dtype={self.dtype}, device='{self.device}')"
        text = repr(self._host_copy())
        suffix = f", device='{self.device}'"
        if text.endswith(")"):
            grad = ""
            if self.grad_fn is not None:
                grad = f", grad_fn=<{type(self.grad_fn).__name__}>"
            elif self.requires_grad:
                grad = ", requires_grad=True"
            text = text[:-1] + suffix + grad + ")"
        return text

    def _host_copy(self) -> torch.Tensor:
        """A PyTorch CPU copy of the values (`_to_copy` to the CPU, through dispatch)."""
        return self.detach().to("cpu")

    def tolist(self):
        return self._host_copy().tolist()

    def numpy(self, *, force: bool = False):
        return self._host_copy().numpy()

    def __reduce_ex__(self, protocol):
        # Pickling (torch.save of a moved module's state) stores a CPU copy.
        return self._host_copy().__reduce_ex__(protocol)


_make_wrapper_subclass = torch.Tensor._make_wrapper_subclass


def from_array(array: jax.Array, requires_grad: bool = False) -> XlaTensor:
    """A new tensor owning a new storage holding `array`. (XlaTensor.__new__ without its
    Python call overhead: every eager op result is made here.)"""
    store = Storage(array) if _placed_storage is None else _placed_storage(array)
    r = _make_wrapper_subclass(XlaTensor, array.shape, dtype=NUMPY_TO_TORCH[array.dtype], device=store.device,
                               requires_grad=requires_grad)
    r._whole = True
    r._store = store
    r._cache = None
    return r


def tensor_on(store: Storage, shape, dtype: torch.dtype, view: tuple | None = None) -> XlaTensor:
    """A new tensor on an existing storage, whole or with view = (strides, offset)
    (XlaTensor.__new__ without its Python call overhead)."""
    if view is None:
        r = _make_wrapper_subclass(XlaTensor, shape, dtype=dtype, device=store.device)
    else:
        r = _make_wrapper_subclass(XlaTensor, shape, strides=view[0], storage_offset=view[1], dtype=dtype,
                                   device=store.device)
    r._whole = view is None
    r._store = store
    r._cache = None
    return r
