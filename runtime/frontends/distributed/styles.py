"""Tensor, sequence and fully sharded parallelism of modules, with torch's names:
`parallelize_module` with `ColwiseParallel`, `RowwiseParallel`, `SequenceParallel`,
`PrepareModuleInput` and `PrepareModuleOutput`; `distribute_module`; FSDP2's
`fully_shard` (docs/distributed.md).

Each lays a module's parameters out over a mesh and adds forward hooks that lay its
inputs and outputs out as the style says. Those layouts are what XLA's partitioner
starts from: eagerly each op runs split over the mesh as its operands are, and a
compiled step is one program whose collectives XLA inserts (a row-wise product's
all-reduce, FSDP's all-gathers and reduce-scatters). One process holds the global
values, so a module's output is the whole tensor, whatever its layout (`use_local_output`
is accepted and changes nothing).

Parameters on our device are laid out in place (they stay the optimizer's); parameters
of a CPU module move to the mesh as new parameters, as DTensor's do, unless
`keep_on_cpu=True`: then they stay on the CPU with their layouts noted for the
torch.compile backend (Note [Layouts of CPU tensors] in runtime/exec/sharding.py).
"""

from __future__ import annotations

import fnmatch
from typing import Any, Callable, Sequence

import torch
import torch.utils._pytree

from ...core.mesh import DeviceMesh, Placement, Replicate, Shard, as_placement
from ...core.tensor import XlaTensor
from ...exec.sharding import note_cpu_layout
from .tensors import _layouts, _mesh, device_mesh_of, distribute_tensor, placements_of, redistribute, relayout_parameter


# ---------------------------------------------------------------- laying tensors out


def _merged(t: torch.Tensor, mesh: DeviceMesh, placements: Sequence[Placement]) -> tuple[DeviceMesh, list[Placement]]:
    """Placements over the whole JAX mesh that change only the dims `mesh` exposes: the
    others keep `t`'s current layout (a tensor-parallel layout keeps its data-parallel
    split), replicated where `t` has none."""
    whole = DeviceMesh.from_jax(mesh.jax_mesh)
    if whole.mesh_dim_names == mesh.mesh_dim_names:
        return mesh, list(placements)
    current: dict[str, Placement] = {}
    cur_mesh = device_mesh_of(t) if isinstance(t, XlaTensor) else None
    if cur_mesh is not None and cur_mesh.jax_mesh == mesh.jax_mesh:
        for name, p in zip(cur_mesh.mesh_dim_names, placements_of(t)):
            current[name] = Replicate() if p.is_partial() else p
    found = [current.get(name, Replicate()) for name in whole.mesh_dim_names]
    for name, p in zip(mesh.mesh_dim_names, placements):
        p = as_placement(p)
        if isinstance(p, Shard) and p.dim < 0:
            p = Shard(p.dim % max(t.dim(), 1))
        found[whole.mesh_dim_names.index(name)] = p
    # a tensor dim split by two mesh dims keeps the order of the mesh
    return whole, found


def relayout(t: Any, mesh: DeviceMesh, placements: Sequence[Placement]) -> Any:
    """An activation laid out on the dims of `mesh` (differentiably); anything but a
    tensor of ours is returned as it is."""
    if not isinstance(t, XlaTensor):
        return t
    whole, found = _merged(t, mesh, placements)
    if placements_of(t) == tuple(found) and device_mesh_of(t) == whole:
        return t
    return redistribute(t, whole, found)


def _place_parameter(module: torch.nn.Module, name: str, mesh: DeviceMesh, placements: Sequence[Placement],
                     keep_on_cpu: bool) -> None:
    """Lay parameter (or buffer) `name` of `module` out over `mesh`."""
    is_param = name in module._parameters
    t = module._parameters[name] if is_param else module._buffers[name]
    if t is None:
        return
    whole, found = _merged(t, mesh, placements)
    if not isinstance(t, XlaTensor):
        if keep_on_cpu:
            layout, constraint, _ = _layouts(t, whole, found)
            note_cpu_layout(t, layout)  # even: Note [Layouts of CPU tensors]
            return
    elif relayout_parameter(t, whole, found):
        return  # laid out in place
    new = distribute_tensor(t.detach(), whole, found)
    if is_param:
        module._parameters[name] = torch.nn.Parameter(new, requires_grad=t.requires_grad)
    else:
        module._buffers[name] = new


