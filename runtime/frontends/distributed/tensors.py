"""Sharded tensors with torch.distributed.tensor's names (docs/distributed.md).

A tensor laid out over a mesh is an XlaTensor whose storage holds a sharded jax.Array
(Note [Placed storage] in runtime/core/placement.py): there is no local shard to wrap,
as in DTensor, because one process holds the global value (JAX's single controller).
`t.placements`, `t.device_mesh` and `t.sharding` say where its values live,
`t.redistribute(mesh, placements)` and `t.full_tensor()` lay them out anew
(differentiably), and eager ops on it run over the mesh (each op's executable is split
by XLA's partitioner, as `jax.jit` of sharded arrays is).
"""

from __future__ import annotations

import sys
from typing import Any, Sequence

import jax
import torch
from jax.sharding import Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding

from ...core.context import context
from ...core.convert import X64, cpu_to_jax
from ...core.mesh import DeviceMesh, Placement, Replicate, Shard, as_placement, check_placements, current_mesh, \
    layout_for, placements_of_layout, requested_layout
from ...core.placement import PlacedStorage, device_count, local_devices, spans_devices, torch_device
from ...core.tensor import DEVICE_NAME, XlaTensor, from_array
from ...exec.eager import value
from ...exec.sharding import laid_out, note_cpu_layout, relayout_in_place


def init_device_mesh(device_type: Any = DEVICE_NAME, mesh_shape: Sequence[int] | None = None, *,
                     mesh_dim_names: Sequence[str] | None = None) -> DeviceMesh:
    """A mesh of every JAX device (of every process), of shape `mesh_shape`:
    `init_device_mesh("jax", (2, 4), mesh_dim_names=("dp", "tp"))`, or without the
    device type, `init_device_mesh((2, 4), ("dp", "tp"))`. The devices are ordered as
    `jax.make_mesh` orders them (by their physical topology on TPUs)."""
    if not isinstance(device_type, str):  # init_device_mesh(shape, names)
        if mesh_shape is not None and mesh_dim_names is None:
            mesh_dim_names = mesh_shape
        device_type, mesh_shape = DEVICE_NAME, device_type
    if device_type != DEVICE_NAME:
        raise ValueError(f"init_device_mesh: the devices here are JAX's, device_type {DEVICE_NAME!r}, "
                         f"not {device_type!r}")
    if mesh_shape is None:
        raise TypeError("init_device_mesh needs mesh_shape, like (8,) or (2, 4)")
    shape = tuple(int(s) for s in mesh_shape)
    names = tuple(mesh_dim_names) if mesh_dim_names is not None else tuple(f"dim{i}" for i in range(len(shape)))
    if len(names) != len(shape):
        raise ValueError(f"init_device_mesh: {len(names)} mesh_dim_names for a mesh of {len(shape)} dims")
    devices = jax.devices()
    total = 1
    for s in shape:
        total *= s
    if total != len(devices):
        raise ValueError(
            f"init_device_mesh: a mesh of shape {shape} has {total} devices, and there are {len(devices)} "
            "(every process's JAX devices): give a shape whose product is that, or build a DeviceMesh of "
            "some of them (DeviceMesh('jax', [[0, 1], [2, 3]], mesh_dim_names=...))")
    mesh = jax.make_mesh(shape, names, axis_types=(jax.sharding.AxisType.Auto,) * len(shape), devices=devices)
    return DeviceMesh.from_jax(mesh)


def _mesh(device_mesh: Any) -> DeviceMesh:
    if device_mesh is None:
        device_mesh = current_mesh()
        if device_mesh is None:
            raise ValueError("no device mesh given, and none is current: pass one, or call inside `with mesh:`")
    if isinstance(device_mesh, Mesh):
        return DeviceMesh.from_jax(device_mesh)
    if not isinstance(device_mesh, DeviceMesh):
        raise TypeError("expected a DeviceMesh (init_device_mesh) or a jax.sharding.Mesh, "
                        f"not {type(device_mesh).__name__}")
    return device_mesh


