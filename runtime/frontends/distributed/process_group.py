"""torch.distributed on our device: a process-group backend named "jax", its
collectives on our tensors (and the functional collectives' ops) as JAX programs, and
`initialize()` for several processes.

Note [Ranks are processes]
JAX runs one program per process over every device it is given (a single controller
per process): within a process, spreading work over its devices is the mesh's job
(distribute_tensor, parallelize_module, fully_shard), and one tensor holds the global
value. So a rank of torch.distributed is a process: `init_process_group("jax")` in a
single process is a world of one rank (DistributedDataParallel then reduces nothing,
and the data parallelism over the process's devices comes from laying the batch out
over a mesh), and under `torchrun --nproc-per-node N` each process is one rank, whose
collectives run as JAX programs over a mesh of one device per process
(runtime/exec/collectives.py), after `initialize()` joined the processes into one JAX
runtime. A collective inside a traced program (compile()) runs there when the group
has one rank; across processes it must run eagerly, and says so.
"""

from __future__ import annotations

import datetime
import os
from typing import Any

import jax
import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future
from torch.futures import Future

from ...core.context import context
from ...core.convert import X64, cpu_to_jax, jax_to_cpu
from ...core.placement import local_devices, spans_devices
from ...core.tensor import DEVICE_NAME, XlaTensor, from_array
from ...exec.collectives import run_all_to_all, run_collective
from ...exec.eager import value
from ...exec.registry import REGISTRY
from .. import dynamo
from .point_to_point import exchange_recv, exchange_send

BACKEND = DEVICE_NAME  # init_process_group("jax")
_REDUCE_OPS = {"SUM": "sum", "AVG": "avg", "MAX": "max", "MIN": "min", "PRODUCT": "product", "BAND": "band",
               "BOR": "bor", "BXOR": "bxor"}



def _check_reduce_scatter_shapes(output: torch.Tensor, input: torch.Tensor, ranks: int) -> None:
    if input.shape[0] != output.shape[0] * ranks or output.shape[1:] != input.shape[1:]:
        raise ValueError(f"reduce_scatter_tensor: an output of shape {tuple(output.shape)} for an input of "
                         f"shape {tuple(input.shape)} over {ranks} ranks")

def _reduce_name(op: Any) -> str:
    """torch's ReduceOp (or the functional collectives' string) as ours."""
    if isinstance(op, str):
        name = op.lower()
        if name not in _REDUCE_OPS.values():
            raise ValueError(f"unknown reduce op {op!r}")
        return name
    text = str(getattr(op, "op", op)).rsplit(".", 1)[-1].upper()
    if text not in _REDUCE_OPS:
        raise ValueError(f"reduce op {op} is not supported by the {BACKEND!r} backend: use SUM, AVG, MAX, MIN, "
                         "PRODUCT, BAND, BOR or BXOR")
    return _REDUCE_OPS[text]


def _array(t: torch.Tensor) -> Any:
    """A tensor's values on this process's default device."""
    if not isinstance(t, XlaTensor):
        return cpu_to_jax(t)
    with X64:
        array = value(t)
    sharding = getattr(array, "sharding", None)
    if sharding is not None and spans_devices(sharding):
        if not array.is_fully_addressable:
            raise RuntimeError("a collective of torch.distributed takes each process's own tensor; this one is laid "
                               "out over several processes' devices already (a mesh): its values are global, "
                               "there is nothing to exchange")
        array = jax.device_put(array, local_devices()[0])
    return array


def _write(t: torch.Tensor, array: Any) -> None:
    """Write a collective's result into `t` (its device and layout kept)."""
    with torch.no_grad():
        t.copy_(from_array(array) if isinstance(t, XlaTensor) else jax_to_cpu(array))


def _done(result: Any) -> Any:
    fut: Future = Future()
    fut.set_result(result)
    return _create_work_from_future(fut)


