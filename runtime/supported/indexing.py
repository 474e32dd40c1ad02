"""index.Tensor, index_put and masked_select: indexing whose shape or validity depends
on the index values.

A bool (or uint8) mask index selects a data-dependent number of elements: PyTorch
hands it to the backend as is, and we turn it into integer indices (its nonzero
coordinates) on the host, as PyTorch's own kernels do. index_put with a single mask
and None elsewhere (`x[mask] = v`, and the backward of `x[mask]`) has a static shape
and stays in the graph while tracing.

Integer indices are checked against their dimension on the host whenever the index is
concrete (eager mode), raising PyTorch's IndexError. In a compiled program the index is
not known while tracing: out-of-range entries then read as fill values or are dropped
(Note [Out-of-bounds indices] in lowerings/indexing.py).
"""

from __future__ import annotations

import jax
import numpy as np
import torch

from ...shape_fns.common import TensorMeta, broadcast_shapes
from ...shape_fns.indexing import check_indices
from ..core.context import context
from ..core.convert import X64, cpu_to_jax, host_array, host_tensor
from ..core.tensor import XlaTensor, from_array
from ..exec.eager import run_node
from ..exec.registry import node


def _device(t):
    """Index tensors may live on the CPU (`x[torch.tensor([0, 2])]`), as PyTorch allows."""
    if t is None or isinstance(t, XlaTensor):
        return t
    with X64:
        return from_array(cpu_to_jax(t))


def _host(t):
    if isinstance(t, XlaTensor):
        with X64:
            return host_array(t)
    return t.detach().numpy()


def _is_mask(t):
    return t is not None and t.dtype in (torch.bool, torch.uint8)


def _expand_masks(self, indices):
    """Integer indices for every bool mask: its nonzero coordinates (PyTorch's
    expandTensors), checking the mask's shape against the dims it covers."""
    out = []
    for ix in indices:
        if not _is_mask(ix):
            out.append(ix)
            continue
        dim = len(out)
        for j, n in enumerate(ix.shape):
            if dim + j >= self.dim():
                raise IndexError(f"too many indices for tensor of dimension {self.dim()}")
            if n != self.shape[dim + j]:
                raise IndexError(
                    f"The shape of the mask {list(ix.shape)} at index {j} does not match the shape of the "
                    f"indexed tensor {list(self.shape)} at index {dim + j}"
                )
        coords = np.nonzero(_host(ix).astype(bool))
        out.extend(_device(host_tensor(np.ascontiguousarray(c, dtype=np.int64))) for c in coords)
    return out


def _traced(indices):
    """True while recording IR, or when an index is a JAX tracer (the torch.compile
    backend and interop run these ops inside jax.jit): no value can be read."""
    if context.trace is not None:
        return True
    return any(isinstance(ix, XlaTensor) and isinstance(ix._store.array, jax.core.Tracer) for ix in indices)


def _check_bounds(self, indices):
    if _traced(indices):
        return
    for dim, ix in enumerate(indices):
        if ix is None or ix.numel() == 0:
            continue
        arr = _host(ix)
        size = self.shape[dim]
        bad = (arr < -size) | (arr >= size)
        if bad.any():
            raise IndexError(
                f"index {int(arr[bad].reshape(-1)[0])} is out of bounds for dimension {dim} with size {size}"
            )


def _prepare(self, indices):
    if context.trace is not None:  # eager mode keeps CPU index tensors on the CPU (`_index_operand`)
        indices = [_device(ix) for ix in indices]
    check_indices(
        TensorMeta(tuple(self.shape), self.dtype),
        [None if ix is None else TensorMeta(tuple(ix.shape), ix.dtype) for ix in indices],
    )
    return indices


def _index_operand(ix):
    """An index for the eager executable. A CPU index tensor goes in as a NumPy copy of
    its values, which jit moves with the call: moving it first (jnp.asarray) costs 11 to
    35 us, more than the indexing (`dots[:, i, j]` with `torch.triu_indices` in DLRM,
    and the index_put of its backward)."""
    if ix is None or isinstance(ix, XlaTensor):
        return ix
    return np.array(ix.detach().numpy())


def impl_index_Tensor(self, indices):
    indices = _prepare(self, indices)
    if any(_is_mask(ix) for ix in indices):
        indices = _expand_masks(self, indices)
    _check_bounds(self, indices)
    if context.trace is None:
        indices = [_index_operand(ix) for ix in indices]
    return run_node(node("index_gather"), (self, indices))


def impl_index_put(self, indices, values, accumulate=False):
    indices = _prepare(self, indices)
    values = _device(values)
    masks = [ix for ix in indices if _is_mask(ix)]
    simple_mask = len(masks) == 1 and sum(ix is not None for ix in indices) == 1
    if masks and not (_traced(indices) and simple_mask):
        indices = _expand_masks(self, indices)
    _check_bounds(self, indices)
    if context.trace is None:
        indices = [_index_operand(ix) for ix in indices]
    return run_node(node("index_put_values"), (self, list(indices), values, bool(accumulate)))


def impl_masked_select(self, mask):
    mask = _device(mask)
    if mask.dtype is not torch.bool:
        raise RuntimeError("masked_select: expected BoolTensor for mask")
    shape = broadcast_shapes(tuple(self.shape), tuple(mask.shape))
    positions = np.flatnonzero(np.broadcast_to(_host(mask), shape)).astype(np.int64)
    return run_node(node("masked_select_positions"), (self, mask, _device(host_tensor(positions))))
