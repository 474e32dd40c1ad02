"""Uninitialized parameters and buffers of lazy modules (`nn.LazyLinear`,
`nn.LazyConv2d`, `nn.LazyBatchNorm1d`, ...) on our device.

Note [Lazy modules]
A lazy module holds `UninitializedParameter`s and `UninitializedBuffer`s until its first
forward, which gives them a shape (`materialize`) and initializes them
(`reset_parameters`), in place: the same Python objects become ordinary tensors, so an
optimizer built before that forward still holds the module's parameters. PyTorch's
`materialize` replaces the tensor's data with `torch.empty(...)` on the placeholder's
device and sets its class to Parameter (Tensor for a buffer); for a tensor on our
device the class must stay XlaTensor, whose storage lives on the Python object. So
`to_xla` replaces each placeholder with one of the classes below: still an
`UninitializedParameter`/`UninitializedBuffer` (nothing about it can be read before the
first forward, `is_lazy` is true, `has_uninitialized_params()` too), and an XlaTensor on
our device, whose `materialize` makes an XlaTensor of the shape asked and turns the
object into it. The module's own initializer then runs on our device with our random
numbers (JAX's generator, seeded by `torch.manual_seed`): the values a module built
directly on our device gets for the same seed, as a lazy module moved to CUDA
initializes with CUDA's generator, not with the CPU's stream.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import torch
from torch.nn.parameter import UninitializedBuffer, UninitializedParameter

from ...shape_fns.common import TORCH_TO_NUMPY
from .convert import X64
from .tensor import DEVICE, Storage, XlaTensor


def _placeholder(cls: type, requires_grad: bool, dtype: torch.dtype | None) -> Any:
    dtype = dtype or torch.get_default_dtype()
    r = torch.Tensor._make_wrapper_subclass(cls, (0,), dtype=dtype, device=DEVICE, requires_grad=requires_grad)
    with X64:
        r._store = Storage(jnp.zeros((0,), TORCH_TO_NUMPY[dtype]))
    r._whole = True
    r._cache = None
    return r


def _materialize(self: Any, shape: Any, device: Any, dtype: Any, parameter: bool) -> None:
    if device is not None and torch.device(device).type != DEVICE.type:
        raise ValueError(
            f"this uninitialized {'parameter' if parameter else 'buffer'} was moved to {DEVICE} with to_xla and "
            f"materializes there, not on {device}: move the module back with xla_native_functions.to_torch first"
        )
    if dtype is None:
        dtype = self.dtype
    data = torch.empty(tuple(shape), device=DEVICE, dtype=dtype)
    self.data = data  # XlaTensor.data: the TensorImpl's sizes and the Python storage
    self.__class__ = XlaTensor
    if parameter:
        self._is_param = True  # what nn.Parameter(XlaTensor) marks: isinstance(p, Parameter)


class UninitializedXlaParameter(UninitializedParameter, XlaTensor):
    """An uninitialized parameter on our device (Note [Lazy modules])."""

    cls_to_become = XlaTensor

    def __new__(cls, requires_grad: bool = True, device: Any = None, dtype: torch.dtype | None = None) -> Any:
        return _placeholder(cls, requires_grad, dtype)

    def materialize(self, shape: Any, device: Any = None, dtype: torch.dtype | None = None) -> None:
        _materialize(self, shape, device, dtype, parameter=True)


class UninitializedXlaBuffer(UninitializedBuffer, XlaTensor):
    """An uninitialized buffer on our device (Note [Lazy modules])."""

    cls_to_become = XlaTensor

    def __new__(cls, requires_grad: bool = False, device: Any = None, dtype: torch.dtype | None = None,
                persistent: bool = True) -> Any:
        r = _placeholder(cls, requires_grad, dtype)
        r.persistent = persistent
        r._is_buffer = True
        return r

    def materialize(self, shape: Any, device: Any = None, dtype: torch.dtype | None = None) -> None:
        _materialize(self, shape, device, dtype, parameter=False)


def to_device(t: Any) -> Any:
    """The placeholder on our device for an uninitialized CPU parameter or buffer."""
    if isinstance(t, UninitializedParameter):
        return UninitializedXlaParameter(t.requires_grad, dtype=t.dtype)
    return UninitializedXlaBuffer(t.requires_grad, dtype=t.dtype, persistent=getattr(t, "persistent", True))


def to_cpu(t: Any) -> Any:
    """PyTorch's CPU placeholder for one of ours, still uninitialized."""
    if isinstance(t, UninitializedParameter):
        return UninitializedParameter(t.requires_grad, dtype=t.dtype)
    return UninitializedBuffer(t.requires_grad, dtype=t.dtype, persistent=getattr(t, "persistent", True))