# ---------------------------------------------------------------- parallel styles


class ParallelStyle:
    """How parallelize_module lays one module out (torch.distributed.tensor.parallel's)."""

    def apply(self, module: torch.nn.Module, mesh: DeviceMesh, keep_on_cpu: bool) -> torch.nn.Module:
        raise NotImplementedError

    def _hooks(self, module: torch.nn.Module, mesh: DeviceMesh, inputs: Sequence[Placement] | None,
               outputs: Sequence[Placement] | None) -> None:
        if inputs is not None:
            def pre(mod: torch.nn.Module, args: tuple) -> tuple:
                return tuple(relayout(a, mesh, inputs) if i == 0 else a for i, a in enumerate(args))

            module.register_forward_pre_hook(pre)
        if outputs is not None:
            def post(mod: torch.nn.Module, args: tuple, out: Any) -> Any:
                return relayout(out, mesh, outputs)

            module.register_forward_hook(post)


def _one(layouts: Any, default: Placement) -> tuple[Placement]:
    if layouts is None:
        return (default,)
    if isinstance(layouts, (tuple, list)):
        if len(layouts) != 1:
            raise ValueError(f"a layout for a 1-d mesh: one placement, not {layouts}")
        layouts = layouts[0]
    return (as_placement(layouts),)


def _check_1d(mesh: DeviceMesh, style: str) -> None:
    if mesh.ndim != 1:
        raise ValueError(f"{style} takes a 1-d mesh (a dim of one: mesh['tp']), not {mesh}")


class ColwiseParallel(ParallelStyle):
    """nn.Linear's weight split by output features (Shard(0)), its bias too; nn.Embedding's
    weight by embedding dims (Shard(1)). The input is replicated, the output split on
    its last dim."""

    def __init__(self, *, input_layouts: Any = None, output_layouts: Any = None, use_local_output: bool = True):
        self.input_layouts = _one(input_layouts, Replicate())
        self.output_layouts = _one(output_layouts, Shard(-1))
        self.use_local_output = use_local_output

    def apply(self, module: torch.nn.Module, mesh: DeviceMesh, keep_on_cpu: bool) -> torch.nn.Module:
        _check_1d(mesh, "ColwiseParallel")
        if isinstance(module, torch.nn.Linear):
            _place_parameter(module, "weight", mesh, [Shard(0)], keep_on_cpu)
            if module.bias is not None:
                _place_parameter(module, "bias", mesh, [Shard(0)], keep_on_cpu)
        elif isinstance(module, torch.nn.Embedding):
            _place_parameter(module, "weight", mesh, [Shard(1)], keep_on_cpu)
        else:
            raise NotImplementedError("ColwiseParallel lays out nn.Linear and nn.Embedding, "
                                      f"not {type(module).__name__}")
        self._hooks(module, mesh, [Replicate()], self.output_layouts)
        return module


class RowwiseParallel(ParallelStyle):
    """nn.Linear's weight split by input features (Shard(1)), its bias replicated;
    nn.Embedding's weight by rows (Shard(0)). The input is split on its last dim (an
    Embedding's: replicated), the output replicated (XLA all-reduces the partial sums)."""

    def __init__(self, *, input_layouts: Any = None, output_layouts: Any = None, use_local_output: bool = True):
        self.input_layouts = _one(input_layouts, Shard(-1))
        self.output_layouts = _one(output_layouts, Replicate())
        self.use_local_output = use_local_output

    def apply(self, module: torch.nn.Module, mesh: DeviceMesh, keep_on_cpu: bool) -> torch.nn.Module:
        _check_1d(mesh, "RowwiseParallel")
        if isinstance(module, torch.nn.Linear):
            _place_parameter(module, "weight", mesh, [Shard(1)], keep_on_cpu)
            if module.bias is not None:
                _place_parameter(module, "bias", mesh, [Replicate()], keep_on_cpu)
            inputs: Sequence[Placement] = [Shard(-1)]
        elif isinstance(module, torch.nn.Embedding):
            _place_parameter(module, "weight", mesh, [Shard(0)], keep_on_cpu)
            inputs = [Replicate()]
        else:
            raise NotImplementedError("RowwiseParallel lays out nn.Linear and nn.Embedding, "
                                      f"not {type(module).__name__}")
        self._hooks(module, mesh, inputs, self.output_layouts)
        return module