def _traced(name: str, size: int, *tensors: torch.Tensor) -> bool:
    """Whether the call is inside a traced program (compile(), lazy mode, a graph of
    the torch.compile backend, whose tensors hold JAX tracers): fine for a group of one
    rank, whose collectives are copies; an error across processes."""
    if context.trace is None and not any(
            isinstance(t, XlaTensor) and isinstance(value(t), jax.core.Tracer) for t in tensors):
        return False
    if size > 1:
        raise RuntimeError(f"torch.distributed.{name} across {size} processes runs eagerly, not inside a compiled "
                           "program (compile(), lazy mode): call it outside, or lay the tensors out over a mesh of "
                           "every process's devices and let XLA insert the collectives (docs/distributed.md)")
    return True


class ProcessGroupJax(dist.ProcessGroup):
    """The "jax" backend of torch.distributed: Note [Ranks are processes]."""

    def __init__(self, rank: int, size: int, processes: tuple[int, ...]):
        super().__init__(rank, size)
        self.processes = processes

    # torch keeps a group's name on its C++ backends, which a process group written in
    # Python has none of: the name is kept here
    _name = ""

    def _set_group_name(self, name: str) -> None:
        self._name = name

    @property
    def group_name(self) -> str:
        if not self._name:
            raise RuntimeError("this process group has no name yet: create it with init_process_group or new_group")
        return self._name

    def getBackendName(self) -> str:
        return BACKEND

    @property
    def name_(self) -> str:
        return BACKEND

    def _run(self, kind: str, t: torch.Tensor, *args: Any) -> Any:
        return run_collective(kind, _array(t), self.processes, *args)

    # -- the collectives DistributedDataParallel and the c10d API call

    def allreduce(self, tensors: list, opts: Any = None) -> Any:
        op = _reduce_name(opts.reduceOp if opts is not None and hasattr(opts, "reduceOp") else "sum")
        if not _traced("all_reduce", self.size(), *tensors):
            for t in tensors:
                _write(t, self._run("all_reduce", t, op))
        return _done(tensors)

    def allreduce_coalesced(self, tensors: list, opts: Any = None) -> Any:
        return self.allreduce(tensors, opts)

    def broadcast(self, tensors: list, opts: Any = None) -> Any:
        src = opts.rootRank if opts is not None else 0
        if not _traced("broadcast", self.size(), *tensors):
            for t in tensors:
                _write(t, self._run("broadcast", t, src))
        return _done(tensors)

    def _allgather_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Any:
        if output.shape[0] != input.shape[0] * self.size() or output.shape[1:] != input.shape[1:]:
            raise ValueError(f"all_gather_into_tensor: an output of shape {tuple(output.shape)} for inputs of shape "
                             f"{tuple(input.shape)} from {self.size()} ranks")
        if _traced("all_gather_into_tensor", self.size(), input):
            with torch.no_grad():
                output.copy_(input)
        else:
            _write(output, self._run("all_gather", input))
        return _done(output)

    def allgather_into_tensor_coalesced(self, outputs: list, inputs: list, opts: Any = None) -> Any:
        for o, i in zip(outputs, inputs):
            self._allgather_base(o, i, opts)
        return _done(outputs)

    def allgather(self, output_lists: list, inputs: list, opts: Any = None) -> Any:
        for outs, t in zip(output_lists, inputs):
            if len(outs) != self.size():
                raise ValueError(f"all_gather: {len(outs)} output tensors for {self.size()} ranks")
            if _traced("all_gather", self.size(), t):
                with torch.no_grad():
                    outs[0].copy_(t)
                continue
            gathered = self._run("all_gather", t.reshape((1,) + tuple(t.shape)))
            for r, o in enumerate(outs):
                _write(o, gathered[r])
        return _done(output_lists)

    def _reduce_scatter_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Any:
        op = _reduce_name(opts.reduceOp if opts is not None else "sum")
        _check_reduce_scatter_shapes(output, input, self.size())
        if _traced("reduce_scatter_tensor", self.size(), input):
            with torch.no_grad():
                output.copy_(input)
        else:
            _write(output, self._run("reduce_scatter", input, op))
        return _done(output)

    def reduce_scatter_tensor_coalesced(self, outputs: list, inputs: list, opts: Any = None) -> Any:
        for o, i in zip(outputs, inputs):
            self._reduce_scatter_base(o, i, opts)
        return _done(outputs)

    def alltoall_base(self, output: torch.Tensor, input: torch.Tensor, output_split_sizes: list,
                      input_split_sizes: list, opts: Any = None) -> Any:
        n = self.size()
        if _traced("all_to_all_single", n, input):
            if output.shape != input.shape:
                raise ValueError(f"all_to_all_single in a group of one rank: an output of shape "
                                 f"{tuple(output.shape)} for an input of shape {tuple(input.shape)}")
            with torch.no_grad():
                output.copy_(input)
        else:
            _write(output, run_all_to_all(_array(input), self.processes, self.rank(), list(input_split_sizes),
                                          list(output_split_sizes), output.shape[0] if output.dim() else 0))
        return _done(output)

    def alltoall(self, output_tensors: list, input_tensors: list, opts: Any = None) -> Any:
        """all_to_all of lists: input_tensors[j] goes to rank j, output_tensors[i] comes
        from rank i (any shapes of one dtype): one all_to_all_single of their values
        flattened, split by their sizes."""
        n = self.size()
        if len(output_tensors) != n or len(input_tensors) != n:
            raise ValueError(f"all_to_all: {len(input_tensors)} inputs and {len(output_tensors)} outputs for {n} ranks")
        flat = torch.cat([t.reshape(-1) for t in input_tensors])
        out = flat.new_empty((sum(t.numel() for t in output_tensors),))
        self.alltoall_base(out, flat, [t.numel() for t in output_tensors], [t.numel() for t in input_tensors])
        offset = 0
        with torch.no_grad():
            for t in output_tensors:
                t.copy_(out[offset:offset + t.numel()].reshape(t.shape))
                offset += t.numel()
        return _done(output_tensors)

    # -- point to point (Note [Point-to-point as exchanges] in point_to_point.py)

    def send(self, tensors: list, dstRank: int, tag: int = 0) -> Any:
        exchange_send(self, list(tensors), dstRank, tag, _array, _write)
        return _done(tensors)

    def recv(self, tensors: list, srcRank: int, tag: int = 0) -> Any:
        works = exchange_recv(self, list(tensors), srcRank, tag, _write)
        return works[0] if len(works) == 1 else _AllOf(works)

    def recv_anysource(self, tensors: list, tag: int = 0) -> Any:
        raise NotImplementedError(f"recv from any source is not supported by the {BACKEND!r} backend: name the "
                                  "sender (recv(tensor, src=...))")

    def scatter(self, output_tensors: list, input_tensors: list, opts: Any = None) -> Any:
        """Rank `rootRank`'s list of tensors, one to each rank: a broadcast of them all,
        each rank keeping its own (DTensor's distribute_tensor scatters from rank 0)."""
        src, out = (opts.rootRank if opts is not None else 0), output_tensors[0]
        if _traced("scatter", self.size()):
            with torch.no_grad():
                out.copy_(input_tensors[0][0])
            return _done(output_tensors)
        stacked = torch.stack(list(input_tensors[0])) if self.rank() == src else \
            out.new_zeros((self.size(),) + tuple(out.shape))
        _write(out, self._run("broadcast", stacked, src)[self.rank()])
        return _done(output_tensors)

    def barrier(self, opts: Any = None) -> Any:
        if self.size() > 1 and context.trace is None:
            run_collective("all_reduce", cpu_to_jax(torch.zeros(())), self.processes, "sum")
        return _done(None)


