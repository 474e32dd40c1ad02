"""Lowerings of gathering and index-driven writes: index_select, gather, take, put,
index_add/copy/fill, masked_fill, masked_scatter, and the kernels behind the
`supported` ops index.Tensor, index_put and masked_select (runtime/supported/indexing.py).

Note [Out-of-bounds indices]
PyTorch raises for an index outside its dimension; a compiled XLA gather or scatter
cannot raise, and JAX clamps such indices by default. Here every index goes through
`bounded`: in-range indices (negative ones wrapped where the op wraps them) are kept,
anything else becomes the dimension's size, which the gather reads as a fill value
(NaN for floating point, the dtype's minimum for integers, True for bool) and the
scatter drops. Never a clamped, plausible-looking value. In eager mode the runtime looks
at the index values before dispatch and raises PyTorch's error (index.Tensor and
index_put in runtime/supported/indexing.py, the others in runtime/exec/index_checks.py); in
compiled programs this is the documented behaviour.

Note [Few rows of a large table]
XLA CPU splits a loop over its threads when its cost model counts at least 512 KB of
bytes accessed, and it counts a gather's whole table. So a lookup of a few rows from a
large table (an EmbeddingBag's: 34 rows of 10,000) is split, and waking the second
thread costs more than the lookup. A loop of dynamic slices costs what its rows do, so
on the CPU `take_rows` reads at most LOOP_ROWS rows of a table of 512 KB or more that
way: the medium zoo DLRM's eager EmbeddingBag went from 47 to 38 us, its eager
inference from 545-583 to 480-493 us. Elsewhere, and for more rows, it is a gather.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .common import scalar_to


def bounded(index, size, wrap):
    """`index` with negatives wrapped (when `wrap`) and every out-of-range entry set to
    `size` (Note [Out-of-bounds indices])."""
    index = index.astype(jnp.int64)
    if wrap:
        index = jnp.where(index < 0, index + size, index)
    return jnp.where((index < 0) | (index >= size), size, index)


def fill_value(dtype):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return True
    if jnp.issubdtype(dtype, jnp.integer):
        return jnp.iinfo(dtype).min
    return jnp.nan


LOOP_ROWS = 256
SPLIT_BYTES = 1 << 19


def take_rows(table, index):
    """table[index] along axis 0 for a 1-D `bounded` index: rows at len(table) read as
    the fill value (Note [Few rows of a large table])."""
    n = table.shape[0]
    fill = fill_value(table.dtype)
    if (0 < index.shape[0] <= LOOP_ROWS and table.size * table.dtype.itemsize >= SPLIT_BYTES
            and jax.default_backend() == "cpu"):
        rows = lax.map(lambda i: lax.dynamic_index_in_dim(table, i, keepdims=False), jnp.minimum(index, n - 1))
        inside = (index < n).reshape(index.shape + (1,) * (table.ndim - 1))
        return jnp.where(inside, rows, jnp.asarray(fill, table.dtype))
    return jnp.take(table, index, axis=0, mode="fill", fill_value=fill)


def _as_1d(x):
    return x.reshape(1) if x.ndim == 0 else x


def _dim(dim, ndim):
    return dim % max(ndim, 1)


def lower_index_select(self, dim, index):
    x = _as_1d(self)
    d = _dim(dim, self.ndim)
    idx = bounded(index.reshape(-1), x.shape[d], wrap=False)
    out = jnp.take(x, idx, axis=d, mode="fill", fill_value=fill_value(x.dtype))
    return out.reshape(()) if self.ndim == 0 else out


def lower_gather(self, dim, index, *, sparse_grad=False):
    if index.size == 0:  # any shape is valid then, even one self cannot be indexed by
        return jnp.zeros(index.shape, self.dtype)
    if index.ndim == 0 or self.ndim == 0:
        d = 0
        x, idx = _as_1d(self), _as_1d(index)
        x = x.reshape(x.shape + (1,) * (idx.ndim - 1))
    else:
        d = _dim(dim, self.ndim)
        x, idx = self, index
    # Dims other than `dim` only need to be as large as the index's.
    x = x[tuple(slice(0, s) if i != d else slice(None) for i, s in enumerate(idx.shape))]
    idx = bounded(idx, x.shape[d], wrap=False)
    out = jnp.take_along_axis(x, idx, axis=d, mode="fill", fill_value=fill_value(x.dtype))
    return out.reshape(index.shape)


def lower_take(self, index):
    flat = self.reshape(-1)
    idx = bounded(index, flat.shape[0], wrap=True)
    return jnp.take(flat, idx, mode="fill", fill_value=fill_value(flat.dtype))


def lower_put(self, index, source, accumulate=False):
    flat = self.reshape(-1)
    idx = bounded(index.reshape(-1), flat.shape[0], wrap=True)
    src = source.reshape(-1).astype(flat.dtype)
    ref = flat.at[idx]
    if not accumulate:
        out = ref.set(src, mode="drop")
    elif flat.dtype == jnp.bool_:
        out = ref.max(src, mode="drop")
    else:
        out = ref.add(src, mode="drop")
    return out.reshape(self.shape)


def _along(self, dim, index, wrap):
    """(self as >=1-d, the index tuple selecting `index` along `dim`)."""
    x = _as_1d(self)
    d = _dim(dim, self.ndim)
    idx = bounded(index.reshape(-1), x.shape[d], wrap)
    return x, (slice(None),) * d + (idx,), d


def _source_along(source, x, d):
    # A 0-d source (with a 0-d or 1-d self) is one slice.
    src = source.reshape(x.shape[:d] + (-1,) + x.shape[d + 1 :]) if source.ndim != x.ndim else source
    return src.astype(x.dtype)


def lower_index_add(self, dim, index, source, *, alpha=1):
    x, key, d = _along(self, dim, index, wrap=False)
    src = _source_along(source, x, d)
    if x.dtype == jnp.bool_:
        out = x.at[key].max(src & jnp.asarray(alpha).astype(jnp.bool_), mode="drop")
    else:
        out = x.at[key].add((src * jnp.asarray(alpha).astype(x.dtype)).astype(x.dtype), mode="drop")
    return out.reshape(self.shape)


def lower_index_copy(self, dim, index, source):
    x, key, d = _along(self, dim, index, wrap=False)
    return x.at[key].set(_source_along(source, x, d), mode="drop").reshape(self.shape)


def lower_index_fill_int_Scalar(self, dim, index, value):
    x, key, _ = _along(self, dim, index, wrap=True)
    return x.at[key].set(scalar_to(value, x.dtype), mode="drop").reshape(self.shape)


def lower_index_fill_int_Tensor(self, dim, index, value):
    x, key, _ = _along(self, dim, index, wrap=True)
    return x.at[key].set(value.astype(x.dtype), mode="drop").reshape(self.shape)


def _masked_shape(self, mask):
    return jnp.broadcast_shapes(self.shape, mask.shape)


def lower_masked_fill_Scalar(self, mask, value):
    shape = _masked_shape(self, mask)
    return jnp.where(mask, scalar_to(value, self.dtype), self).astype(self.dtype).reshape(shape)


def lower_masked_fill_Tensor(self, mask, value):
    shape = _masked_shape(self, mask)
    return jnp.where(mask, value.astype(self.dtype), self).reshape(shape)


def lower_masked_scatter(self, mask, source):
    shape = _masked_shape(self, mask)
    m = jnp.broadcast_to(mask, shape).reshape(-1)
    # The k-th True position takes source's k-th element (row-major); positions past
    # source's end read the fill value (PyTorch raises there, Note [Out-of-bounds indices]).
    pos = jnp.cumsum(m.astype(jnp.int64)) - 1
    src = source.reshape(-1)
    if src.shape[0] == 0:  # nothing to scatter (jnp.take cannot read an empty axis)
        src = jnp.full((1,), fill_value(src.dtype), src.dtype)
    taken = jnp.take(src, bounded(pos, src.shape[0], wrap=False), mode="fill", fill_value=fill_value(src.dtype))
    out = jnp.where(m, taken, jnp.broadcast_to(self, shape).reshape(-1))
    return out.reshape(shape)


def lower_masked_scatter_backward(grad_output, mask, sizes):
    # source's gradient: the k-th selected element of grad_output goes to source's k-th
    # element; elements past the number of True positions get zero.
    shape = jnp.broadcast_shapes(grad_output.shape, mask.shape)
    g = jnp.broadcast_to(grad_output, shape).reshape(-1)
    m = jnp.broadcast_to(mask, shape).reshape(-1)
    n = int(np.prod(sizes))
    (positions,) = jnp.nonzero(m, size=n, fill_value=g.shape[0])
    taken = jnp.take(g, positions, mode="fill", fill_value=0) if g.shape[0] else jnp.zeros((n,), g.dtype)
    return taken.reshape(tuple(sizes))


# ---------------------------------------------------------------- index.Tensor, index_put


def _index_key(shape, indices):
    """The NumPy-style key for aten's `Tensor?[] indices` over a tensor of `shape`: None
    keeps a dim, integer tensors select (broadcast together; non-adjacent advanced
    indices move to the front, as in NumPy). Integer indices only (the runtime turns
    bool masks into integer ones)."""
    key = []
    for i, ix in enumerate(indices):
        key.append(slice(None) if ix is None else bounded(ix, shape[i], wrap=True))
    return tuple(key)


def index_tensor(self, indices):
    """index.Tensor with integer (int64/int32) index tensors."""
    return self.at[_index_key(self.shape, indices)].get(mode="fill", fill_value=fill_value(self.dtype))


def index_put_values(self, indices, values, accumulate):
    """index_put with integer index tensors, or with a single bool mask (covering the
    leading dims it spans) and None elsewhere: the mask's k-th True position takes the
    k-th row of `values`, so the shape stays static."""
    masks = [i for i, ix in enumerate(indices) if ix is not None and ix.dtype in (jnp.bool_, jnp.uint8)]
    values = values.astype(self.dtype)
    if masks:
        (pos,) = masks
        mask = indices[pos].astype(jnp.bool_)
        k = mask.ndim
        lead, rest = self.shape[:pos], self.shape[pos + k :]
        x = self.reshape(lead + (-1,) + rest)
        m = mask.reshape(-1)
        rank = jnp.cumsum(m.astype(jnp.int64)) - 1
        # values broadcast to the indexing result (lead, nnz, rest): its nnz dim is 1 or nnz.
        vals = values.reshape((1,) * max(0, len(lead) + 1 + len(rest) - values.ndim) + values.shape)
        nnz_dim = vals.shape[len(lead)]
        gathered = vals if nnz_dim == 1 else jnp.take(vals, jnp.clip(rank, 0, nnz_dim - 1), axis=len(lead))
        gathered = jnp.broadcast_to(gathered, lead + (m.shape[0],) + rest)
        sel = m.reshape((1,) * len(lead) + (-1,) + (1,) * len(rest))
        new = x + gathered if accumulate else gathered
        if accumulate and x.dtype == jnp.bool_:
            new = x | gathered
        return jnp.where(sel, new, x).reshape(self.shape)
    ref = self.at[_index_key(self.shape, indices)]
    if accumulate:
        if self.dtype == jnp.bool_:
            return ref.max(values, mode="drop")
        return ref.add(values, mode="drop")
    return ref.set(values, mode="drop")


def masked_select_positions(self, mask, positions):
    """masked_select given the flat positions of mask's True entries (computed on the
    host: the result's length depends on the data)."""
    shape = _masked_shape(self, mask)
    return jnp.broadcast_to(self, shape).reshape(-1)[positions]


def lower_index_gather(self, indices):
    """index.Tensor once the runtime has checked the indices and made bool masks integer
    indices (runtime/supported/indexing.py)."""
    return index_tensor(self, indices)


def lower_index_put_values(self, indices, values, accumulate):
    return index_put_values(self, indices, values, accumulate)


def lower_masked_select_positions(self, mask, positions):
    return masked_select_positions(self, mask, positions)
