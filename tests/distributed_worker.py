"""The distributed checks, run by tests/distributed_harness.py in a subprocess with
simulated devices: `python tests/distributed_worker.py GROUP [ARGS]` reports (distributed_harness.report)
what the group measured as JSON (values compared with
PyTorch CPU in this process, placements as their reprs); the tests assert on it."""

from __future__ import annotations

import io
import sys
import traceback

import torch

import xla_native_functions as xnf
import xla_native_functions.distributed as xd
from distributed_harness import report
from xla_native_functions.runtime.platform.metrics import metrics as counters

GROUPS = {}


def group(fn):
    GROUPS[fn.__name__] = fn
    return fn


def cpu(t):
    if hasattr(t, "trigger_wait"):  # the functional collectives' AsyncCollectiveTensor
        t = t.trigger_wait()
    return xnf.to_torch(t.detach()) if isinstance(t, torch.Tensor) else t


def err(a, b) -> float:
    """Largest absolute difference of two tensors (ours or CPU), inf on a shape mismatch."""
    a, b = cpu(a).double(), cpu(b).double()
    if a.shape != b.shape:
        return float("inf")
    return 0.0 if a.numel() == 0 else (a - b).abs().max().item()


def raised(fn) -> str:
    try:
        fn()
    except Exception as e:  # the type and message are what the test checks
        return f"{type(e).__name__}: {e}"
    return ""


def placements(t) -> str:
    return repr(t.placements)


MESH_NAMES = {1: ("x",), 2: ("dp", "tp"), 3: ("dp", "tp", "sp")}


def make_mesh(shape: tuple[int, ...]):
    return xd.init_device_mesh(shape, MESH_NAMES[len(shape)])


def placement_sets(ndim: int) -> dict[str, list]:
    """Layouts of a (16, 8) tensor over a mesh of `ndim` dims, by name."""
    sets = {
        "replicated": [xd.Replicate()] * ndim,
        "rows": [xd.Shard(0)] + [xd.Replicate()] * (ndim - 1),
        "rows_all": [xd.Shard(0)] * ndim,
    }
    if ndim > 1:
        sets["rows_cols"] = [xd.Shard(0)] * (ndim - 1) + [xd.Shard(1)]
    else:
        sets["cols"] = [xd.Shard(1)]
    return sets


# ---------------------------------------------------------------- devices


@group
def devices() -> dict:
    out = {"count": xnf.device_count(), "distributed_count": xd.device_count()}
    a = torch.ones(2, 3, device="jax:1")
    out["factory_device"] = str(a.device)
    out["factory_err"] = err(a, torch.ones(2, 3))
    x = torch.arange(12.0).reshape(3, 4)
    x3 = x.to("jax:3")
    out["to_device"] = str(x3.device)
    out["to_err"] = err(x3, x)
    x5 = x3.to(torch.device("jax", 5))
    out["moved_device"] = str(x5.device)
    y = (x3 * 2).exp().sum(0)
    out["op_device"] = str(y.device)
    out["op_err"] = err(y, (x * 2).exp().sum(0))
    out["result_lives_there"] = sorted(d.id for d in xd.sharding_of(y).device_set)
    back = x3.to("jax:0")
    out["back_device"] = str(back.device)
    out["back_mixes_with_default"] = err(back + xnf.to_xla(x), x * 2)
    out["like_device"] = str(torch.zeros_like(x3).device)
    out["new_device"] = str(x3.new_ones(2).device)
    out["out_of_range"] = raised(lambda: torch.ones(2, device="jax:8"))
    out["to_out_of_range"] = raised(lambda: x.to("jax:11"))
    out["cross_device"] = raised(lambda: x3 + xnf.to_xla(x))
    out["cross_device_mm"] = raised(lambda: torch.mm(x3, x5.t()))
    dst = torch.zeros(3, 4, device="jax:2")
    dst.copy_(x3)
    out["copy_keeps_device"] = str(dst.device)
    out["copy_err"] = err(dst, x)
    out["copy_lives_there"] = sorted(d.id for d in xd.sharding_of(dst).device_set)
    w = torch.randn(4, 4, requires_grad=True)
    w2 = w.detach().to("jax:2").requires_grad_()
    (w2 * w2).sum().backward()
    out["grad_device"] = str(w2.grad.device)
    out["grad_err"] = err(w2.grad, 2 * w.detach())
    f = xnf.compile(lambda t: (t * 3).sum(1))
    r = [f(x3) for _ in range(3)][-1]
    out["compiled_device"] = str(r.device)
    out["compiled_err"] = err(r, (x * 3).sum(1))
    out["compiled_lives_there"] = sorted(d.id for d in xd.sharding_of(r).device_set)
    m = xnf.to_xla(torch.nn.Linear(4, 2)).to("jax:4")
    out["module_device"] = sorted({str(p.device) for p in m.parameters()})
    out["module_out_device"] = str(m(torch.ones(1, 4, device="jax:4")).device)
    return out