class _AllOf(dist.Work):
    """The work of several recvs of one call."""

    def __init__(self, works: list):
        super().__init__()
        self.works = works

    def is_completed(self) -> bool:
        return all(w.is_completed() for w in self.works)

    def wait(self, timeout: Any = None) -> bool:
        return all(w.wait(timeout) for w in self.works)


def _create(options: Any, backend_options: Any = None) -> ProcessGroupJax:
    ranks = tuple(options.global_ranks_in_group) or tuple(range(options.group_size))
    return ProcessGroupJax(options.group_rank, options.group_size, ranks)


# ---------------------------------------------------------------- functional collectives


def _group(group_name: Any) -> ProcessGroupJax:
    pg = group_name if isinstance(group_name, dist.ProcessGroup) else \
        torch._C._distributed_c10d._resolve_process_group(group_name)
    if not isinstance(pg, ProcessGroupJax):
        raise RuntimeError(f"a collective on a tensor of {DEVICE_NAME} needs a process group of the {BACKEND!r} "
                           f"backend (init_process_group({BACKEND!r})), not {pg.name()!r}")
    return pg


def _functional(kind: str) -> Any:
    def all_reduce(input: torch.Tensor, reduce_op: str, group_name: Any) -> torch.Tensor:
        out = input.clone()
        _group(group_name).allreduce([out], _Opts(reduce_op))
        return out

    def all_reduce_(input: torch.Tensor, reduce_op: str, group_name: Any) -> torch.Tensor:
        _group(group_name).allreduce([input], _Opts(reduce_op))
        return input

    def all_gather_into_tensor(input: torch.Tensor, group_size: int, group_name: Any) -> torch.Tensor:
        out = input.new_empty((input.shape[0] * group_size,) + tuple(input.shape[1:]))
        _group(group_name)._allgather_base(out, input)
        return out

    def reduce_scatter_tensor(input: torch.Tensor, reduce_op: str, group_size: int, group_name: Any) -> torch.Tensor:
        out = input.new_empty((input.shape[0] // group_size,) + tuple(input.shape[1:]))
        _group(group_name)._reduce_scatter_base(out, input, _Opts(reduce_op))
        return out

    def all_to_all_single(input: torch.Tensor, output_split_sizes: list, input_split_sizes: list,
                          group_name: Any) -> torch.Tensor:
        out = input.new_empty((sum(output_split_sizes),) + tuple(input.shape[1:])) if output_split_sizes \
            else torch.empty_like(input)
        _group(group_name).alltoall_base(out, input, list(output_split_sizes), list(input_split_sizes))
        return out

    def broadcast(input: torch.Tensor, src: int, group_name: Any) -> torch.Tensor:
        out = input.clone()
        _group(group_name).broadcast([out], _Opts(root=src))
        return out

    def broadcast_(input: torch.Tensor, src: int, group_name: Any) -> torch.Tensor:
        _group(group_name).broadcast([input], _Opts(root=src))
        return input

    def wait_tensor(input: torch.Tensor) -> torch.Tensor:
        return input  # the collectives above complete before they return

    return locals()[kind]


class _Opts:
    """The options object the process group's methods read (reduceOp, rootRank)."""

    def __init__(self, reduce_op: str = "sum", root: int = 0):
        self.reduceOp, self.rootRank = reduce_op, root


_FUNCTIONAL = ("all_reduce", "all_reduce_", "all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single",
               "broadcast", "broadcast_", "wait_tensor")


# Note [Collectives in graphs of the torch.compile backend]
# A functional collective in an ATen graph of the torch.compile backend runs inside the
# graph's jitted program when its group has one rank (a copy); between processes it
# runs between the jitted partitions, eagerly, as the eager path runs it (each process's
# tensor exchanged through a JAX program over a mesh of one device per process): the
# backend splits the graph there (`dynamo.HOST_NODES`). A collective on a group of
# another backend (gloo on CPU tensors) runs there too, as torch runs it, with its
# wait_tensor.


def _group_of_node(node: torch.fx.Node) -> Any:
    name = node.kwargs.get("group_name", node.args[-1] if node.args else None)
    if isinstance(name, dist.ProcessGroup):
        return name
    try:
        return torch._C._distributed_c10d._resolve_process_group(name)
    except Exception:  # not a group's name: the op's own checks say so when it runs
        return None


def _host_collective(node: torch.fx.Node) -> Any:
    """What runs a graph's collective node between the jitted partitions, or None to
    run it inside (Note [Collectives in graphs of the torch.compile backend])."""
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload) or \
            target.namespace != "_c10d_functional":
        return None
    kind = target._schema.name.split("::", 1)[1]
    if kind == "wait_tensor":
        source = node.args[0] if node.args else None
        if isinstance(source, torch.fx.Node) and _host_collective(source) is not None:
            # torch's wait for its own collective; ours have completed when they return
            return _functional(kind) if isinstance(_group_of_node(source), ProcessGroupJax) else target
        return None
    if kind not in _FUNCTIONAL:
        return None
    pg = _group_of_node(node)
    if pg is None:
        return None
    if not isinstance(pg, ProcessGroupJax):
        return target
    return _functional(kind) if pg.size() > 1 else None


# ---------------------------------------------------------------- the c10d ops
# torch.distributed's Python API calls some collectives through the dispatcher's c10d
# ops (all_gather_into_tensor, reduce_scatter_tensor, ...), which reach our tensors'
# dispatch with the process group boxed: these run them on the group.


def _unboxed(pg: Any) -> ProcessGroupJax:
    found = dist.ProcessGroup.unbox(pg) if not isinstance(pg, dist.ProcessGroup) else pg
    if not isinstance(found, ProcessGroupJax):
        raise RuntimeError(f"a collective on a tensor of {DEVICE_NAME} needs a process group of the {BACKEND!r} "
                           f"backend (init_process_group({BACKEND!r})), not {found.name()!r}")
    return found


def _reduce_of(op: Any) -> str:
    """A c10d op's boxed ReduceOp (a ScriptObject whose op() is RedOpType's number)."""
    if isinstance(op, torch.ScriptObject):
        number = op.op()
        for kind in dist.ReduceOp.RedOpType.__members__.values():
            if int(kind) == number:
                return _reduce_name(kind)
    return _reduce_name(op)


def _c10d(kind: str) -> Any:
    def allreduce_(tensors, process_group, reduce_op, sparse_indices=None, async_op=True, timeout=-1):
        work = _unboxed(process_group).allreduce(list(tensors), _Opts(_reduce_of(reduce_op)))
        return list(tensors), work.boxed()

    def allreduce_coalesced_(tensors, process_group, reduce_op, async_op=True, timeout=-1):
        return _unboxed(process_group).allreduce(list(tensors), _Opts(_reduce_of(reduce_op))).boxed()

    def broadcast_(tensors, process_group, root_rank, root_tensor=0, async_op=True, timeout=-1):
        work = _unboxed(process_group).broadcast(list(tensors), _Opts(root=root_rank))
        return list(tensors), work.boxed()

    def _allgather_base_(output_tensor, input_tensor, process_group, async_op=True, timeout=-1):
        return output_tensor, _unboxed(process_group)._allgather_base(output_tensor, input_tensor).boxed()

    def allgather_(output_tensors, input_tensors, process_group, async_op=True, timeout=-1):
        work = _unboxed(process_group).allgather([list(o) for o in output_tensors], list(input_tensors))
        return [list(o) for o in output_tensors], work.boxed()

    def allgather_into_tensor_coalesced_(outputs, inputs, process_group, async_op=True):
        return _unboxed(process_group).allgather_into_tensor_coalesced(list(outputs), list(inputs)).boxed()

    def _reduce_scatter_base_(output_tensor, input_tensor, process_group, reduce_op, async_op=True, timeout=-1):
        pg = _unboxed(process_group)
        return output_tensor, pg._reduce_scatter_base(output_tensor, input_tensor, _Opts(_reduce_of(reduce_op))).boxed()

    def reduce_scatter_tensor_coalesced_(outputs, inputs, process_group, reduce_op, async_op=True, timeout=-1):
        pg = _unboxed(process_group)
        return pg.reduce_scatter_tensor_coalesced(list(outputs), list(inputs), _Opts(_reduce_of(reduce_op))).boxed()

    def alltoall_base_(output, input, process_group, output_split_sizes, input_split_sizes, async_op=True,
                       timeout=-1):
        pg = _unboxed(process_group)
        return pg.alltoall_base(output, input, list(output_split_sizes), list(input_split_sizes)).boxed()

    def alltoall_(output_tensors, input_tensors, process_group, async_op=True, timeout=-1):
        work = _unboxed(process_group).alltoall(list(output_tensors), list(input_tensors))
        return list(output_tensors), work.boxed()

    def send(tensors, process_group, dst, tag):
        return _unboxed(process_group).send(list(tensors), dst, tag).boxed()

    def recv_(tensors, process_group, src, tag):
        return _unboxed(process_group).recv(list(tensors), src, tag).boxed()

    def recv_any_source_(tensors, process_group, tag):
        return _unboxed(process_group).recv_anysource(list(tensors), tag).boxed()

    def scatter_(output_tensors, input_tensors, process_group, root_rank, async_op=True, timeout=-1):
        work = _unboxed(process_group).scatter(list(output_tensors), [list(i) for i in input_tensors],
                                               _Opts(root=root_rank))
        return list(output_tensors), work.boxed()

    def barrier(tensor, process_group, device_ids, async_op=True, timeout=-1):
        return _unboxed(process_group).barrier().boxed()

    return locals()[kind]


_C10D = ("allreduce_", "allreduce_coalesced_", "broadcast_", "_allgather_base_", "allgather_",
         "allgather_into_tensor_coalesced_", "_reduce_scatter_base_", "reduce_scatter_tensor_coalesced_",
         "alltoall_base_", "barrier", "alltoall_", "send", "recv_", "recv_any_source_", "scatter_")


def install() -> None:
    """Register the "jax" backend for our device, and the functional collectives' ops."""
    if BACKEND not in dist.Backend.backend_list:
        dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=[DEVICE_NAME])
    import torch.distributed._functional_collectives  # noqa: F401  (defines the _c10d_functional ops)
    ops = torch.ops._c10d_functional
    for name in _FUNCTIONAL:
        op = getattr(ops, name, None)
        if op is not None:
            REGISTRY[op.default] = _functional(name)
    for name in _C10D:
        op = getattr(torch.ops.c10d, name, None)
        if op is not None:
            REGISTRY[op.default] = _c10d(name)
    if _host_collective not in dynamo.HOST_NODES:
        dynamo.HOST_NODES.append(_host_collective)


