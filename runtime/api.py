"""The user-facing API, re-exported by `xla_native_functions`."""

from __future__ import annotations

from typing import Any

import torch
from torch.nn.parameter import is_lazy
from torch.utils._pytree import tree_map

from .core.convert import X64, cpu_to_jax, host_array, jax_to_cpu
from .core.ir import Node
from .core import uninitialized
from .core.placement import device_count
from .core.device_storage import torchscript_refusal
from .core.tensor import DEVICE, XlaTensor, from_array
from .exec import custom_ops, layouts, value_checks
from .exec.layouts import preserved_strides, with_strides
from .exec.custom_ops import register_lowering
from .exec.first_call import wait_for_background_compiles
from .exec.registry import NODES, POLICY, REGISTRY, SECTIONS, OperatorNotFound, check_tracer_nodes
from .frontends import dispatch, distributed, forked_child, parameter_moves
from .frontends.analyze import analyze
from .frontends.analyze import main as analyze_main  # noqa: F401 - the generated `python -m` entry runs it
from .frontends import op_counters as metrics
from .frontends.dynamo import dynamo_report
from .frontends.env import default_env
from .frontends.hlo import hlo
from .frontends.interop import call_jax, jax_function, jax_jit, to_jax, to_torch_tensor, x64
from .frontends.lazy import lazy_mode, mark_step
from .frontends.moved_models import watch_graph_breaks
from .frontends.parameter_moves import swap_keeping_attributes, swappable
from .frontends.replay import compile
from .platform.config import config
from .platform.debug_env import apply_debug_env
from .platform.metrics import metrics_report, reset_metrics
from .supported.data_dependent import install_ctc_loss_host_lengths
from .supported.foreach import enable_foreach_optimizers
from .supported.rnn import install_whole_rnn_layers

__all__ = [
    "OperatorNotFound",
    "analyze",
    "call_jax",
    "compile",
    "config",
    "default_env",
    "device_count",
    "dynamo_report",
    "hlo",
    "jax_function",
    "jax_jit",
    "lazy_mode",
    "mark_step",
    "metrics",
    "metrics_report",
    "register_lowering",
    "reset_metrics",
    "to_jax",
    "to_torch",
    "to_torch_tensor",
    "to_xla",
    "wait_for_background_compiles",
    "x64",
]


def _move_module(module: torch.nn.Module, convert, convert_lazy) -> torch.nn.Module:
    # Uninitialized parameters and buffers of lazy modules stay uninitialized, on the new
    # device (Note [Lazy modules] in runtime/core/uninitialized.py).
    memo: dict[int, Any] = {}
    # RNNs hold weak references to their weights, which forbid moving them in place:
    # dropped and remade around the move, as RNNBase._apply does around Module.to's.
    rnns = [m for m in module.modules() if isinstance(m, torch.nn.RNNBase)]
    for m in rnns:
        m._flat_weight_refs = []
    for m in module.modules():
        for name, p in list(m._parameters.items()):
            if p is None:
                continue
            if id(p) not in memo:
                if is_lazy(p):
                    memo[id(p)] = convert_lazy(p)
                else:
                    moved = torch.nn.Parameter(convert(p.detach()), requires_grad=p.requires_grad)
                    # the same object, as Module.to keeps it (Note [Parameters keep their identity
                    # across devices] in runtime/frontends/parameter_moves.py)
                    if swappable(p, moved):
                        swap_keeping_attributes(p, moved)
                        moved = p
                    memo[id(p)] = moved
            m._parameters[name] = memo[id(p)]
        for name, b in list(m._buffers.items()):
            if b is None:
                continue
            if id(b) not in memo:
                memo[id(b)] = convert_lazy(b) if is_lazy(b) else convert(b)
            m._buffers[name] = memo[id(b)]
    for m in rnns:
        m._init_flat_weights()
    return module


def _lazy_to_xla(t: torch.Tensor) -> torch.Tensor:
    return t if isinstance(t, XlaTensor) else uninitialized.to_device(t)


def _lazy_to_torch(t: torch.Tensor) -> torch.Tensor:
    return uninitialized.to_cpu(t) if isinstance(t, XlaTensor) else t


def _tensor_to_xla(t: torch.Tensor) -> XlaTensor:
    if isinstance(t, XlaTensor):
        return t
    if t.layout != torch.strided:
        raise RuntimeError(
            f"{t.layout} tensors cannot be moved to JAX (dense tensors only): convert with .to_dense() first"
        )
    out = from_array(cpu_to_jax(t.detach()))
    strides = preserved_strides(tuple(t.shape), tuple(t.stride()))  # as t.to(device) keeps them
    if strides is not None:
        out = with_strides(out, strides)
    if t.requires_grad:
        out.requires_grad_(True)
    return out


def _tensor_to_torch(t: torch.Tensor) -> torch.Tensor:
    if not isinstance(t, XlaTensor):
        return t
    with X64:
        out = jax_to_cpu(host_array(t))
    strides = None if t._whole else preserved_strides(tuple(t.shape), tuple(t.stride()))
    if strides is not None:
        out = with_strides(out, strides)
    if t.requires_grad:
        out.requires_grad_(True)
    return out


def to_xla(obj: Any) -> Any:
    """Move tensors, modules (parameters and buffers, in place, ties kept) or any pytree
    of them to JAX."""
    if isinstance(obj, torch.jit.ScriptModule):  # Note [Loading to our device] in core/device_storage.py
        raise TypeError(f"xla_native_functions.to_xla({type(obj).__name__}): " + torchscript_refusal(DEVICE.type))
    if isinstance(obj, torch.nn.Module):
        watch_graph_breaks(only_if_loaded=True)  # Note [Moved models under torch.compile]
        return _move_module(obj, _tensor_to_xla, _lazy_to_xla)
    return tree_map(lambda x: _tensor_to_xla(x) if isinstance(x, torch.Tensor) else x, obj)


def to_torch(obj: Any) -> Any:
    """Move tensors, modules or pytrees back to PyTorch CPU tensors."""
    if isinstance(obj, torch.nn.Module):
        return _move_module(obj, _tensor_to_torch, _lazy_to_torch)
    if isinstance(obj, torch.Tensor):
        return _tensor_to_torch(obj)
    return tree_map(lambda x: _tensor_to_torch(x) if isinstance(x, torch.Tensor) else x, obj)




def install(registry: dict[Any, Any], sections: dict[str, str], nodes: dict[str, type[Node]],
            library_ops: dict[str, tuple[str, Any]] | None = None, unavailable: dict[str, str] | None = None, *,
            policy: dict[str, dict[str, tuple[int | str, ...]]] | None = None) -> None:
    """Called by the generated package at import: its dispatch stubs by aten overload,
    the manifest section of each overload, and its IR classes by unambiguous name; a
    manifest with operators of other libraries adds their stubs by qualified name (with
    the schema each was generated for) and the entries whose library did not import
    (Note [Library operators] in runtime/exec/custom_ops.py)."""
    apply_debug_env(config)
    POLICY.update(policy or {})
    REGISTRY.update(layouts.install(value_checks.install(registry, POLICY.get("eager_value_checks", {}))))
    SECTIONS.update(sections)
    NODES.update(nodes)
    check_tracer_nodes()
    dispatch.install(registry)
    distributed.install()
    forked_child.install()
    parameter_moves.install()
    enable_foreach_optimizers()
    install_whole_rnn_layers()
    install_ctc_loss_host_lengths()
    if library_ops or unavailable:
        custom_ops.install_library_ops(library_ops or {}, unavailable or {})
