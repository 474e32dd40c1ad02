"""Lowerings of histograms (histc, histogram, histogramdd), reductions into groups
given by data (segment_reduce, index_reduce, scatter with reduce=add/multiply, the
masked index ops) and other counting and searching ops with static output shapes
(searchsorted with a scalar, isin, nonzero_static, hash_tensor).

Histograms follow PyTorch's CPU kernel: an element lands in bin
`trunc((x - lo) * bins / (hi - lo))` (histc), corrected against the bin edges by a
search among the neighbouring edges (histogram with a bin count), or found by binary
search among given edges; elements outside [lo, hi] and NaN are skipped, and the last
bin includes its right edge. Edges follow torch.linspace in the input's dtype.

Note [Integer histc]
PyTorch's CPU kernel raises for integer input ("histogram_cpu" not implemented for
'Int'), its CUDA kernel counts it, and libraries written for accelerators call it on
any device that is not the CPU: Hugging Face's mixture-of-experts layers count tokens
per expert with `torch.histc(expert_ids.int(), ...)` when the device type is not
"cpu". Integer histc therefore runs here as on CUDA: the bounds are truncated to
integers, an element lands in bin `(x - lo) * bins // (hi - lo)` in integer
arithmetic (the last bin includes `hi`), and the result has the input's dtype.

Note [Data-dependent histogram checks]
PyTorch raises when an edge taken from the data is not finite (NaN or inf in the
input with no explicit range), and for histc when min > max: those values are known
only inside the graph here, so such calls produce a histogram of zeros (NaN edges
select nothing) instead of an error.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from .common import opmath
from .scatter import _identity, lower_scatter_reduce_two


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


def _histc_range(x, min, max, dtype):
    """histc's (lo, hi) in `dtype`: min and max, the data's extremes where they are
    equal, widened by one each way where those are equal too."""
    lo, hi = jnp.asarray(min).astype(dtype), jnp.asarray(max).astype(dtype)
    if x.size:
        from_data = lo == hi
        lo = jnp.where(from_data, jnp.min(x).astype(dtype), lo)
        hi = jnp.where(from_data, jnp.max(x).astype(dtype), hi)
    same = lo == hi
    return jnp.where(same, lo - 1, lo), jnp.where(same, hi + 1, hi)


def lower_histc(self, bins=100, min=0, max=0):
    x = self.reshape(-1)
    if jnp.issubdtype(self.dtype, jnp.integer):
        return _integer_histc(x, bins, min, max)
    lo, hi = _histc_range(x, min, max, jnp.float64)
    # Note [Data-dependent histogram checks]
    bad = ~(jnp.isfinite(lo) & jnp.isfinite(hi) & (lo < hi))
    lo, hi = jnp.where(bad, jnp.nan, lo), jnp.where(bad, jnp.nan, hi)
    edges = _linspace(lo, hi, bins + 1, self.dtype)
    return _histogramdd(x.reshape(-1, 1), [edges], None, False, "linear")


def _integer_histc(x, bins, min, max):
    """histc of integers, which PyTorch's CUDA kernel computes and its CPU kernel refuses
    (Note [Integer histc]): integer range and bin arithmetic, counts in the input's type.
    A float bound is truncated, as PyTorch's Scalar::to truncates it."""
    lo, hi = _histc_range(x, min, max, jnp.int64)
    wide = x.astype(jnp.int64)
    inside = (wide >= lo) & (wide <= hi) & (lo < hi)  # Note [Data-dependent histogram checks]
    pos = (wide - lo) * bins // jnp.maximum(hi - lo, 1)
    pos = jnp.clip(jnp.where(pos == bins, bins - 1, pos), 0, bins - 1)
    return jnp.zeros(bins, x.dtype).at[pos].add(inside.astype(x.dtype))


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
    common = to_numpy_dtype(
        torch.promote_types(to_torch_dtype(sorted_sequence.dtype), to_torch_dtype(jnp.asarray(self).dtype))
    )
    value = jnp.asarray(self).astype(common).reshape(())
    return lower_searchsorted_Tensor(
        sorted_sequence.astype(common), value, out_int32=out_int32, right=right, side=side, sorter=sorter
    )


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


def _segment_ids(offsets, length):
    """For rows of segment offsets (B, S + 1), each position along an axis of `length`
    mapped to its segment, or to S (dropped) outside [offsets[0], offsets[S])."""
    import jax

    segs = offsets.shape[-1] - 1
    pos = jnp.arange(length)
    ids = jax.vmap(lambda o: jnp.searchsorted(o[1:], pos, side="right"))(offsets)
    outside = (pos[None, :] < offsets[:, :1]) | (ids >= segs)
    return jnp.where(outside, segs, ids)


