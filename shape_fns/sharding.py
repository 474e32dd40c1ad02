"""The shape function of the sharding constraint (lowerings/sharding.py)."""

from __future__ import annotations

from .common import TensorMeta

def shard_as_output_shape(self, mesh_devices, mesh_shape, mesh_axes, spec):
    if len(spec) != len(self.shape):
        raise ValueError(f"a layout of {len(spec)} dims for a tensor of {len(self.shape)} dims")
    return TensorMeta(tuple(self.shape), self.dtype)