class SequenceParallel(ParallelStyle):
    """A module working on each position alone (LayerNorm, RMSNorm, Dropout): its
    parameters replicated, its input and output split along `sequence_dim`."""

    def __init__(self, *, sequence_dim: int = 1, use_local_output: bool = False):
        self.sequence_dim = sequence_dim
        self.use_local_output = use_local_output

    def apply(self, module: torch.nn.Module, mesh: DeviceMesh, keep_on_cpu: bool) -> torch.nn.Module:
        _check_1d(mesh, "SequenceParallel")
        for name in list(module._parameters):
            _place_parameter(module, name, mesh, [Replicate()], keep_on_cpu)
        self._hooks(module, mesh, [Shard(self.sequence_dim)], [Shard(self.sequence_dim)])
        return module


class PrepareModuleInput(ParallelStyle):
    """Lay a module's positional inputs out: `desired_input_layouts[i]` for input i (None
    leaves it as it is). `input_layouts` is accepted for torch's signature: one process
    holds global values, so where they came from changes nothing."""

    def __init__(self, *, input_layouts: Any = None, desired_input_layouts: Any = None, input_kwarg_layouts: Any = None,
                 desired_input_kwarg_layouts: Any = None, use_local_output: bool = False):
        self.desired = _many(desired_input_layouts)
        self.desired_kwargs = {k: as_placement(v) for k, v in (desired_input_kwarg_layouts or {}).items()}

    def apply(self, module: torch.nn.Module, mesh: DeviceMesh, keep_on_cpu: bool) -> torch.nn.Module:
        _check_1d(mesh, "PrepareModuleInput")

        def pre(mod: torch.nn.Module, args: tuple, kwargs: dict) -> tuple:
            args = tuple(a if i >= len(self.desired) or self.desired[i] is None
                         else relayout(a, mesh, [self.desired[i]]) for i, a in enumerate(args))
            kwargs = {k: relayout(v, mesh, [self.desired_kwargs[k]]) if k in self.desired_kwargs else v
                      for k, v in kwargs.items()}
            return args, kwargs

        module.register_forward_pre_hook(pre, with_kwargs=True)
        return module


class PrepareModuleOutput(ParallelStyle):
    """Lay a module's outputs out: `desired_output_layouts[i]` for output i (a single
    tensor output: one placement)."""

    def __init__(self, *, output_layouts: Any = None, desired_output_layouts: Any = None,
                 use_local_output: bool = True):
        self.desired = _many(desired_output_layouts)

    def apply(self, module: torch.nn.Module, mesh: DeviceMesh, keep_on_cpu: bool) -> torch.nn.Module:
        _check_1d(mesh, "PrepareModuleOutput")

        def post(mod: torch.nn.Module, args: tuple, out: Any) -> Any:
            if isinstance(out, (tuple, list)):
                return type(out)(o if i >= len(self.desired) or self.desired[i] is None
                                 else relayout(o, mesh, [self.desired[i]]) for i, o in enumerate(out))
            return out if not self.desired or self.desired[0] is None else relayout(out, mesh, [self.desired[0]])

        module.register_forward_hook(post)
        return module


def _many(layouts: Any) -> list[Placement | None]:
    if layouts is None:
        return []
    if not isinstance(layouts, (tuple, list)):
        layouts = [layouts]
    return [None if p is None else as_placement(p) for p in layouts]


def _style(style: Any) -> ParallelStyle:
    """Ours, or torch's style of the same name (read through its attributes)."""
    if isinstance(style, ParallelStyle):
        return style
    name = type(style).__name__
    ours = {"ColwiseParallel": ColwiseParallel, "RowwiseParallel": RowwiseParallel}
    if name in ours:
        return ours[name](input_layouts=getattr(style, "input_layouts", None),
                          output_layouts=getattr(style, "output_layouts", None))
    if name == "SequenceParallel":
        return SequenceParallel(sequence_dim=getattr(style, "sequence_sharding", (Shard(1),))[0].dim)
    raise TypeError(f"{style!r} is not a parallel style: use ColwiseParallel(), RowwiseParallel(), SequenceParallel(), "
                    "PrepareModuleInput() or PrepareModuleOutput()")


