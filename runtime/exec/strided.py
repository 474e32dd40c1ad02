"""The tracer's own nodes: reading and writing a view of a storage, and casting."""

from __future__ import annotations

from ...shape_fns.common import TORCH_TO_NUMPY, TensorMeta
from ..core.ir import ATTR, TENSOR, Node
from ..core.views import strided_read, strided_write


class StridedRead(Node):
    """Reads a view of a storage (Note [Views and mutation])."""

    __slots__ = ()
    op = name = "strided_read"
    arg_kinds = (TENSOR, ATTR, ATTR, ATTR)

    @staticmethod
    def lower(base, size, stride, offset):
        return strided_read(base, size, stride, offset)

    @staticmethod
    def output_shape(base, size, stride, offset):
        return TensorMeta(tuple(size), base.dtype)


class StridedWrite(Node):
    """Writes a view of a storage, giving the storage's new value."""

    __slots__ = ()
    op = name = "strided_write"
    arg_kinds = (TENSOR, TENSOR, ATTR, ATTR, ATTR)

    @staticmethod
    def lower(base, src, size, stride, offset):
        return strided_write(base, src, size, stride, offset)

    @staticmethod
    def output_shape(base, src, size, stride, offset):
        return base


class Convert(Node):
    """Casts to a dtype (the write of an in-place op into a tensor of another dtype)."""

    __slots__ = ()
    op = name = "convert"
    arg_kinds = (TENSOR, ATTR)

    @staticmethod
    def lower(x, dtype):
        return x.astype(TORCH_TO_NUMPY[dtype])

    @staticmethod
    def output_shape(x, dtype):
        return TensorMeta(x.shape, dtype)
