"""The tracer's own nodes: reading and writing a view of a storage, a complex storage
read as reals and back, and casting."""

from __future__ import annotations

from ...shape_fns.common import TORCH_TO_NUMPY, TensorMeta
from ..core.ir import ATTR, TENSOR, Node
from ..core.views import complex_from_pairs, real_pairs, strided_read, strided_write


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


class RealPairs(Node):
    """A complex storage's value as reals, two per element (a `_real` view reads it)."""

    __slots__ = ()
    op = name = "real_pairs"
    arg_kinds = (TENSOR,)

    @staticmethod
    def lower(base):
        return real_pairs(base)

    @staticmethod
    def output_shape(base):
        return TensorMeta(tuple(base.shape) + (2,), base.dtype.to_real())


class ComplexFromPairs(Node):
    """The complex value of a storage from its reals (a write through a `_real` view)."""

    __slots__ = ()
    op = name = "complex_from_pairs"
    arg_kinds = (TENSOR,)

    @staticmethod
    def lower(pairs):
        return complex_from_pairs(pairs)

    @staticmethod
    def output_shape(pairs):
        return TensorMeta(tuple(pairs.shape[:-1]), pairs.dtype.to_complex())
