"""Point-to-point `send` and `recv` (and `isend`/`irecv`) between the processes of a
process group of the "jax" backend.

Note [Point-to-point as exchanges]
JAX has no one-sided transfer between processes: a transfer is a program that both
processes run. So every send or recv that needs the peer is an exchange between the
two processes, which run the same small programs over a mesh of their two devices
(runtime/exec/collectives.py): an all-gather of what each side does (sending or
receiving, the tag, the bytes, the dtype), then, when either side sends, an all-gather
of the bytes sent (each side's padded to the larger). A send meeting the peer's recv
delivers at once. Two sends cross: each side keeps the bytes it got for its next recv
from that peer, which then needs no exchange (the peer's recv is served the same way).
Two recvs both wait: their works complete when a later exchange brings the data. So
the usual patterns of torch's point-to-point ops run: a send and a recv, both sides
`isend` then `irecv`, or both `irecv` then `isend` (`batch_isend_irecv`), and the
receives of each peer are filled in the order they were issued. As with gloo, each
pair of processes must issue matching operations: a send nobody receives makes its
peer's next exchange wait for it; a recv whose data no exchange brought raises at
`wait()`. The values are copied when the op is called.
"""

from __future__ import annotations

import collections
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch
import torch.distributed as dist

from ...core.context import context
from ...core.convert import X64
from ...exec.collectives import run_collective

SEND, RECV = 1, 2
# dtypes by their number in an exchange's description
DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64", "float16", "bfloat16",
          "float32", "float64", "complex64", "complex128")


def _to_bytes(array: Any) -> Any:
    flat = array.reshape(-1)
    if jnp.issubdtype(flat.dtype, jnp.complexfloating):
        flat = jnp.stack([flat.real, flat.imag], axis=-1).reshape(-1)
    if flat.dtype == jnp.bool_:
        flat = flat.astype(jnp.uint8)
    return jax.lax.bitcast_convert_type(flat, jnp.uint8).reshape(-1)


def _from_bytes(raw: Any, dtype_name: str, shape: tuple[int, ...]) -> Any:
    dtype = jnp.dtype(dtype_name)
    if dtype == jnp.bool_:
        return (raw != 0).reshape(shape)
    part = jnp.finfo(dtype).dtype if jnp.issubdtype(dtype, jnp.complexfloating) else dtype
    values = jax.lax.bitcast_convert_type(raw.reshape(-1, part.itemsize), part) if part.itemsize > 1 else \
        jax.lax.bitcast_convert_type(raw, part)
    if part != dtype:
        values = values.reshape(-1, 2)
        values = jax.lax.complex(values[:, 0], values[:, 1])
    return values.reshape(shape)


class _Message:
    __slots__ = ("tag", "dtype", "nbytes", "raw")

    def __init__(self, tag: int, dtype: str, nbytes: int, raw: Any):
        self.tag, self.dtype, self.nbytes, self.raw = tag, dtype, nbytes, raw


class RecvWork(dist.Work):
    """The work of a recv: complete once its tensor holds the data sent to it."""

    def __init__(self, tensor: torch.Tensor, peer: int, tag: int):
        super().__init__()
        self.tensor, self.peer, self.tag = tensor, peer, tag
        self.done = False
        self.error: BaseException | None = None

    def is_completed(self) -> bool:
        return self.done

    def is_success(self) -> bool:
        return self.done and self.error is None

    def wait(self, timeout: Any = None) -> bool:
        if self.error is not None:
            raise self.error
        if not self.done:
            raise RuntimeError(
                f"recv from rank {self.peer} (tag {self.tag}): nothing sent to it has arrived: with the "
                f"'jax' backend a recv's data arrives when both processes run a point-to-point op towards each other "
                f"(Note [Point-to-point as exchanges]): issue the matching send in rank {self.peer} before waiting "
                "here, or send from both sides first")
        return True

    def result(self) -> list:
        return [self.tensor]


class _Peer:
    """What this process holds for one peer of one group: messages received and not yet
    taken, and recvs issued and not yet filled (both in order)."""

    def __init__(self):
        self.messages: collections.deque[_Message] = collections.deque()
        self.receives: collections.deque[RecvWork] = collections.deque()


def _peer_state(pg: Any, peer: int) -> _Peer:
    peers = pg.__dict__.setdefault("_p2p_peers", {})  # kept on the group: gone with it
    found = peers.get(peer)
    if found is None:
        found = peers[peer] = _Peer()
    return found


