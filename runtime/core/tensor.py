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

A storage holds one array of one dtype, while PyTorch's memory is bytes that a view may
read as another dtype: a complex tensor as reals (`view_as_real`, and so `z.real` and
`z.imag`: each complex element two reals side by side), reals as complex
(`view_as_complex`), any tensor as another dtype (`x.view(torch.int32)`). A tensor with
`_reinterprets` set is such a view: its size, stride and offset count elements of its
own dtype in the storage's memory read as that dtype (lowerings/storage.py
`memory_as`, Note [Memory as another dtype]), and a write through it lands in the
storage's array (`memory_write`), so `z.real.mul_(2)`, `z.imag[1] = -1` and
`x.view(torch.int32)[0] = 0` change `z` and `x` as in PyTorch. Such a view is never
`_whole`, so only the view paths (strided reads and writes) ask for the flag; every
other tensor reads the class default, False.

While a trace records (Note [Per-thread trace] in core/context.py), the storages it
reads or writes also hold their IR value (`pending`) and the trace that owns it
(`owner`); the trace's sync writes the results into `array` and clears both. A
storage the trace wrote has no array until then (`array` None), so nothing can read a
value from before the write: the owning thread runs the trace to read it, any other
thread is refused.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any

import jax
import torch
from torch.utils.backend_registration import _DummyBackendModule, _DummyDeviceGuard, _DummyPrivateUse1Hook

from ...shape_fns.common import NUMPY_TO_TORCH
from ..platform import hook_errors
from ..platform.device_guard import install_native_device
from .autocast import install_autocast_fallthrough, install_autocast_kernels
from .device_storage import DeviceStorage, load_to_cpu_for, pickled_form, refuse_torchscript_loads_to, storage_address
from .inference import made_in_mode
from .sharing import wait_for_write
from .streams import StreamsOfOneQueue

DEVICE_NAME = "jax"


class _DeviceModule(StreamsOfOneQueue, _DummyBackendModule):
    """`torch.jax`: PyTorch's placeholder device module, plus what autocast, activation
    checkpointing and torch.distributed ask of it: autocast's supported dtypes (Note
    [Autocast] in core/autocast.py), each device's random state, which checkpointing
    saves and restores, and streams, events and the device count (Note [One queue] in
    core/streams.py). Our random numbers are drawn from PyTorch's CPU generator
    (runtime/supported/random.py), so the device has no random state of its own."""

    def device(self, index: Any) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    # Dynamo runs these rather than tracing them: code it compiles may save and restore
    # the accelerator's random state around a call, as torch.testing's freeze_rng_state
    # does under no_dispatch(), where Dynamo cannot make the state tensor a fake one.
    # (torch._disable_dynamo imports Dynamo at the first call, not here.)
    @torch._disable_dynamo
    def get_rng_state(self, device: Any = None) -> torch.Tensor:
        return torch.empty(0, dtype=torch.uint8)

    @torch._disable_dynamo
    def set_rng_state(self, new_state: torch.Tensor, device: Any = None) -> None:
        pass

    # Seeding, as device-agnostic code calls it through `torch.get_device_module(device)`:
    # the device draws from PyTorch's CPU generator, so these seed and read that one
    # (torch.manual_seed calls manual_seed_all with the seed it just set: no change).
    def manual_seed(self, seed: int) -> None:
        torch.default_generator.manual_seed(int(seed))

    manual_seed_all = manual_seed

    def seed(self) -> None:
        torch.default_generator.seed()

    seed_all = seed

    def initial_seed(self) -> int:
        return torch.default_generator.initial_seed()

    def get_rng_state_all(self) -> list[torch.Tensor]:
        return [self.get_rng_state()]

    def set_rng_state_all(self, new_states: list[torch.Tensor]) -> None:
        for state in new_states:
            self.set_rng_state(state)

    # Memory, as torch.accelerator answers for the device (Note [Generators of our
    # device] in platform/device_guard.cpp registers its hooks): nothing to free,
    # statistics not kept.
    def empty_cache(self) -> None:
        torch.accelerator.empty_cache()

    def memory_allocated(self, device: Any = None) -> int:
        return torch.accelerator.memory_allocated(device)

    def max_memory_allocated(self, device: Any = None) -> int:
        return torch.accelerator.max_memory_allocated(device)

    def memory_reserved(self, device: Any = None) -> int:
        return torch.accelerator.memory_reserved(device)

    def reset_peak_memory_stats(self, device: Any = None) -> None:
        torch.accelerator.reset_peak_memory_stats(device)

    def is_bf16_supported(self, including_emulation: bool = True) -> bool:
        return True

    def get_device_name(self, device: Any = None) -> str:
        return f"jax {jax.devices()[0].device_kind}"

    def get_amp_supported_dtype(self) -> list[torch.dtype]:
        # torch.autocast("jax", ...) asks this first: the kernels are registered then.
        install_autocast_kernels()
        return [torch.bfloat16, torch.float16]


