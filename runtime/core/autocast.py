"""torch.autocast for our device: the casts CPU autocast makes, op for op.

Note [Autocast]
PyTorch registers an autocast kernel per op and per device (aten/src/ATen/
autocast_mode.cpp); for a backend registered from Python (PrivateUse1) it registers
none, so `torch.autocast("jax")` would change nothing. PyTorch exposes which ops CPU
autocast handles (those with a kernel for the AutocastCPU dispatch key), not what each
kernel does (cast to the autocast dtype, to float32, or to the widest input type). So
the policy is read from CPU's kernels themselves: for each op of CPU's list a kernel
registered for AutocastPrivateUse1 asks CPU autocast what it would do to a call with
the same argument dtypes, by running the op's AutocastCPU kernel on stand-ins (CPU
tensors of the same dtypes and shapes that hold one element; a tensor not on our device,
which autocast does not cast, becomes a meta tensor) under a dispatch mode that records
the casts the kernel makes and stops it at the first other op, before any computation.
The answer is cached per op, argument dtypes and autocast dtype; the kernel then makes
the same casts on our tensors and runs the op with autocast excluded, as CPU's kernel
does (so autograd records the casts, and backward casts gradients back). The kernels
are registered on first use of autocast for the device (`get_amp_supported_dtype`,
which `torch.autocast` asks first; about 80 ms), the fallthrough for every other op
when the device is registered. Not reproduced: CPU autocast's cache of weight
casts within one autocast region (a performance detail: each use casts again, with the
same values).
"""

from __future__ import annotations

import threading
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_aten = torch.ops.aten
_AUTOCAST_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)
_LIBRARY: list[Any] = []
_FALLTHROUGH: list[Any] = []
_install_lock = threading.Lock()


def cpu_autocast_ops() -> list[Any]:
    """The aten overloads CPU autocast handles (a kernel for the AutocastCPU key)."""
    ops = []
    for name in sorted(torch._C._dispatch_get_all_op_names()):
        if name.startswith("aten::") and torch._C._dispatch_has_kernel_for_dispatch_key(name, "AutocastCPU"):
            base, _, overload = name.removeprefix("aten::").partition(".")
            ops.append(getattr(getattr(_aten, base), overload or "default"))
    return ops


def install_autocast_fallthrough() -> None:
    """Let every op pass the AutocastPrivateUse1 key, as PyTorch registers for its own
    devices' autocast keys (it registers nothing for this one): without it, enabling
    autocast for our device by hand (`torch.set_autocast_enabled("jax", True)`) would
    leave ops with no kernel there."""
    with _install_lock:
        if not _FALLTHROUGH:
            fallback = torch.library.Library("_", "IMPL")
            fallback.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
            _FALLTHROUGH.append(fallback)


def install_autocast_kernels() -> None:
    """Register a kernel for AutocastPrivateUse1 for every op of CPU autocast's list."""
    install_autocast_fallthrough()
    with _install_lock:
        if _LIBRARY:
            return
        lib = torch.library.Library("aten", "IMPL")
        for op in cpu_autocast_ops():
            name = op._schema.name.removeprefix("aten::")
            if op._overloadname != "default":
                name += "." + op._overloadname
            lib.impl(name, _autocast_kernel(op), "AutocastPrivateUse1")
        _LIBRARY.append(lib)


def _tensor_leaves(args: tuple, kwargs: dict) -> list[tuple[Any, Any, torch.Tensor]]:
    """(argument position or name, index in a tensor list or None, tensor)."""
    leaves = []
    for where, a in list(enumerate(args)) + list(kwargs.items()):
        if isinstance(a, torch.Tensor):
            leaves.append((where, None, a))
        elif isinstance(a, (list, tuple)):
            leaves += [(where, j, b) for j, b in enumerate(a) if isinstance(b, torch.Tensor)]
    return leaves


def _autocast_kernel(op: Any) -> Any:
    plans: dict[Any, tuple[tuple[int, torch.dtype], ...]] = {}
    device_type = torch._C._get_privateuse1_backend_name()

    def kernel(*args: Any, **kwargs: Any) -> Any:
        dtype = torch.get_autocast_dtype(device_type)
        leaves = _tensor_leaves(args, kwargs)
        key = (dtype,) + tuple((w, j, t.dtype, t.device.type == device_type) for w, j, t in leaves)
        casts = plans.get(key)
        if casts is None:
            casts = plans[key] = _cpu_casts(op, dtype, args, kwargs, leaves, device_type)
        with torch._C._ExcludeDispatchKeyGuard(_AUTOCAST_KEYS):
            if casts:
                args, kwargs = _substitute(args, kwargs, leaves, {i: leaves[i][2].to(d) for i, d in casts})
            return op(*args, **kwargs)

    return kernel


def _substitute(args: tuple, kwargs: dict, leaves: list, new: dict[int, torch.Tensor]) -> tuple[tuple, dict]:
    args, kwargs = list(args), dict(kwargs)
    for i, t in new.items():
        where, j, _ = leaves[i]
        container = args if isinstance(where, int) else kwargs
        if j is None:
            container[where] = t
        else:
            items = list(container[where])
            items[j] = t
            container[where] = items
    return tuple(args), kwargs


class _Reached(Exception):
    """CPU's autocast kernel passed the call on: every cast it makes is made."""


class _CastRecorder(TorchDispatchMode):
    def __init__(self, index: dict[int, int]):
        super().__init__()
        self.index = index
        self.casts: dict[int, torch.dtype] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is _aten._to_copy.default and id(args[0]) in self.index and kwargs.get("dtype") is not None:
            source = args[0]
            self.casts[self.index[id(source)]] = kwargs["dtype"]
            with torch._C._DisableTorchDispatch():
                return _stand_in(source.shape, kwargs["dtype"], source.device)
        raise _Reached


def _stand_in(shape: Any, dtype: torch.dtype, device: Any) -> torch.Tensor:
    return torch.empty((), dtype=dtype, device=device).expand(tuple(shape))


def _cpu_casts(op: Any, dtype: torch.dtype, args: tuple, kwargs: dict, leaves: list,
               device_type: str) -> tuple[tuple[int, torch.dtype], ...]:
    """The casts CPU autocast makes for a call with these argument dtypes: (leaf, dtype)."""
    with torch._C._DisableTorchDispatch():  # plain CPU tensors, also inside default_env()
        stand_ins = {i: _stand_in(t.shape, t.dtype, "cpu" if t.device.type == device_type else "meta")
                     for i, (_, _, t) in enumerate(leaves)}
    probe_args, probe_kwargs = _substitute(args, kwargs, leaves, stand_ins)
    recorder = _CastRecorder({id(t): i for i, t in stand_ins.items()})
    enabled, previous = torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")
    torch.set_autocast_enabled("cpu", True)
    torch.set_autocast_dtype("cpu", dtype)
    try:
        with torch._C._ExcludeDispatchKeyGuard(_AUTOCAST_KEYS), recorder:
            op(*probe_args, **probe_kwargs)
    except _Reached:
        pass
    except Exception as error:
        if "autocast" in str(error):  # CPU autocast refuses this call: so do we
            raise
        # Anything else failed after the casts (a check on the stand-ins' shapes or
        # values), which are all recorded by then.
    finally:
        torch.set_autocast_enabled("cpu", enabled)
        torch.set_autocast_dtype("cpu", previous)
    return tuple(sorted(recorder.casts.items()))
