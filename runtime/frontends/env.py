"""The environment: inside it, factory functions (`torch.randn`, `torch.zeros`,
`torch.arange`, ...) and tensors made from data (`torch.tensor`, `torch.from_numpy`)
create XlaTensors (PyTorch passes an unspecified device on as
"cpu", so an explicit device="cpu" cannot be told apart; use to_torch for CPU copies), and every op on
XlaTensors runs on JAX. Outside it, ops on XlaTensors still run on JAX (through the
tensor's own __torch_dispatch__); only factories need the environment."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ..core.convert import cpu_to_jax
from ..core.tensor import DEVICE, XlaTensor, from_array
from ..exec.registry import HANDLERS
from .dispatch import dispatch


def creates_on_jax(kwargs: dict[str, Any]) -> bool:
    # PyTorch fills in device=cpu when none was given, so CPU counts as "ours" here.
    device = kwargs.get("device")
    return device is None or torch.device(device).type in (DEVICE.type, "cpu")


class Environment(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        flat, _ = tree_flatten((args, kwargs))
        if any(isinstance(x, XlaTensor) for x in flat):
            return dispatch(func, args, kwargs)
        tensors = [x for x in flat if isinstance(x, torch.Tensor)]
        if not tensors and is_factory(func) and creates_on_jax(kwargs):
            if id(func) not in HANDLERS and has_composite_kernel(func):
                # A factory built from other ops (hann_window: arange, then pointwise
                # ops): PyTorch's kernel runs for our device, and the factories it calls
                # reach our kernels for the device (runtime/frontends/dispatch.py).
                return func(*args, **{**kwargs, "device": DEVICE})
            return dispatch(func, args, {**kwargs, "device": DEVICE})
        if func is LIFT_FRESH and args[0].device.type == "cpu":
            # torch.tensor(data) builds the tensor on the CPU and then lifts it: like a
            # default device (torch.set_default_device), the environment moves it.
            return from_array(cpu_to_jax(args[0]))
        return func(*args, **kwargs)

    def enable_globally(self) -> None:
        if not getattr(self, "_global", False):
            self.__enter__()
            self._global = True

    def disable_globally(self) -> None:
        if getattr(self, "_global", False):
            self.__exit__(None, None, None)
            self._global = False


LIFT_FRESH = torch.ops.aten.lift_fresh.default


def is_factory(func: Any) -> bool:
    return any(a.name == "device" for a in func._schema.arguments)


def has_composite_kernel(func: Any) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeExplicitAutograd")


_DEFAULT_ENV: list[Environment] = []


def default_env() -> Environment:
    """The process's environment (a context manager; `enable_globally()` keeps it on)."""
    if not _DEFAULT_ENV:
        _DEFAULT_ENV.append(Environment())
    return _DEFAULT_ENV[0]
