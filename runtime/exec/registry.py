"""The op registry: which handler runs each operator, and the IR classes of the ops.
The generated package fills both at import (`api.install`); everything below the
frontends looks ops up here instead of importing generated code."""

from __future__ import annotations

from typing import Any

from ..core.ir import Node
from ..core.sharing import WRITE_LOCK
from ..platform.metrics import metrics


def _serialized(handler: Any) -> Any:
    """An op that writes tensors holds WRITE_LOCK for its whole run: its read-modify-write
    of a storage never interleaves with another thread's (Note [Threads and storages] in
    core/sharing.py). Uncontended, the lock costs about as much as this wrapper's call;
    a trace takes it too, for the few ops that run while recording (host reads)."""
    acquire, release = WRITE_LOCK.acquire, WRITE_LOCK.release

    def run(*args, **kwargs):
        acquire()
        try:
            return handler(*args, **kwargs)
        finally:
            release()

    run.__wrapped__ = handler
    return run


def _writes(op: Any) -> bool:
    schema = getattr(op, "_schema", None)
    return schema is not None and schema.is_mutable


class _Registry(dict):
    """aten overload -> handler. The per-op path looks handlers up by id(op) in
    `by_id`, kept in step with the dict, because hashing an OpOverload runs Python.
    Handlers of ops that write tensors are stored serialized (`_serialized`)."""

    def __init__(self):
        super().__init__()
        self.by_id: dict[int, Any] = {}

    def __setitem__(self, op: Any, handler: Any) -> None:
        if _writes(op):
            handler = _serialized(handler)
        super().__setitem__(op, handler)
        self.by_id[id(op)] = handler
        metrics.ops_by_id[id(op)] = op  # names the per-op call counts

    def __delitem__(self, op: Any) -> None:
        super().__delitem__(op)
        del self.by_id[id(op)]

    def update(self, other: Any = (), **kwargs: Any) -> None:
        for op, handler in dict(other, **kwargs).items():
            self[op] = handler


REGISTRY = _Registry()
HANDLERS = REGISTRY.by_id
CALLS = metrics.calls_by_id
# Manifest section of each overload, for metrics and error messages.
SECTIONS: dict[str, str] = {}
# Facts about operators from the manifest's `policy`: fact -> {op name: its integers or
# its name} (`host_only`, `transposed_weight_operands`, `eager_value_checks`).
POLICY: dict[str, dict[str, tuple[int | str, ...]]] = {}


def policy(fact: str) -> dict[str, tuple[int | str, ...]]:
    return POLICY.get(fact, {})


# Code of the Python kernels that ops register at our device's dispatcher keys
# (supported/data_dependent.py): PyTorch calls them outside __torch_dispatch__, and the
# torch.compile backend has Dynamo run them as plain Python (frontends/dynamo.py).
DEVICE_KERNEL_CODES: list[Any] = []


# IR class of every manifest entry by unambiguous name (`add_Tensor` -> AddTensor).
NODES: dict[str, type[Node]] = {}


# Internal nodes the tracer itself records (reading and writing views, the memory of
# views as another dtype, casting a written value): every manifest must list them.
TRACER_NODES = ("cast_to", "memory_as", "memory_write", "strided_read", "strided_write")


def check_tracer_nodes() -> None:
    missing = [name for name in TRACER_NODES if name not in NODES]
    if missing:
        raise RuntimeError(
            f"the generated package lacks the internal nodes {', '.join(missing)}, which the runtime records: copy "
            "them from the `internal` section of the repository's native_functions.yaml into your manifest and "
            "regenerate"
        )


def node(name: str) -> type[Node]:
    """The IR class of a manifest entry, by its unambiguous name."""
    return NODES[name]


def handler(op: Any) -> Any:
    """The function that runs `op` on our tensors (its dispatch stub, checks included)."""
    return REGISTRY[op]


class OperatorNotFound(NotImplementedError):
    """An operator that no manifest section lists and no run-time lowering handles."""
