"""Checks of torch's own FSDP2 and DTensor on our device (Note [torch's DTensor here] in
runtime/frontends/distributed/torch_fsdp.py), run by tests/test_distributed_torch_fsdp.py
in subprocesses: `python tests/torch_fsdp_worker.py GROUP` in one process, or under
torchrun for the groups that span processes. Reports its result with distributed_harness.report."""

from __future__ import annotations

import copy
import os
import sys
import traceback

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

import xla_native_functions as xnf
import xla_native_functions.distributed as xd
from xla_native_functions.runtime.platform.metrics import metrics as counters
from distributed_harness import report
from distributed_worker import MODELS, _train, cpu, err, raised, reference

GROUPS = {}


def group(fn):
    GROUPS[fn.__name__] = fn
    return fn


def _shard_blocks(model: torch.nn.Module, mesh, **kwargs) -> torch.nn.Module:
    """FSDP2's usual wrapping: each Linear, then the root."""
    for sub in model:
        if isinstance(sub, torch.nn.Linear):
            fully_shard(sub, mesh=mesh, **kwargs)
    fully_shard(model, mesh=mesh, **kwargs)
    return model


def _fsdp_mlp(mesh, rank: int, world: int, compiled: str | None = None) -> dict:
    """torch's fully_shard on the zoo's MLP over `mesh` (one rank per process), each rank
    training on its share of the batch for 5 steps, against PyTorch CPU training on the
    whole batch."""
    ref_losses, ref_weights = reference("mlp")
    model, x, y, loss_fn = MODELS["mlp"]()
    share = x.shape[0] // world
    xs, ys = x[rank * share:(rank + 1) * share], y[rank * share:(rank + 1) * share]
    model = _shard_blocks(model.to(torch.device("jax", torch.jax.current_device())), mesh)
    kinds = sorted({type(p).__name__ for p in model.parameters()})
    local_devices = sorted({str(p.to_local().device) for p in model.parameters()})
    device = torch.device("jax", torch.jax.current_device())
    compiles = counters.compile_count
    losses = _train(model, xs.to(device), ys.to(device), loss_fn, compiled=compiled)
    compiles = counters.compile_count - compiles
    if world > 1:  # the whole batch's loss is the mean of the shares' losses
        total = torch.tensor(losses, device=device)
        dist.all_reduce(total, op=dist.ReduceOp.AVG)
        losses = cpu(total).tolist()
    weights = {n: cpu(p.full_tensor()) for n, p in model.named_parameters()}
    return {"parameter_types": kinds, "local_devices": local_devices, "losses": losses, "compiles": compiles,
            "local_shapes": {n: list(p.to_local().shape) for n, p in model.named_parameters()},
            "loss_err": max(abs(a - b) / max(abs(b), 1e-3) for a, b in zip(losses, ref_losses)),
            "weight_err": max(err(weights[n], w) for n, w in ref_weights.items())}


def _dtensor_round_trip(mesh, rank: int, world: int) -> dict:
    """torch's DTensor on our tensors: distribute, ops, redistribute, from_local,
    to_local, full_tensor, against the same on the CPU."""
    torch.manual_seed(0)
    a, b = torch.randn(8, 6), torch.randn(6, 4)
    device = torch.device("jax", torch.jax.current_device())
    da = distribute_tensor(a.to(device), mesh, [Shard(0)])
    db = distribute_tensor(b.to(device), mesh, [Replicate()])
    out = {"type": type(da).__name__, "local_device": str(da.to_local().device),
           "local_shape": list(da.to_local().shape)}
    out["local_err"] = err(da.to_local(), a.chunk(world)[rank])
    prod = torch.relu(da @ db * 2 + 1)  # Shard(0) @ Replicate: Shard(0)
    out["product_placements"] = repr(prod.placements)
    out["product_err"] = err(prod.full_tensor(), torch.relu(a @ b * 2 + 1))
    total = da.sum()  # a Partial sum, reduced on the way out
    out["sum_err"] = err(total.full_tensor(), a.sum())
    moved = da.redistribute(mesh, [Replicate()])
    out["redistributed_err"] = err(moved.to_local(), a)
    mine = torch.full((2, 3), float(rank + 1), device=device)
    built = DTensor.from_local(mine, mesh, [Shard(0)])
    out["from_local_shape"] = list(built.shape)
    out["from_local_err"] = err(built.full_tensor(), torch.cat([torch.full((2, 3), float(r + 1))
                                                                for r in range(world)]))
    return out