def _segment_layout(data, lengths, offsets, axis):
    """data as (B, L, R) around `axis`, and the segments' offsets as (B, S + 1)."""
    axis = axis % data.ndim
    lead = int(np.prod(data.shape[:axis], dtype=np.int64))
    x = data.reshape(lead, data.shape[axis], -1)
    if offsets is None:
        lens = lengths.reshape(-1, lengths.shape[-1]).astype(jnp.int64)
        offsets = jnp.concatenate([jnp.zeros((lens.shape[0], 1), jnp.int64), jnp.cumsum(lens, axis=1)], axis=1)
    else:
        offsets = offsets.reshape(-1, offsets.shape[-1]).astype(jnp.int64)
    offsets = jnp.broadcast_to(offsets, (lead, offsets.shape[-1]))
    return x, offsets, axis


def _segment_start(reduce, dtype, initial):
    if initial is not None:
        return jnp.asarray(initial).astype(dtype)
    return {
        "max": jnp.asarray(-jnp.inf, dtype),
        "min": jnp.asarray(jnp.inf, dtype),
        "prod": jnp.ones((), dtype),
    }.get(reduce, jnp.zeros((), dtype))


def lower_segment_reduce(data, reduce, *, lengths=None, indices=None, offsets=None, axis=0, unsafe=False, initial=None):
    # PyTorch checks (unless `unsafe`) that lengths are non-negative and add up to
    # the axis' size; the lengths are data here, so invalid ones are not detected:
    # elements past the last segment are ignored, a negative length empties its segment.
    x, offs, axis = _segment_layout(data, lengths, offsets, axis)
    b, n, r = x.shape
    segs = offs.shape[1] - 1
    # PyTorch's kernel reduces float16/bfloat16 in their own type, rounding each step.
    xs = x
    ids = _segment_ids(offs, n)
    key = (jnp.arange(b)[:, None, None], ids[:, :, None], jnp.arange(r)[None, None, :])
    base = jnp.broadcast_to(_segment_start(reduce, xs.dtype, initial), (b, segs, r))
    ref = base.at[key]
    if reduce in ("sum", "mean"):
        out = ref.add(xs, mode="drop")
    elif reduce == "prod":
        out = ref.multiply(xs, mode="drop")
    else:
        out = ref.max(xs, mode="drop") if reduce == "max" else ref.min(xs, mode="drop")
        # A NaN element makes its segment NaN, as PyTorch's kernel does.
        nan = jnp.zeros((b, segs, r), jnp.bool_).at[key].max(jnp.isnan(xs), mode="drop")
        out = jnp.where(nan, jnp.nan, out)
    if reduce == "mean":
        count = jnp.maximum(offs[:, 1:] - offs[:, :-1], 0)[:, :, None]
        # An empty segment's mean is its initial value, or NaN without one.
        empty = jnp.full_like(out, jnp.nan) if initial is None else out
        out = jnp.where(count > 0, out / jnp.maximum(count, 1).astype(out.dtype), empty)
    shape = data.shape[:axis] + (segs,) + data.shape[axis + 1:]
    return out.astype(data.dtype).reshape(shape)


def lower__segment_reduce_backward(grad, output, data, reduce, *, lengths=None, offsets=None, axis=0, initial=None):
    x, offs, axis = _segment_layout(data, lengths, offsets, axis)
    b, n, r = x.shape
    segs = offs.shape[1] - 1
    xs = opmath(x)
    ids = _segment_ids(offs, n)
    inside = (ids < segs)[:, :, None]
    g = opmath(grad).reshape(b, segs, r)
    o = opmath(output).reshape(b, segs, r)
    take = lambda t: jnp.take_along_axis(t, jnp.minimum(ids, max(segs - 1, 0))[:, :, None], axis=1)
    key = (jnp.arange(b)[:, None, None], ids[:, :, None], jnp.arange(r)[None, None, :])
    if segs == 0:
        return jnp.zeros(data.shape, data.dtype)
    g_at, o_at = take(g), take(o)
    if reduce in ("max", "min"):
        hit = jnp.isnan(xs) | (xs == o_at)
        counter = jnp.zeros((b, segs, r), jnp.int64).at[key].add(hit.astype(jnp.int64), mode="drop")
        gi = jnp.where(hit, g_at, 0)
        # PyTorch shares a tied gradient among the tied elements only where it is positive.
        c = take(counter).astype(gi.dtype)
        gi = jnp.where((c >= 2) & (gi > 0), gi / jnp.maximum(c, 1), gi)
    elif reduce == "mean":
        count = (offs[:, 1:] - offs[:, :-1])[:, :, None]
        gi = g_at / take(jnp.broadcast_to(count, (b, segs, r))).astype(g_at.dtype)
    elif reduce == "sum":
        gi = g_at
    else:
        special = jnp.isnan(xs) | (xs == 0)
        nan_ct = jnp.zeros((b, segs, r), jnp.int64).at[key].add(jnp.isnan(xs).astype(jnp.int64), mode="drop")
        zero_ct = jnp.zeros((b, segs, r), jnp.int64).at[key].add((xs == 0).astype(jnp.int64), mode="drop")
        start = _segment_start("prod", xs.dtype, initial)
        rest = jnp.full((b, segs, r), start, xs.dtype).at[key].multiply(jnp.where(special, 1, xs), mode="drop")
        # The product of the segment without this (zero or NaN) element.
        others_nan = take(nan_ct) - jnp.isnan(xs)
        others_zero = take(zero_ct) - (xs == 0)
        exclusive = jnp.where(others_nan > 0, jnp.nan, take(rest) * jnp.where(others_zero > 0, 0, 1).astype(xs.dtype))
        gi = jnp.where(special, g_at * exclusive, g_at * o_at / jnp.where(special, 1, xs))
    gi = jnp.where(inside, gi, 0)
    return gi.astype(data.dtype).reshape(data.shape)