def _matches(module: torch.nn.Module, pattern: str) -> list[tuple[str, torch.nn.Module]]:
    """Submodules whose path matches `pattern` atom by atom (`layers.*.mlp`)."""
    atoms = pattern.split(".")
    found = []
    for path, sub in module.named_modules():
        parts = path.split(".") if path else []
        if len(parts) == len(atoms) and all(fnmatch.fnmatchcase(p, a) for p, a in zip(parts, atoms)):
            found.append((path, sub))
    return found


def parallelize_module(module: torch.nn.Module, device_mesh: Any = None, parallelize_plan: Any = None, *,
                       src_data_rank: int | None = 0, keep_on_cpu: bool = False) -> torch.nn.Module:
    """Apply a parallel style to `module`, or a plan {submodule path (with `*`
    wildcards): style or nested plan} to its submodules; returns `module`."""
    mesh = _mesh(device_mesh)
    if parallelize_plan is None:
        return module
    if isinstance(parallelize_plan, dict):
        for pattern, style in parallelize_plan.items():
            subs = _matches(module, pattern)
            if not subs:
                raise ValueError(f"parallelize_module: no submodule of {type(module).__name__} matches {pattern!r}")
            for _, sub in subs:
                parallelize_module(sub, mesh, style, keep_on_cpu=keep_on_cpu)
        return module
    return _style(parallelize_plan).apply(module, mesh, keep_on_cpu)


def distribute_module(module: torch.nn.Module, device_mesh: Any = None,
                      partition_fn: Callable[[str, torch.nn.Module, DeviceMesh], None] | None = None,
                      input_fn: Callable[[torch.nn.Module, Any, DeviceMesh], Any] | None = None,
                      output_fn: Callable[[torch.nn.Module, Any, DeviceMesh], Any] | None = None, *,
                      keep_on_cpu: bool = False) -> torch.nn.Module:
    """torch's distribute_module: `partition_fn(name, submodule, mesh)` lays out each
    submodule's parameters (default: every parameter and buffer replicated), and
    `input_fn(module, inputs, mesh)` / `output_fn(module, outputs, mesh)` become forward
    hooks. Returns `module`."""
    mesh = _mesh(device_mesh)
    for name, sub in list(module.named_modules()):
        if partition_fn is not None:
            partition_fn(name, sub, mesh)
        for pname in list(sub._parameters) + list(sub._buffers):  # what partition_fn left: replicated
            t = sub._parameters[pname] if pname in sub._parameters else sub._buffers[pname]
            if t is not None and (not isinstance(t, XlaTensor) or device_mesh_of(t) is None):
                _place_parameter(sub, pname, mesh, [Replicate()] * mesh.ndim, keep_on_cpu)
    if input_fn is not None:
        module.register_forward_pre_hook(lambda mod, inputs: input_fn(mod, inputs, mesh))
    if output_fn is not None:
        module.register_forward_hook(lambda mod, inputs, outputs: output_fn(mod, outputs, mesh))
    return module


# ---------------------------------------------------------------- fully_shard


_SHARDED = "_xnf_fully_sharded"  # the parameters a fully_shard call manages, on its module


class _MixedPrecisionCast(torch.autograd.Function):
    """A gathered parameter cast to the compute dtype, whose gradient is cast to the
    reduction dtype on its way back (FSDP2's param_dtype and reduce_dtype); autograd
    then casts it to the parameter's own dtype."""

    @staticmethod
    def forward(ctx: Any, t: torch.Tensor, dtype: torch.dtype, grad_dtype: torch.dtype) -> torch.Tensor:
        ctx.grad_dtype = grad_dtype
        return t.to(dtype)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        return grad.to(ctx.grad_dtype), None, None


def _cast_floating(tree: Any, dtype: torch.dtype) -> Any:
    """Floating-point tensors of `tree` (args, outputs) cast to `dtype`."""
    return torch.utils._pytree.tree_map_only(
        torch.Tensor, lambda t: t.to(dtype) if t.is_floating_point() and t.dtype != dtype else t, tree)