# ---------------------------------------------------------------- several processes


def _env_int(*names: str) -> int | None:
    for n in names:
        if os.environ.get(n, "") != "":
            return int(os.environ[n])
    return None


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None, *, local_device_ids: Any = None,
               initialization_timeout: int = 300, init_process_group: bool = True) -> None:
    """Join this process to the others as one JAX runtime (`jax.distributed.initialize`),
    so that meshes span every process's devices, and (`init_process_group`) start
    torch.distributed with the "jax" backend, rank = process id.

    Without arguments the values come from torchrun's environment: the process count
    from WORLD_SIZE, the id from RANK, and the coordinator from JAX_COORDINATOR_ADDRESS,
    else MASTER_ADDR with the port after MASTER_PORT (torch's own store takes
    MASTER_PORT). On CPU hosts the collectives between processes go through gloo.
    Call it before anything else touches JAX devices."""
    if num_processes is None:
        num_processes = _env_int("WORLD_SIZE")
    if process_id is None:
        process_id = _env_int("RANK")
    if coordinator_address is None:
        coordinator_address = os.environ.get("JAX_COORDINATOR_ADDRESS") or None
        if coordinator_address is None and os.environ.get("MASTER_ADDR") and os.environ.get("MASTER_PORT"):
            coordinator_address = f"{os.environ['MASTER_ADDR']}:{int(os.environ['MASTER_PORT']) + 1}"
    if num_processes is None or process_id is None or coordinator_address is None:
        raise RuntimeError("initialize(): give coordinator_address, num_processes and process_id, or start the "
                           "script with torchrun (WORLD_SIZE, RANK, MASTER_ADDR and MASTER_PORT set)")
    try:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    except AttributeError:  # a JAX without the option picks its own
        pass
    jax.distributed.initialize(coordinator_address, num_processes, process_id, local_device_ids=local_device_ids,
                               initialization_timeout=initialization_timeout)
    if init_process_group and not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", coordinator_address.rsplit(":", 1)[0])
        os.environ.setdefault("MASTER_PORT", str(int(coordinator_address.rsplit(":", 1)[1]) - 1))
        dist.init_process_group(BACKEND, rank=process_id, world_size=num_processes,
                                timeout=datetime.timedelta(seconds=initialization_timeout))
