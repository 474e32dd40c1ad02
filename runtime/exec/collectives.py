"""The collectives of torch.distributed between processes, as JAX programs.

A rank of torch.distributed is a process here (a JAX controller: Note [Ranks are
processes] in runtime/frontends/distributed/process_group.py). A collective over the
processes of a group stacks each process's value into one global array, split along a
new leading dim over a mesh holding one device per process, and runs a jitted program
over it whose output layout asks for the result: XLA's partitioner inserts the
all-reduce, all-gather, reduce-scatter or all-to-all between the processes (gloo's or
the platform's collectives underneath). With one process the same programs run on a
mesh of one device.

Every process of the group must call the same collectives in the same order, as with
torch.distributed; the values live on each process's first local device (jax:0).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from ..core.convert import X64
from ..core.placement import local_devices

AXIS = "ranks"
REDUCE_OPS = ("sum", "avg", "max", "min", "product", "band", "bor", "bxor")


@functools.lru_cache(maxsize=None)
def process_mesh(processes: tuple[int, ...]) -> Mesh:
    """A mesh of the first device of each process in `processes` (in rank order)."""
    first: dict[int, Any] = {}
    for d in jax.devices():
        if d.process_index not in first or d.id < first[d.process_index].id:
            first[d.process_index] = d
    missing = [p for p in processes if p not in first]
    if missing:
        raise RuntimeError(f"processes {missing} have no JAX device: is jax.distributed initialized in every "
                           "process (xla_native_functions.distributed.initialize())?")
    return Mesh(np.array([first[p] for p in processes], dtype=object), (AXIS,))


def _stacked(array: Any, mesh: Mesh) -> Any:
    """This process's `array` as its block of a global array of shape (ranks, *shape)."""
    here = mesh.local_devices[0]
    block = jax.device_put(jnp.expand_dims(array, 0), here)
    shape = (mesh.size,) + tuple(array.shape)
    return jax.make_array_from_single_device_arrays(shape, NamedSharding(mesh, P(AXIS)), [block])


def _local(array: Any) -> Any:
    """This process's block of a global result, on its default device."""
    return jax.device_put(array.addressable_data(0), local_devices()[0])


def _reduce(stacked: Any, op: str) -> Any:
    if op in ("sum", "avg"):
        total = jnp.sum(stacked, axis=0, dtype=stacked.dtype)
        if op == "avg":
            n = stacked.shape[0]
            total = total / n if jnp.issubdtype(stacked.dtype, jnp.inexact) else total // n
        return total
    if op == "max":
        return jnp.max(stacked, axis=0)
    if op == "min":
        return jnp.min(stacked, axis=0)
    if op == "product":
        return jnp.prod(stacked, axis=0, dtype=stacked.dtype)
    fn = {"band": jnp.bitwise_and, "bor": jnp.bitwise_or, "bxor": jnp.bitwise_xor}[op]
    return fn.reduce(stacked, axis=0)


@functools.lru_cache(maxsize=256)
def _program(kind: str, mesh: Mesh, args: tuple) -> Any:
    replicated, split = NamedSharding(mesh, P()), NamedSharding(mesh, P(AXIS))

    if kind == "all_reduce":
        (op,) = args
        return jax.jit(lambda s: _reduce(s, op), out_shardings=replicated)
    if kind == "all_gather":  # the ranks' blocks concatenated along dim 0
        return jax.jit(lambda s: s.reshape((-1,) + s.shape[2:]), out_shardings=replicated)
    if kind == "reduce_scatter":  # rank r keeps block r (along dim 0) of the reduction

        def reduce_scatter(s: Any) -> Any:
            out = _reduce(s, args[0])
            return out.reshape((s.shape[0], -1) + out.shape[1:])

        return jax.jit(reduce_scatter, out_shardings=split)
    if kind == "broadcast":
        (src,) = args
        return jax.jit(lambda s: s[src], out_shardings=replicated)
    if kind == "all_to_all":  # block j (along dim 0) of rank i goes to rank j, at position i

        def all_to_all(s: Any) -> Any:
            n = s.shape[0]
            blocks = s.reshape((n, n, -1) + s.shape[2:])
            return jnp.swapaxes(blocks, 0, 1)

        return jax.jit(all_to_all, out_shardings=split)
    raise ValueError(f"unknown collective {kind!r}")


def run_collective(kind: str, array: Any, processes: tuple[int, ...], *args: Any) -> Any:
    """This process's result of collective `kind` over the processes `processes`, its
    value `array`: all_reduce(op), all_gather, reduce_scatter(op), broadcast(src rank),
    all_to_all. Shapes: all_gather gives (ranks * n0, ...), reduce_scatter takes
    (ranks * k, ...) and gives (k, ...), all_to_all takes and gives (ranks * k, ...)."""
    mesh = process_mesh(processes)
    n = len(processes)
    if kind in ("reduce_scatter", "all_to_all") and (array.ndim == 0 or array.shape[0] % n):
        raise ValueError(f"{kind}: dim 0 of the input ({tuple(array.shape)}) must divide by the group's {n} ranks")
    with X64:
        out = _program(kind, mesh, args)(_stacked(array, mesh))
        if kind == "reduce_scatter":
            return _local(out)[0]
        if kind == "all_to_all":
            local = _local(out)[0]
            return local.reshape((-1,) + local.shape[2:])
        return _local(out)


