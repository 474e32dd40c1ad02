"""Lowerings of grid sampling (grid_sampler_2d / grid_sampler_3d) and their backward ops, and
of the affine grids F.affine_grid makes for them (affine_grid_generator).

Every output position reads the input at a point the grid gives in [-1, 1] coordinates
(x indexes the last dim). The point is mapped to pixel coordinates with PyTorch's
unnormalization, then padded (border clips, reflection folds), and the input is read at
the neighbouring pixels (bilinear: 2^d corners, nearest: the nearest pixel, rounding
half to even like nearbyint, bicubic: a 4x4 neighbourhood with A = -0.75). Pixels outside
the input read as zero. The reads are gathers from each (N) batch's flattened planes.

Backward ops are the adjoints of the forward map (jax.vjp). The clip and the reflection
are written with explicit selects so their derivatives are PyTorch's: 1 strictly
inside the clip range and 0 on and beyond its ends; a reflection flips the sign.
"""

from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp

from .common import opmath

BILINEAR, NEAREST, BICUBIC = 0, 1, 2
ZEROS, BORDER, REFLECTION = 0, 1, 2
_A = -0.75  # PyTorch's bicubic convolution coefficient


def _unnormalize(coord, size, align_corners, nd):
    # The 2-D CPU kernel (vectorized) and the 3-D one (scalar) round differently.
    if nd == 2:
        if align_corners:
            return (coord + 1) * ((size - 1) / 2)
        return (coord + 1) * (size / 2) - 0.5
    if align_corners:
        return (coord + 1) / 2 * (size - 1)
    return ((coord + 1) * size - 1) / 2


def _clip(coord, size, nd):
    limit = size - 1
    inside = (coord > 0) & (coord < limit)
    # NaN clips to 0 in the vectorized 2-D kernel and to size - 1 in the scalar 3-D one.
    low = (coord <= 0) | (jnp.isnan(coord) if nd == 2 else False)
    return jnp.where(inside, coord, jnp.where(low, jnp.zeros_like(coord), jnp.full_like(coord, limit)))


def _reflect(coord, twice_low, twice_high, nd):
    if twice_low == twice_high:
        return jnp.zeros_like(coord)
    low = twice_low / 2
    c = coord - low
    neg = c < 0
    c = jnp.where(neg, -c, c)
    if nd == 2:
        twice_span = twice_high - twice_low
        extra = c - jnp.trunc(c / twice_span) * twice_span
        flip = extra > twice_span - extra
        return jnp.where(flip, twice_span - extra, extra) + low
    span = (twice_high - twice_low) / 2
    extra = jnp.fmod(c, span)
    odd = jnp.fmod(jnp.floor(c / span), 2) != 0
    return jnp.where(odd, span - extra, extra) + low


def _pad(coord, size, padding_mode, align_corners, nd):
    if padding_mode == BORDER:
        return _clip(coord, size, nd)
    if padding_mode == REFLECTION:
        if align_corners:
            coord = _reflect(coord, 0, 2 * (size - 1), nd)
        else:
            coord = _reflect(coord, -1, 2 * size - 1, nd)
        return _clip(coord, size, nd)
    return coord


def _read(flat, spatial, coords):
    """Values (N, C, P) at integer-valued float coordinates (each (N, P)); zero outside."""
    valid = None
    idx = None
    stride = 1
    for size, c in reversed(list(zip(spatial, coords))):
        ok = (c >= 0) & (c <= size - 1)
        valid = ok if valid is None else valid & ok
        i = jnp.clip(jnp.where(ok, c, 0), 0, size - 1).astype(jnp.int32) * stride
        idx = i if idx is None else idx + i
        stride *= size
    vals = jnp.take_along_axis(flat, idx[:, None, :], axis=2)
    return jnp.where(valid[:, None, :], vals, jnp.zeros((), flat.dtype))


def _cubic_weights(t):
    def near(x):
        return ((_A + 2) * x - (_A + 3)) * x * x + 1

    def far(x):
        return ((_A * x - 5 * _A) * x + 8 * _A) * x - 4 * _A

    return (far(t + 1), near(t), near(1 - t), far(2 - t))


def _sample(input, grid, interpolation_mode, padding_mode, align_corners):
    """input (N, C, *spatial) and grid (N, *out, d) in a floating compute dtype."""
    nd = grid.shape[-1]
    n, c = input.shape[:2]
    spatial = input.shape[2:]
    out_spatial = grid.shape[1:-1]
    p = math.prod(out_spatial)
    flat = input.reshape(n, c, math.prod(spatial))
    g = grid.reshape(n, p, nd)
    # grid[..., 0] indexes the last spatial dim
    raw = [_unnormalize(g[..., nd - 1 - i], spatial[i], align_corners, nd) for i in range(nd)]
    if interpolation_mode == BICUBIC:
        out = _bicubic(flat, spatial, raw, padding_mode, align_corners)
    else:
        coords = [_pad(raw[i], spatial[i], padding_mode, align_corners, nd) for i in range(nd)]
        if interpolation_mode == NEAREST:
            out = _read(flat, spatial, [jnp.round(x) for x in coords])
        else:
            out = _multilinear(flat, spatial, coords)
    return out.reshape((n, c) + tuple(out_spatial))


