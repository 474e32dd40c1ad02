"""XlaTensor: a torch.Tensor backed by JAX.

Note [Views and mutation]
Tensors share a Storage, exactly as PyTorch tensors share memory: a Storage holds
one value (a jax.Array eagerly, an IR Value while tracing) in the shape of the tensor
that created it, and every tensor on it has PyTorch's size, stride and storage offset
into that value read as a flat, contiguous buffer. A tensor that spans its whole
storage contiguously (`_whole`) reads the value directly; any other view reads it
through a strided gather (runtime/views.py; inside the consuming op's executable for
views from offset 0, Note [Fused view reads] in runtime/dispatch.py) and writes
through a strided scatter, so a write through any view lands in the base and in every
other view of it, as in PyTorch. View ops compute new sizes and strides only (no JAX
work); mutation replaces the storage's value and bumps its version, which invalidates
cached view values. The new value always has the old one's shape and dtype: a tensor
that needs another (resize_ beyond the storage) gets a new Storage, so compile()'s
replay guards a storage's identity, not its array's shape.
"""

from __future__ import annotations

import contextlib
from typing import Any

import jax
import torch
from torch.utils.backend_registration import _DummyBackendModule, _setup_privateuseone_for_python_backend

from ..shape_fns.common import NUMPY_TO_TORCH
from .device_guard import install_native_device_guard

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
    # autograd aborts the process on backward() (shared/FACTS.md).
    if torch._C._get_privateuse1_backend_name() != DEVICE_NAME:
        _setup_privateuseone_for_python_backend(DEVICE_NAME, backend_module=_DeviceModule())
        install_native_device_guard()  # Note [Native device guard]
    return torch.device(DEVICE_NAME, 0)


DEVICE = _register_device()


class Storage:
    """Shared memory of a family of views; see Note [Views and mutation]."""

    __slots__ = ("value", "version", "__weakref__")

    def __init__(self, value: Any):
        self.value = value
        self.version = 0


_NO_KWARGS: dict[str, Any] = {}
_dispatch: Any = None  # runtime.dispatch.dispatch, set there (it imports this module)


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
            r = torch.Tensor._make_wrapper_subclass(cls, shape, dtype=dtype, device=DEVICE, requires_grad=requires_grad)
            r._whole = True
        else:
            r = torch.Tensor._make_wrapper_subclass(
                cls, shape, strides=strides, storage_offset=offset, dtype=dtype, device=DEVICE, requires_grad=requires_grad
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
        if new.__class__ is XlaTensor and new.is_inference() is not self.is_inference():
            # torch also copies the key set, and refuses one that differs on a device
            # like ours: `self` stays what it is (Note [Inference mode]).
            from .inference import view_like

            new = view_like(self, new._store, tuple(new.shape), new.dtype,
                            None if new._whole else (tuple(new.stride()), new.storage_offset()))
        torch.Tensor.data.__set__(self, new)
        self._store, self._whole, self._cache = new._store, new._whole, None

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return _dispatch(func, args, kwargs or _NO_KWARGS)

    def __repr__(self, *, tensor_contents=None) -> str:
        from .api import to_torch

        value = self._store.value
        if isinstance(value, jax.core.Tracer):  # inside jax.jit/grad/vmap (interop)
            return f"XlaTensor(<traced by JAX>, size={tuple(self.shape)}, dtype={self.dtype}, device='{self.device}')"
        cpu = to_torch(self.detach())
        text = repr(cpu)
        suffix = f", device='{self.device}'"
        if text.endswith(")"):
            grad = ""
            if self.grad_fn is not None:
                grad = f", grad_fn=<{type(self.grad_fn).__name__}>"
            elif self.requires_grad:
                grad = ", requires_grad=True"
            text = text[:-1] + suffix + grad + ")"
        return text

    def tolist(self):
        from .api import to_torch

        return to_torch(self.detach()).tolist()

    def numpy(self, *, force: bool = False):
        from .api import to_torch

        return to_torch(self.detach()).numpy()

    def __reduce_ex__(self, protocol):
        # Pickling (torch.save of a moved module's state) stores a CPU copy.
        from .api import to_torch

        return to_torch(self.detach()).__reduce_ex__(protocol)


_make_wrapper_subclass = torch.Tensor._make_wrapper_subclass


def from_array(array: jax.Array, requires_grad: bool = False) -> XlaTensor:
    """A new tensor owning a new storage holding `array`. (XlaTensor.__new__ without its
    Python call overhead: every eager op result is made here.)"""
    r = _make_wrapper_subclass(XlaTensor, array.shape, dtype=NUMPY_TO_TORCH[array.dtype], device=DEVICE, requires_grad=requires_grad)
    r._whole = True
    r._store = Storage(array)
    r._cache = None
    return r


def tensor_on(store: Storage, shape, dtype: torch.dtype, view: tuple | None = None) -> XlaTensor:
    """A new tensor on an existing storage, whole or with view = (strides, offset)
    (XlaTensor.__new__ without its Python call overhead)."""
    if view is None:
        r = _make_wrapper_subclass(XlaTensor, shape, dtype=dtype, device=DEVICE)
    else:
        r = _make_wrapper_subclass(XlaTensor, shape, strides=view[0], storage_offset=view[1], dtype=dtype, device=DEVICE)
    r._whole = view is None
    r._store = store
    r._cache = None
    return r
