"""Laying tensors out over devices and meshes, eagerly and in traced programs.

Eagerly a layout is a `jax.device_put`: the array moves, and ops on it then run where it
is (JAX's computation follows its operands' shardings, and XLA's partitioner splits each
executable over the mesh). In a trace (compile(), lazy mode) a layout is a `shard_as`
node, a sharding constraint in the program, and every graph constrains the values it
writes into a placed storage to that storage's layout (`constrain_roots`), so the
partitioner lays the whole step out from its inputs and outputs and inserts the
collectives itself (Note [Placed storage] in core/placement.py).
"""

from __future__ import annotations

import weakref
from typing import Any

import jax
import numpy as np
import torch
from jax.sharding import NamedSharding, SingleDeviceSharding
from torch.utils._pytree import tree_flatten

from ..core.context import context
from ..core.convert import X64
from ..core.ir import Value
from ..core.mesh import requested_layout
from ..core.placement import (PlacedStorage, activate, jax_device, lay_out, placed_storage, spans_devices,
                              torch_device, uncommitted)
from ..core.tensor import DEVICE_NAME, Storage, XlaTensor, from_array, tensor_on
from .eager import value
from .registry import REGISTRY, node


def layout_attrs(layout: NamedSharding, ndim: int) -> tuple:
    """The attributes of a shard_as node laying a tensor of `ndim` dims out as `layout`
    (lowerings/sharding.py: device ids, mesh shape and axes, one string per dim)."""
    mesh = layout.mesh
    spec = tuple(layout.spec) + (None,) * (ndim - len(layout.spec))
    text = tuple("" if e is None else e if isinstance(e, str) else ",".join(e) for e in spec)
    return (tuple(int(d.id) for d in mesh.devices.flat), tuple(int(s) for s in mesh.devices.shape),
            tuple(mesh.axis_names), text)


def _shard_as(v: Any, layout: NamedSharding) -> Any:
    """A shard_as node on IR value `v`: its output value."""
    cls = node("shard_as")
    attrs = layout_attrs(layout, len(v.meta.shape))
    return Value(cls((v,) + attrs), 0, v.meta)


def _is_constraint(v: Any, layout: NamedSharding) -> bool:
    n = v.node
    return n is not None and n.__class__ is node("shard_as") and n.args[1:] == layout_attrs(layout, len(v.meta.shape))


def constrain_roots(stores: list[Storage]) -> None:
    """Before a graph runs: each value it writes into a placed storage laid out over a
    mesh gets that storage's layout as a constraint (Note [Placed storage])."""
    for s in stores:
        if s.__class__ is PlacedStorage:
            v = s.pending
            layout = s.layout
            if v is not None and v.node is not None and isinstance(layout, NamedSharding) and spans_devices(layout):
                if s.note is not None:  # the layout asked for: an uneven split applies inside the program
                    layout = requested_layout(s.note[0], s.note[1], tuple(v.meta.shape))
                if not _is_constraint(v, layout):
                    s.pending = _shard_as(v, layout)


def _adopt(trace: Any, v: Any, store: Storage) -> None:
    """`store` holds traced value `v` until the trace runs."""
    store.pending, store.owner = v, trace
    trace.storages.append(weakref.ref(store))


def laid_out(t: XlaTensor, layout: Any, note: Any = None, constraint: NamedSharding | None = None) -> XlaTensor:
    """A new tensor with `t`'s values laid out as `layout` (a Sharding). `constraint`:
    the layout a traced program applies, when it is not the one JAX can hold at rest (an
    uneven split)."""
    activate()
    trace = context.trace
    if trace is None:
        with X64:
            array = lay_out(value(t), layout) if spans_devices(layout) or not isinstance(layout, SingleDeviceSharding) \
                else _to_device(value(t), layout)
        store = placed_storage(array, layout, note)
        return tensor_on(store, tuple(t.shape), t.dtype)
    v = trace.value_of(t)
    if isinstance(constraint or layout, NamedSharding):
        v = _shard_as(v, constraint or layout)
    if isinstance(layout, SingleDeviceSharding) and torch_device(layout).index == 0:
        store = Storage(None)
    else:
        store = PlacedStorage(None, layout, note=note)
    _adopt(trace, v, store)
    return tensor_on(store, tuple(t.shape), t.dtype)


def _to_device(array: Any, layout: SingleDeviceSharding) -> Any:
    if torch_device(layout).index == 0:
        return uncommitted(array)
    return lay_out(array, layout)