def _weighted_sum(values, weights):
    out = None
    for v, w in zip(values, weights):
        term = v * w[:, None, :]
        out = term if out is None else out + term
    return out


def _multilinear(flat, spatial, coords):
    lows = [jnp.floor(x) for x in coords]
    fracs = [x - lo for x, lo in zip(coords, lows)]
    values, weights = [], []
    for corner in itertools.product((0, 1), repeat=len(spatial)):
        w = None
        for bit, f in zip(corner, fracs):
            wi = f if bit else 1 - f
            w = wi if w is None else w * wi
        values.append(_read(flat, spatial, [lo + bit for lo, bit in zip(lows, corner)]))
        weights.append(w)
    return _weighted_sum(values, weights)


def _bicubic(flat, spatial, raw, padding_mode, align_corners):
    (h, w), (y, x) = spatial, raw
    y0, x0 = jnp.floor(y), jnp.floor(x)
    wy, wx = _cubic_weights(y - y0), _cubic_weights(x - x0)

    def tap(dy, dx):
        # Each tap's pixel is padded on its own, like ATen's get_value_bounded.
        yy = jnp.trunc(_pad(y0 + dy, h, padding_mode, align_corners, 2))
        xx = jnp.trunc(_pad(x0 + dx, w, padding_mode, align_corners, 2))
        return _read(flat, spatial, [jax.lax.stop_gradient(yy), jax.lax.stop_gradient(xx)])

    out = None
    for i, dy in enumerate((-1, 0, 1, 2)):
        row = None
        for j, dx in enumerate((-1, 0, 1, 2)):
            term = tap(dy, dx) * wx[j][:, None, :]
            row = term if row is None else row + term
        term = row * wy[i][:, None, :]
        out = term if out is None else out + term
    return out


def _forward(input, grid, interpolation_mode, padding_mode, align_corners):
    x = opmath(input)
    out = _sample(x, opmath(grid).astype(x.dtype), interpolation_mode, padding_mode, align_corners)
    return out.astype(input.dtype)


def _backward(grad_output, input, grid, interpolation_mode, padding_mode, align_corners, output_mask):
    x = opmath(input)
    _, vjp = jax.vjp(
        lambda i, g: _sample(i, g, interpolation_mode, padding_mode, align_corners), x, opmath(grid).astype(x.dtype)
    )
    grad_input, grad_grid = vjp(opmath(grad_output).astype(x.dtype))
    grad_input = grad_input.astype(input.dtype) if output_mask[0] else None
    return grad_input, grad_grid.astype(grid.dtype)


def lower_grid_sampler_2d(input, grid, interpolation_mode, padding_mode, align_corners):
    return _forward(input, grid, interpolation_mode, padding_mode, align_corners)


def lower_grid_sampler_3d(input, grid, interpolation_mode, padding_mode, align_corners):
    return _forward(input, grid, interpolation_mode, padding_mode, align_corners)


def lower_grid_sampler_2d_backward(
    grad_output, input, grid, interpolation_mode, padding_mode, align_corners, output_mask
):
    return _backward(grad_output, input, grid, interpolation_mode, padding_mode, align_corners, output_mask)


def lower_grid_sampler_3d_backward(
    grad_output, input, grid, interpolation_mode, padding_mode, align_corners, output_mask
):
    return _backward(grad_output, input, grid, interpolation_mode, padding_mode, align_corners, output_mask)


def _affine_base_grid(size, align_corners, dtype):
    """(points, d + 1): each output position's normalized coordinates, x first, then a 1
    (PyTorch's base grid, whose steps shrink by (n - 1) / n without align_corners)."""
    axes = []
    for n in reversed(size[2:]):  # x runs along the last dim
        if n <= 1:
            axes.append(jnp.zeros((max(n, 0),), dtype))
            continue
        steps = jnp.linspace(-1.0, 1.0, n, dtype=dtype)
        axes.append(steps if align_corners else steps * ((n - 1) / n))
    mesh = jnp.meshgrid(*reversed(axes), indexing="ij")  # over size[2:] in order
    coords = [m.reshape(-1) for m in reversed(mesh)] + [jnp.ones((math.prod(size[2:]),), dtype)]
    return jnp.stack(coords, axis=-1)


def lower_affine_grid_generator(theta, size, align_corners):
    """The sampling grid of an affine map (F.affine_grid): each base point times theta."""
    base = _affine_base_grid(size, align_corners, theta.dtype)
    grid = jnp.einsum("pk,njk->npj", opmath(base), opmath(theta))
    return grid.astype(theta.dtype).reshape((size[0],) + tuple(size[2:]) + (len(size) - 2,))

