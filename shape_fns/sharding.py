"""Shape functions of the sharding constraint and the collectives (lowerings/sharding.py)."""

from __future__ import annotations

from .common import TensorMeta

REDUCE_OPS = ("sum", "avg", "max", "min", "product", "band", "bor", "bxor")


def _group(group_size):
    if group_size < 1:
        raise ValueError(f"a collective needs a group of at least one member, not {group_size}")


def _dim(dim, ndim, what):
    if not -max(ndim, 1) <= dim < max(ndim, 1):
        raise IndexError(f"{what}: dimension {dim} is out of range for a tensor of {ndim} dims")
    return dim % max(ndim, 1)


def shard_as_output_shape(self, mesh_devices, mesh_shape, mesh_axes, spec):
    if len(spec) != len(self.shape):
        raise ValueError(f"a layout of {len(spec)} dims for a tensor of {len(self.shape)} dims")
    return TensorMeta(tuple(self.shape), self.dtype)


def all_reduce_output_shape(self, op, axes, group_size):
    _group(group_size)
    if op not in REDUCE_OPS:
        raise ValueError(f"all_reduce: unknown reduce op {op!r}: one of {', '.join(REDUCE_OPS)}")
    return TensorMeta(tuple(self.shape), self.dtype)


def all_gather_output_shape(self, dim, axes, group_size):
    _group(group_size)
    shape = list(self.shape)
    d = _dim(dim, len(shape), "all_gather")
    shape[d] *= group_size
    return TensorMeta(tuple(shape), self.dtype)


def reduce_scatter_output_shape(self, op, dim, axes, group_size):
    _group(group_size)
    if op not in REDUCE_OPS:
        raise ValueError(f"reduce_scatter: unknown reduce op {op!r}: one of {', '.join(REDUCE_OPS)}")
    shape = list(self.shape)
    d = _dim(dim, len(shape), "reduce_scatter")
    if shape[d] % group_size:
        raise ValueError(f"reduce_scatter: dimension {d} of size {shape[d]} does not split into {group_size} equal blocks")
    shape[d] //= group_size
    return TensorMeta(tuple(shape), self.dtype)


def all_to_all_output_shape(self, split_dim, concat_dim, axes, group_size):
    _group(group_size)
    shape = list(self.shape)
    s = _dim(split_dim, len(shape), "all_to_all")
    c = _dim(concat_dim, len(shape), "all_to_all")
    if shape[s] % group_size:
        raise ValueError(f"all_to_all: dimension {s} of size {shape[s]} does not split into {group_size} equal blocks")
    shape[s] //= group_size
    shape[c] *= group_size
    return TensorMeta(tuple(shape), self.dtype)


def broadcast_from_output_shape(self, src, axes, group_size):
    _group(group_size)
    if not 0 <= src < group_size:
        raise ValueError(f"broadcast: source rank {src} is not in a group of {group_size}")
    return TensorMeta(tuple(self.shape), self.dtype)
