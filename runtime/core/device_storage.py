"""Storage identity for tensors on our device.

Note [Device addresses]
An XlaTensor has no host memory: its values are a JAX array on its `Storage`
(core/tensor.py), and the storage PyTorch keeps for it is a placeholder whose data
pointer cannot be read ("invalid python storage"). Libraries that save checkpoints
tell tensors that share memory apart by their storages' data pointers
(`safetensors.torch.storage_ptr`, which transformers' `id_tensor_storage` uses: first
`t.untyped_storage().data_ptr()`, then `t.storage().data_ptr()`), and compare
`t.data_ptr()` with it to find the tensor that spans its whole storage. For those reads
a tensor on our device answers with a device address, as a CUDA tensor does with one
the host cannot dereference either: the identity of its `Storage`, plus its offset in
bytes. Tensors that share memory get the same storage address; tensors that do not,
different ones. The address is never memory: `XlaTensor.storage()` (PyTorch's
deprecated TypedStorage accessor) returns a `DeviceStorage` that gives the address and
sizes and refuses to read values, and PyTorch's own `untyped_storage()` is unchanged.
Its size is PyTorch's placeholder's: for a view, up to the view's last element (the
storage of `x[1:3]`, x of 4x3 float32, has 36 bytes where a CPU tensor's has 48); code
that needs the whole storage reads the Storage's shape.

Pickling (torch.save) stores CPU copies, and keeps sharing as it is: the tensors of one
storage pickled while its CPU copy is alive (during one torch.save) become views of that
one copy, so a state dict with tied weights or views saves each storage once and loads
with the same sharing, as the CPU model's does.

Note [Loading to our device]
torch.load(f, map_location="jax") (device-agnostic scripts pass their device) moves
each loaded storage to the device, and there are no PyTorch storages on ours: PyTorch's
attempt to make one crashed the process. The storages stay on the CPU instead, with a
warning, so the loaded tensors are CPU tensors. The usual next steps move them:
`model.load_state_dict(...)` copies into a moved model's parameters, an optimizer's
`load_state_dict` casts its state to its parameters' device, and `to_xla` moves the rest.

TorchScript modules cannot run on our device: the TorchScript loader moves each storage
to the device and then rebuilds the parameters from PyTorch's storage of it, below the
dispatcher, so `torch.jit.load(f, map_location="jax")` gave parameters holding
uninitialized memory, silently. The device's setup wraps torch.jit.load to refuse that
map_location, saying what to do instead; `to_xla` refuses a ScriptModule likewise.
"""

from __future__ import annotations

import warnings
import weakref
from typing import Any

import torch


def storage_address(store: Any) -> int:
    """The device address of a Storage (Note [Device addresses])."""
    return id(store)


class DeviceStorage:
    """What `XlaTensor.storage()` returns: the address and size of the tensor's storage,
    for libraries that identify shared memory by them (Note [Device addresses])."""

    __slots__ = ("_tensor",)

    def __init__(self, tensor: Any):
        self._tensor = tensor

    @property
    def device(self) -> Any:
        return self._tensor.device

    @property
    def dtype(self) -> Any:
        return self._tensor.dtype

    @property
    def is_sparse(self) -> bool:
        return False

    def data_ptr(self) -> int:
        if self.nbytes() == 0:
            return 0  # as a CPU storage without elements
        return storage_address(self._tensor._store)

    def nbytes(self) -> int:
        return self._tensor.untyped_storage().nbytes()

    def element_size(self) -> int:
        return self._tensor.element_size()

    def size(self) -> int:
        return self.nbytes() // self.element_size()

    def __len__(self) -> int:
        return self.size()

    def untyped(self) -> Any:
        return self._tensor.untyped_storage()

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(
            f"the storage of a tensor on the {self._tensor.device} device has no host memory, so it has no '{name}': "
            "copy the tensor to the CPU first (`tensor.cpu()` or xla_native_functions.to_torch(tensor)) and use that "
            "tensor's storage"
        )

    def __repr__(self) -> str:
        return f"DeviceStorage(device={self.device}, dtype={self.dtype}, nbytes={self.nbytes()})"


# Storage -> (its version when copied, weak reference to the CPU copy's storage). The
# copy lives as long as the pickler that holds it (one torch.save).
_HOST_COPIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def pickled_form(t: Any, protocol: int, whole_storage: Any) -> Any:
    """`__reduce_ex__` of a tensor on our device: that of a CPU tensor with its values,
    on a CPU copy of its storage shared with the other tensors on it. `whole_storage(t)`
    is a tensor spanning t's storage."""
    store = t._store
    whole = whole_storage(t)
    if whole is None:  # a value pending in a trace, or a storage of another dtype
        host = t.detach().to("cpu")
    else:
        entry = _HOST_COPIES.get(store)
        untyped = entry[1]() if entry is not None and entry[0] == store.version else None
        if untyped is None:
            untyped = whole.detach().to("cpu").untyped_storage()
            _HOST_COPIES[store] = (store.version, weakref.ref(untyped))
        with torch._C._DisableTorchDispatch():  # a CPU tensor, also inside default_env()
            host = torch.empty(0, dtype=t.dtype).set_(untyped, t.storage_offset(), t.shape, t.stride())
    if isinstance(t, torch.nn.Parameter):
        return torch.nn.Parameter(host, requires_grad=t.requires_grad).__reduce_ex__(protocol)
    if t.requires_grad and t.is_leaf:
        host.requires_grad_(True)
    return host.__reduce_ex__(protocol)


def load_to_cpu_for(device_name: str):
    """torch.serialization's deserializer for `device_name` locations (Note [Loading to
    our device])."""

    def deserialize(storage: Any, location: str) -> Any:
        if location != device_name and not location.startswith(device_name + ":"):
            return None
        # shown once under Python's default filter: every storage warns from the same line of torch
        warnings.warn(
            f"torch.load(..., map_location={location!r}) loads tensors to the CPU: the {device_name} device keeps "
            "no PyTorch storages. model.load_state_dict(...) and optimizer.load_state_dict(...) move the values "
            "to the parameters' device; move other tensors with xla_native_functions.to_xla or .to(device).",
            stacklevel=2,
        )
        return storage

    return deserialize


def torchscript_refusal(device_name: str) -> str:
    return (
        f"TorchScript modules cannot run on the {device_name} device (the TorchScript interpreter rebuilds "
        f"parameters from PyTorch storages, which the {device_name} device has none of). Run the module on the CPU, "
        "or load the model as an nn.Module (with its state dict from torch.load) or as a torch.export program "
        "(torch.export.load(...).module()) and move that with xla_native_functions.to_xla"
    )


def refuse_torchscript_loads_to(device_name: str) -> None:
    """torch.jit.load with a map_location on `device_name` raises instead of loading
    garbage (Note [Loading to our device])."""
    load = torch.jit.load
    if getattr(load, "_refuses_device", None) == device_name:
        return

    def refusing_load(f: Any, map_location: Any = None, *args: Any, **kwargs: Any) -> Any:
        if map_location is not None and not callable(map_location) and not isinstance(map_location, dict):
            if torch.device(map_location).type == device_name:
                raise RuntimeError(f"torch.jit.load(..., map_location={str(map_location)!r}): "
                                   + torchscript_refusal(device_name))
        return load(f, map_location, *args, **kwargs)

    refusing_load.__doc__ = load.__doc__
    refusing_load.__wrapped__ = load
    refusing_load._refuses_device = device_name
    torch.jit.load = refusing_load
