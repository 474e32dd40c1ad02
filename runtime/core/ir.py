"""The IR: nodes recorded while tracing, and the values flowing between them. Operands
are of the kinds in core/kinds.py (Note [Argument kinds])."""

from __future__ import annotations

from typing import Any, Callable

from ...shape_fns.common import TensorMeta
from .kinds import ATTR, ATTR_LIST, OPT_TENSOR, SCALAR, STATIC_KINDS, TENSOR, TENSOR_LIST

__all__ = ["ATTR", "ATTR_LIST", "OPT_TENSOR", "SCALAR", "STATIC_KINDS", "TENSOR", "TENSOR_LIST", "Node", "ScalarInput",
           "SpecialScalar", "Value", "is_special_scalar"]


class Value:
    """One output of a node, or a graph input (node None) holding a concrete array."""

    __slots__ = ("node", "index", "meta", "data", "__weakref__")

    def __init__(self, node: Node | None, index: int, meta: TensorMeta, data: Any = None):
        self.node = node
        self.index = index
        self.meta = meta
        self.data = data  # a graph input's concrete jax.Array or Python scalar

    def __repr__(self) -> str:
        src = self.node.name if self.node is not None else "input"
        return f"Value({src}[{self.index}], {self.meta.shape}, {self.meta.dtype})"


class ScalarInput:
    """A Scalar argument recorded as a graph operand: its value is fed at run time,
    its Python type (bool/int/float/complex) is part of the graph key."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value


class SpecialScalar(ScalarInput):
    """A Scalar argument equal to 1 (`alpha` and `beta` of nearly every add and addmm),
    recorded as a graph constant instead of an operand, so XLA folds the multiply away.
    A graph key holds its value, so only a change to or from 1 compiles anything (as
    PyTorch/XLA does with its special scalars)."""

    __slots__ = ()

    def __eq__(self, other: Any) -> bool:
        return other.__class__ is SpecialScalar and (self.value.__class__, self.value) == (
            other.value.__class__,
            other.value,
        )

    def __hash__(self) -> int:
        return hash((self.value.__class__, self.value))


def is_special_scalar(x: Any) -> bool:
    return (x.__class__ is int or x.__class__ is float) and x == 1


class Node:
    """An op application. Subclasses are generated (generated/.../ir.py), one per
    manifest entry, and set the class attributes below; `args` is in schema order with
    tensors replaced by Values (None, or lists of Values) and Scalars by ScalarInputs."""

    # No reference back to the node's output Values: the recorded graph stays acyclic, so
    # its inputs' arrays are freed as soon as the last root is dropped, not at the next
    # garbage collection.
    __slots__ = ("args",)
    op: str = ""
    name: str = ""
    section: str = ""
    arg_names: tuple[str, ...] = ()
    arg_kinds: tuple[str, ...] = ()
    returns: str = "tensor"
    # the last operand is a random key the runtime draws for each call (the lowering
    # takes a LoweringContext: exec/keys.py, lowerings/common.py)
    needs_key: bool = False
    lower: Callable[..., Any]
    output_shape: Callable[..., Any]

    def __init__(self, args: tuple[Any, ...]):
        self.args = args

    def static_key(self) -> tuple[Any, ...]:
        """The node's identity apart from its operands: op and static attributes."""
        key: list[Any] = [type(self)]
        for kind, a in zip(self.arg_kinds, self.args):
            if kind in STATIC_KINDS:
                key.append(a)
            elif kind == SCALAR:
                key.append(None if a is None else type(a.value))
        return tuple(key)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.op})"