# ---------------------------------------------------------------- sharded tensors


def per_mesh(fn):
    """A group run for each mesh of a comma-separated list (one subprocess for all):
    {mesh text: result}."""
    def run(shapes_text: str) -> dict:
        return {text: fn(tuple(int(s) for s in text.split("x"))) for text in shapes_text.split(",")}
    run.__name__ = fn.__name__
    return group(run)


@per_mesh
def sharding(shape: tuple[int, ...]) -> dict:
    mesh = make_mesh(shape)
    torch.manual_seed(0)
    A, B, C = torch.randn(16, 8), torch.randn(8, 16), torch.randn(16, 8)
    out = {}
    for name, ps in placement_sets(len(shape)).items():
        r = {}
        a = xd.distribute_tensor(A, mesh, ps)
        r["placements"] = placements(a)
        r["device"] = str(a.device)
        r["value"] = err(a, A)
        r["blocks"] = len({str(s.index) for s in a.sharding.addressable_shards}) if False else \
            len({str(i) for i in a.sharding.devices_indices_map(tuple(A.shape)).values()})
        e = a * 2 + 1
        r["elementwise"] = (err(e, A * 2 + 1), placements(e))
        r["exp"] = err(torch.exp(a), torch.exp(A))
        t = a.t()
        r["transpose"] = (err(t, A.t()), placements(t))
        s = a.sum(0)
        r["sum0"] = (err(s, A.sum(0)), placements(s))
        mm = a @ xnf.to_xla(B)
        r["matmul"] = (err(mm, A @ B), placements(mm))
        r["view"] = err(a.view(4, 4, 8), A.view(4, 4, 8))
        r["slice"] = err(a[:, 2:6], A[:, 2:6])
        r["select"] = err(a[3], A[3])
        r["unsqueeze"] = err(a.unsqueeze(0), A.unsqueeze(0))
        b = xd.distribute_tensor(A, mesh, ps)
        b.add_(1)
        r["add_"] = (err(b, A + 1), placements(b), repr(b.sharding.spec))
        b.mul_(xnf.to_xla(C))
        r["mul_"] = (err(b, (A + 1) * C), placements(b), repr(b.sharding.spec))
        b.copy_(xnf.to_xla(C))
        r["copy_"] = (err(b, C), placements(b), repr(b.sharding.spec))
        b[0:4].fill_(0)
        expect = C.clone()
        expect[0:4] = 0
        r["view_write"] = (err(b, expect), placements(b), repr(b.sharding.spec))
        b.t().mul_(2)
        r["transposed_view_write"] = (err(b, expect * 2), placements(b), repr(b.sharding.spec))
        r["spec"] = repr(a.sharding.spec)
        out[name] = r
    # traced programs carry the layouts
    rows_cols = list(placement_sets(len(shape)).values())[-1]
    a = xd.distribute_tensor(A, mesh, rows_cols)
    b = xnf.to_xla(B)
    f = xnf.compile(lambda x, y: torch.relu(x @ y).sum(1))
    compiles = counters.compile_count
    results = [f(a, b) for _ in range(4)]
    out["compiled"] = {"err": err(results[-1], torch.relu(A @ B).sum(1)), "compiles": counters.compile_count - compiles,
                       "placements": placements(results[-1])}
    p = xd.distribute_tensor(A, mesh, rows_cols)
    step = xnf.compile(lambda w, g: w.sub_(0.5 * g))
    for _ in range(3):
        step(p, xnf.to_xla(C))
    out["compiled_in_place"] = {"err": err(p, A - 1.5 * C), "placements": placements(p), "spec": repr(p.sharding.spec),
                                "expected": repr(rows_cols)}
    # lazy mode: the recorded ops run as one program at mark_step, layouts kept
    lz = xd.distribute_tensor(A, mesh, rows_cols)
    with xnf.lazy_mode():
        lazy_out = (lz * 2).relu()
        lz.add_(1)
        xnf.mark_step()
    out["lazy"] = {"err": max(err(lazy_out, (A * 2).relu()), err(lz, A + 1)), "placements": placements(lz),
                   "spec": repr(lz.sharding.spec), "out_placements": placements(lazy_out)}
    marked = xnf.to_xla(A.clone())
    ident = id(marked)
    xd.mark_sharding(marked, mesh, ("dp" if len(shape) > 1 else "x", None))
    out["mark_sharding"] = {"same_object": id(marked) == ident, "placements": placements(marked),
                            "err": err(marked, A)}
    # torch.compile on CPU tensors with noted layouts
    xc, yc = A.clone(), B.clone()
    xd.mark_sharding(xc, mesh, tuple(MESH_NAMES[len(shape)][:1]) + (None,))
    g = torch.compile(lambda x, y: torch.relu(x @ y) * 2, backend="xla_native")
    out["dynamo"] = err(g(xc, yc), torch.relu(A @ B) * 2)
    # jax_jit with in and out shardings
    from jax.sharding import NamedSharding, PartitionSpec as P
    names = MESH_NAMES[len(shape)]
    jf = xnf.jax_jit(lambda x, y: x @ y, in_shardings=(NamedSharding(mesh.jax_mesh, P(names[0], None)), None),
                     out_shardings=NamedSharding(mesh.jax_mesh, P(None, names[-1])))
    r = jf(xnf.to_xla(A), b)
    out["jax_jit"] = {"err": err(r, A @ B), "spec": repr(r.sharding.spec), "placements": placements(r)}
    out["visualize"] = xd.visualize(xd.distribute_tensor(A, mesh, rows_cols), file=io.StringIO())
    return out