def relayout_in_place(t: XlaTensor, layout: Any, note: Any = None, constraint: NamedSharding | None = None) -> None:
    """Lay `t` itself out as `layout` (PyTorch/XLA's mark_sharding): it keeps its identity
    (a parameter stays the optimizer's), and takes a placed storage. Its device does not
    change: a layout whose first device is not `t`'s raises."""
    if not t._whole:
        raise RuntimeError("a view cannot be laid out in place: its storage is shared with its base; lay out the base "
                           "tensor, or distribute_tensor(view) for a new tensor")
    new_device = torch_device(layout)
    if new_device != t.device:
        raise RuntimeError(f"laying out a tensor in place keeps its device: it is on {t.device}, the layout's first "
                           f"device is {new_device}; use distribute_tensor or .to() for a new tensor")
    store = t._store
    if store.__class__ is PlacedStorage and store.layout == layout and store.note == note:
        if context.trace is None:
            return
    new = laid_out(t, layout, note, constraint)
    t._store, t._cache = new._store, None


def to_device(t: XlaTensor, index: int | None) -> XlaTensor:
    """`t`'s values on torch's jax:index (a new tensor; `t` itself when it is there)."""
    device = jax_device(index)
    target = torch.device(DEVICE_NAME, 0 if index is None else index)
    if t.device == target and not (t._store.__class__ is PlacedStorage and spans_devices(t._store.layout)):
        return t
    return laid_out(t, SingleDeviceSharding(device))


def on_device(t: Any, device: Any) -> Any:
    """A factory's or copy's result `t` moved where `device` (a torch device of ours)
    says: jax:i for an index i (checked), unchanged without an index."""
    if device is None or not isinstance(t, XlaTensor):
        return t
    device = torch.device(device)
    if device.type != DEVICE_NAME or device.index is None:
        return t
    jax_device(device.index)  # raises for an index out of range
    if device.index == 0 and t._store.__class__ is not PlacedStorage:
        return t
    return to_device(t, device.index)


def like(t: Any, template: Any) -> Any:
    """A `*_like` factory's result laid out as its template, as DTensor keeps placements."""
    if not isinstance(t, XlaTensor) or not isinstance(template, XlaTensor):
        return t
    store = template._store
    if store.__class__ is not PlacedStorage:
        return t
    if store.layout is None or not template._whole or tuple(t.shape) != tuple(template.shape):
        # a view, or a result not computed yet: at least on the template's device
        return t if t.device == template.device else on_device(t, template.device)
    if t._store.__class__ is PlacedStorage and t._store.layout == store.layout:
        return t
    return laid_out(t, store.layout, store.note)


def from_device_array(array: Any) -> XlaTensor:
    """A tensor of a JAX array wherever it lives."""
    activate()
    return from_array(array)


def is_laid_out(t: Any) -> bool:
    """Whether a tensor lives somewhere else than uncommitted on the default device."""
    return isinstance(t, XlaTensor) and t._store.__class__ is PlacedStorage


def jax_array(t: XlaTensor) -> Any:
    with X64:
        return value(t)


def _placing(handler: Any, like_op: bool, new_op: bool) -> Any:
    def run(*args: Any, **kwargs: Any) -> Any:
        out = handler(*args, **kwargs)
        device = kwargs.get("device")
        if device is not None:
            return on_device(out, device)
        if like_op and args:
            return like(out, args[0])
        if new_op and args and isinstance(args[0], XlaTensor):  # self.new_zeros(...): on self's device
            return on_device(out, args[0].device)
        return out

    run.__wrapped__ = handler
    return run


def install_device_handlers() -> None:
    """Ops with a device argument (factories, `*_like`, `_to_copy`) put their results on
    the device asked for (Note [Devices] in core/placement.py); `*_like` ops without one
    lay their results out as their template is. A handler that lays its result's strides
    out (Note [Result layouts] in exec/layouts.py) does so after the placement."""
    for op, handler in list(REGISTRY.items()):
        if getattr(handler, "places_results", False) or not hasattr(op, "_schema"):
            continue
        arguments = op._schema.arguments
        if not any(a.name == "device" for a in arguments):
            continue
        takes_self = bool(arguments) and arguments[0].name == "self"
        like_op = op._schema.name.endswith("_like") and takes_self
        new_op = op._schema.name.startswith("aten::new_") and takes_self
        around = getattr(handler, "around", None)
        placing = _placing(handler if around is None else handler.__wrapped__, like_op, new_op)
        placing = placing if around is None else around(placing)
        placing.places_results = True
        REGISTRY[op] = placing




# Note [Layouts of CPU tensors]
# The torch.compile backend runs models that stay on the CPU (runtime/frontends/dynamo.py):
# their parameters cannot move to a mesh, so laying one out (mark_sharding, the parallel
# styles on a CPU module) notes the layout here instead, by tensor, and the backend's
# programs constrain that input to it. Eager CPU code does not look. The layout noted
# is the one JAX holds at rest: a dim that does not divide by its mesh dims stays whole
# (an uneven split left to XLA's choice can give a program's outputs a layout JAX cannot
# name on the mesh, such as a (10,) gradient split in 2 over a mesh of 8).
_CPU_LAYOUTS: dict[int, tuple[weakref.ref, Any]] = {}