def fully_shard(module: torch.nn.Module, *, mesh: Any = None, reshard_after_forward: bool | int = True,
                shard_placement_fn: Callable[[torch.nn.Parameter], Shard | None] | None = None, mp_policy: Any = None,
                offload_policy: Any = None, ignored_params: set | None = None, keep_on_cpu: bool = False
                ) -> torch.nn.Module:
    """FSDP2's `fully_shard`: the module's parameters not yet managed by a fully_shard
    call on one of its submodules are split by their dim 0 (or `shard_placement_fn`'s
    Shard) over `mesh` (a 2-d mesh: replicated over its first dim and split over its
    second, HSDP). Before each forward they are gathered whole for it (an all-gather),
    and their gradients are laid out split again (a reduce-scatter), which XLA's
    partitioner turns into those collectives. Returns `module`.

    `mp_policy` (torch's MixedPrecisionPolicy, or anything with its attributes) is
    applied as FSDP2 applies it: the gathered parameters are cast to `param_dtype` for
    the forward and backward (the parameters, and the optimizer's master copy, keep
    their dtype), floating inputs of the module's forward to `param_dtype`
    (`cast_forward_inputs`), its floating outputs to `output_dtype`, and the
    parameters' gradients are cast to `reduce_dtype` (default `param_dtype`) before they
    are laid out split again (the reduce-scatter), then to the parameters' dtype.
    `reshard_after_forward` and `offload_policy` are accepted for torch's signature:
    when gathered parameters are freed is XLA's scheduling, and offloading is not
    applied (docs/distributed.md)."""
    mesh = _mesh(mesh)
    if mesh.ndim not in (1, 2):
        raise ValueError(f"fully_shard takes a 1-d mesh (FSDP) or a 2-d one (HSDP: replicate, shard), not {mesh}")
    param_dtype = getattr(mp_policy, "param_dtype", None) if mp_policy is not None else None
    reduce_dtype = getattr(mp_policy, "reduce_dtype", None) if mp_policy is not None else None
    output_dtype = getattr(mp_policy, "output_dtype", None) if mp_policy is not None else None
    ignored = {id(p) for p in (ignored_params or ())}
    managed = set()
    for sub in module.modules():
        managed |= getattr(sub, _SHARDED, set()) if sub is not module else set()
    mine: list[tuple[torch.nn.Module, str]] = []
    for sub in module.modules():
        for name, p in list(sub._parameters.items()):
            if p is None or id(p) in ignored or (id(sub), name) in managed:
                continue
            placement = shard_placement_fn(p) if shard_placement_fn is not None else None
            placement = Shard(0) if placement is None else as_placement(placement)
            placements = [placement] if mesh.ndim == 1 else [Replicate(), placement]
            if p.dim() == 0:
                placements = [Replicate()] * mesh.ndim
            _place_parameter(sub, name, mesh, placements, keep_on_cpu)
            mine.append((sub, name))
    setattr(module, _SHARDED, {(id(s), n) for s, n in mine} | managed)
    gathered: list[tuple[torch.nn.Module, str, torch.nn.Parameter]] = []

    def unshard(mod: torch.nn.Module, args: tuple) -> Any:
        for sub, name in mine:
            p = sub._parameters[name]
            if isinstance(p, XlaTensor) and device_mesh_of(p) is not None:
                whole = relayout(p, mesh, [Replicate()] * mesh.ndim)
                if param_dtype is not None and p.is_floating_point() and p.dtype != param_dtype:
                    whole = _MixedPrecisionCast.apply(whole, param_dtype, reduce_dtype or param_dtype)
                if whole is not p:
                    gathered.append((sub, name, p))
                    sub._parameters[name] = whole
        if param_dtype is not None and getattr(mp_policy, "cast_forward_inputs", True):
            return _cast_floating(args, param_dtype)
        return None

    def reshard(mod: torch.nn.Module, args: tuple, out: Any) -> Any:
        while gathered:
            sub, name, p = gathered.pop()
            sub._parameters[name] = p
        return _cast_floating(out, output_dtype) if output_dtype is not None else None

    module.register_forward_pre_hook(unshard)
    module.register_forward_hook(reshard, always_call=True)
    return module