def _register_device() -> torch.device:
    # A renamed PrivateUse1 device must also be registered as a Python backend, or
    # autograd aborts the process on backward() ("PyTorch is not linked with support for
    # jax devices").
    if torch._C._get_privateuse1_backend_name() != DEVICE_NAME:
        # The steps of torch.utils.backend_registration's setup for a Python backend, in
        # its order, with C++ hooks and guard where they can be built.
        torch.utils.rename_privateuse1_backend(DEVICE_NAME)
        torch.utils.generate_methods_for_privateuse1_backend()
        torch._register_device_module(DEVICE_NAME, _DeviceModule())
        if not install_native_device():  # Note [Native device guard]
            torch._C._acc.register_python_privateuseone_hook(_DummyPrivateUse1Hook())
            torch._C._acc.register_python_privateuseone_device_guard(_DummyDeviceGuard())
        install_autocast_fallthrough()  # Note [Autocast] in core/autocast.py
        # before PyTorch's own PrivateUse1 deserializer (priority 23): Note [Loading to our device]
        torch.serialization.register_package(19, lambda storage: None, load_to_cpu_for(DEVICE_NAME))
        refuse_torchscript_loads_to(DEVICE_NAME)
    return torch.device(DEVICE_NAME, 0)


DEVICE = _register_device()


NO_VALUE_MESSAGE = (
    "this tensor was made inside a traced call (compile() or lazy_mode()) whose recorded ops could not run, so it "
    "holds no value: recompute it"
)


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
        while True:
            pending, array = self.pending, self.array
            if pending is not None:
                return tuple(pending.meta.shape)
            if array is not None:
                return tuple(array.shape)
            # a write in flight in another thread (Note [Threads and storages]), or none
            if not wait_for_write(self) and self.array is None and self.pending is None:
                raise RuntimeError(NO_VALUE_MESSAGE)

    def dtype(self) -> torch.dtype:
        while True:
            pending, array = self.pending, self.array
            if pending is not None:
                return pending.meta.dtype
            if array is not None:
                return NUMPY_TO_TORCH[array.dtype]
            # a write in flight in another thread (Note [Threads and storages]), or none
            if not wait_for_write(self) and self.array is None and self.pending is None:
                raise RuntimeError(NO_VALUE_MESSAGE)


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


# The attributes by which an XlaTensor holds its storage (the class's own; any other is
# a program's, copied with the tensor and kept across moves).
STORAGE_ATTRIBUTES = frozenset({"_store", "_whole", "_cache", "_reinterprets"})