def note_cpu_layout(t: torch.Tensor, layout: NamedSharding | None) -> None:
    """Note (None: forget) the layout the torch.compile backend gives CPU tensor `t`."""
    key = id(t)
    if layout is None:
        _CPU_LAYOUTS.pop(key, None)
        return
    _CPU_LAYOUTS[key] = (weakref.ref(t, lambda _: _CPU_LAYOUTS.pop(key, None)), layout)


def cpu_layout(t: Any) -> NamedSharding | None:
    """The layout noted for CPU tensor `t` (Note [Layouts of CPU tensors])."""
    if not _CPU_LAYOUTS:
        return None
    entry = _CPU_LAYOUTS.get(id(t))
    if entry is None:
        return None
    ref, layout = entry
    if ref() is not t:
        return None
    return layout


class InputLayouts(tuple):
    """The noted layout (or None) of each argument of a torch.compile graph: a static
    argument of its jitted function (Note [Layouts of CPU tensors])."""

    __slots__ = ()


def input_layouts(args: tuple) -> InputLayouts | None:
    """The layouts noted for a graph's CPU tensor arguments; None when there are none."""
    if not _CPU_LAYOUTS:
        return None
    found = tuple(cpu_layout(a) if isinstance(a, torch.Tensor) and not isinstance(a, XlaTensor) else None for a in args)
    mesh = next((x.mesh for x in found if x is not None), None)
    if mesh is None:  # a graph of a step whose tensors of ours are sharded (a backward graph's saved values)
        shardings = (getattr(a._store.array, "sharding", None) for a in args if isinstance(a, XlaTensor))
        mesh = next((s.mesh for s in shardings if isinstance(s, NamedSharding) and spans_devices(s)), None)
        if mesh is None:
            return None
    # the other CPU tensor inputs replicated over the same mesh: one program cannot take
    # arrays committed to one device and arrays spread over several
    whole = NamedSharding(mesh, jax.sharding.PartitionSpec())
    return InputLayouts(whole if x is None and isinstance(a, torch.Tensor) and not isinstance(a, XlaTensor) else x
                        for x, a in zip(found, args))


def constrain_array(array: Any, layout: NamedSharding | None) -> Any:
    """`array` (a JAX tracer) constrained to `layout` inside the program being traced."""
    if layout is None:
        return array
    return jax.lax.with_sharding_constraint(array, layout)


def place_input(array: Any, layout: NamedSharding) -> Any:
    """A torch.compile graph's input laid out as noted before the call (a layout JAX
    cannot hold at rest, an uneven split, is applied inside the program only)."""
    try:
        layout.shard_shape(tuple(array.shape))
    except ValueError:
        return np.asarray(array)
    return jax.device_put(array, layout)


# ---------------------------------------------------------------- jax_jit's in/out shardings


def argument_shardings(args: tuple, kwargs: dict, in_shardings: Any) -> list:
    """The sharding of each leaf of `(args, kwargs)` flattened as torch flattens them:
    `in_shardings` has one entry per positional argument (a Sharding for all the
    argument's tensors, None for none, or a pytree of those matching the argument);
    keyword arguments get none."""
    from_prefix = in_shardings if isinstance(in_shardings, (tuple, list)) else (in_shardings,) * len(args)
    if len(from_prefix) != len(args):
        raise ValueError(f"jax_jit: in_shardings has {len(from_prefix)} entries for {len(args)} positional arguments")
    found: list = []
    for a, s in zip(args, from_prefix):
        n = len(tree_flatten(a)[0])
        if s is None or isinstance(s, jax.sharding.Sharding):
            found += [s] * n
            continue
        per_leaf = tree_flatten(s)[0]
        if len(per_leaf) != n:
            raise ValueError(f"jax_jit: an in_shardings entry of {len(per_leaf)} shardings for an argument of "
                             f"{n} leaves")
        found += per_leaf
    found += [None] * len(tree_flatten(kwargs)[0])
    return found


def place_argument(array: Any, sharding: Any) -> Any:
    """A jax_jit argument put in its sharding before the call."""
    if not isinstance(sharding, jax.sharding.Sharding):
        raise TypeError(f"jax_jit: in_shardings entries are jax.sharding.Sharding objects or None, not {sharding!r}")
    return jax.device_put(array, sharding)


def constrain_outputs(out: Any, out_shardings: Any) -> Any:
    """A jitted function's outputs constrained to `out_shardings`, a prefix of their tree
    (a Sharding applies to every array under it; None leaves them to XLA)."""
    def apply(sharding: Any, sub: Any) -> Any:
        if sharding is None:
            return sub
        return jax.tree_util.tree_map(
            lambda x: jax.lax.with_sharding_constraint(x, sharding) if isinstance(x, jax.Array) else x, sub)

    return jax.tree_util.tree_map(apply, out_shardings, out,
                                  is_leaf=lambda x: x is None or isinstance(x, jax.sharding.Sharding))
