"""Lowerings of convolution and its backward op, on lax.conv_general_dilated.

A transposed convolution is the gradient of a convolution with respect to its input:
a convolution of the input dilated by `stride`, padded by dilation * (k - 1) - padding
(plus output_padding on the high side), with the kernel flipped spatially and its
in/out channels swapped within each group. The backward op differentiates the forward
lowering with jax.vjp, so every variant (transposed, groups, dilation) shares one path.
"""

from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp
from jax import lax

from .common import opmath


def _dimension_numbers(nspatial):
    sp = "DHW"[3 - nspatial :] if nspatial <= 3 else None
    if sp is None:
        sp = "".join(chr(ord("a") + i) for i in range(nspatial))
    return ("NC" + sp, "OI" + sp, "NC" + sp)


def _expand(values, n):
    values = tuple(values)
    return values * n if len(values) == 1 else values


# Note [Convolutions with few output positions]
# XLA CPU's convolution kernel is very slow when the output has few positions and the
# kernel covers most of the input: the last stage of a ResNet-18 at 64x64 images (512
# channels, 2x2 outputs, 3x3 kernel, batch 8) took 219 ms forward and 418 ms with its
# gradient, PyTorch CPU about 2 ms; 1024 channels took 2 s. The strided convolution
# into that stage (256 -> 512 channels, 4x4 -> 2x2) was fast forward but 57 ms in its
# gradient, another convolution XLA derives. There the convolution is instead written
# as what it is, a matrix product of the weights with the input windows (one strided
# slice per kernel position, stacked): 1.0 ms forward, 7.9 ms with the gradient, which
# jax.vjp derives as slices, pads and products. With many output positions the windows
# are large copies and XLA's kernel wins (64 channels, 56x56: 27 against 86 ms), so
# only outputs of up to SMALL_OUTPUT_POSITIONS positions per image take this way
# (at 4x4 both take about the same time).
SMALL_OUTPUT_POSITIONS = 16


def _conv_as_matmul(input, weight, stride, padding, dilation, out_sizes):
    """A convolution (groups 1) as a product of the weights with the stacked windows."""
    nspatial = input.ndim - 2
    kernel = weight.shape[2:]
    x = _pad_spatial(input, [(p, p) for p in padding])
    windows = [lax.slice(x, start, limit, strides)
               for start, limit, strides in _taps(kernel, stride, dilation, out_sizes, *input.shape[:2])]
    cols = jnp.stack(windows, axis=2)  # (N, C, kernel positions, *out_sizes)
    w = weight.reshape(weight.shape[:2] + (-1,))  # (O, C, kernel positions)
    spatial = "".join(chr(ord("h") + i) for i in range(nspatial))
    return jnp.einsum(f"nck{spatial},ock->no{spatial}", cols, w, precision=lax.Precision.HIGHEST)


# Note [Convolutions with kernel equal to stride]
# A convolution whose kernel equals its stride, unpadded and undilated (a ViT's patch
# embedding, a patch-merging layer), reads each input position once: its windows are
# the input's own blocks, laid out by a reshape, and the convolution is one product of
# those blocks with the weights. Its gradient is again a product and a reshape, where
# XLA CPU's convolution gradient is very slow: 224x224 images in 16x16 patches, 3 -> 192
# channels, batch 8: 11.5 against 171 ms with the gradient (1.8 against 2.0 ms forward);
# the small zoo ViT's 4x4 patches of 16x16 images, 10 against 17 us. It comes before
# the few-output-positions path, whose stacked windows are copies (42 us there).


def _patches_apart(kernel, stride, padding, dilation, groups):
    """Whether a convolution reads each input position at most once, in blocks (Note
    [Convolutions with kernel equal to stride]); all lists expanded."""
    return (groups == 1 and tuple(kernel) == tuple(stride) and math.prod(kernel) > 1 and not any(padding)
            and all(d == 1 for d in dilation))