class XlaTensor(torch.Tensor):
    _store: Storage
    _whole: bool
    _cache: Any  # (storage version, value) of a view's last read
    _reinterprets = False  # a view of its storage's memory as another dtype (Note [Views and mutation])

    @staticmethod
    def __new__(
        cls, store: Storage, shape, dtype: torch.dtype, strides=None, offset: int = 0, requires_grad: bool = False
    ):
        if strides is None:
            r = torch.Tensor._make_wrapper_subclass(
                cls, shape, dtype=dtype, device=store.device, requires_grad=requires_grad
            )
            r._whole = True
        else:
            r = torch.Tensor._make_wrapper_subclass(
                cls,
                shape,
                strides=strides,
                storage_offset=offset,
                dtype=dtype,
                device=store.device,
                requires_grad=requires_grad,
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
        if not isinstance(new, XlaTensor):
            raise RuntimeError(
                "Attempted to call `variable.set_data(tensor)`, but `variable` and `tensor` have incompatible tensor "
                f"type: `variable` is on {self.device} and `tensor` on {new.device}. Move the tensor first "
                "(`p.data = t.to(p.device)`) or copy its values in (`p.data.copy_(t)`)"
            )
        if new.__class__ is XlaTensor:
            # torch also copies the key set, and refuses one that differs on a device
            # like ours: `self` stays what it is (Note [Inference mode] in
            # core/inference.py). Read without __torch_function__, which a placeholder
            # of a lazy module (core/uninitialized.py) refuses.
            with torch._C.DisableTorchFunctionSubclass():
                inference = self.is_inference()
            if new.is_inference() is not inference:
                new = made_in_mode(inference, same_layout, new)
        torch.Tensor.data.__set__(self, new)
        self._store, self._whole, self._cache, self._reinterprets = new._store, new._whole, None, new._reinterprets

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

    # PyTorch formats a 0-dim tensor as its number only when its class is torch.Tensor
    # itself; code that builds names from indices (f"expert_{idx[0]}" in Switch
    # Transformers' routing) expects that on every device.
    def __format__(self, format_spec: str) -> str:
        if self.dim() == 0 and not isinstance(self._store.array, jax.core.Tracer):
            return self.detach().item().__format__(format_spec)
        return object.__format__(self, format_spec)

    def _host_copy(self) -> torch.Tensor:
        """A PyTorch CPU copy of the values (`_to_copy` to the CPU, through dispatch)."""
        return self.detach().to("cpu")

    # With PyTorch's Python device guard an exception from a hook would abort the
    # process: Note [Hook errors during backward] in runtime/platform/hook_errors.py.
    def register_hook(self, hook):
        return torch.Tensor.register_hook(self, hook_errors.tensor_hook(hook))

    def register_post_accumulate_grad_hook(self, hook):
        return torch.Tensor.register_post_accumulate_grad_hook(self, hook_errors.post_accumulate_grad_hook(hook))

    def tolist(self):
        return self._host_copy().tolist()

    def numpy(self, *, force: bool = False):
        # A copy of the values: this tensor has no host memory to share with the array
        # (docs/semantics.md). PyTorch's refusals of a tensor that requires grad stay.
        if self.requires_grad and not force:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.")
        return self._host_copy().numpy()

    def __reduce_ex__(self, protocol):
        # Pickling (torch.save of a moved module's state) stores a CPU copy, sharing
        # memory as this tensor does (Note [Device addresses] in core/device_storage.py).
        return pickled_form(self, protocol, _whole_storage)

    # Note [Device addresses] in core/device_storage.py
    def data_ptr(self) -> int:
        if self.untyped_storage().nbytes() == 0:
            return 0
        return storage_address(self._store) + self.storage_offset() * self.element_size()

    const_data_ptr = data_ptr  # the same device address (PyTorch's would read the placeholder storage: 0)

    def storage(self) -> DeviceStorage:
        return DeviceStorage(self)

    def __deepcopy__(self, memo: dict) -> XlaTensor:
        # PyTorch's default copies a tensor subclass by its storage when data_ptr() is not
        # 0, which reads host memory this tensor does not have. A copy is a clone (a new
        # storage) with the same requires_grad, .grad and Python attributes (a parameter
        # stays a parameter); memo keeps tied tensors tied.
        if id(self) in memo:
            return memo[id(self)]
        if not self.is_leaf:
            raise RuntimeError(
                "Only Tensors created explicitly by the user (graph leaves) support the deepcopy protocol at the "
                "moment: detach() the tensor first"
            )
        with torch.no_grad():
            new = self.clone()
        new.requires_grad_(self.requires_grad)
        memo[id(self)] = new
        if self.grad is not None:
            new.grad = copy.deepcopy(self.grad, memo)
        extra = {k: v for k, v in self.__dict__.items() if k not in STORAGE_ATTRIBUTES}
        if extra:
            new.__dict__.update(copy.deepcopy(extra, memo))
        return new


_make_wrapper_subclass = torch.Tensor._make_wrapper_subclass


def _whole_storage(t: XlaTensor) -> XlaTensor | None:
    """A tensor spanning t's whole storage (None while a trace holds its value, or when
    the storage holds another dtype than t)."""
    store = t._store
    array = store.array
    if array is None or store.pending is not None or NUMPY_TO_TORCH.get(array.dtype) != t.dtype:
        return None
    if t._whole:
        return t
    return tensor_on(store, tuple(array.shape), t.dtype)


def from_array(array: jax.Array, requires_grad: bool = False) -> XlaTensor:
    """A new tensor owning a new storage holding `array`. (XlaTensor.__new__ without its
    Python call overhead: every eager op result is made here.)"""
    store = Storage(array) if _placed_storage is None else _placed_storage(array)
    if requires_grad:
        r = _make_wrapper_subclass(XlaTensor, array.shape, dtype=NUMPY_TO_TORCH[array.dtype], device=store.device,
                                   requires_grad=True)
    else:  # without the keyword: parsing it costs about 0.7 us of every eager op's 20
        r = _make_wrapper_subclass(XlaTensor, array.shape, dtype=NUMPY_TO_TORCH[array.dtype], device=store.device)
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
        r = _make_wrapper_subclass(
            XlaTensor, shape, strides=view[0], storage_offset=view[1], dtype=dtype, device=store.device
        )
    r._whole = view is None
    r._store = store
    r._cache = None
    return r


def reinterpreting_view_on(store: Storage, shape, dtype: torch.dtype, view: tuple) -> XlaTensor:
    """A view of a storage's memory as `dtype`, with view = (strides, offset) counted in
    elements of `dtype` (Note [Views and mutation])."""
    r = tensor_on(store, shape, dtype, view)
    r._reinterprets = True
    return r


def same_layout(t: XlaTensor) -> XlaTensor:
    """A new tensor on t's storage with t's size, strides, offset and dtype."""
    if t._whole:
        return tensor_on(t._store, tuple(t.shape), t.dtype)
    view = (tuple(t.stride()), t.storage_offset())
    if t._reinterprets:
        return reinterpreting_view_on(t._store, tuple(t.shape), t.dtype, view)
    return tensor_on(t._store, tuple(t.shape), t.dtype, view)
