"""Internal nodes of sharded programs (docs/distributed.md): a sharding constraint on a
value, and the collectives of torch.distributed, lowered to JAX's.

A mesh travels through the IR as plain values (the ids of its devices, its shape, its
axis names) and a layout as one string per tensor dim ("" replicated, "dp", or "dp,tp"
for a dim split over two mesh axes), so that a node's attributes are the schema's own
types and a graph's key compares them by value.

The collectives run inside a region where each device (or each process) computes on
its own block, `jax.shard_map`, whose mesh binds the axis names they reduce over: the
runtime puts them there (runtime/exec/collectives.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

_MESHES: dict[tuple, Mesh] = {}


def mesh_of(mesh_devices, mesh_shape, mesh_axes) -> Mesh:
    """The JAX mesh of these device ids, shape and axis names (axes of automatic
    sharding: XLA's partitioner decides what the constraints leave open)."""
    key = (tuple(mesh_devices), tuple(mesh_shape), tuple(mesh_axes))
    mesh = _MESHES.get(key)
    if mesh is None:
        by_id = {d.id: d for d in jax.devices()}
        devices = np.array([by_id[i] for i in mesh_devices], dtype=object).reshape(tuple(mesh_shape))
        mesh = _MESHES[key] = Mesh(devices, tuple(mesh_axes), axis_types=(AxisType.Auto,) * len(mesh_axes))
    return mesh


def partition_spec(spec) -> PartitionSpec:
    """One string per tensor dim ("", "dp", "dp,tp") as a PartitionSpec."""
    entries = []
    for s in spec:
        names = tuple(n for n in s.split(",") if n)
        entries.append(None if not names else names[0] if len(names) == 1 else names)
    return PartitionSpec(*entries)


def lower_shard_as(self, mesh_devices, mesh_shape, mesh_axes, spec):
    """`self` laid out over the mesh as `spec` says: a constraint XLA's partitioner
    propagates from, inserting the collectives that the layouts around it need."""
    sharding = NamedSharding(mesh_of(mesh_devices, mesh_shape, mesh_axes), partition_spec(spec))
    return jax.lax.with_sharding_constraint(self, sharding)


def _axes(axes):
    return tuple(axes) if len(axes) != 1 else axes[0]


def lower_all_reduce(self, op, axes, group_size):
    """torch.distributed.all_reduce over the mesh axes `axes` (group_size devices)."""
    names = _axes(axes)
    if op == "sum":
        return jax.lax.psum(self, names)
    if op == "avg":
        total = jax.lax.psum(self, names)
        return total / group_size if jnp.issubdtype(self.dtype, jnp.inexact) else total // group_size
    if op == "max":
        return jax.lax.pmax(self, names)
    if op == "min":
        return jax.lax.pmin(self, names)
    if op == "product":
        return jnp.prod(jax.lax.all_gather(self, names, axis=0), axis=0).astype(self.dtype)
    if op in ("band", "bor", "bxor"):
        gathered = jax.lax.all_gather(self, names, axis=0)
        fn = {"band": jnp.bitwise_and, "bor": jnp.bitwise_or, "bxor": jnp.bitwise_xor}[op]
        return fn.reduce(gathered, axis=0)
    raise ValueError(f"all_reduce: unknown reduce op {op!r}")


def lower_all_gather(self, dim, axes, group_size):
    """The blocks of every member of the group, concatenated along `dim` in rank order."""
    return jax.lax.all_gather(self, _axes(axes), axis=dim, tiled=True)


def lower_reduce_scatter(self, op, dim, axes, group_size):
    """The reduction over the group, split along `dim`: member i keeps block i."""
    names = _axes(axes)
    if op in ("sum", "avg"):
        out = jax.lax.psum_scatter(self, names, scatter_dimension=dim, tiled=True)
        if op == "avg":
            out = out / group_size if jnp.issubdtype(self.dtype, jnp.inexact) else out // group_size
        return out
    reduced = lower_all_reduce(self, op, axes, group_size)
    index = jax.lax.axis_index(names)
    block = self.shape[dim] // group_size
    return jax.lax.dynamic_slice_in_dim(reduced, index * block, block, axis=dim)


def lower_all_to_all(self, split_dim, concat_dim, axes, group_size):
    """Block j of `self` along split_dim goes to member j; the blocks received are
    concatenated along concat_dim in rank order."""
    return jax.lax.all_to_all(self, _axes(axes), split_dim, concat_dim, tiled=True)


def lower_broadcast_from(self, src, axes, group_size):
    """Every member gets member `src`'s value."""
    names = _axes(axes)
    mine = jax.lax.axis_index(names) == src
    if self.dtype == jnp.bool_:
        return jax.lax.psum(jnp.where(mine, self, False).astype(jnp.int32), names).astype(jnp.bool_)
    return jax.lax.psum(jnp.where(mine, self, jnp.zeros_like(self)), names)