def _check_peer(pg: Any, peer: int, what: str) -> None:
    if context.trace is not None:
        raise RuntimeError(f"torch.distributed.{what} runs eagerly, not inside a compiled program (compile(), lazy "
                           "mode): call it outside")
    if not 0 <= peer < pg.size() or peer == pg.rank():
        raise ValueError(f"{what}: rank {peer} is not another rank of this group of {pg.size()} (this is rank "
                         f"{pg.rank()})")


def _exchange(pg: Any, peer: int, kind: int, tag: int, array: Any, dtype: str) -> tuple[int, int, _Message | None]:
    """One exchange with `peer` (Note [Point-to-point as exchanges]): returns the peer's
    kind and tag, and its message when it sent one."""
    me, them = pg.processes[pg.rank()], pg.processes[peer]
    pair = (min(me, them), max(me, them))
    first = me < them
    nbytes = int(array.size * array.dtype.itemsize) if kind == SEND else 0
    with X64:
        described = np.asarray(run_collective(
            "all_gather", jnp.asarray([[kind, tag, nbytes, DTYPES.index(dtype)]], dtype=jnp.int64), pair))
        theirs = described[1 if first else 0]
        their_kind, their_tag, their_bytes, their_dtype = (int(x) for x in theirs)
        if kind != SEND and their_kind != SEND:
            return their_kind, their_tag, None
        width = max(nbytes, their_bytes if their_kind == SEND else 0)
        mine = _to_bytes(array) if kind == SEND else jnp.zeros((0,), jnp.uint8)
        mine = jnp.pad(mine, (0, width - mine.shape[0]))
        got = run_collective("all_gather", mine[None], pair)
        if their_kind != SEND:
            return their_kind, their_tag, None
        raw = got[1 if first else 0][:their_bytes]
    return their_kind, their_tag, _Message(their_tag, DTYPES[their_dtype], their_bytes, raw)


def _fill(work: RecvWork, message: _Message, write: Any) -> None:
    t = work.tensor
    dtype = str(t.dtype).removeprefix("torch.")
    nbytes = t.numel() * t.element_size()
    if message.tag != work.tag or message.dtype != dtype or message.nbytes != nbytes:
        work.error = RuntimeError(
            f"recv from rank {work.peer}: it sent {message.nbytes} bytes of {message.dtype} with tag {message.tag} "
            f"into a buffer of {nbytes} bytes of {dtype} with tag {work.tag}: sends and recvs pair in the order "
            "issued; give the buffer the sent tensor's dtype and number of elements, and the same tag")
    else:
        with X64:
            write(t, _from_bytes(message.raw, dtype, tuple(t.shape)))
    work.done = True


def _match(state: _Peer, write: Any) -> None:
    while state.messages and state.receives:
        _fill(state.receives.popleft(), state.messages.popleft(), write)


def exchange_send(pg: Any, tensors: list, peer: int, tag: int, array_of: Any, write: Any) -> None:
    """Send each tensor to rank `peer` of the group, in order."""
    _check_peer(pg, peer, "send")
    state = _peer_state(pg, peer)
    for t in tensors:
        dtype = str(t.dtype).removeprefix("torch.")
        # a recv of the peer checks what arrives against its buffer (_fill)
        _, _, message = _exchange(pg, peer, SEND, tag, array_of(t), dtype)
        if message is not None:  # the sends crossed: the peer's data waits for a recv here
            state.messages.append(message)
            _match(state, write)


def exchange_recv(pg: Any, tensors: list, peer: int, tag: int, write: Any) -> list[RecvWork]:
    """Receive into each tensor from rank `peer` of the group, in order: a work per
    tensor, complete once its data arrived."""
    _check_peer(pg, peer, "recv")
    state = _peer_state(pg, peer)
    works = []
    for t in tensors:
        work = RecvWork(t, peer, tag)
        state.receives.append(work)
        works.append(work)
        _match(state, write)
        if work.done:
            continue
        dtype = str(t.dtype).removeprefix("torch.")
        _, _, message = _exchange(pg, peer, RECV, tag, jnp.zeros((0,), jnp.uint8), dtype)
        if message is not None:
            state.messages.append(message)
            _match(state, write)
    return works