def run_all_to_all(array: Any, processes: tuple[int, ...], rank: int, input_splits: list[int],
                   output_splits: list[int], output_rows: int) -> Any:
    """This process's result of all_to_all_single with split sizes (torch's
    `input_split_sizes` / `output_split_sizes`; an empty list is an equal split): rank
    i's block j (`input_splits[j]` rows along dim 0) goes to rank j, which puts the
    blocks of every rank in rank order (`output_splits[i]` rows from rank i).

    The ranks first gather every rank's splits (a small all-gather), so that each of
    them checks all of them alike (a wrong split raises in every process, none waits
    for a partner that gave up) and knows the largest block; the blocks are padded to
    it, exchanged by the equal all-to-all, and cut back."""
    n = len(processes)
    rows = int(array.shape[0]) if array.ndim else 0
    ins = list(input_splits) or ([rows // n] * n if rows % n == 0 else [-1] * n)
    outs = list(output_splits) or ([output_rows // n] * n if output_rows % n == 0 else [-1] * n)
    if len(ins) != n or len(outs) != n:
        ins, outs = [-2] * n, [-2] * n  # reported by every rank below
    mine = np.array([ins + outs + [rows, output_rows]], dtype=np.int64)
    with X64:
        every = np.asarray(run_collective("all_gather", jnp.asarray(mine), processes)) if n > 1 else mine
    problems = []
    for r in range(n):
        r_in, r_out, r_rows, r_out_rows = every[r, :n], every[r, n:2 * n], every[r, 2 * n], every[r, 2 * n + 1]
        if (r_in == -2).any():
            problems.append(f"rank {r} gave split sizes that are not one per rank of the group ({n})")
        elif (r_in < 0).any() or r_in.sum() != r_rows:
            problems.append(f"rank {r}'s input_split_sizes {r_in.tolist()} do not add up to its input's {r_rows} rows")
        elif (r_out < 0).any() or r_out.sum() != r_out_rows:
            problems.append(f"rank {r}'s output_split_sizes {r_out.tolist()} do not add up to its output's "
                            f"{r_out_rows} rows")
    if not problems:
        for r in range(n):
            sent = every[:, r]  # what each rank sends to rank r
            if (every[r, n:2 * n] != sent).any():
                problems.append(f"rank {r} expects {every[r, n:2 * n].tolist()} rows from the ranks, which send it "
                                f"{sent.tolist()}")
    if problems:
        raise ValueError("all_to_all_single: " + "; ".join(problems))
    sizes = every[:, :n]  # sizes[i, j]: rows rank i sends to rank j
    if (sizes == sizes.flat[0]).all():  # equal splits
        if n == 1:
            return array
        return run_collective("all_to_all", array, processes)
    largest = int(sizes.max())
    rest = tuple(array.shape[1:])
    starts = np.concatenate([[0], np.cumsum(sizes[rank])])
    with X64:
        padding = [jnp.zeros((largest - sizes[rank, j],) + rest, array.dtype) for j in range(n)]
        padded = jnp.concatenate([jnp.concatenate([array[starts[j]:starts[j + 1]], padding[j]]) for j in range(n)])
        got = run_collective("all_to_all", padded, processes).reshape((n, largest) + rest)
        return jnp.concatenate([got[i, :sizes[i, rank]] for i in range(n)])


# ---------------------------------------------------------------- over mesh axes
# The same collectives between the devices of a mesh, inside one SPMD program
# (`jax.shard_map`): each device is a rank (Note [Ranks as devices] in
# runtime/frontends/distributed/spmd.py), `axes` the mesh axes its group spans.


def axis_rank(axes: tuple[str, ...]) -> Any:
    """This device's rank in the group of `axes` (row-major over them), as int64."""
    return jax.lax.axis_index(axes).astype(jnp.int64)


def axis_all_reduce(x: Any, axes: tuple[str, ...], op: str, size: int) -> Any:
    if op in ("sum", "avg"):
        summed = jax.lax.psum(x.astype(jnp.int32) if x.dtype == jnp.bool_ else x, axes)
        if op == "avg":
            summed = summed / size if jnp.issubdtype(x.dtype, jnp.inexact) else summed // size
        return summed.astype(x.dtype)
    if op == "max" and x.dtype != jnp.bool_:
        return jax.lax.pmax(x, axes)
    if op == "min" and x.dtype != jnp.bool_:
        return jax.lax.pmin(x, axes)
    # product and the bitwise reductions have no collective of their own: every rank
    # reduces the gathered values
    return _reduce(jax.lax.all_gather(x, axes), op).astype(x.dtype)


def axis_all_gather(x: Any, axes: tuple[str, ...]) -> Any:
    """The ranks' values concatenated along dim 0 (a 0-d value: stacked)."""
    return jax.lax.all_gather(x, axes, axis=0, tiled=x.ndim > 0)


def axis_reduce_scatter(x: Any, axes: tuple[str, ...], op: str, size: int) -> Any:
    """Rank r keeps block r (along dim 0) of the reduction."""
    if op in ("sum", "avg") and jnp.issubdtype(x.dtype, jnp.inexact):
        out = jax.lax.psum_scatter(x, axes, scatter_dimension=0, tiled=True)
        return out / size if op == "avg" else out
    full = axis_all_reduce(x, axes, op, size)
    block = x.shape[0] // size
    return jax.lax.dynamic_slice_in_dim(full, jax.lax.axis_index(axes) * block, block, axis=0)


def axis_broadcast(x: Any, axes: tuple[str, ...], src: int) -> Any:
    """Rank `src`'s value on every rank: a sum of it and zeros (exact)."""
    carrier = x.astype(jnp.int32) if x.dtype == jnp.bool_ else x
    mine = jnp.where(jax.lax.axis_index(axes) == src, carrier, jnp.zeros_like(carrier))
    return jax.lax.psum(mine, axes).astype(x.dtype)


def axis_all_to_all(x: Any, axes: tuple[str, ...]) -> Any:
    """Block j (along dim 0) of rank i goes to rank j, at position i."""
    return jax.lax.all_to_all(x, axes, 0, 0, tiled=True)
