"""torch's own DTensor and FSDP2 (`torch.distributed.tensor`, `torch.distributed.fsdp.
fully_shard`) on tensors of our device: Note [torch's DTensor here].

Note [torch's DTensor here]
torch's DTensor is SPMD with one rank per device: every rank runs the same program on
its local shard, and a DeviceMesh is a grid of ranks of the default process group. Here
a rank is a process (Note [Ranks are processes] in process_group.py), so torch's
DeviceMesh over the "jax" device is a grid of processes, each holding its local tensors
on its own device (jax:0, or the device `torch.jax.set_device` chose):

- in one process, torch's mesh has one rank: `init_device_mesh("jax", (1,))`, DTensors
  whose local tensor is the whole tensor, and FSDP2 running on one device;
- under `torchrun --nproc-per-node N` with `xd.initialize()`, a mesh of N ranks, whose
  collectives (FSDP2's all-gather and reduce-scatter, DTensor's redistributions) run
  eagerly between the processes as JAX programs (runtime/exec/collectives.py).

A mesh of torch's bigger than the world (`init_device_mesh("jax", (8,))` in one process
with 8 JAX devices) cannot be: one process would have to run as 8 ranks. It raises,
naming xd.init_device_mesh / xd.fully_shard / xd.distribute_tensor, which lay one
process's tensors over its devices (XLA's SPMD partitioner splitting the program).

What torch asks of the device is in core/streams.py (streams, events, the current
device). FSDP2 also asks two things of memory that our tensors do not have, patched
here when torch's FSDP2 is imported (an import hook, so importing this package does not
import FSDP2, which costs a second):
- it frees a gathered parameter by resizing its storage to 0 bytes and allocates it again
  by resizing it back (`free_storage`, `alloc_storage`). A tensor of ours has no host
  storage to resize (its values are a JAX array); the gathered parameter keeps its array
  until the next all-gather overwrites it (JAX frees an array when nothing holds it);
- its three copy ops (`fsdp::all_gather_copy_in`, `fsdp::split_with_sizes_copy`,
  `fsdp::chunk_cat`) have kernels for every device key but reach our tensors' dispatch
  first: the same aten ops run here.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from typing import Any

import torch

from ...core.tensor import DEVICE_NAME, XlaTensor
from ...exec.registry import REGISTRY

_FSDP = "torch.distributed.fsdp._fully_shard"


# ---------------------------------------------------------------- FSDP2's memory and copy ops


def _patch_fsdp() -> None:
    """Our tensors' answers to FSDP2's storage resizing and copy ops (Note [torch's
    DTensor here]); the modules are loaded by now."""
    param = sys.modules[f"{_FSDP}._fsdp_param"]
    group = sys.modules[f"{_FSDP}._fsdp_param_group"]
    if getattr(param, "_xnf_patched", False):
        return
    free, alloc = param.free_storage, param.alloc_storage

    def free_storage(tensor: torch.Tensor) -> None:
        if not isinstance(tensor, XlaTensor):
            free(tensor)

    def alloc_storage(tensor: torch.Tensor) -> None:
        if not isinstance(tensor, XlaTensor):
            alloc(tensor)

    param.free_storage, param.alloc_storage, group.alloc_storage = free_storage, alloc_storage, alloc_storage
    param._xnf_patched = True

    fsdp = torch.ops.fsdp

    def all_gather_copy_in(all_gather_inputs: list, all_gather_output: torch.Tensor, inp_split_sizes: list,
                           all_gather_input_numel: int, rank: int) -> tuple:
        mine = all_gather_output.narrow(0, all_gather_input_numel * rank, all_gather_input_numel)
        with torch.no_grad():
            for dst, src in zip(torch.split(mine, list(inp_split_sizes)), all_gather_inputs):
                dst.copy_(src)
        return mine, all_gather_output

    def split_with_sizes_copy(all_gather_output: torch.Tensor, all_gather_input_split_sizes: list, dim: int = 0, *,
                              out: list) -> None:
        torch.split_with_sizes_copy(all_gather_output, list(all_gather_input_split_sizes), dim=dim, out=out)

    def chunk_cat(tensors: list, dim: int, num_chunks: int, *, out: torch.Tensor) -> None:
        torch._chunk_cat(tensors, dim, num_chunks, out=out)

    REGISTRY[fsdp.all_gather_copy_in.default] = all_gather_copy_in
    REGISTRY[fsdp.split_with_sizes_copy.default] = split_with_sizes_copy
    REGISTRY[fsdp.chunk_cat.default] = chunk_cat


class _AfterFsdpImport(importlib.abc.MetaPathFinder):
    """Runs `_patch_fsdp` right after torch's FSDP2 package is imported."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != _FSDP:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        load = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            load(module)
            _patch_fsdp()

        spec.loader.exec_module = exec_module
        return spec


# ---------------------------------------------------------------- torch's DeviceMesh


def _patch_device_mesh() -> None:
    """A mesh of torch's over the "jax" device bigger than the world says what to use
    instead (Note [torch's DTensor here])."""
    from torch.distributed.device_mesh import DeviceMesh  # loaded already by the functional collectives

    setup = DeviceMesh._setup_world_group_and_device
    if getattr(setup, "_xnf_wrapped", False):
        return

    def _setup_world_group_and_device(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return setup(self, *args, **kwargs)
        except RuntimeError as error:
            if self._device_type != DEVICE_NAME or "bigger than default world size" not in str(error):
                raise
            world = torch.distributed.get_world_size()
            raise RuntimeError(
                f"torch's DeviceMesh of {self._layout.numel()} ranks over the {DEVICE_NAME!r} device, in a world of "
                f"{world} rank{'s' if world != 1 else ''}: a rank of torch.distributed is a process here (JAX runs "
                "one program per process over all of its devices), so torch's DTensor and fully_shard span processes "
                f"(torchrun --nproc-per-node N with xla_native_functions.distributed.initialize(), a mesh of N ranks; "
                f"one process: init_device_mesh({DEVICE_NAME!r}, (1,))). To split one process's tensors over its "
                f"{torch.jax.device_count()} devices, use xla_native_functions.distributed: xd.init_device_mesh("
                f"{tuple(self._layout.top_level_sizes)}, names), xd.fully_shard, "
                "xd.distribute_tensor, xd.parallelize_module (they take torch's placements and styles; "
                "docs/distributed.md)") from None

    _setup_world_group_and_device._xnf_wrapped = True
    DeviceMesh._setup_world_group_and_device = _setup_world_group_and_device


def install() -> None:
    _patch_device_mesh()
    if f"{_FSDP}._fsdp_param_group" in sys.modules:
        _patch_fsdp()
    elif not any(isinstance(f, _AfterFsdpImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterFsdpImport())