@per_mesh
def uneven(shape: tuple[int, ...]) -> dict:
    mesh = make_mesh(shape)
    torch.manual_seed(0)
    A, B = torch.randn(10, 6), torch.randn(6, 3)
    ps = [xd.Shard(0)] + [xd.Shard(1)] * (len(shape) - 1)
    a = xd.distribute_tensor(A, mesh, ps)
    out = {"placements": placements(a), "spec": repr(a.sharding.spec), "value": err(a, A)}
    out["elementwise"] = err(a * 3 - 1, A * 3 - 1)
    out["sum0"] = err(a.sum(0), A.sum(0))
    out["sum1"] = err(a.sum(1), A.sum(1))
    out["matmul"] = err(a @ xnf.to_xla(B), A @ B)
    out["transpose"] = err(a.t().contiguous(), A.t())
    a.add_(2)
    out["add_"] = (err(a, A + 2), placements(a), repr(a.sharding.spec))
    f = xnf.compile(lambda x, y: (torch.tanh(x) @ y).sum(0))
    out["compiled"] = err([f(a, xnf.to_xla(B)) for _ in range(3)][-1], (torch.tanh(A + 2) @ B).sum(0))
    # a compiled write into the tensor is constrained to the split asked for, uneven or not
    out["program"] = [line.strip() for line in xnf.hlo(lambda x: x.mul_(2), a).splitlines()
                      if "sdy.sharding_constraint" in line]
    out["visualize"] = xd.visualize(a, file=io.StringIO())
    return out



# ---------------------------------------------------------------- training


class MLP(torch.nn.Module):
    def __init__(self, d: int = 16, hidden: int = 32):
        super().__init__()
        self.up = torch.nn.Linear(d, hidden)
        self.down = torch.nn.Linear(hidden, d)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