def lower_index_reduce(self, dim, index, source, reduce, *, include_self=True):
    # Out-of-range indices are data: their updates are dropped (Note [Out-of-bounds
    # indices] in lowerings/indexing.py) where PyTorch raises IndexError.
    from .indexing import _along, _source_along

    x, key, d = _along(self, dim, index, wrap=False)
    src = _source_along(source, x, d)
    # Mean accumulates in the tensor's own type (PyTorch's index_add, then a division).
    xs, s = (x, src) if reduce == "mean" else (opmath(x), opmath(src))
    hit = jnp.zeros(x.shape, jnp.bool_).at[key].set(True, mode="drop")
    base = xs if include_self else jnp.where(hit, _identity(reduce, xs.dtype), xs)
    ref = base.at[key]
    if reduce == "prod":
        out = ref.multiply(s, mode="drop")
    elif reduce == "mean":
        out = ref.add(s, mode="drop")
        count = jnp.zeros(x.shape, jnp.int64).at[key].add(1, mode="drop") + (1 if include_self else 0)
        count = jnp.maximum(count, 1).astype(out.dtype)
        out = jnp.floor_divide(out, count) if jnp.issubdtype(out.dtype, jnp.integer) else out / count
    else:
        out = ref.max(s, mode="drop") if reduce == "amax" else ref.min(s, mode="drop")
        if jnp.issubdtype(s.dtype, jnp.floating):
            # A NaN source propagates, as PyTorch's max/min do.
            nan = jnp.zeros(x.shape, jnp.bool_).at[key].max(jnp.isnan(s), mode="drop")
            out = jnp.where(nan, jnp.nan, out)
    return out.astype(x.dtype).reshape(self.shape)


_SCATTER_REDUCE = {"add": "sum", "multiply": "prod"}


def lower_scatter_reduce(self, dim, index, src, *, reduce):
    return lower_scatter_reduce_two(self, dim, index, src, _SCATTER_REDUCE[reduce])


def lower_scatter_value_reduce(self, dim, index, value, *, reduce):
    # The value takes self's dtype before it is combined (2.7 adds 2 to an int64).
    src = jnp.asarray(value).astype(self.dtype)
    return lower_scatter_reduce_two(self, dim, index, src, _SCATTER_REDUCE[reduce])


def _clamped_indices(self, indices):
    """Indices clamped into range, as the masked-index ops promise valid reads where
    the mask is set and let masked-out positions point anywhere."""
    out = []
    for i, ix in enumerate(indices):
        if ix is None:
            out.append(None)
        else:
            size = self.shape[i]
            out.append(jnp.clip(ix.astype(jnp.int64), -size, max(size - 1, 0)))
    return out


def lower__unsafe_masked_index(self, mask, indices, fill):
    from .indexing import index_tensor

    gathered = index_tensor(self, _clamped_indices(self, indices))
    keep = jnp.broadcast_to(mask, gathered.shape)
    return jnp.where(keep, gathered, jnp.asarray(fill).astype(self.dtype))


def lower__unsafe_masked_index_put_accumulate(self, mask, indices, values):
    from .indexing import index_put_values

    masked = jnp.where(jnp.broadcast_to(mask, values.shape), values, jnp.zeros((), values.dtype))
    return index_put_values(self, _clamped_indices(self, indices), masked, True)