def _layouts(t: torch.Tensor, mesh: DeviceMesh, placements: Any) -> tuple:
    """(layout at rest, constraint for compiled programs or None, note) of `t` placed so."""
    if placements is None:
        placements = [Replicate()] * mesh.ndim
    found = check_placements(mesh, placements, t.dim())
    shape = tuple(t.shape)
    layout = layout_for(mesh, found, shape)
    wanted = requested_layout(mesh, found, shape)
    return layout, (None if wanted == layout else wanted), (mesh, found)


def _on_jax(t: torch.Tensor) -> XlaTensor:
    if isinstance(t, XlaTensor):
        return t
    if t.layout != torch.strided:
        raise RuntimeError(f"{t.layout} tensors cannot be distributed (dense tensors only): convert with .to_dense()")
    with X64:
        return from_array(cpu_to_jax(t.detach()))


def distribute_tensor(tensor: torch.Tensor, device_mesh: Any = None, placements: Sequence[Any] | None = None, *,
                      src_data_rank: int | None = 0) -> XlaTensor:
    """A new tensor holding `tensor`'s values laid out over `device_mesh` by `placements`
    (one per mesh dim; default: replicated). A CPU tensor moves to the mesh. A leaf,
    requiring grad as `tensor` does. `src_data_rank` is accepted for torch's signature:
    one process holds the values, so there is no rank to scatter from."""
    mesh = _mesh(device_mesh)
    layout, constraint, note = _layouts(tensor, mesh, placements)
    out = laid_out(_on_jax(tensor).detach(), layout, note, constraint)
    if tensor.requires_grad:
        out.requires_grad_(True)
    return out


def _spec_placements(mesh: DeviceMesh, spec: Sequence[Any], ndim: int) -> list[Placement]:
    """PyTorch/XLA's partition spec (per tensor dim: a mesh dim name or index, a tuple of
    them, or None) as one placement per mesh dim."""
    if len(spec) != ndim:
        raise ValueError(f"a partition spec of {len(spec)} entries for a tensor of {ndim} dims: "
                         "give one per tensor dim")
    names = mesh.mesh_dim_names
    placements: list[Placement] = [Replicate()] * mesh.ndim
    for d, entry in enumerate(spec):
        if entry is None:
            continue
        for e in (entry if isinstance(entry, (tuple, list)) else (entry,)):
            if isinstance(e, int):
                if not 0 <= e < len(names):
                    raise IndexError(f"partition spec names mesh dim {e}; the mesh has {len(names)}")
                e = names[e]
            if e not in names:
                raise KeyError(f"partition spec names mesh dim {e!r}, which is not in {names}")
            i = names.index(e)
            if not placements[i].is_replicate():
                raise ValueError(f"partition spec uses mesh dim {e!r} twice")
            placements[i] = Shard(d)
    return placements


def mark_sharding(t: torch.Tensor, mesh: Any, partition_spec: Sequence[Any]) -> torch.Tensor:
    """PyTorch/XLA's `xs.mark_sharding(t, mesh, ("dp", None))`: lay `t` itself out over
    `mesh`, one entry per tensor dim (a mesh dim's name or index, a tuple of them, or
    None), and return it. `t` keeps its identity, so a parameter stays its optimizer's.
    On a CPU tensor, the layout is noted for the torch.compile backend, which applies it
    inside its programs (the tensor stays where it is)."""
    mesh = _mesh(mesh)
    placements = _spec_placements(mesh, tuple(partition_spec), t.dim())
    layout, constraint, note = _layouts(t, mesh, placements)
    if not isinstance(t, XlaTensor):
        note_cpu_layout(t, layout)  # even: Note [Layouts of CPU tensors]
        return t
    relayout_in_place(t, layout, note, constraint)
    return t


def relayout_parameter(t: XlaTensor, mesh: DeviceMesh, placements: Sequence[Any]) -> bool:
    """Lay a parameter of ours out in place (it stays its optimizer's); False when it
    cannot keep its device so (the mesh starts on another device)."""
    layout, constraint, note = _layouts(t, mesh, placements)
    if torch_device(layout) != t.device or not t._whole:
        return False
    relayout_in_place(t, layout, note, constraint)
    return True


