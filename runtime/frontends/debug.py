"""The debug settings: print each op, or check each op against PyTorch CPU."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

from ..core.convert import X64, host_array, jax_to_cpu
from ..core.tensor import XlaTensor
from ..platform.call_site import user_call_site
from ..platform.config import config


def _describe(x: Any) -> str:
    if isinstance(x, torch.Tensor):
        return f"{type(x).__name__}{list(x.shape)}:{str(x.dtype).removeprefix('torch.')}"
    return repr(x)


def _to_cpu(x: Any) -> Any:
    if isinstance(x, XlaTensor):
        with X64:
            return jax_to_cpu(host_array(x))
    return x


_active = [False]


def debug_call(func: Any, handler: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if _active[0]:  # ops run by the checks themselves
        return handler(*args, **kwargs)
    _active[0] = True
    try:
        return _debug_call(func, handler, args, kwargs)
    finally:
        _active[0] = False


def _debug_call(func: Any, handler: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if config.debug_print_each_op:
        shown = ", ".join([_describe(a) for a in args] + [f"{k}={_describe(v)}" for k, v in kwargs.items()])
        print(f"[xla_native_functions] {func}({shown})")
    reference = cpu_reference(func, args, kwargs) if config.debug_accuracy_for_each_op else None
    _active[0] = False
    out = handler(*args, **kwargs)
    _active[0] = True
    if reference is not None:
        _compare(func, out, reference)
    return out


def cpu_reference(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """`func` run by PyTorch on CPU copies of its arguments (None if PyTorch raises): the
    reference of the accuracy check. Taken before the op runs, which may write into its
    arguments."""
    cpu_args, cpu_kwargs = tree_map(_to_cpu, (args, kwargs))
    if cpu_kwargs.get("device") is not None:  # a factory asked for our device
        cpu_kwargs["device"] = torch.device("cpu")
    with torch._C._DisableTorchDispatch():
        try:
            return func(*cpu_args, **cpu_kwargs)
        except Exception:  # the op itself will raise, or has no CPU meaning
            return None


def differences(out: Any, reference: Any) -> list[tuple[float, float]]:
    """(max abs, max rel) difference of every result of ours that differs from PyTorch's
    beyond `config.accuracy_atol`/`accuracy_rtol` (`torch.allclose`; integer and bool
    results must be equal, and count their unequal elements)."""
    ours, _ = tree_flatten(tree_map(_to_cpu, out))
    ref, _ = tree_flatten(reference)
    found = []
    for a, b in zip(ours, ref):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.shape != b.shape:
            continue
        if a.is_floating_point() or a.is_complex():
            diff = (a.double() - b.double()).abs()
            max_abs = diff.max().item() if diff.numel() else 0.0
            denom = b.double().abs().clamp_min(1e-30)
            max_rel = (diff / denom).max().item() if diff.numel() else 0.0
            bad = not torch.allclose(a.to(b.dtype), b, atol=config.accuracy_atol, rtol=config.accuracy_rtol, equal_nan=True)
        else:
            max_abs = max_rel = float((a != b).sum().item())
            bad = bool(max_abs)
        if bad:
            found.append((max_abs, max_rel))
    return found


def _compare(func: Any, out: Any, reference: Any) -> None:
    for max_abs, max_rel in differences(out, reference):
        print(
            f"[xla_native_functions] accuracy: {func} differs from PyTorch CPU: max abs {max_abs:.3g}, "
            f"max rel {max_rel:.3g}, at {user_call_site()}"
        )