def _patches_as_matmul(input, weight):
    """A convolution (groups 1) with kernel == stride, no padding, dilation 1."""
    nspatial = input.ndim - 2
    kernel = weight.shape[2:]
    out_sizes = tuple(n // k for n, k in zip(input.shape[2:], kernel))
    # Positions past the last whole block are read by no window: cut them off.
    x = input[(slice(None), slice(None)) + tuple(slice(0, o * k) for o, k in zip(out_sizes, kernel))]
    x = x.reshape(input.shape[:2] + tuple(itertools.chain.from_iterable(zip(out_sizes, kernel))))
    spatial = "".join(chr(ord("h") + i) for i in range(nspatial))
    within = "".join(chr(ord("r") + i) for i in range(nspatial))
    blocks = "".join(a + b for a, b in zip(spatial, within))
    return jnp.einsum(f"nc{blocks},oc{within}->no{spatial}", x, weight, precision=lax.Precision.HIGHEST)


# Note [Transposed convolutions with kernel equal to stride]
# A transposed convolution whose kernel equals its stride (a UNet's or a decoder's
# ConvTranspose2d(k=2, stride=2), no padding) writes each input position into its own
# k x k output block: a product of the input with the weights, its blocks then laid
# out by a reshape. As a convolution of the input dilated by the stride, XLA CPU took
# 29 ms forward and 1.06 s with the gradient (128 -> 64 channels, 32x32 -> 64x64,
# batch 8; PyTorch 12 ms forward); as a product, 8 and 46 ms.


def _blocks_apart(kernel, stride, padding, dilation, output_padding, groups):
    """Whether a transposed convolution writes each input position into its own block
    (Note [Transposed convolutions with kernel equal to stride]); all lists expanded."""
    return (groups == 1 and tuple(kernel) == tuple(stride) and not any(padding) and not any(output_padding)
            and all(d == 1 for d in dilation))


def _upsample_as_matmul(input, weight):
    """A transposed convolution (groups 1) with kernel == stride, no padding, dilation 1."""
    nspatial = input.ndim - 2
    spatial = "".join(chr(ord("h") + i) for i in range(nspatial))
    within = "".join(chr(ord("r") + i) for i in range(nspatial))
    blocks = "".join(a + b for a, b in zip(spatial, within))
    out = jnp.einsum(f"nc{spatial},co{within}->no{blocks}", input, weight, precision=lax.Precision.HIGHEST)
    sizes = tuple(n * k for n, k in zip(input.shape[2:], weight.shape[2:]))
    return out.reshape(input.shape[:1] + weight.shape[1:2] + sizes)


def _conv(input, weight, stride, padding, dilation, transposed, output_padding, groups):
    nspatial = input.ndim - 2
    stride = _expand(stride, nspatial)
    padding = _expand(padding, nspatial)
    dilation = _expand(dilation, nspatial)
    kernel = weight.shape[2:]
    if transposed:
        output_padding = _expand(output_padding, nspatial)
        if _blocks_apart(kernel, stride, padding, dilation, output_padding, groups):
            return _upsample_as_matmul(input, weight)
        cin = weight.shape[0]
        # (in, out/g, k...) -> (out, in/g, k...), flipped: the adjoint of a forward conv.
        w = weight.reshape((groups, cin // groups) + weight.shape[1:])
        w = jnp.swapaxes(w, 1, 2).reshape((weight.shape[1] * groups, cin // groups) + kernel)
        w = jnp.flip(w, axis=tuple(range(2, 2 + nspatial)))
        pads = [
            (d * (k - 1) - p, d * (k - 1) - p + op)
            for k, p, d, op in zip(kernel, padding, dilation, output_padding)
        ]
        return lax.conv_general_dilated(
            input,
            w,
            window_strides=(1,) * nspatial,
            padding=pads,
            lhs_dilation=stride,
            rhs_dilation=dilation,
            dimension_numbers=_dimension_numbers(nspatial),
            feature_group_count=groups,
            precision=lax.Precision.HIGHEST,
        )
    out_sizes = [(n + 2 * p - d * (k - 1) - 1) // st + 1
                 for n, k, p, d, st in zip(input.shape[2:], kernel, padding, dilation, stride)]
    if _patches_apart(kernel, stride, padding, dilation, groups) and 0 < math.prod(out_sizes):
        return _patches_as_matmul(input, weight)
    if groups == 1 and 0 < math.prod(out_sizes) <= SMALL_OUTPUT_POSITIONS:
        return _conv_as_matmul(input, weight, stride, padding, dilation, out_sizes)
    if _depthwise(input.shape, weight.shape, groups) and 0 < math.prod(out_sizes):
        return _depthwise_as_taps(input, weight, stride, padding, dilation, out_sizes)
    return lax.conv_general_dilated(
        input,
        weight,
        window_strides=stride,
        padding=[(p, p) for p in padding],
        rhs_dilation=dilation,
        dimension_numbers=_dimension_numbers(nspatial),
        feature_group_count=groups,
        precision=lax.Precision.HIGHEST,
    )


# Note [Gradients of transposed convolutions]
# A transposed convolution is the adjoint of the forward convolution with the same
# weights (out_channels -> in_channels): y = A(w)^T x. So its input gradient is that
# forward convolution of the output gradient g, and its weight gradient that of
# <A(w) g, x>: the forward convolution's weight gradient, with g as its input and x as
# its cotangent. Differentiating the lowering itself instead (a convolution of the
# stride-dilated input) gives XLA CPU a weight gradient over a dilated input that took
# 4.6 s for ConvTranspose2d(128, 64, k=4, s=2, p=1) on 32x32, batch 8 (PyTorch: 83 ms
# forward and backward); as forward-convolution gradients, 66 to 260 ms in three runs
# on a loaded machine. A transposed convolution whose kernel equals its stride keeps the
# gradient of its product form, which is faster still.


def _transposed_gradients(x, w, g, stride, padding, dilation, groups):
    """The forward convolution of g (the input gradient) and the vjp of it in w (the
    weight gradient, given x), or None where its output is not x's shape (an
    output_padding of a stride or more, which PyTorch allows with dilation)."""
    nspatial = x.ndim - 2
    zeros = (0,) * nspatial

    def adjoint(w):
        return _conv(g.astype(jnp.result_type(x, w)), w, stride, padding, dilation, False, zeros, groups)

    out, vjp = jax.vjp(adjoint, w)
    if out.shape != x.shape:
        return None
    return out, vjp


# Note [Grouped convolutions]
# XLA CPU's kernels handle grouped convolutions poorly. JAX differentiates one in its
# weights as a convolution with batch_group_count = groups, which XLA CPU expands into a
# dense convolution over all channel pairs, then masks to the diagonal blocks: for a
# depthwise 5x5 convolution of 1152 channels, a (1152, 1152, 5, 5) array and 265 MB of
# temporaries; 3.5 s for the gradients of a groups-32 3x3 convolution of 64 channels at
# 56x56, batch 8 (PyTorch: 21 ms on one thread). So the weight gradient is one product
# per kernel tap: the tap's strided window of the input, grouped, against the output
# gradient, contracted over batch and output positions (the forward's work, no
# intermediate larger than the input): 29 ms there. A depthwise convolution (one input
# channel per group) is also slow forward in XLA's kernel, 42 ms for 64 channels at
# 56x56, batch 8 (PyTorch 11 ms): as a sum over kernel taps of each tap's window times
# its weights, which XLA fuses into one loop, 1.4 ms, and its input gradient, the
# gradient of that sum, 20 against 37 ms. With more input channels per group the
# per-tap products lose to XLA's kernel forward (8 groups of 16 channels: 19 against
# 11 ms), so there the forward and input gradient stay XLA's.
MAX_DEPTHWISE_TAPS = 64


def _depthwise(input_shape, weight_shape, groups):
    """Whether a forward convolution takes _depthwise_as_taps: one input channel per
    group, a kernel of at most MAX_DEPTHWISE_TAPS taps, a nonempty batch."""
    return 1 < groups == input_shape[1] and 0 < input_shape[0] and math.prod(weight_shape[2:]) <= MAX_DEPTHWISE_TAPS


def _taps(kernel, stride, dilation, out_sizes, n, c):
    """(start, limit, strides) of each kernel tap's window in the padded input."""
    for offsets in itertools.product(*(range(k) for k in kernel)):
        start = (0, 0) + tuple(o * d for o, d in zip(offsets, dilation))
        limit = (n, c) + tuple(b + st * (m - 1) + 1 for b, st, m in zip(start[2:], stride, out_sizes))
        yield start, limit, (1, 1) + tuple(stride)


def _pad_spatial(x, low_high):
    return lax.pad(x, jnp.zeros((), x.dtype), ((0, 0, 0), (0, 0, 0)) + tuple((lo, hi, 0) for lo, hi in low_high))


def _depthwise_as_taps(input, weight, stride, padding, dilation, out_sizes):
    """A convolution with one input channel per group: sum over kernel taps of the tap's
    window times its weights (Note [Grouped convolutions]); lists expanded."""
    n, c = input.shape[:2]
    multiplier = weight.shape[0] // c
    x = _pad_spatial(input, [(p, p) for p in padding])
    w = weight.reshape((1, c, multiplier, -1) + (1,) * len(out_sizes))
    out = None
    for t, (start, limit, strides) in enumerate(_taps(weight.shape[2:], stride, dilation, out_sizes, n, c)):
        term = lax.slice(x, start, limit, strides).reshape((n, c, 1) + tuple(out_sizes)) * w[:, :, :, t]
        out = term if out is None else out + term
    return out.reshape((n, c * multiplier) + tuple(out_sizes))


def _depthwise_input_gradient(g, weight, input_sizes, stride, padding, dilation):
    """The input gradient of _depthwise_as_taps: each tap's share of the output gradient,
    put back where its window read; lists expanded."""
    n = g.shape[0]
    out_sizes = tuple(g.shape[2:])
    c = input_sizes[1]
    multiplier = weight.shape[0] // c
    gg = g.reshape((n, c, multiplier) + out_sizes)
    w = weight.reshape((1, c, multiplier, -1) + (1,) * len(out_sizes))
    padded = tuple(h + 2 * p for h, p in zip(input_sizes[2:], padding))
    total = None
    for t, (start, limit, _) in enumerate(_taps(weight.shape[2:], stride, dilation, out_sizes, n, c)):
        share = gg * w[:, :, :, t]
        share = share[:, :, 0] if multiplier == 1 else share.sum(axis=2)
        placed = lax.pad(share, jnp.zeros((), share.dtype), ((0, 0, 0), (0, 0, 0)) + tuple(
            (lo, size - hi, st - 1) for lo, hi, size, st in zip(start[2:], limit[2:], padded, stride)))
        total = placed if total is None else total + placed
    return lax.slice(total, (0, 0) + tuple(padding), (n, c) + tuple(p + h for p, h in zip(padding, input_sizes[2:])))


def _grouped_weight_gradient(x, g, kernel, stride, padding, dilation, groups):
    """The weight gradient of a forward convolution with groups > 1 (Note [Grouped
    convolutions]): per tap, the window against the output gradient, contracted over
    batch and output positions; lists expanded."""
    n, c = x.shape[:2]
    o, out_sizes = g.shape[1], tuple(g.shape[2:])
    xp = _pad_spatial(x, [(p, p) for p in padding])
    gg = g.reshape((n, groups, o // groups) + out_sizes)
    spatial = "".join(chr(ord("h") + i) for i in range(len(kernel)))
    summed = (0,) + tuple(range(3, 3 + len(out_sizes)))
    taps = []
    for start, limit, strides in _taps(kernel, stride, dilation, out_sizes, n, c):
        window = lax.slice(xp, start, limit, strides).reshape((n, groups, c // groups) + out_sizes)
        if c == groups:  # depthwise: a product and a sum, cheaper to trace than a contraction
            taps.append(jnp.sum(window * gg, axis=summed)[:, :, None])  # (groups, o / groups, 1)
        else:
            taps.append(jnp.einsum(f"ngc{spatial},ngo{spatial}->goc", window, gg, precision=lax.Precision.HIGHEST))
    return jnp.stack(taps, axis=-1).reshape((o, c // groups) + tuple(kernel))  # from (groups, o/g, c/g, taps)


def lower_convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    x, w = opmath(input), opmath(weight)
    out = _conv(x, w, stride, padding, dilation, transposed, output_padding, groups)
    if bias is not None:
        out = out + opmath(bias).reshape((1, -1) + (1,) * (out.ndim - 2)).astype(out.dtype)
    return out.astype(input.dtype)


def lower_convolution_backward(
    grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups, output_mask
):
    x, w, g = opmath(input), opmath(weight), opmath(grad_output)

    def forward(x, w):
        return _conv(x, w, stride, padding, dilation, transposed, output_padding, groups)

    grad_input = grad_weight = grad_bias = None
    adjoint = None
    n = x.ndim - 2
    if transposed and (output_mask[0] or output_mask[1]) and not _blocks_apart(
            w.shape[2:], _expand(stride, n), _expand(padding, n), _expand(dilation, n), _expand(output_padding, n),
            groups):  # the product's own gradient is faster there (21 against 36 ms for a UNet's up-sampling)
        adjoint = _transposed_gradients(x, w, g, stride, padding, dilation, groups)
    if adjoint is not None:  # Note [Gradients of transposed convolutions]
        gx, vjp = adjoint
        if output_mask[0]:
            grad_input = gx.astype(input.dtype)
        if output_mask[1]:
            grad_weight = vjp(x.astype(gx.dtype))[0].astype(weight.dtype)
    elif groups > 1 and not transposed and (output_mask[0] or output_mask[1]):  # Note [Grouped convolutions]
        gg = g.astype(jnp.result_type(x, w))
        stride, padding, dilation = _expand(stride, n), _expand(padding, n), _expand(dilation, n)
        if output_mask[0] and _depthwise(x.shape, w.shape, groups):
            grad_input = _depthwise_input_gradient(gg, w.astype(gg.dtype), x.shape, stride, padding,
                                                   dilation).astype(input.dtype)
        elif output_mask[0]:
            _, vjp = jax.vjp(lambda x: forward(x, w), x)
            grad_input = vjp(gg)[0].astype(input.dtype)
        if output_mask[1]:
            grad_weight = _grouped_weight_gradient(x.astype(gg.dtype), gg, w.shape[2:], stride, padding, dilation,
                                                   groups).astype(weight.dtype)
    elif output_mask[0] or output_mask[1]:
        _, vjp = jax.vjp(forward, x, w)
        gx, gw = vjp(g.astype(jnp.result_type(x, w)))
        if output_mask[0]:
            grad_input = gx.astype(input.dtype)
        if output_mask[1]:
            grad_weight = gw.astype(weight.dtype)
    if output_mask[2]:
        axes = (0,) + tuple(range(2, grad_output.ndim))
        grad_bias = jnp.sum(g, axis=axes).astype(grad_output.dtype)
    return grad_input, grad_weight, grad_bias


def _window_positions(h, w, kernel_size, dilation, padding, stride):
    """Flat positions in the padded (h, w) plane of every (kernel tap, block), tap-major."""
    import numpy as np

    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = kernel_size, dilation, padding, stride
    blocks_h = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    blocks_w = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    ki, kj = np.meshgrid(np.arange(kh), np.arange(kw), indexing="ij")
    bi, bj = np.meshgrid(np.arange(blocks_h), np.arange(blocks_w), indexing="ij")
    rows = (ki.reshape(-1, 1) * dh + bi.reshape(1, -1) * sh).reshape(-1)
    cols = (kj.reshape(-1, 1) * dw + bj.reshape(1, -1) * sw).reshape(-1)
    return rows * (w + 2 * pw) + cols


def lower_col2im(self, output_size, kernel_size, dilation, padding, stride):
    # fold: every column of window values is added back into its window; the target
    # positions are static, and overlapping windows add up.
    batched = self.ndim == 3
    cols = self if batched else self[None]
    n, ckk, length = cols.shape
    (h, w), (kh, kw), (ph, pw) = output_size, kernel_size, padding
    channels = ckk // (kh * kw)
    flat = _window_positions(h, w, kernel_size, dilation, padding, stride)
    values = opmath(cols).reshape(n, channels, kh * kw * length)
    padded = jnp.zeros((n, channels, (h + 2 * ph) * (w + 2 * pw)), values.dtype).at[:, :, flat].add(values)
    out = padded.reshape(n, channels, h + 2 * ph, w + 2 * pw)[:, :, ph : ph + h, pw : pw + w].astype(self.dtype)
    return out if batched else out[0]


def lower_im2col(self, kernel_size, dilation, padding, stride):
    # unfold: the values of every window, gathered at static positions.
    batched = self.ndim == 4
    x = self if batched else self[None]
    n, channels, h, w = x.shape
    (kh, kw), (ph, pw) = kernel_size, padding
    flat = _window_positions(h, w, kernel_size, dilation, padding, stride)
    # Explicit sizes, not -1: batches and channels may be empty.
    padded = jnp.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw))).reshape(n, channels, (h + 2 * ph) * (w + 2 * pw))
    out = padded[:, :, flat].reshape(n, channels * kh * kw, flat.size // (kh * kw))
    return out if batched else out[0]
