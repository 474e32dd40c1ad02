"""Pooling ops whose schemas default an `int[N]` argument to a single int
(`int[2] padding=0`, `int[2] dilation=1`). The dispatcher drops arguments equal to
their defaults, and the generated stub passes the int default to `_attr_list`, which
needs a sequence; these implementations expand such arguments to tuples and run the
pure lowerings from lowerings/pooling.py."""

from __future__ import annotations

from ...lowerings import pooling as lowerings
from ...shape_fns import pooling as shape_fns
from ..dispatch import run_node
from ..ir import ATTR, ATTR_LIST, TENSOR, Node


def _ints(v):
    return (v,) if isinstance(v, int) else tuple(v)


class _MaxPool(Node):
    __slots__ = ()
    arg_kinds = (TENSOR, ATTR_LIST, ATTR_LIST, ATTR_LIST, ATTR_LIST, ATTR)


class MaxPool2dWithIndices(_MaxPool):
    __slots__ = ()
    op = name = "max_pool2d_with_indices"
    lower = staticmethod(lowerings.max_pool2d_with_indices_lowering)
    output_shape = staticmethod(shape_fns.max_pool2d_with_indices_meta)


class MaxPool3dWithIndices(_MaxPool):
    __slots__ = ()
    op = name = "max_pool3d_with_indices"
    lower = staticmethod(lowerings.max_pool3d_with_indices_lowering)
    output_shape = staticmethod(shape_fns.max_pool3d_with_indices_meta)


class _AvgPool(Node):
    __slots__ = ()
    arg_kinds = (TENSOR, ATTR_LIST, ATTR_LIST, ATTR_LIST, ATTR, ATTR, ATTR)


class AvgPool2d(_AvgPool):
    __slots__ = ()
    op = name = "avg_pool2d"
    lower = staticmethod(lowerings.avg_pool2d_lowering)
    output_shape = staticmethod(shape_fns.avg_pool2d_meta)


class AvgPool3d(_AvgPool):
    __slots__ = ()
    op = name = "avg_pool3d"
    lower = staticmethod(lowerings.avg_pool3d_lowering)
    output_shape = staticmethod(shape_fns.avg_pool3d_meta)


def _max_pool_args(self, kernel_size, stride, padding, dilation, ceil_mode):
    return (self, _ints(kernel_size), _ints(stride), _ints(padding), _ints(dilation), bool(ceil_mode))


def _avg_pool_args(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    return (
        self, _ints(kernel_size), _ints(stride), _ints(padding), bool(ceil_mode), bool(count_include_pad),
        None if divisor_override is None else int(divisor_override),
    )


def impl_max_pool2d_with_indices(self, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return run_node(MaxPool2dWithIndices, _max_pool_args(self, kernel_size, stride, padding, dilation, ceil_mode))


def impl_max_pool3d_with_indices(self, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return run_node(MaxPool3dWithIndices, _max_pool_args(self, kernel_size, stride, padding, dilation, ceil_mode))


def impl_avg_pool2d(self, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None):
    return run_node(AvgPool2d, _avg_pool_args(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override))


def impl_avg_pool3d(self, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None):
    return run_node(AvgPool3d, _avg_pool_args(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override))
