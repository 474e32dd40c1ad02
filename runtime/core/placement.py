"""Where a tensor's values live: on one JAX device, or spread over several by a sharding.

Note [Devices]
Every JAX device of this process is a torch device: jax:i is `jax.local_devices()[i]`
(`torch.device("jax", 3)`, `.to("jax:3")`, `torch.ones(2, device="jax:1")`), and an
index past the last one raises. The default device, jax:0, holds the arrays JAX has not
committed to a device (every array the runtime made before anything was placed): JAX
moves those where the other operands of an op live, which is what lets a tensor on
jax:0 meet a sharded one, as an unsharded tensor is replicated in PyTorch/XLA's SPMD.
A tensor laid out over a mesh reports the first of its devices (jax:0 for a mesh of
every device). Ops between tensors of two devices raise PyTorch's same-device error,
as do ops between tensors on two different meshes (Note [Device check]).

Note [Placed storage]
A storage whose array lives anywhere but uncommitted on the default device is a
`PlacedStorage`: it holds the torch device every tensor on it reports, and its layout (a
`jax.sharding.Sharding`: one device, or a NamedSharding of a mesh). Every array written
into it is laid out that way: an in-place op, a `copy_` from another device, the result
of a compiled graph or of a replay all land where the tensor lives, as a PyTorch tensor
keeps its device and a DTensor its placements. (compile()'s graphs constrain their
results to the layouts of the storages they write, so this is a check there, not a
transfer: runtime/exec/sharding.py.) The results of ops on placed tensors get a
PlacedStorage of the layout XLA gave them. A placed storage may also hold a `note`, the
placements the user asked for, which the distributed frontend reads back: a layout JAX
cannot hold at rest (a dim that does not divide by the mesh) is kept as close as it can,
and compiled programs apply the one asked for (docs/distributed.md).

Until the first tensor is placed, none of this runs: every array gets a plain Storage,
at the cost of one check in `from_array`.
"""

from __future__ import annotations

import threading
from typing import Any

import jax
import torch
from jax._src.array import ArrayImpl as _ArrayImpl  # the concrete array class: a cheaper test than jax.Array's
from jax.sharding import NamedSharding, Sharding, SingleDeviceSharding

from . import convert, tensor as tensor_module
from .tensor import DEVICE, DEVICE_NAME, Storage, XlaTensor, register_dispatcher, register_placed_storage

_DEVICES: list[Any] = []  # jax.local_devices(), read once JAX's backend is up
_INDEX: dict[Any, int] = {}  # jax device -> its torch index
_DEVICE_OF_LAYOUT: dict[Any, torch.device] = {}
_lock = threading.Lock()


def local_devices() -> list[Any]:
    """The JAX devices of this process, in torch's index order (jax:0, jax:1, ...)."""
    if not _DEVICES:
        with _lock:
            if not _DEVICES:
                devices = jax.local_devices()
                _INDEX.update({d: i for i, d in enumerate(devices)})
                _DEVICES.extend(devices)
    return _DEVICES


def device_count() -> int:
    """How many devices of this process torch sees: jax:0 ... jax:(count - 1)."""
    return len(local_devices())


def jax_device(index: int | None) -> Any:
    """The JAX device behind torch's jax:index (None: the default, jax:0)."""
    devices = local_devices()
    i = 0 if index is None else index
    if not 0 <= i < len(devices):
        raise RuntimeError(
            f"{DEVICE_NAME}:{i} is not a device of this process: it has {len(devices)} JAX "
            f"device{'s' if len(devices) != 1 else ''} ({DEVICE_NAME}:0 to {DEVICE_NAME}:{len(devices) - 1}). "
            "On a CPU host, XLA_FLAGS=--xla_force_host_platform_device_count=N (set before JAX starts) gives N"
        )
    return devices[i]


def torch_device(layout: Sharding) -> torch.device:
    """The torch device of a layout: its device, or the first of this process's devices
    it spans (Note [Devices])."""
    device = _DEVICE_OF_LAYOUT.get(layout)
    if device is None:
        local_devices()
        indices = [_INDEX[d] for d in layout.device_set if d in _INDEX]
        device = torch.device(DEVICE_NAME, min(indices) if indices else 0)
        if len(_DEVICE_OF_LAYOUT) > 4096:
            _DEVICE_OF_LAYOUT.clear()
        _DEVICE_OF_LAYOUT[layout] = device
    return device


def spans_devices(layout: Any) -> bool:
    """Whether a layout spreads an array over more than one device."""
    return layout is not None and not isinstance(layout, SingleDeviceSharding) and len(layout.device_set) > 1


def uncommitted(array: Any) -> Any:
    """`array` on the default device, not committed to it (Note [Devices]): the same
    buffer when it is there already, else a copy there."""
    device = local_devices()[0]
    if array.__class__ is not _ArrayImpl:
        return array
    if not array._committed:
        return array
    if array.sharding != SingleDeviceSharding(device):
        array = jax.device_put(array, device)
    return convert.uncommitted(array)  # JAX's own constructor, told the array is not committed


def lay_out(array: Any, layout: Sharding) -> Any:
    """`array` in `layout` (a transfer only where it is laid out otherwise)."""
    current = array.sharding
    if current is layout or current == layout:
        return array
    if current.is_equivalent_to(layout, array.ndim) and array._committed:
        return array
    return jax.device_put(array, layout)


