"""The checks of ranks as devices (xla_native_functions.distributed.spmd), run by
tests/test_distributed_spmd.py in a subprocess with 8 simulated CPU devices:
`python tests/distributed_spmd_worker.py` reports its result with
distributed_harness.report.
Every collective is compared with the same computation done by hand (PyTorch CPU) on
the stacked per-rank values; the DDP-style step with one device."""

from __future__ import annotations

import copy
import sys
import traceback

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

import xla_native_functions as xnf
import xla_native_functions.distributed as xd
from distributed_harness import report


def cpu(t):
    return xnf.to_torch(t.detach()) if isinstance(t, torch.Tensor) else t


def err(a, b) -> float:
    a, b = cpu(a).double(), cpu(b).double()
    return float("inf") if a.shape != b.shape else (a - b).abs().max().item()


def collectives(shape: tuple[int, ...], names: tuple[str, ...], dim: str) -> dict:
    """Each collective on the group of mesh dim `dim` (and the whole mesh), against
    the stacked values reduced by hand. Rank values: (8, 3) blocks of distinct numbers."""
    mesh = xd.init_device_mesh(shape, names)
    group = xd.mesh_group(mesh, dim)
    axis = names.index(dim)
    n = shape[axis]
    x = torch.arange(8 * 8 * 3, dtype=torch.float32).reshape(*shape, 8, 3) * 0.5 - 40

    def per_rank(t):
        out = {"rank": dist.get_rank(), "group_rank": dist.get_rank(group), "world": torch.tensor(
            dist.get_world_size(), device="jax"), "group_size": torch.tensor(dist.get_world_size(group), device="jax")}
        for op in ("sum", "avg", "max", "min", "product"):
            y = t.clone()
            dist.all_reduce(y, op=getattr(dist.ReduceOp, op.upper()), group=group)
            out[f"all_reduce_{op}"] = y
        whole = t.clone()
        dist.all_reduce(whole)  # the default group: every device of the mesh
        out["all_reduce_world"] = whole
        g = torch.empty(n * 8, 3, device="jax")
        dist.all_gather_into_tensor(g, t, group=group)
        out["all_gather_into_tensor"] = g
        parts = [torch.empty(8, 3, device="jax") for _ in range(n)]
        dist.all_gather(parts, t, group=group)
        out["all_gather"] = torch.stack(parts)
        s = torch.empty(8 // n, 3, device="jax")
        dist.reduce_scatter_tensor(s, t, group=group)
        out["reduce_scatter_tensor"] = s
        b = t.clone()
        dist.broadcast(b, src=n - 1, group=group)
        out["broadcast"] = b
        a = torch.empty_like(t)
        dist.all_to_all_single(a, t, group=group)
        out["all_to_all_single"] = a
        out["funcol_all_reduce"] = funcol.all_reduce(t * 2, "sum", group)
        out["funcol_all_gather"] = funcol.all_gather_tensor(t, 0, group)
        out["funcol_reduce_scatter"] = funcol.reduce_scatter_tensor(t, "sum", 0, group)
        out["funcol_all_to_all"] = funcol.all_to_all_single(t, None, None, group)
        out["funcol_broadcast"] = funcol.broadcast(t, 0, group)
        rank = dist.get_rank(group)
        out["where_rank"] = torch.where(rank == 0, t, -t)
        return out

    got = xd.spmd(per_rank, mesh)(xnf.to_xla(x))
    # by hand: move the group's dim first, the rest as rank indices
    xs = x.movedim(axis, 0)  # (n, other, 8, 3)

    def back(t):  # a value per (group rank, other) -> the mesh's layout
        return t.movedim(0, axis)

    def same(v):  # one value for the whole group, on each of its ranks
        return back(v.unsqueeze(0).expand(n, *v.shape))

    block = 8 // n
    expected = {
        "rank": torch.arange(8).reshape(shape),
        "group_rank": back(torch.arange(n).reshape(n, *([1] * (len(shape) - 1))).expand(n, *xs.shape[1:-2])),
        "world": torch.full(shape, 8), "group_size": torch.full(shape, n),
        "all_reduce_sum": same(xs.sum(0)), "all_reduce_avg": same(xs.mean(0)), "all_reduce_max": same(xs.amax(0)),
        "all_reduce_min": same(xs.amin(0)), "all_reduce_product": same(xs.prod(0)),
        "all_reduce_world": x.sum(tuple(range(len(shape)))).expand_as(x),
        "all_gather_into_tensor": same(torch.cat(list(xs), -2)),
        "all_gather": same(xs.movedim(0, -3)),
        "reduce_scatter_tensor": back(torch.stack([xs.sum(0)[..., r * block:(r + 1) * block, :] for r in range(n)])),
        "broadcast": same(xs[n - 1]),
        "all_to_all_single": back(torch.stack([torch.cat([xs[i][..., j * block:(j + 1) * block, :]
                                                          for i in range(n)], -2) for j in range(n)])),
        "funcol_all_reduce": same(2 * xs.sum(0)),
        "funcol_all_gather": same(torch.cat(list(xs), -2)),
        "funcol_reduce_scatter": back(torch.stack([xs.sum(0)[..., r * block:(r + 1) * block, :] for r in range(n)])),
        "funcol_all_to_all": back(torch.stack([torch.cat([xs[i][..., j * block:(j + 1) * block, :]
                                                          for i in range(n)], -2) for j in range(n)])),
        "funcol_broadcast": same(xs[0]),
        "where_rank": back(torch.cat([xs[:1], -xs[1:]])),
    }
    out = {k: err(got[k], v) / max(1.0, v.abs().max().item()) for k, v in expected.items()}
    out["placements"] = repr(got["broadcast"].placements)
    return out


def ddp_step() -> dict:
    """The zoo's MLP trained DDP-style over 8 ranks-as-devices (each its 2 rows of the
    batch of 16, gradients all-reduced and averaged by hand, SGD with momentum) against
    one device (PyTorch CPU) on the whole batch, 5 steps."""
    from zoo.mlp import build_mlp
    torch.manual_seed(0)
    case = build_mlp(16)
    cpu_model, x, y = case.model, case.inputs[0], case.target
    loss_fn = torch.nn.functional.cross_entropy
    model = xnf.to_xla(copy.deepcopy(cpu_model))
    mesh = xd.init_device_mesh((8,), ("dp",))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def step(x, y):  # one rank, its share of the batch
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= dist.get_world_size()
        opt.step()
        return loss.detach()

    run = xd.spmd(step, mesh)
    xs, ys = xnf.to_xla(x.reshape(8, 2, *x.shape[1:])), xnf.to_xla(y.reshape(8, 2))
    losses = [cpu(run(xs, ys)).mean().item() for _ in range(5)]  # the batch's loss: the ranks' mean
    cpu_opt = torch.optim.SGD(cpu_model.parameters(), lr=0.05, momentum=0.9)
    ref = []
    for _ in range(5):
        cpu_opt.zero_grad()
        loss = loss_fn(cpu_model(x), y)
        loss.backward()
        cpu_opt.step()
        ref.append(loss.item())
    return {"losses": losses, "reference": ref,
            "loss_err": max(abs(a - b) / abs(b) for a, b in zip(losses, ref)),
            "weight_err": max(err(p, q) for p, q in zip(model.parameters(), cpu_model.parameters())),
            "programs": len(run._programs)}


def errors() -> dict:
    mesh = xd.init_device_mesh((8,), ("dp",))
    out = {}

    def branch(t):
        if dist.get_rank() == 0:
            return t
        return -t

    def index(t):
        return t * int(dist.get_rank())

    for name, fn in (("branch", branch), ("int", index)):
        try:
            xd.spmd(fn, mesh)(xnf.to_xla(torch.ones(8, 2)))
            out[name] = ""
        except Exception as e:
            out[name] = f"{type(e).__name__}: {e}"
    try:
        t = xnf.to_xla(torch.ones(2))
        dist.all_reduce(t, group=xd.mesh_group(mesh, "dp"))
        out["outside"] = ""
    except Exception as e:
        out["outside"] = f"{type(e).__name__}: {e}"
    try:
        xd.spmd(lambda t: t, mesh)(xnf.to_xla(torch.ones(4, 2)))
        out["shape"] = ""
    except Exception as e:
        out["shape"] = f"{type(e).__name__}: {e}"
    return out


if __name__ == "__main__":
    try:
        result = {"mesh8": collectives((8,), ("dp",), "dp"), "mesh24_tp": collectives((2, 4), ("dp", "tp"), "tp"),
                  "mesh24_dp": collectives((2, 4), ("dp", "tp"), "dp"), "ddp": ddp_step(), "errors": errors()}
    except Exception:
        traceback.print_exc()
        sys.exit(1)
    report(result)
