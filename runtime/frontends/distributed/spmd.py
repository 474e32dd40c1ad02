"""Ranks as devices of one process: code written for torch.distributed (each rank holds
its own values and calls `dist.all_reduce`, `dist.get_rank()`, ...) run with one rank
per device of a mesh, as one SPMD program (docs/distributed.md, "Ranks as devices").

Note [Ranks as devices]
`spmd(fn, mesh)(*args)` runs `fn` once per device of `mesh` inside `jax.shard_map`,
jitted: one program, compiled once per shape, in which every device is a rank. Tensor
arguments hold every rank's value stacked along leading dims, one per mesh dim (rank
(i, j)'s value is `arg[i, j]`); each rank sees its own. Results come back stacked the
same way, laid out over the mesh (a rank's block on its device). Inside, the default
process group is the whole mesh (`dist.get_rank()`, `dist.get_world_size()`,
`dist.all_reduce(t)` without a group), and `mesh_group(mesh, "tp")` is the group of the
ranks along one mesh dim (as torch's `DeviceMesh.get_group("tp")`), usable as
`group=` of the collectives and of the functional collectives. Each collective lowers
to JAX's collective over those mesh axes (runtime/exec/collectives.py: `psum`,
`all_gather`, `psum_scatter`, `all_to_all`), and a rank is `lax.axis_index`: a tensor,
not a Python int, since one program runs for every rank, so code branching on it in
Python raises, naming `torch.where` as the fix.

Tensors `fn` uses from outside its arguments (a model's parameters, an optimizer's
state) are the same on every rank, as a replicated model is in DDP. Each call traces
`fn` once (`jax.make_jaxpr` of the shard_map; its Python runs once per call, as it
would eagerly): the tensors it reads from outside are the jaxpr's constants, which the
jitted program takes as arguments, so it compiles once per distinct program (the
jaxpr's text) and later calls only trace; the tensors from outside it writes and the
tensors it makes that outlive the call (`.grad`, optimizer buffers; found by a
dispatch mode watching its ops) are the program's outputs, written back after it ran.
Outside the call there is one such tensor, not one per rank: it takes rank 0's value,
as DDP's buffers take rank 0's (broadcast_buffers); all-reduce a value that must
agree, as DDP's gradients are. (JAX cannot always tell a value agrees: one written
through a view of a value that differed still types as differing, so the program does
not check it: `check_vma=False`.)
"""

from __future__ import annotations

import functools
import gc
import math
import threading
import weakref
from typing import Any, Callable

import jax
import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from jax.sharding import NamedSharding, PartitionSpec as P
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_unflatten

from ....shape_fns.common import NUMPY_TO_TORCH
from ...core.context import context, untraced
from ...core.convert import X64, cpu_to_jax
from ...core.mesh import DeviceMesh
from ...core.placement import local_devices
from ...core.tensor import Storage, XlaTensor, from_array, tensor_on
from ...exec.collectives import (axis_all_gather, axis_all_reduce, axis_all_to_all, axis_broadcast, axis_rank,
                                 axis_reduce_scatter)
from ...exec.eager import value
from .process_group import BACKEND, ProcessGroupJax, _check_reduce_scatter_shapes, _done, _reduce_name

RANK_MESSAGE = (
    "inside xla_native_functions.distributed.spmd every rank runs one program, so a value that depends on the rank "
    "(dist.get_rank() is a tensor there, lax.axis_index) or on the ranks' data cannot become a Python value "
    "(int(), bool(), .item(), an `if` on it, an index): compute both branches and pick with "
    "torch.where(rank == 0, a, b), or slice with torch.index_select / narrow by the rank tensor"
)


class _Run(threading.local):
    """The spmd call this thread is tracing (None outside)."""
    active: Any = None


_run = _Run()


def _mesh_of(mesh: Any) -> DeviceMesh:
    if isinstance(mesh, DeviceMesh):
        return mesh
    if isinstance(mesh, jax.sharding.Mesh):
        return DeviceMesh.from_jax(mesh)
    raise TypeError(f"spmd: a DeviceMesh (init_device_mesh) or a jax.sharding.Mesh, not {type(mesh).__name__}")