def _mixed_precision(mesh, rank: int, world: int) -> dict:
    """torch's fully_shard with MixedPrecisionPolicy(bfloat16 parameters, float32
    reductions) on our device, against the same policy of torch's FSDP2 on the CPU with
    gloo: the same losses and float32 master weights."""
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    cpu_mesh = init_device_mesh("cpu", (world,))
    model, x, y, loss_fn = MODELS["mlp"]()
    share = x.shape[0] // world
    xs, ys = x[rank * share:(rank + 1) * share], y[rank * share:(rank + 1) * share]
    ours = _shard_blocks(xnf.to_xla(copy.deepcopy(model)), mesh, mp_policy=policy)
    theirs = _shard_blocks(copy.deepcopy(model), cpu_mesh, mp_policy=policy)
    seen = {}
    ours[0].register_forward_hook(lambda m, i, o: seen.setdefault("activation", str(o.dtype)) and None)
    ours_losses = _train(ours, xnf.to_xla(xs), xnf.to_xla(ys), loss_fn)
    cpu_losses = _train(theirs, xs, ys, loss_fn)
    ref_losses, ref_weights = reference("mlp")  # float32 throughout: how far bfloat16 takes the run
    return {"activation_dtype": seen["activation"], "losses": ours_losses, "cpu_losses": cpu_losses,
            "master_dtypes": sorted({str(p.dtype) for p in ours.parameters()}),
            "loss_err": max(abs(a - b) / max(abs(b), 1e-3) for a, b in zip(ours_losses, cpu_losses)),
            "weight_err": max(err(p.full_tensor(), q.full_tensor())
                              for p, q in zip(ours.parameters(), theirs.parameters())),
            "bf16_vs_fp32_weight_err": max(err(q.full_tensor(), ref_weights[n])
                                           for n, q in theirs.named_parameters())}


def _xd_mixed_precision(cpu_mesh, compiled: str | None) -> dict:
    """xd.fully_shard with the same MixedPrecisionPolicy over 8 devices of this process,
    against torch's FSDP2 with it on the CPU (gloo, one rank)."""
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    mesh = xd.init_device_mesh((torch.jax.device_count(),), ("fsdp",))
    model, x, y, loss_fn = MODELS["mlp"]()
    ours = xnf.to_xla(copy.deepcopy(model))
    for sub in ours:
        if isinstance(sub, torch.nn.Linear):
            xd.fully_shard(sub, mesh=mesh, mp_policy=policy)
    xd.fully_shard(ours, mesh=mesh, mp_policy=policy)
    theirs = _shard_blocks(copy.deepcopy(model), cpu_mesh, mp_policy=policy)
    seen = {}
    ours[2].register_forward_hook(lambda m, i, o: seen.setdefault("activation", str(o.dtype)) and None)
    split = lambda t: xd.distribute_tensor(t, mesh, [xd.Shard(0)])  # noqa: E731
    ours_losses = _train(ours, x, y, loss_fn, split, compiled=compiled)
    cpu_losses = _train(theirs, x, y, loss_fn)
    return {"activation_dtype": seen["activation"], "losses": ours_losses, "cpu_losses": cpu_losses,
            "master_dtypes": sorted({str(p.dtype) for p in ours.parameters()}),
            "placements": sorted({repr(p.placements) for p in ours.parameters()}),
            "loss_err": max(abs(a - b) / max(abs(b), 1e-3) for a, b in zip(ours_losses, cpu_losses)),
            "weight_err": max(err(p, q.full_tensor()) for p, q in zip(ours.parameters(), theirs.parameters())),
            "vs_fp32_weight_err": max(err(p, reference("mlp")[1][n]) for n, p in ours.named_parameters())}


@group
def one_process() -> dict:
    """A world of one rank: torch's mesh of one rank, FSDP2, DTensor and mixed
    precision; and a mesh of torch's bigger than the world."""
    from distributed_harness import free_port
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dist.init_process_group("cpu:gloo,jax:jax", rank=0, world_size=1)
    mesh = init_device_mesh("jax", (1,))
    out = {"mesh": str(mesh), "fsdp": _fsdp_mlp(mesh, 0, 1), "fsdp_compiled": _fsdp_mlp(mesh, 0, 1, "compile"),
           "dtensor": _dtensor_round_trip(mesh, 0, 1),
           "mixed_precision": _mixed_precision(mesh, 0, 1),
           "too_big": raised(lambda: init_device_mesh("jax", (torch.jax.device_count(),))),
           "set_device_out_of_range": raised(lambda: torch.jax.set_device(torch.jax.device_count())),
           "device_count": torch.jax.device_count()}
    on_1 = torch.randn(8, 6).to("jax:1")
    out["like_a_made_tensor"] = str(torch.empty_like(on_1.chunk(2)[1].contiguous()).device)
    cpu_mesh = init_device_mesh("cpu", (1,))
    out["xd_mixed_precision"] = _xd_mixed_precision(cpu_mesh, "compile")
    dist.destroy_process_group()
    return out


@group
def processes() -> dict:
    """One rank of a torchrun-style run: torch's mesh of both processes, FSDP2 and
    DTensor between them."""
    xd.initialize()
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.jax.set_device(int(os.environ["LOCAL_RANK"]))  # as a CUDA script does (2 devices per process here)
    mesh = init_device_mesh("jax", (world,))
    out = {"rank": rank, "world": world, "fsdp": _fsdp_mlp(mesh, rank, world),
           "dtensor": _dtensor_round_trip(mesh, rank, world)}
    dist.destroy_process_group()
    return out


if __name__ == "__main__":
    name = sys.argv[1]
    try:
        result = GROUPS[name]()
    except Exception:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)  # now: exiting normally waits for the other ranks at JAX's shutdown barrier
    report(result)