class Attention(torch.nn.Module):
    def __init__(self, d: int = 16, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v = torch.nn.Linear(d, d), torch.nn.Linear(d, d), torch.nn.Linear(d, d)
        self.out = torch.nn.Linear(d, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = (t.view(b, s, self.heads, -1).transpose(1, 2) for t in (self.q(x), self.k(x), self.v(x)))
        att = torch.softmax(q @ k.transpose(-1, -2) / (q.shape[-1] ** 0.5), dim=-1)
        return self.out((att @ v).transpose(1, 2).reshape(b, s, d))


class Block(torch.nn.Module):
    def __init__(self, d: int = 16):
        super().__init__()
        self.norm1, self.norm2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.attn = Attention(d)
        self.mlp = MLP(d)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Transformer(torch.nn.Module):
    """A small pre-norm transformer: two blocks of 4-head self-attention and an MLP."""

    def __init__(self, d: int = 16, layers: int = 2):
        super().__init__()
        self.inp = torch.nn.Linear(8, d)
        self.blocks = torch.nn.ModuleList(Block(d) for _ in range(layers))
        self.head = torch.nn.Linear(d, 8)

    def forward(self, x):
        x = self.inp(x)
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def _zoo_mlp():
    """The zoo's MLP classifier (scripts/zoo/mlp.py), batch 16."""
    from zoo.mlp import build_mlp
    torch.manual_seed(0)
    case = build_mlp(16)
    return case.model, case.inputs[0], case.target, torch.nn.functional.cross_entropy


def _regression(cls, xs, ys):
    def build():
        torch.manual_seed(0)
        model = cls()
        g = torch.Generator().manual_seed(1)
        return model, torch.randn(*xs, generator=g), torch.randn(*ys, generator=g), torch.nn.functional.mse_loss
    return build


MODELS = {"mlp": _zoo_mlp, "attention": _regression(Attention, (8, 4, 16), (8, 4, 16)),
          "transformer": _regression(Transformer, (8, 4, 8), (8, 4, 8))}
# tensor-parallel plans: Colwise then Rowwise for each pair of linears
TP_PLANS = {
    "mlp": {"0": xd.ColwiseParallel(), "2": xd.RowwiseParallel()},
    "attention": {"q": xd.ColwiseParallel(), "k": xd.ColwiseParallel(), "v": xd.ColwiseParallel(),
                  "out": xd.RowwiseParallel()},
    "transformer": {"blocks.*.attn.q": xd.ColwiseParallel(), "blocks.*.attn.k": xd.ColwiseParallel(),
                    "blocks.*.attn.v": xd.ColwiseParallel(), "blocks.*.attn.out": xd.RowwiseParallel(),
                    "blocks.*.mlp.up": xd.ColwiseParallel(), "blocks.*.mlp.down": xd.RowwiseParallel()},
}
STEPS = 5


def _train(model, x, y, loss_fn, prepare=lambda t: t, compiled=None, steps=STEPS):
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    fwd = torch.compile(model, backend="xla_native") if compiled == "dynamo" else model

    def step(x, y):
        opt.zero_grad()
        loss = loss_fn(fwd(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    run = xnf.compile(step) if compiled == "compile" else step
    return [float(run(prepare(x.clone()), prepare(y.clone()))) for _ in range(steps)]


_REFERENCES: dict = {}


def reference(kind: str):
    """Losses and final weights of PyTorch CPU training the model (one device)."""
    if kind not in _REFERENCES:
        model, x, y, loss_fn = MODELS[kind]()
        losses = _train(model, x, y, loss_fn)
        _REFERENCES[kind] = losses, {n: p.detach().clone() for n, p in model.named_parameters()}
    return _REFERENCES[kind]


def parallelize(kind: str, style: str, mesh, model, on_cpu: bool):
    """Lay `model` out for `style` over `mesh`; returns the names of the mesh dims the
    batch is split over (data parallelism over what the style leaves)."""
    names = mesh.mesh_dim_names
    if style == "dp":
        xd.distribute_module(model, mesh, keep_on_cpu=on_cpu)
        return names
    if style == "tp":  # the last mesh dim splits the layers, the others the batch
        xd.parallelize_module(model, mesh[names[-1]], TP_PLANS[kind], keep_on_cpu=on_cpu)
        return names[:-1]
    if style == "fsdp":  # FSDP over a 1-d mesh, HSDP (replicate, shard) over the first two dims
        fsdp = mesh[names[0]] if len(names) == 1 else mesh[names[:2]]
        if kind == "transformer":
            for b in model.blocks:
                xd.fully_shard(b, mesh=fsdp, keep_on_cpu=on_cpu)
        xd.fully_shard(model, mesh=fsdp, keep_on_cpu=on_cpu)
        return fsdp.mesh_dim_names
    raise ValueError(style)


def train_sharded(shape: tuple[int, ...], kind: str, style: str, mode: str) -> dict:
    mesh = make_mesh(shape)
    ref_losses, ref_weights = reference(kind)
    model, x, y, loss_fn = MODELS[kind]()
    on_cpu = mode == "dynamo"  # the torch.compile backend runs CPU modules
    if not on_cpu:
        model = xnf.to_xla(model)
    batch = parallelize(kind, style, mesh, model, on_cpu)
    if on_cpu:
        first = tuple(batch) if len(batch) > 1 else batch[0] if batch else None

        def prepare(t):
            return xd.mark_sharding(t, mesh, (first,) + (None,) * (t.dim() - 1))
    else:
        def prepare(t):
            return xd.distribute_tensor(t, mesh, [xd.Shard(0) if n in batch else xd.Replicate()
                                                  for n in mesh.mesh_dim_names])
    xnf.reset_metrics()
    compiles, replays = counters.compile_count, counters.replays
    losses = _train(model, x, y, loss_fn, prepare, None if mode == "eager" else mode)
    weights = {n: cpu(p) for n, p in model.named_parameters()}
    return {
        "loss_err": max(abs(a - b) / max(abs(b), 1e-3) for a, b in zip(losses, ref_losses)),
        "weight_err": max(err(weights[n], w) for n, w in ref_weights.items()),
        "compiles": counters.compile_count - compiles, "replays": counters.replays - replays,
        "placements": {n: repr(xd.placements_of(p)) for n, p in model.named_parameters()},
        "graphs": [(g["program"], g["devices"], sorted({c["kind"] for c in g["collectives"]}))
                   for g in xd.compiled_collectives()],
    }


ALL_MESHES = ("8", "2x4", "4x2", "2x2x2")
ALL_RUNS = [f"{m}:{k}:{s}:{mode}" for m in ALL_MESHES for k in ("mlp", "transformer") for s in ("dp", "tp", "fsdp")
            for mode in ("compile", "dynamo")] + [f"{m}:attention:tp:{mode}" for m in ALL_MESHES
                                                   for mode in ("compile", "dynamo")]


@group
def training(runs_text: str) -> dict:
    """`runs_text`: comma-separated MESH:KIND:STYLE:MODE (MESH like 2x4; MODE eager,
    compile or dynamo), or `all`: every mesh, model, style and mode (ALL_RUNS)."""
    out = {}
    for run in (ALL_RUNS if runs_text == "all" else runs_text.split(",")):
        shape_text, kind, style, mode = run.split(":")
        shape = tuple(int(s) for s in shape_text.split("x"))
        if runs_text == "all":  # the sweep reports every run's failure
            try:
                out[run] = train_sharded(shape, kind, style, mode)
            except Exception as e:  # reported, with its type and message
                out[run] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        else:
            out[run] = train_sharded(shape, kind, style, mode)
    return out


@group
def dp_step() -> dict:
    """A data-parallel step of the zoo's MLP (plain SGD) on a mesh of 8 devices:
    compilations, and the collectives of its optimized HLO."""
    mesh = make_mesh((8,))
    model, x, y, loss_fn = MODELS["mlp"]()
    model = xnf.to_xla(model)
    xd.distribute_module(model, mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    @xnf.compile
    def step(x, y):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    xnf.reset_metrics()
    batch = xd.distribute_tensor(x, mesh, [xd.Shard(0)]), xd.distribute_tensor(y, mesh, [xd.Shard(0)])
    losses = [float(step(*batch)) for _ in range(4)]
    return {"compiles": counters.compile_count, "replays": counters.replays, "losses": losses,
            "parameter_bytes": [p.numel() * p.element_size() for p in model.parameters()],
            "graphs": xd.compiled_collectives(), "report": xnf.metrics_report()}


# ---------------------------------------------------------------- torch.distributed


def _collectives(rank: int, world: int) -> dict:
    """torch.distributed's collectives and their functional forms on our tensors, each
    rank's values made from its rank, against what they must give."""
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    out = {}
    mine = torch.arange(4 * world, dtype=torch.float32).reshape(2 * world, 2) + 100 * rank
    every = [torch.arange(4 * world, dtype=torch.float32).reshape(2 * world, 2) + 100 * r for r in range(world)]
    x = xnf.to_xla(mine.clone())
    dist.all_reduce(x)
    out["all_reduce"] = err(x, sum(every))
    x = xnf.to_xla(mine.clone())
    dist.all_reduce(x, op=dist.ReduceOp.MAX)
    out["all_reduce_max"] = err(x, torch.stack(every).amax(0))
    x = xnf.to_xla(mine.clone())
    dist.all_reduce(x, op=dist.ReduceOp.AVG)
    out["all_reduce_avg"] = err(x, sum(every) / world)
    gathered = torch.empty(2 * world * world, 2, device="jax")
    dist.all_gather_into_tensor(gathered, xnf.to_xla(mine))
    out["all_gather_into_tensor"] = err(gathered, torch.cat(every))
    parts = [torch.empty(2 * world, 2, device="jax") for _ in range(world)]
    dist.all_gather(parts, xnf.to_xla(mine))
    out["all_gather"] = max(err(p, e) for p, e in zip(parts, every))
    scattered = torch.empty(2, 2, device="jax")
    dist.reduce_scatter_tensor(scattered, xnf.to_xla(mine))
    out["reduce_scatter_tensor"] = err(scattered, sum(every)[2 * rank:2 * rank + 2])
    b = xnf.to_xla(mine.clone())
    dist.broadcast(b, src=world - 1)
    out["broadcast"] = err(b, every[-1])
    a2a = torch.empty(2 * world, 2, device="jax")
    dist.all_to_all_single(a2a, xnf.to_xla(mine))
    out["all_to_all_single"] = err(a2a, torch.cat([e[2 * rank:2 * rank + 2] for e in every]))
    dist.barrier()
    group = dist.group.WORLD
    out["funcol_all_reduce"] = err(funcol.all_reduce(xnf.to_xla(mine), "sum", group), sum(every))
    out["funcol_all_gather"] = err(funcol.all_gather_tensor(xnf.to_xla(mine), 0, group), torch.cat(every))
    out["funcol_reduce_scatter"] = err(funcol.reduce_scatter_tensor(xnf.to_xla(mine), "sum", 0, group),
                                       sum(every)[2 * rank:2 * rank + 2])
    out["dynamo_funcol"] = _dynamo_funcol(rank, world, mine, every, group)
    out.update(_uneven_all_to_all(rank, world, group))
    f = xnf.compile(lambda t: funcol.all_reduce(t * 2, "sum", group) + 1)
    out["compiled_funcol"] = raised(lambda: f(xnf.to_xla(mine))) if world > 1 else \
        err([f(xnf.to_xla(mine)) for _ in range(3)][-1], mine * 2 + 1)
    return out


def _uneven_all_to_all(rank: int, world: int, group) -> dict:
    """all_to_all_single with split sizes (rank i sends splits[i][j] rows to rank j, some
    of them none), its functional form, all_to_all of lists of any shapes, and splits that
    do not match, which every rank reports (and the next collective still runs)."""
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    splits = [[(i + 2 * j) % 3 + (world == 1) for j in range(world)] for i in range(world)]
    inputs = [torch.arange(3 * sum(splits[i]), dtype=torch.float32).reshape(-1, 3) + 100 * i for i in range(world)]

    def block(i, j):  # the rows rank i sends to rank j
        start = sum(splits[i][:j])
        return inputs[i][start:start + splits[i][j]]

    expected = torch.cat([block(i, rank) for i in range(world)])
    received = [splits[i][rank] for i in range(world)]
    out = {}
    got = torch.empty(expected.shape, device="jax")
    dist.all_to_all_single(got, xnf.to_xla(inputs[rank]), output_split_sizes=received,
                           input_split_sizes=splits[rank])
    out["all_to_all_uneven"] = err(got, expected)
    out["funcol_all_to_all_uneven"] = err(
        funcol.all_to_all_single(xnf.to_xla(inputs[rank]), received, splits[rank], group), expected)
    # lists: rank i sends rank j a (j + 1, i + 1) tensor
    sent = [torch.full((j + 1, rank + 1), 10.0 * rank + j) for j in range(world)]
    outs = [torch.empty(rank + 1, i + 1, device="jax") for i in range(world)]
    dist.all_to_all(outs, [xnf.to_xla(t) for t in sent])
    out["all_to_all_list"] = max(err(o, torch.full((rank + 1, i + 1), 10.0 * i + rank)) for i, o in enumerate(outs))
    wrong = list(received)
    wrong[0] += 1
    out["all_to_all_bad_splits"] = raised(lambda: dist.all_to_all_single(
        torch.empty(expected.shape[0] + 1, 3, device="jax"), xnf.to_xla(inputs[rank]), output_split_sizes=wrong,
        input_split_sizes=splits[rank]))
    x = xnf.to_xla(torch.ones(2))
    dist.all_reduce(x)
    out["after_bad_splits"] = err(x, torch.full((2,), float(world)))
    return out


def _point_to_point(rank: int, world: int) -> dict:
    """send/recv and isend/irecv between ranks 0 and 1 (each pattern of Note
    [Point-to-point as exchanges]), batch_isend_irecv around the ring, a recv into a
    buffer of the wrong dtype, and a send to this rank itself."""
    import torch.distributed as dist

    out = {}
    peer = 1 - rank
    value = torch.arange(6, dtype=torch.float32).reshape(2, 3) + 10 * rank
    # a send and a recv, each way, in two dtypes
    if rank == 0:
        dist.send(xnf.to_xla(value), dst=1)
        got = torch.empty(4, dtype=torch.int64, device="jax")
        dist.recv(got, src=1)
        out["send_recv"] = err(got, torch.arange(4) * 7)
    else:
        got = torch.empty(2, 3, device="jax")
        dist.recv(got, src=0)
        dist.send(xnf.to_xla(torch.arange(4) * 7), dst=0)
        out["send_recv"] = err(got, value - 10)
    # both isend, then both irecv (the sends cross)
    got = torch.empty(2, 3, device="jax")
    works = [dist.isend(xnf.to_xla(value), dst=peer), dist.irecv(got, src=peer)]
    for w in works:
        w.wait()
    out["isend_then_irecv"] = err(got, value - 10 * rank + 10 * peer)
    # both irecv, then both isend (the recvs wait for the sends), two messages each
    first, second = torch.empty(3, device="jax"), torch.empty(2, dtype=torch.bool, device="jax")
    works = [dist.irecv(first, src=peer), dist.irecv(second, src=peer)]
    incomplete = [w.is_completed() for w in works]
    works += [dist.isend(xnf.to_xla(torch.tensor([1.5, -2.0, 3.0]) * (peer + 1)), dst=peer),
              dist.isend(xnf.to_xla(torch.tensor([True, rank == 0])), dst=peer)]
    for w in works:
        w.wait()
    out["irecv_then_isend"] = max(err(first, torch.tensor([1.5, -2.0, 3.0]) * (rank + 1)),
                                  err(second, torch.tensor([True, peer == 0])))
    out["irecv_waits"] = incomplete == [False, False]
    # batch_isend_irecv around the ring
    ring = torch.empty(2, 3, device="jax")
    ops = [dist.P2POp(dist.isend, xnf.to_xla(value), (rank + 1) % world),
           dist.P2POp(dist.irecv, ring, (rank - 1) % world)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    out["batch_isend_irecv"] = err(ring, value - 10 * rank + 10 * ((rank - 1) % world))
    # a buffer of another dtype: the receiver raises, the sender goes on
    if rank == 0:
        dist.send(xnf.to_xla(torch.ones(4)), dst=1)
        out["wrong_dtype"] = ""
    else:
        out["wrong_dtype"] = raised(lambda: dist.recv(torch.empty(4, dtype=torch.int32, device="jax"), src=0))
    out["to_itself"] = raised(lambda: dist.send(xnf.to_xla(value), dst=rank))
    x = xnf.to_xla(torch.ones(2))
    dist.all_reduce(x)
    out["after"] = err(x, torch.full((2,), float(world)))
    return out


def _dynamo_funcol(rank: int, world: int, mine, every, group) -> float:
    """The functional collectives inside a graph of the torch.compile backend (on CPU
    tensors, as that backend takes them), with ops before and after each, called twice
    (the second call replays): the largest difference from what they must give."""
    import torch.distributed._functional_collectives as funcol

    def step(t):
        reduced = funcol.all_reduce(t * 2, "sum", group)
        gathered = funcol.all_gather_tensor(reduced + 1, 0, group)
        scattered = funcol.reduce_scatter_tensor(gathered * 0.5, "sum", 0, group)
        sent = funcol.broadcast(t - 1, world - 1, group)
        swapped = funcol.all_to_all_single(t.exp() * 0 + t, None, None, group)
        return reduced.sum(1), gathered, scattered, sent, swapped.neg()

    compiled = torch.compile(step, backend="xla_native")
    total = sum(every)
    expected = ((2 * total).sum(1), torch.cat([2 * total + 1] * world), world * (2 * total + 1) * 0.5, every[-1] - 1,
                -torch.cat([e[2 * rank:2 * rank + 2] for e in every]))
    worst = 0.0
    for _ in range(2):
        got = compiled(mine.clone())
        worst = max([worst] + [err(g, e) for g, e in zip(got, expected)])
    return worst


def _ddp(rank: int, world: int) -> dict:
    """DistributedDataParallel over the ranks, each training on its share of the batch,
    against one process training on the whole batch."""
    import torch.distributed as dist

    ref_losses, ref_weights = reference("mlp")
    model, x, y, loss_fn = MODELS["mlp"]()
    share = x.shape[0] // world
    xs, ys = x[rank * share:(rank + 1) * share], y[rank * share:(rank + 1) * share]
    ddp = torch.nn.parallel.DistributedDataParallel(xnf.to_xla(model))
    losses = _train(ddp, xnf.to_xla(xs), xnf.to_xla(ys), loss_fn)
    # the whole batch's loss is the mean of the shares' losses
    total = torch.tensor(losses, device="jax")
    dist.all_reduce(total, op=dist.ReduceOp.AVG)
    weights = {n: cpu(p) for n, p in ddp.module.named_parameters()}
    return {"loss_err": max(abs(a - b) / max(abs(b), 1e-3) for a, b in zip(cpu(total).tolist(), ref_losses)),
            "weight_err": max(err(weights[n], w) for n, w in ref_weights.items())}


def _spmd(world: int) -> dict:
    """One model over every process's devices: a mesh of all of them, the batch split
    over it, the compiled step run by every process (XLA's collectives between them)."""
    import jax
    mesh = xd.init_device_mesh((jax.device_count(),), ("dp",))
    ref_losses, ref_weights = reference("mlp")
    model, x, y, loss_fn = MODELS["mlp"]()
    model = xnf.to_xla(model)
    xd.distribute_module(model, mesh)
    xnf.reset_metrics()
    losses = _train(model, x, y, loss_fn, lambda t: xd.distribute_tensor(t, mesh, [xd.Shard(0)]), "compile")
    weights = {n: cpu(p) for n, p in model.named_parameters()}
    return {"devices": jax.device_count(), "local_devices": jax.local_device_count(),
            "loss_err": max(abs(a - b) / max(abs(b), 1e-3) for a, b in zip(losses, ref_losses)),
            "weight_err": max(err(weights[n], w) for n, w in ref_weights.items()),
            "graphs": [(g["program"], g["devices"], sorted({c["kind"] for c in g["collectives"]}))
                       for g in xd.compiled_collectives()]}


@group
def processes() -> dict:
    """One rank of a torchrun-style run (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set):
    joins the others, then runs the collectives, DDP and a mesh over every process."""
    import torch.distributed as dist
    xd.initialize()
    rank, world = dist.get_rank(), dist.get_world_size()
    out = {"rank": rank, "world": world, "backend": dist.get_backend()}
    out["collectives"] = _collectives(rank, world)
    out["point_to_point"] = _point_to_point(rank, world)
    out["ddp"] = _ddp(rank, world)
    out["spmd"] = _spmd(world)
    dist.destroy_process_group()
    return out


@group
def one_process() -> dict:
    """torch.distributed in one process: a world of one rank (docs/distributed.md)."""
    import os
    import torch.distributed as dist
    from distributed_harness import free_port
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dist.init_process_group("jax", rank=0, world_size=1)
    out = {"backend": dist.get_backend(), "collectives": _collectives(0, 1), "ddp": _ddp(0, 1),
           "send_to_itself": raised(lambda: dist.send(xnf.to_xla(torch.ones(2)), dst=0))}
    dist.destroy_process_group()
    return out


if __name__ == "__main__":
    name, args = sys.argv[1], sys.argv[2:]
    try:
        result = GROUPS[name](*args)
    except Exception:
        traceback.print_exc()
        sys.exit(1)
    report(result)
