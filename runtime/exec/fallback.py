"""CPU fallback: run an op through PyTorch on the CPU, inputs copied out and results
copied back, counted in the metrics (the manifest's `fallback` section, and unlisted
ops with `config.allow_cpu_fallback`)."""

from __future__ import annotations

from typing import Any

import torch

from ..core.context import context, pytorch_kernels
from ..core.convert import X64, cpu_to_jax, host_array, jax_to_cpu
from ..core.tensor import XlaTensor, from_array
from ..platform.metrics import metrics
from .mutation import write_into



def _to_cpu_arg(x: Any) -> Any:
    if isinstance(x, XlaTensor):
        with X64:
            return jax_to_cpu(host_array(x))
    if isinstance(x, (list, tuple)):
        return type(x)(_to_cpu_arg(y) for y in x)
    return x


def fallback(op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run `op` through PyTorch on CPU: inputs copied out, results copied back."""
    metrics.fallback_calls[str(op)] += 1
    trace = context.trace
    if trace is not None:
        trace.refuse_replay(f"it calls {op}, which runs on the CPU")
    cpu_args = _to_cpu_arg(args)
    cpu_kwargs = {k: _to_cpu_arg(v) for k, v in kwargs.items()}
    if "device" in cpu_kwargs and cpu_kwargs["device"] is not None:
        cpu_kwargs["device"] = torch.device("cpu")
    with torch._C._DisableTorchDispatch(), pytorch_kernels():
        out = op(*cpu_args, **cpu_kwargs)
    # Arguments the op writes into (self of an in-place op, out=, running stats) got
    # the new values on the CPU copies: write them back, and return our tensors.
    written = {}
    for i, a in enumerate(op._schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            ours, theirs = (args[i], cpu_args[i]) if i < len(args) else (kwargs.get(a.name), cpu_kwargs.get(a.name))
            if isinstance(ours, XlaTensor):
                with X64:
                    new = cpu_to_jax(theirs)
                if trace is not None:
                    new = trace.input(new)
                write_into(ours, new, check_cast=False)
                written[id(theirs)] = ours
    if written:
        if isinstance(out, (tuple, list)):
            return type(out)(written.get(id(o)) or _from_cpu_result(o) for o in out)
        if id(out) in written:
            return written[id(out)]
    return _from_cpu_result(out)


def _from_cpu_result(out: Any) -> Any:
    if isinstance(out, torch.Tensor):
        return from_array(cpu_to_jax(out))
    if isinstance(out, (list, tuple)):
        return type(out)(_from_cpu_result(o) for o in out)
    return out