class MeshGroup(ProcessGroupJax):
    """A process group whose ranks are the devices of a mesh along some of its dims:
    its collectives run inside `spmd` (Note [Ranks as devices])."""

    def __init__(self, mesh: DeviceMesh, dims: tuple[str, ...]):
        size = math.prod(mesh.jax_mesh.shape[d] for d in dims)
        super().__init__(0, size, tuple(range(size)))
        self.mesh, self.dims = mesh, dims
        name = f"jax_mesh_{'_'.join(dims)}_{id(self):x}"
        self._set_group_name(name)
        # torch's registries: the functional collectives resolve a group by its name,
        # broadcast's src by the group's ranks (here the ranks along `dims`)
        torch._C._distributed_c10d._register_process_group(name, self)
        c10d._world.pg_group_ranks[self] = {i: i for i in range(size)}
        c10d._world.pg_names[self] = name
        c10d._world.pg_map[self] = (BACKEND, None)

    def __repr__(self) -> str:
        return f"MeshGroup({', '.join(f'{d}={self.mesh.jax_mesh.shape[d]}' for d in self.dims)})"

    def _axes(self, name: str) -> tuple[str, ...]:
        run = _run.active
        if run is None:
            raise RuntimeError(f"torch.distributed.{name} on a group of a mesh's devices runs inside "
                               "xla_native_functions.distributed.spmd(fn, mesh), one rank per device; outside it "
                               "lay tensors out over the mesh (distribute_tensor) and let XLA insert the collectives")
        if run.mesh.jax_mesh != self.mesh.jax_mesh:
            raise RuntimeError(f"torch.distributed.{name}: this group's mesh is not the mesh spmd runs over")
        return self.dims

    def rank(self) -> Any:
        """This rank's index in the group: a 0-d int64 tensor (Note [Ranks as devices])."""
        axes = self._axes("get_rank")
        return _run.active.rank(axes)

    def size(self) -> int:
        return math.prod(self.mesh.jax_mesh.shape[d] for d in self.dims)

    def _op(self, name: str, tensors: list, compute: Callable) -> None:
        axes = self._axes(name)
        for t in tensors:
            _run.active.touch(t)
            with X64:
                new = compute(value(t), axes)
            _write(t, new)

    def allreduce(self, tensors: list, opts: Any = None) -> Any:
        op = _reduce_name(opts.reduceOp if opts is not None and hasattr(opts, "reduceOp") else "sum")
        self._op("all_reduce", tensors, lambda x, axes: axis_all_reduce(x, axes, op, self.size()))
        return _done(tensors)

    def broadcast(self, tensors: list, opts: Any = None) -> Any:
        src = opts.rootRank if opts is not None else 0
        if not 0 <= src < self.size():
            raise ValueError(f"broadcast: src {src} is not a rank of this group of {self.size()}")
        self._op("broadcast", tensors, lambda x, axes: axis_broadcast(x, axes, src))
        return _done(tensors)

    def _allgather_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Any:
        if output.shape[0] != input.shape[0] * self.size() or output.shape[1:] != input.shape[1:]:
            raise ValueError(f"all_gather_into_tensor: an output of shape {tuple(output.shape)} for inputs of shape "
                             f"{tuple(input.shape)} from {self.size()} ranks")
        axes = self._axes("all_gather_into_tensor")
        _run.active.touch(input)
        with X64:
            _write(output, axis_all_gather(value(input), axes))
        return _done(output)

    def allgather(self, output_lists: list, inputs: list, opts: Any = None) -> Any:
        axes = self._axes("all_gather")
        for outs, t in zip(output_lists, inputs):
            if len(outs) != self.size():
                raise ValueError(f"all_gather: {len(outs)} output tensors for {self.size()} ranks")
            _run.active.touch(t)
            with X64:
                stacked = jax.lax.all_gather(value(t), axes)
            for r, o in enumerate(outs):
                _write(o, stacked[r])
        return _done(output_lists)

    def _reduce_scatter_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Any:
        op = _reduce_name(opts.reduceOp if opts is not None else "sum")
        _check_reduce_scatter_shapes(output, input, self.size())
        axes = self._axes("reduce_scatter_tensor")
        _run.active.touch(input)
        with X64:
            _write(output, axis_reduce_scatter(value(input), axes, op, self.size()))
        return _done(output)

    def alltoall_base(self, output: torch.Tensor, input: torch.Tensor, output_split_sizes: list,
                      input_split_sizes: list, opts: Any = None) -> Any:
        n = self.size()
        rows = input.shape[0] if input.dim() else 0
        equal = [rows // n] * n
        if rows % n or (input_split_sizes and list(input_split_sizes) != equal) or \
                (output_split_sizes and list(output_split_sizes) != equal) or output.shape != input.shape:
            raise NotImplementedError(
                f"all_to_all_single between the devices of a mesh needs equal blocks (dim 0 of {rows} rows split in "
                f"{n}, output and input of one shape): one SPMD program holds one shape per value on every rank; "
                "pad the blocks to the largest and exchange those")
        axes = self._axes("all_to_all_single")
        _run.active.touch(input)
        with X64:
            _write(output, axis_all_to_all(value(input), axes))
        return _done(output)

    def send(self, tensors: list, dstRank: int, tag: int = 0) -> Any:
        raise NotImplementedError("send/recv between the devices of a mesh inside spmd: every rank runs the same "
                                  "program, so exchange with all_to_all_single or a collective instead")

    def recv(self, tensors: list, srcRank: int, tag: int = 0) -> Any:
        return self.send(tensors, srcRank, tag)

    def barrier(self, opts: Any = None) -> Any:
        self._axes("barrier")  # one program: the ranks are in step already
        return _done(None)


def _write(t: torch.Tensor, array: Any) -> None:
    with torch.no_grad():
        t.copy_(from_array(array))


_GROUPS: dict = {}


def mesh_group(mesh: Any, dims: str | tuple[str, ...] | None = None) -> MeshGroup:
    """The process group of the ranks along `dims` of `mesh` (all its dims by default),
    for code run by `spmd` over that mesh (Note [Ranks as devices])."""
    mesh = _mesh_of(mesh)
    names = tuple(mesh.jax_mesh.axis_names)
    dims = tuple(mesh.mesh_dim_names) if dims is None else ((dims,) if isinstance(dims, str) else tuple(dims))
    unknown = [d for d in dims if d not in names]
    if unknown or not dims:
        raise ValueError(f"mesh_group: {unknown or dims} are not dims of the mesh, whose dims are {names}")
    key = (mesh.jax_mesh, dims)
    if key not in _GROUPS:
        _GROUPS[key] = MeshGroup(mesh, dims)
    return _GROUPS[key]


# ---------------------------------------------------------------- the call


class _Watch(TorchDispatchMode):
    """Sees every op `fn` runs: the storages it meets that existed before (captured)
    and the ones its ops make."""

    def __init__(self, call: _Call):
        super().__init__()
        self.call = call

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for a in tree_flatten((args, kwargs))[0]:
            if isinstance(a, XlaTensor):
                self.call.touch(a)
        out = func(*args, **kwargs)
        for o in tree_flatten(out)[0]:
            if isinstance(o, XlaTensor):
                self.call.made(o)
        return out


class _Call:
    """One trace of `fn` inside shard_map: what it captured and made."""

    def __init__(self, mesh: DeviceMesh, world: MeshGroup):
        self.mesh, self.world = mesh, world
        self.inputs: weakref.WeakSet = weakref.WeakSet()  # the argument storages
        self.captured: dict[Storage, Any] = {}  # storage from outside -> its array before the call
        # Weak sets, not ids: a storage made and dropped in the call frees its address
        # for a later one, which must still be recorded.
        self.made_storages: list[weakref.ref] = []
        self.made_set: weakref.WeakSet = weakref.WeakSet()
        self.ranks: dict = {}

    def rank(self, axes: tuple[str, ...]) -> XlaTensor:
        if axes not in self.ranks:
            with X64:
                self.ranks[axes] = from_array(axis_rank(axes))
        return self.ranks[axes]

    def touch(self, t: XlaTensor) -> None:
        store = t._store
        if store in self.made_set or store in self.inputs or store in self.captured:
            return
        array = store.array
        if array is None:
            raise RuntimeError("spmd: the function uses a tensor whose value is pending in a compile() or lazy_mode() "
                               "trace: call spmd outside it, or read the tensor first")
        if not isinstance(array, jax.core.Tracer):  # else a value of an outer JAX transformation
            self.captured[store] = array

    def made(self, t: XlaTensor) -> None:
        store = t._store
        if store not in self.made_set and store not in self.captured and store not in self.inputs:
            self.made_set.add(store)
            self.made_storages.append(weakref.ref(store))

    def restore(self) -> None:
        for store, array in self.captured.items():
            store.array = array

    def kept(self) -> list[Storage]:
        """The storages made by the call that are still alive."""
        gc.collect()  # the autograd graph's cycles hold intermediates until collected
        return [s for s in (r() for r in self.made_storages) if s is not None]


class Spmd:
    """`spmd(fn, mesh)`: Note [Ranks as devices]."""

    def __init__(self, fn: Callable, mesh: Any):
        self.fn, self.mesh = fn, _mesh_of(mesh)
        self.dims = tuple(self.mesh.jax_mesh.axis_names)
        self.shape = tuple(self.mesh.jax_mesh.shape[d] for d in self.dims)
        self.world = mesh_group(self.mesh, self.dims)
        self._programs: dict = {}
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _call(self, args, kwargs)


_TENSOR = object()


def _local(array: Any, ndims: int) -> Any:
    return array.reshape(array.shape[ndims:])


def _patched_get_rank(original: Callable) -> Callable:
    def get_rank(group: Any = None) -> Any:
        run = _run.active
        if run is not None and (group is None or group is c10d.GroupMember.WORLD):
            return run.world.rank()
        if isinstance(group, MeshGroup):
            return group.rank()
        return original(group)

    return get_rank


class _Scope:
    """While fn runs: this call current, the mesh's group the default one, and
    `dist.get_rank` answering with the rank tensor."""

    def __init__(self, call: _Call):
        self.call = call

    def __enter__(self) -> None:
        self.outer = _run.active, c10d._world.default_pg, dist.get_rank, c10d.get_rank
        _run.active = self.call
        c10d._world.default_pg = self.call.world
        patched = _patched_get_rank(self.outer[3])
        dist.get_rank = c10d.get_rank = patched

    def __exit__(self, *exc: Any) -> None:
        _run.active, c10d._world.default_pg, dist.get_rank, c10d.get_rank = self.outer


def _run_fn(s: Spmd, call: _Call, spec: Any, leaves: list, arrays: list) -> tuple:
    """fn on this rank's values (arrays: the program's inputs for the tensor
    arguments). Returns (output tree spec, output leaves with tensors as arrays)."""
    nd = len(s.dims)
    it = iter(arrays)
    filled = []
    for leaf in leaves:
        if leaf is _TENSOR:
            t = from_array(_local(next(it), nd))
            call.inputs.add(t._store)
            filled.append(t)
        else:
            filled.append(leaf)
    args, kwargs = tree_unflatten(filled, spec)
    with untraced(), X64, _Scope(call), _Watch(call):
        try:
            out = s.fn(*args, **kwargs)
        except jax.errors.ConcretizationTypeError as e:
            raise RuntimeError(RANK_MESSAGE) from e
    out_leaves, out_spec = tree_flatten(out)
    result = []
    for o in out_leaves:
        if isinstance(o, torch.Tensor):
            if hasattr(o, "trigger_wait"):  # the functional collectives' AsyncCollectiveTensor
                o = o.trigger_wait()
            if not isinstance(o, XlaTensor):
                o = from_array(cpu_to_jax(o))
            with X64:
                result.append(value(o))
        else:
            result.append(o)
    return out_spec, result


def _stacked(array: Any, nd: int) -> Any:
    return array.reshape((1,) * nd + tuple(array.shape))


def _is_array(x: Any) -> bool:
    return isinstance(x, (jax.Array, jax.core.Tracer))


def _trace(s: Spmd, spec: Any, leaves: list, arrays: list) -> tuple:
    """Trace fn per rank inside shard_map (its Python runs once, as eagerly): the
    program as a jaxpr whose constants are the tensors it read from outside, and what
    to write back: (closed jaxpr, output leaves, written storages, kept storages)."""
    found: dict = {}
    nd = len(s.dims)

    def body(*xs: Any) -> tuple:
        call = _Call(s.mesh, s.world)
        try:
            out_spec, outs = _run_fn(s, call, spec, leaves, list(xs))
            written = [st for st, before in call.captured.items() if st.array is not before]
            kept = call.kept()
            found.update(out_spec=out_spec, outs=outs, written=written, kept=kept)
            return ([_stacked(o, nd) for o in outs if _is_array(o)], [st.array for st in written],
                    [st.array for st in kept])
        finally:
            call.restore()

    mapped = jax.shard_map(body, mesh=s.mesh.jax_mesh, in_specs=(P(*s.dims),) * len(arrays),
                           out_specs=(P(*s.dims), P(), P()), check_vma=False)
    abstract = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in arrays]
    with X64:
        closed = jax.make_jaxpr(mapped)(*abstract)
    return closed, found


