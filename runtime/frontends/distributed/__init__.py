"""`xla_native_functions.distributed`: torch.distributed's tensor API and collectives
over JAX meshes, and several processes as one JAX program (docs/distributed.md)."""

from __future__ import annotations

from ...core.mesh import DeviceMesh, Partial, Placement, Replicate, Shard
from ...core.placement import device_count
from ...exec.sharding import install_device_handlers
from . import process_group, report, torch_fsdp
from .process_group import ProcessGroupJax, initialize
from .report import compiled_collectives
from .spmd import MeshGroup, mesh_group, spmd
from .styles import (ColwiseParallel, ParallelStyle, PrepareModuleInput, PrepareModuleOutput, RowwiseParallel,
                     SequenceParallel, distribute_module, fully_shard, parallelize_module)
from .tensors import (_attach_tensor_api, clear_sharding, device_mesh_of, distribute_tensor, full_tensor,
                      init_device_mesh, mark_sharding, placements_of, redistribute, sharding_of, visualize)

__all__ = [
    "ColwiseParallel",
    "DeviceMesh",
    "ParallelStyle",
    "Partial",
    "Placement",
    "MeshGroup",
    "ProcessGroupJax",
    "PrepareModuleInput",
    "PrepareModuleOutput",
    "Replicate",
    "RowwiseParallel",
    "SequenceParallel",
    "Shard",
    "clear_sharding",
    "compiled_collectives",
    "device_count",
    "device_mesh_of",
    "distribute_module",
    "distribute_tensor",
    "full_tensor",
    "fully_shard",
    "init_device_mesh",
    "initialize",
    "mark_sharding",
    "mesh_group",
    "parallelize_module",
    "placements_of",
    "redistribute",
    "sharding_of",
    "spmd",
    "visualize",
]


def install() -> None:
    """At package import: devices for the ops with a device argument, and DTensor's names
    on our tensors."""
    install_device_handlers()
    _attach_tensor_api()
    report.install()
    process_group.install()
    torch_fsdp.install()
