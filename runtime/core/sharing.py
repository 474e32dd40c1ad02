"""Storages shared between threads: one lock for every write of a storage's array, and
how a reader waits for a write in flight.

Note [Threads and storages]
PyTorch lets threads share tensors: in-place ops from several threads on one tensor
all land, and a reader sees the tensor's value before or after a write, never an
error. Our storage holds an immutable JAX array that a write replaces, so a write is a
read-modify-write of that slot (read the array, run the op with the GIL released, store
the result), and a donating write (Note [Donated in-place updates] in
exec/mutation.py, Note [Donated graph inputs] in exec/graph.py) deletes the old array,
which another thread may be about to use. So:

  - every eager op that writes a tensor (a mutable schema: in-place, out=, running
    stats) holds WRITE_LOCK for its whole run (exec/registry.py wraps its handler), and
    so does a compile() replay (frontends/replay.py), which reads and writes back
    storages too: two writes of one storage never interleave, and no write is lost.
    It is one re-entrant lock, so an op that writes inside another op cannot deadlock;
    the price is that eager writes of different threads run one at a time, even on
    different tensors. Ops that only read never take it;
  - a write that donates a buffer first takes the array out of the storage (the slot
    holds None), then checks by reference count that no other reference exists, and
    donates a copy if one does: once the slot is empty no thread can pick the buffer
    up, and a thread that already held it shows in the count. A trace's sync empties
    the slots of the storages it writes the same way, under its own `running` lock;
  - a reader that finds a slot empty waits for the write in flight (`wait_for_write`:
    the trace's `running` lock if a trace of another thread owns the storage, else
    WRITE_LOCK) and reads the new array. The fast read path (`store.array` is not
    None) is unchanged.
A trace claims a storage (Note [Per-thread trace] in context.py) under WRITE_LOCK, so it
reads a value no write is replacing, and from then on eager writes and replays of
other threads refuse that storage until the trace has run; another thread's trace
reads it without claiming it, and refuses to write it (Note [Reads of another thread's
storages] in exec/trace.py).
"""

from __future__ import annotations

import threading
from typing import Any

WRITE_LOCK = threading.RLock()


def wait_for_write(store: Any) -> bool:
    """Wait until the write of `store` in flight in another thread, if any, is done
    (its slot was found empty); whether there was one."""
    owner = store.owner
    if owner is None:
        lock = WRITE_LOCK
    elif owner.thread != threading.get_ident():
        lock = owner.running  # held while that trace's graph runs
    else:
        return False
    if lock.acquire(blocking=False):  # free, or held by this thread: nothing in flight
        lock.release()
        return False
    lock.acquire()
    lock.release()
    return True
