"""The internal node of sharded programs (docs/distributed.md): a sharding constraint on
a value, lowered to JAX's.

A mesh travels through the IR as plain values (the ids of its devices, its shape, its
axis names) and a layout as one string per tensor dim ("" replicated, "dp", or "dp,tp"
for a dim split over two mesh axes), so that a node's attributes are the schema's own
types and a graph's key compares them by value."""

from __future__ import annotations

import jax
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
