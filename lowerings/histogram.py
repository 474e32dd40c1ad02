"""Lowerings of histograms (histc, histogram, histogramdd) and other counting and
searching ops with static output shapes (searchsorted with a scalar, isin,
nonzero_static, hash_tensor).

Histograms follow PyTorch's CPU kernel: an element lands in bin
`trunc((x - lo) * bins / (hi - lo))` (histc), corrected against the bin edges by a
search among the neighbouring edges (histogram with a bin count), or found by binary
search among given edges; elements outside [lo, hi] and NaN are skipped, and the last
bin includes its right edge. Edges follow torch.linspace in the input's dtype.

Note [Data-dependent histogram checks]
PyTorch raises when an edge taken from the data is not finite (NaN or inf in the
input with no explicit range), and for histc when min > max: those values are known
only inside the graph here, so such calls produce a histogram of zeros (NaN edges
select nothing) instead of an error.
"""

from __future__ import annotations

import jax.numpy as jnp

from .common import opmath


def _linspace(lo, hi, steps, dtype):
    """torch.linspace(lo, hi, steps) in `dtype`: the first half counts up from lo, the
    second half down from hi, as PyTorch's CPU kernel does."""
    start, end = jnp.asarray(lo).astype(dtype), jnp.asarray(hi).astype(dtype)
    if steps == 1:
        return start.reshape(1)
    step = (end - start) / jnp.asarray(steps - 1, dtype)
    i = jnp.arange(steps)
    up = start + step * i.astype(dtype)
    down = end - step * (steps - 1 - i).astype(dtype)
    return jnp.where(i < steps // 2, up, down)


def _outer_edges(x2d, ranges):
    """Each dimension's (lo, hi) in float64: the given range, else the data's min and
    max ([0, 1] for no data), widened by 0.5 each way when equal."""
    n = x2d.shape[1]
    if ranges is not None:
        lo = jnp.asarray([ranges[2 * d] for d in range(n)], jnp.float64)
        hi = jnp.asarray([ranges[2 * d + 1] for d in range(n)], jnp.float64)
    elif x2d.shape[0] == 0:
        lo, hi = jnp.zeros((n,), jnp.float64), jnp.ones((n,), jnp.float64)
    else:
        lo, hi = jnp.min(x2d, axis=0).astype(jnp.float64), jnp.max(x2d, axis=0).astype(jnp.float64)
    same = lo == hi
    return jnp.where(same, lo - 0.5, lo), jnp.where(same, hi + 0.5, hi)


def _bin_index(x, edges, algorithm):
    """The bin of each element of `x` along one dimension, and whether it is inside."""
    nb = edges.shape[0] - 1
    lo, hi = edges[0], edges[-1]
    inside = (x >= lo) & (x <= hi)
    if algorithm == "search":
        pos = jnp.searchsorted(edges, x, side="right").astype(jnp.int64) - 1
    else:
        # Each step rounds to the input's type, as PyTorch's kernel computes it (done
        # explicitly: XLA may keep a float16 chain in float32 between steps).
        rnd = lambda v: v.astype(x.dtype).astype(opmath(x).dtype)
        wide = lambda v: v.astype(opmath(x).dtype)
        scaled = rnd(rnd(rnd(wide(x) - wide(lo)) * nb) / rnd(wide(hi) - wide(lo)))
        pos = jnp.clip(jnp.where(inside, scaled, 0).astype(jnp.int64), 0, nb)
        if algorithm == "local":
            # Check the computed bin against its neighbouring edges, as torch.histogram
            # does, so counts agree with the returned edges.
            first = jnp.maximum(pos - 1, 0)
            stop = jnp.minimum(pos + 2, nb + 1)
            count = jnp.zeros_like(pos)
            for k in range(3):
                at = first + k
                count = count + ((at < stop) & (edges[jnp.minimum(at, nb)] <= x)).astype(jnp.int64)
            pos = first + count - 1
    pos = jnp.where(pos == nb, nb - 1, pos)
    return jnp.clip(pos, 0, max(nb - 1, 0)), inside


def _histogramdd(x2d, edges, weight, density, algorithm):
    """The histogram of the rows of `x2d` (M, N) over N edge sequences."""
    dtype = x2d.dtype
    shape = tuple(e.shape[0] - 1 for e in edges)
    # PyTorch's kernel accumulates in the input's own type, float16/bfloat16 included
    # (a bfloat16 count stops growing at 256), and so do we.
    acc = dtype
    total = 1
    for s in shape:
        total *= s
    if x2d.shape[0] == 0 or total == 0:
        hist = jnp.zeros(shape, acc)
    else:
        flat = jnp.zeros(x2d.shape[0], jnp.int64)
        keep = jnp.ones(x2d.shape[0], jnp.bool_)
        for d, e in enumerate(edges):
            pos, inside = _bin_index(x2d[:, d], e.astype(dtype), algorithm)
            flat = flat * shape[d] + pos
            keep = keep & inside
        w = jnp.ones(x2d.shape[0], acc) if weight is None else weight.reshape(-1).astype(acc)
        hist = jnp.zeros(total, acc).at[flat].add(jnp.where(keep, w, 0)).reshape(shape)
    if density:
        hist = hist / hist.sum()
        for d, e in enumerate(edges):
            widths = opmath(jnp.diff(e.astype(dtype)))
            hist = hist / widths.reshape(tuple(-1 if k == d else 1 for k in range(len(shape))))
    return hist.astype(dtype)


def lower_histc(self, bins=100, min=0, max=0):
    x = self.reshape(-1)
    lo = jnp.asarray(min).astype(jnp.float64)
    hi = jnp.asarray(max).astype(jnp.float64)
    if x.size:
        from_data = lo == hi
        lo = jnp.where(from_data, jnp.min(x).astype(jnp.float64), lo)
        hi = jnp.where(from_data, jnp.max(x).astype(jnp.float64), hi)
    same = lo == hi
    lo, hi = jnp.where(same, lo - 1, lo), jnp.where(same, hi + 1, hi)
    # Note [Data-dependent histogram checks]
    bad = ~(jnp.isfinite(lo) & jnp.isfinite(hi) & (lo < hi))
    lo, hi = jnp.where(bad, jnp.nan, lo), jnp.where(bad, jnp.nan, hi)
    edges = _linspace(lo, hi, bins + 1, self.dtype)
    return _histogramdd(x.reshape(-1, 1), [edges], None, False, "linear")


def lower_histogram_bin_ct(self, bins=100, *, range=None, weight=None, density=False):
    x = self.reshape(-1, 1)
    lo, hi = _outer_edges(x, range)
    edges = _linspace(lo[0], hi[0], bins + 1, self.dtype)
    return _histogramdd(x, [edges], weight, density, "local"), edges


def lower_histogram_bins_tensor(self, bins, *, weight=None, density=False):
    return _histogramdd(self.reshape(-1, 1), [bins], weight, density, "search"), bins


def _dd_edges(self, bins, ranges):
    x = self.reshape(-1, self.shape[-1])
    lo, hi = _outer_edges(x, ranges)
    return x, [_linspace(lo[d], hi[d], b + 1, self.dtype) for d, b in enumerate(bins)]


def lower__histogramdd_bin_edges(self, bins, *, range=None, weight=None, density=False):
    return list(_dd_edges(self, bins, range)[1])


def lower__histogramdd_from_bin_cts(self, bins, *, range=None, weight=None, density=False):
    x, edges = _dd_edges(self, bins, range)
    return _histogramdd(x, edges, weight, density, "local")


def lower__histogramdd_from_bin_tensors(self, bins, *, weight=None, density=False):
    return _histogramdd(self.reshape(-1, self.shape[-1]), list(bins), weight, density, "search")


def lower_searchsorted_Scalar(sorted_sequence, self, *, out_int32=False, right=False, side=None, sorter=None):
    from ..shape_fns.common import to_numpy_dtype, to_torch_dtype
    from .distance import lower_searchsorted_Tensor
    import torch

    # PyTorch turns the scalar into a 0-d tensor of its own type (int64, double or
    # bool) and compares both in their promoted type.
    common = to_numpy_dtype(torch.promote_types(to_torch_dtype(sorted_sequence.dtype), to_torch_dtype(jnp.asarray(self).dtype)))
    value = jnp.asarray(self).astype(common).reshape(())
    return lower_searchsorted_Tensor(sorted_sequence.astype(common), value, out_int32=out_int32, right=right, side=side, sorter=sorter)


def lower_isin_Tensor_Tensor(elements, test_elements, *, assume_unique=False, invert=False):
    from ..shape_fns.common import promote_dtypes, to_numpy_dtype

    common = to_numpy_dtype(promote_dtypes(elements, test_elements))
    a, b = elements.astype(common), test_elements.reshape(-1).astype(common)
    if b.size == 0:
        found = jnp.zeros(a.shape, jnp.bool_)
    else:
        # Sort once and binary-search each element: O((n + m) log m), not n * m.
        s = jnp.sort(b)
        at = jnp.clip(jnp.searchsorted(s, a), 0, s.size - 1)
        found = s[at] == a
    return ~found if invert else found


def lower_nonzero_static(self, *, size, fill_value=-1):
    if self.ndim == 0:
        return jnp.zeros((size, 0), jnp.int64)
    if self.size == 0:
        # jnp.nonzero ignores fill_value for an empty input.
        return jnp.full((size, self.ndim), fill_value, jnp.int64)
    coords = jnp.nonzero(self != 0, size=size, fill_value=fill_value)
    return jnp.stack(coords, axis=-1).astype(jnp.int64)


def lower_hash_tensor(self, dim=(), *, keepdim=False, mode=0):
    import jax

    from ..shape_fns.common import reduction_dims

    dims = reduction_dims(dim, self.ndim)
    # Elements widen to their 64-bit float or integer type and are xor-ed as raw bits.
    wide = self.astype(jnp.float64) if jnp.issubdtype(self.dtype, jnp.floating) else self.astype(jnp.int64)
    bits = jax.lax.bitcast_convert_type(wide, jnp.uint64)
    out = jax.lax.reduce(bits, jnp.uint64(0), jax.lax.bitwise_xor, dims)
    if keepdim:
        out = jnp.expand_dims(out, dims)
    return out