class PlacedStorage(Storage):
    """A storage that lives somewhere else than the default device: Note [Placed storage]."""

    __slots__ = ("_array", "device", "layout", "note")

    def __init__(self, array: Any, layout: Sharding | None, device: torch.device | None = None, note: Any = None):
        self.pending = None
        self.owner = None
        self.version = 0
        self.layout = layout  # None: the first array written sets it
        self.device = device if device is not None else torch_device(layout) if layout is not None else DEVICE
        self.note = note
        self._array = None
        self.array = array

    @property
    def array(self) -> Any:
        return self._array

    @array.setter
    def array(self, value: Any) -> None:
        if value is not None and value.__class__ is _ArrayImpl:
            layout = self.layout
            if layout is None:
                self.layout = value.sharding
            else:
                value = lay_out(value, layout)
        self._array = value


class _State:
    # True once a tensor was placed: arrays get their storage from `storage_for`, and
    # ops check their operands' devices (Note [Device check]).
    active = False


state = _State()


def storage_for(array: Any) -> Storage:
    """The storage of a new array: a plain one on the default device, else placed where
    the array lives (Note [Placed storage])."""
    if array.__class__ is not _ArrayImpl:
        return Storage(array)  # a JAX tracer (the torch.compile backend, interop) or a NumPy value
    layout = array.sharding
    if layout.__class__ is SingleDeviceSharding:
        if not array._committed:
            return Storage(array)
        device = torch_device(layout)
        if device.index == 0:
            return Storage(uncommitted(array))
        return PlacedStorage(array, layout, device)
    return PlacedStorage(array, layout)


def placed_storage(array: Any, layout: Sharding, note: Any = None) -> Storage:
    """A new storage holding `array` laid out as `layout` (the default device's when it
    is the one device jax:0: a plain storage, Note [Devices])."""
    activate()
    if isinstance(layout, SingleDeviceSharding) and torch_device(layout).index == 0:
        return Storage(uncommitted(array))
    return PlacedStorage(array, layout, note=note)


def pending_storage(operands: tuple) -> Storage:
    """The storage of a traced op's result: on the device of its placed operands (the
    layout its graph gives it decides the rest)."""
    for a in operands:
        if a.__class__ is XlaTensor:
            store = a._store
            if store.__class__ is PlacedStorage:
                if store.device.index == 0:
                    return Storage(None)
                layout = store.layout if isinstance(store.layout, SingleDeviceSharding) else None
                return PlacedStorage(None, layout, store.device)
    return Storage(None)


# Note [Device check]
# PyTorch refuses an op whose tensors live on two devices. Our tensors are checked once
# something is placed (before that, all of them are on jax:0): every op on an XlaTensor
# goes through `_checked_dispatch` first, which compares the devices of its tensor
# operands, and the meshes of those spread over several devices (JAX cannot run one
# program over two meshes). Copies between devices are what `copy_` and `_to_copy` are
# for, and are let through.
_CROSS_DEVICE_OPS: set[int] = set()
_dispatch_unchecked: list[Any] = []


def _mismatch(a: Storage, b: Storage) -> str | None:
    if a.device != b.device:
        return ("Expected all tensors to be on the same device, but found at least two devices, "
                f"{a.device} and {b.device}!")
    la = a.layout if a.__class__ is PlacedStorage else None
    lb = b.layout if b.__class__ is PlacedStorage else None
    if spans_devices(la) and spans_devices(lb) and la.device_set != lb.device_set:
        return ("Expected all tensors to be on the same device mesh, but found tensors laid out over two meshes "
                f"({_describe_devices(la)} and {_describe_devices(lb)}): redistribute one of them onto the other's "
                "mesh")
    return None


def _describe_devices(layout: Any) -> str:
    local_devices()
    indices = sorted(_INDEX.get(d, -1) for d in layout.device_set)
    return "devices " + ", ".join(f"{DEVICE_NAME}:{i}" for i in indices)


def _checked_dispatch(func: Any, args: tuple, kwargs: dict) -> Any:
    if id(func) not in _CROSS_DEVICE_OPS:
        first = None
        for group in (args, kwargs.values()):
            for a in group:
                cls = a.__class__
                if cls is XlaTensor:
                    store = a._store
                    if first is None:
                        first = store
                    elif store is not first and (store.__class__ is PlacedStorage or first.__class__ is PlacedStorage):
                        problem = _mismatch(first, store)
                        if problem:
                            raise RuntimeError(problem)
                elif cls is list or cls is tuple:
                    for x in a:
                        if x.__class__ is XlaTensor:
                            store = x._store
                            if first is None:
                                first = store
                            elif store is not first and (store.__class__ is PlacedStorage
                                                         or first.__class__ is PlacedStorage):
                                problem = _mismatch(first, store)
                                if problem:
                                    raise RuntimeError(problem)
    return _dispatch_unchecked[0](func, args, kwargs)


def activate() -> None:
    """From now on arrays may live off the default device: give them placed storages,
    and check the devices of every op's operands."""
    if state.active:
        return
    with _lock:
        if state.active:
            return
        aten = torch.ops.aten
        for op in (aten.copy_.default, aten._to_copy.default, aten.copy.default, aten._copy_from.default,
                   aten._copy_from_and_resize.default, aten.set_.source_Tensor):
            _CROSS_DEVICE_OPS.add(id(op))
        _dispatch_unchecked.append(tensor_module._dispatch)
        register_placed_storage(storage_for)
        register_dispatcher(_checked_dispatch)
        state.active = True


def sharding_of(t: XlaTensor) -> Sharding | None:
    """The JAX sharding of a tensor's values where they are concrete (a view: of the
    values it reads); None inside a JAX transformation."""
    store = t._store
    array = store.array
    if array is None or store.pending is not None:
        if store.__class__ is PlacedStorage and store.layout is not None and t._whole:
            return store.layout
        return None
    if not t._whole:
        return None
    return array.sharding if array.__class__ is _ArrayImpl else None


def is_named(layout: Any) -> bool:
    return isinstance(layout, NamedSharding)