def _compiled(s: Spmd, closed: Any) -> Any:
    """The jitted program of a traced jaxpr, its constants as arguments: compiled once
    per distinct program (the jaxpr's text), whatever the constants' values."""
    key = str(closed.jaxpr)
    program = s._programs.get(key)
    if program is None:
        jaxpr = closed.jaxpr
        program = s._programs[key] = jax.jit(lambda consts, xs: jax.core.eval_jaxpr(jaxpr, consts, *xs))
    return program


def _call(s: Spmd, args: tuple, kwargs: dict) -> Any:
    if _run.active is not None:
        raise RuntimeError("spmd inside spmd: call the inner function directly, it runs per rank already")
    leaves, spec = tree_flatten((args, kwargs))
    arrays, static = [], []
    nd = len(s.dims)
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            trace = context.trace
            with X64:
                a = (trace.host_value(leaf) if trace is not None else value(leaf)) if isinstance(leaf, XlaTensor) \
                    else cpu_to_jax(leaf.detach())
            if tuple(a.shape[:nd]) != s.shape:
                raise ValueError(f"spmd: a tensor argument holds every rank's value stacked along its leading dims, "
                                 f"one per mesh dim {dict(zip(s.dims, s.shape))}: shape {s.shape + ('...',)}, "
                                 f"not {tuple(a.shape)}")
            arrays.append(a)
            static.append(_TENSOR)
        else:
            static.append(leaf)
    jmesh = s.mesh.jax_mesh
    closed, found = _trace(s, spec, static, arrays)
    program = _compiled(s, closed)
    replicated = NamedSharding(jmesh, P())
    with X64:
        data = [jax.device_put(a, NamedSharding(jmesh, P(*s.dims))) for a in arrays]
        consts = [jax.device_put(c, replicated) if isinstance(c, jax.Array) else c for c in closed.consts]
        flat = program(consts, data)
    outs, written, kept = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(
        ([0] * sum(1 for o in found["outs"] if _is_array(o)), [0] * len(found["written"]),
         [0] * len(found["kept"]))), flat)
    for st, new in zip(found["written"], written):
        _write(tensor_on(st, tuple(new.shape), NUMPY_TO_TORCH[new.dtype]), new)
    home = local_devices()[0]
    for st, new in zip(found["kept"], kept):
        st.array = jax.device_put(new, home)
        st.version += 1
    it = iter(outs)
    result = [from_array(next(it)) if _is_array(o) else o for o in found["outs"]]
    return tree_unflatten(result, found["out_spec"])


def spmd(fn: Callable, mesh: Any) -> Spmd:
    """Run `fn`, written for torch.distributed (one rank's values, its collectives),
    once per device of `mesh` as one jitted SPMD program (Note [Ranks as devices]).
    Tensor arguments and results hold every rank's value stacked along leading dims,
    one per mesh dim."""
    return Spmd(fn, mesh)