def clear_sharding(t: torch.Tensor) -> torch.Tensor:
    """Undo mark_sharding: `t` gathered onto its device (a CPU tensor: its note dropped)."""
    if not isinstance(t, XlaTensor):
        note_cpu_layout(t, None)
        return t
    store = t._store
    if store.__class__ is PlacedStorage and spans_devices(store.layout):
        relayout_in_place(t, SingleDeviceSharding(local_devices()[t.device.index or 0]))
    return t


class _Relayout(torch.autograd.Function):
    """A layout change that gradients flow through, laid out on their way back as the
    input was (DTensor's redistribute)."""

    @staticmethod
    def forward(ctx: Any, t: XlaTensor, layout: Any, note: Any, constraint: Any) -> XlaTensor:
        store = t._store
        ctx.back = (store.layout, store.note) if store.__class__ is PlacedStorage and t._whole else None
        return laid_out(t, layout, note, constraint)

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        if ctx.back is not None and isinstance(grad, XlaTensor) and ctx.back[0] is not None:
            layout, note = ctx.back
            if note is not None:
                mesh, placements = note
                placements = tuple(Replicate() if p.is_partial() else p for p in placements)
                layout, constraint, note = _layouts(grad, mesh, placements)
                grad = laid_out(grad, layout, note, constraint)
            else:
                grad = laid_out(grad, layout)
        return grad, None, None, None


def redistribute(t: torch.Tensor, device_mesh: Any = None, placements: Sequence[Any] | None = None) -> torch.Tensor:
    """`t` laid out anew (a new tensor, differentiable). A CPU tensor is returned as it is
    (the torch.compile backend's programs follow their inputs' noted layouts)."""
    if not isinstance(t, XlaTensor):
        return t
    mesh = _mesh(device_mesh if device_mesh is not None else device_mesh_of(t))
    layout, constraint, note = _layouts(t, mesh, placements)
    return _Relayout.apply(t, layout, note, constraint)


def full_tensor(t: torch.Tensor) -> torch.Tensor:
    """`t`'s values replicated over its mesh (DTensor.full_tensor; differentiable)."""
    mesh = device_mesh_of(t)
    if mesh is None:
        return t
    return redistribute(t, mesh, [Replicate()] * mesh.ndim)


# ---------------------------------------------------------------- what a tensor shows


def _value_sharding(t: XlaTensor) -> Any:
    """The JAX sharding of `t`'s values (a view: of the values it reads)."""
    store = t._store
    if t._whole and store.pending is None and store.array is not None:
        array = store.array
        return getattr(array, "sharding", None) if not isinstance(array, jax.core.Tracer) else None
    if t._whole and store.__class__ is PlacedStorage and store.layout is not None:
        return store.layout
    if context.trace is not None or store.pending is not None:
        return None  # a traced value: its layout is the program's, known once it runs
    array = value(t)
    return None if isinstance(array, jax.core.Tracer) else array.sharding


def _note(t: XlaTensor) -> Any:
    store = t._store
    if store.__class__ is PlacedStorage and t._whole and store.note is not None:
        return store.note
    return None


def sharding_of(t: torch.Tensor) -> Any:
    """The jax.sharding.Sharding of a tensor's values; None for a CPU tensor."""
    if not isinstance(t, XlaTensor):
        return None
    return _value_sharding(t)


def device_mesh_of(t: torch.Tensor) -> DeviceMesh | None:
    """The mesh a tensor is laid out over; None for a tensor on one device."""
    if not isinstance(t, XlaTensor):
        return None
    note = _note(t)
    if note is not None:
        return note[0]
    layout = _value_sharding(t)
    if isinstance(layout, NamedSharding) and spans_devices(layout):
        return placements_of_layout(layout, t.dim())[0]
    return None


def placements_of(t: torch.Tensor) -> tuple[Placement, ...] | None:
    """A tensor's placements over its mesh (as asked for, where it was placed itself;
    else as XLA laid its values out); None for a tensor on one device."""
    if not isinstance(t, XlaTensor):
        return None
    note = _note(t)
    if note is not None:
        return note[1]
    layout = _value_sharding(t)
    if isinstance(layout, NamedSharding) and spans_devices(layout):
        return placements_of_layout(layout, t.dim())[1]
    return None


