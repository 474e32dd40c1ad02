"""What device-agnostic PyTorch code asks of `torch.jax` besides the placeholder's
answers: streams and events, and the current device (Note [One queue]).

Note [One queue]
PyTorch's distributed code is written for CUDA's streams: FSDP2 all-gathers on one
stream, copies in on another, and orders them with events (`Stream()`,
`current_stream().wait_event(e)`, `with torch.jax.stream(s):`). On our device every op
is a JAX computation that JAX orders by its data: an op reading a tensor waits for the
op that wrote it, whichever "stream" either was issued on, and a host read waits for
its value. So there is one queue, in data order, and streams and events are what
torch.cpu's are: objects that answer at once, whose waits are already satisfied.

The current device is jax:0 unless `torch.jax.set_device(i)` chose another device of
this process; FSDP2 and DTensor put the tensors they make there
(`torch.device("jax", torch.jax.current_device())`), as they do on CUDA. A bare
`device="jax"` in a factory call still means jax:0 (PyTorch asks the device guard,
whose device is jax:0).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import jax


class Stream:
    """A stream of our device (Note [One queue]): its waits are already satisfied."""

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any) -> None:
        self.device = device
        self.priority = priority

    def wait_stream(self, stream: Any) -> None:
        pass

    def wait_event(self, event: Any) -> None:
        pass

    def record_event(self, event: Any = None) -> Event:
        return event if event is not None else Event()

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass


class Event:
    """An event of our device (Note [One queue]): recorded and reached at once. A timing
    event keeps the host's clock when it is recorded: executions on JAX's CPU device
    run inline (Note [Inline CPU execution]), so the time between two records is the
    time of the ops issued between them."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
        self.enable_timing = enable_timing
        self.recorded_at: float | None = None

    def record(self, stream: Any = None) -> Event:
        self.recorded_at = time.perf_counter()
        return self

    def elapsed_time(self, end_event: Event) -> float:
        """Milliseconds from this event's record to `end_event`'s, as torch.cuda.Event's."""
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self.recorded_at is None or end_event.recorded_at is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end_event.recorded_at - self.recorded_at) * 1000.0

    def wait(self, stream: Any = None) -> None:
        pass

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass


_QUEUE = Stream()
_current = {"index": 0}  # the process's, as autograd's device threads must see it too


class StreamsOfOneQueue:
    """The stream, event and current-device functions of `torch.jax` (mixed into the
    device module in core/tensor.py)."""

    Stream = Stream
    Event = Event

    def current_stream(self, device: Any = None) -> Stream:
        return _QUEUE

    def default_stream(self, device: Any = None) -> Stream:
        return _QUEUE

    def stream(self, stream: Any) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext(stream)

    def synchronize(self, device: Any = None) -> None:
        pass

    def device_count(self) -> int:
        return len(jax.local_devices())

    def current_device(self) -> int:
        return _current["index"]

    def set_device(self, device: Any) -> None:
        index = device if isinstance(device, int) else getattr(device, "index", None)
        if isinstance(device, str):
            index = int(device.partition(":")[2] or 0)
        index = 0 if index is None else int(index)
        count = len(jax.local_devices())
        if not 0 <= index < count:
            raise RuntimeError(
                f"torch.jax.set_device({index}): this process has {count} JAX device{'s' if count != 1 else ''} "
                f"(jax:0 to jax:{count - 1}). JAX numbers each process's devices from jax:0, so under torchrun a "
                "process's own device is jax:0, not jax:LOCAL_RANK: call set_device(0) (or not at all)")
        _current["index"] = index