def _attach_tensor_api() -> None:
    """DTensor's names on our tensors: `t.placements`, `t.device_mesh`, `t.sharding`,
    `t.redistribute(...)`, `t.full_tensor()`."""
    XlaTensor.placements = property(placements_of)
    XlaTensor.device_mesh = property(device_mesh_of)
    XlaTensor.sharding = property(sharding_of)
    XlaTensor.redistribute = lambda self, device_mesh=None, placements=None: redistribute(self, device_mesh, placements)
    XlaTensor.full_tensor = full_tensor


# ---------------------------------------------------------------- visualize


def _device_label(d: Any) -> str:
    local = local_devices()
    if d in local:
        return str(local.index(d))
    return f"p{d.process_index}:{d.id}"


def _ranges(slices: list, n: int) -> list[tuple[int, int]]:
    found = sorted({(s.start or 0, n if s.stop is None else s.stop) for s in slices})
    return found


def visualize(t: torch.Tensor, *, file: Any = None) -> str:
    """Print (to `file`, default stdout) and return a picture of where a tensor's values
    live: which devices hold which block (rows and columns of a 2-d tensor, the blocks of
    each split dim otherwise), with its mesh and placements."""
    if not isinstance(t, XlaTensor):
        text = f"tensor of shape {tuple(t.shape)}, {t.dtype}, on {t.device}: not on a JAX device"
        print(text, file=file or sys.stdout)
        return text
    shape = tuple(t.shape)
    layout = _value_sharding(t)
    mesh, placements = device_mesh_of(t), placements_of(t)
    where = f"{mesh} as {placements}" if mesh is not None else str(t.device)
    lines = [f"tensor of shape {shape}, {t.dtype}, on {where}"]
    if layout is None:
        lines.append("  (inside a JAX transformation: no concrete layout)")
    else:
        blocks: dict[tuple, list] = {}
        for d, index in layout.devices_indices_map(shape).items():
            key = tuple((s.start or 0, shape[i] if s.stop is None else s.stop) for i, s in enumerate(index))
            blocks.setdefault(key, []).append(d)
        note = ""
        if mesh is not None and placements is not None:
            sizes = [shape[p.dim] for p in placements if isinstance(p, Shard)]
            split = {p.dim for p in placements if isinstance(p, Shard)}
            laid = {i for key in blocks for i, (a, b) in enumerate(key) if (a, b) != (0, shape[i])}
            if split - laid:
                note = (f"  (dims {sorted(split - laid)} do not divide evenly over their mesh dims: held whole at "
                        "rest, split inside compiled programs)")
            del sizes
        cell = {k: "jax:" + ",".join(_device_label(d) for d in sorted(v, key=lambda d: d.id))
                for k, v in blocks.items()}
        if len(shape) == 0:
            lines.append("  " + next(iter(cell.values())))
        elif len(shape) <= 2:
            rows = sorted({k[0] for k in blocks})
            cols = sorted({k[1] for k in blocks}) if len(shape) == 2 else [None]
            head = ["rows"] + ([f"cols {a}:{b}" for a, b in cols] if len(shape) == 2 else ["devices"])
            table = [head]
            for r in rows:
                row = [f"{r[0]}:{r[1]}"]
                for c in cols:
                    row.append(cell.get((r,) if c is None else (r, c), "-"))
                table.append(row)
            widths = [max(len(row[i]) for row in table) for i in range(len(head))]
            for row in table:
                lines.append("  " + "  ".join(x.ljust(w) for x, w in zip(row, widths)).rstrip())
        else:
            for key in sorted(blocks):
                parts = ", ".join(f"{a}:{b}" for a, b in key)
                lines.append(f"  [{parts}]  {cell[key]}")
        if note:
            lines.append(note)
    text = "\n".join(lines)
    print(text, file=file or sys.stdout)
    return text


__all__ = ["DeviceMesh", "Mesh", "PartitionSpec", "clear_sharding", "device_count", "device_mesh_of",
           "distribute_tensor",
           "full_tensor", "init_device_mesh", "mark_sharding", "placements_of", "redistribute", "sharding_of",
           "torch_device", "visualize", "as_placement"]
