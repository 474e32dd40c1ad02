"""Shape functions of pooling ops (max, average, adaptive) and their backward ops, with
the window arithmetic the lowerings share."""

from __future__ import annotations

import torch

from .common import TensorMeta, require_kernel_dtype, scalar_type_name


def pool_params(nd, kernel_size, stride, padding, dilation=1):
    """kernel, stride, padding, dilation as nd-tuples: one value stands for all dims and
    an empty stride means the kernel size, as in ATen."""

    def expand(name, v, allow_empty=False):
        v = (v,) if isinstance(v, int) else tuple(v)
        if allow_empty and not v:
            return None
        if len(v) == 1:
            v = v * nd
        if len(v) != nd:
            raise RuntimeError(f"{name} must either be a single int, or a tuple of {nd} ints")
        return v

    k = expand("kernel_size", kernel_size)
    s = expand("stride", stride, allow_empty=True) or k
    p = expand("padding", padding)
    d = expand("dilation", dilation)
    return k, s, p, d


def pool_output_size(size, k, s, p, d, ceil_mode):
    out = (size + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1  # the last window must start inside the input or its left padding
    return out


def _check_pool(name, self, nd, k, s, p, d):
    if self.ndim not in (nd + 1, nd + 2) or any(x == 0 for x in self.shape[-nd - 1 :]):
        raise RuntimeError(
            f"{name}: Expected {nd + 1}D or {nd + 2}D (batch mode) tensor with optional 0 dim batch size "
            f"for input, but got: {list(self.shape)}"
        )
    if any(x <= 0 for x in k):
        raise RuntimeError(f"{name}: kernel_size must be greater than zero, but got {list(k)}")
    if any(x <= 0 for x in s):
        raise RuntimeError(f"{name}: stride must be greater than zero, but got {list(s)}")
    if any(x <= 0 for x in d):
        raise RuntimeError(f"{name}: dilation must be greater than zero, but got {list(d)}")
    if any(pp < 0 or pp > kk // 2 for pp, kk in zip(p, k)):
        raise RuntimeError(
            f"pad should be at most half of effective kernel size, but got pad={list(p)}, kernel_size={list(k)}"
        )


def pooled_shape(name, self, nd, kernel_size, stride, padding, dilation, ceil_mode):
    k, s, p, d = pool_params(nd, kernel_size, stride, padding, dilation)
    _check_pool(name, self, nd, k, s, p, d)
    spatial = tuple(pool_output_size(i, *a, ceil_mode) for i, *a in zip(self.shape[-nd:], k, s, p, d))
    if any(o <= 0 for o in spatial):
        raise RuntimeError(
            f"Given input size: ({'x'.join(map(str, self.shape[-nd - 1:]))}). Calculated output size: "
            f"({'x'.join(map(str, (self.shape[-nd - 1],) + spatial))}). Output size is too small"
        )
    return self.shape[:-nd] + spatial


def _max_pool(name, self, nd, kernel_size, stride, padding, dilation, ceil_mode):
    if self.dtype is torch.bool or self.dtype.is_complex:
        raise RuntimeError(f'"{name}" not implemented for \'{self.dtype}\'')
    shape = pooled_shape(name, self, nd, kernel_size, stride, padding, dilation, ceil_mode)
    return TensorMeta(shape, self.dtype), TensorMeta(shape, torch.int64)


def max_pool2d_with_indices_output_shape(
    self, kernel_size, stride=(), padding=(0, 0), dilation=(1, 1), ceil_mode=False
):
    return _max_pool("max_pool2d", self, 2, kernel_size, stride, padding, dilation, ceil_mode)


def max_pool3d_with_indices_output_shape(
    self, kernel_size, stride=(), padding=(0, 0, 0), dilation=(1, 1, 1), ceil_mode=False
):
    return _max_pool("max_pool3d", self, 3, kernel_size, stride, padding, dilation, ceil_mode)


def _pool_backward(grad_output, self, indices=None):
    if indices is not None and tuple(indices.shape) != tuple(grad_output.shape):
        raise RuntimeError(f"Expected indices of size {list(grad_output.shape)}, but got {list(indices.shape)}")
    return TensorMeta(self.shape, self.dtype)


def max_pool2d_with_indices_backward_output_shape(
    grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices
):
    shape = pooled_shape("max_pool2d", self, 2, kernel_size, stride, padding, dilation, ceil_mode)
    _check_grad(grad_output, shape)
    return _pool_backward(grad_output, self, indices)


def max_pool3d_with_indices_backward_output_shape(
    grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices
):
    shape = pooled_shape("max_pool3d", self, 3, kernel_size, stride, padding, dilation, ceil_mode)
    _check_grad(grad_output, shape)
    return _pool_backward(grad_output, self, indices)


def _check_grad(grad_output, shape):
    if tuple(grad_output.shape) != tuple(shape):
        raise RuntimeError(f"Expected grad_output of size {list(shape)}, but got {list(grad_output.shape)}")


def _avg_pool(name, self, nd, kernel_size, stride, padding, ceil_mode, divisor_override):
    if divisor_override is not None and divisor_override == 0:
        raise RuntimeError("divisor must be not zero")
    if self.dtype is torch.bool or self.dtype.is_complex:
        raise RuntimeError(f'"{name}" not implemented for \'{self.dtype}\'')
    return pooled_shape(name, self, nd, kernel_size, stride, padding, 1, ceil_mode)


def avg_pool2d_output_shape(
    self, kernel_size, stride=(), padding=(0, 0), ceil_mode=False, count_include_pad=True, divisor_override=None
):
    return TensorMeta(
        _avg_pool("avg_pool2d", self, 2, kernel_size, stride, padding, ceil_mode, divisor_override), self.dtype
    )


def avg_pool3d_output_shape(
    self, kernel_size, stride=(), padding=(0, 0, 0), ceil_mode=False, count_include_pad=True, divisor_override=None
):
    return TensorMeta(
        _avg_pool("avg_pool3d", self, 3, kernel_size, stride, padding, ceil_mode, divisor_override), self.dtype
    )


def avg_pool2d_backward_output_shape(
    grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override
):
    _check_grad(
        grad_output, _avg_pool("avg_pool2d", self, 2, kernel_size, stride, padding, ceil_mode, divisor_override)
    )
    return TensorMeta(self.shape, self.dtype)


def avg_pool3d_backward_output_shape(
    grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override
):
    _check_grad(
        grad_output, _avg_pool("avg_pool3d", self, 3, kernel_size, stride, padding, ceil_mode, divisor_override)
    )
    return TensorMeta(self.shape, self.dtype)


def _adaptive(name, self, nd, output_size):
    output_size = tuple(output_size)
    if len(output_size) == 1:
        output_size = output_size * nd
    if len(output_size) != nd:
        raise RuntimeError(f"{name}: output_size must be {nd}")
    if self.ndim not in (nd + 1, nd + 2) or any(x == 0 for x in self.shape[-nd:]):
        raise RuntimeError(
            f"{name}(): Expected {nd + 1}D or {nd + 2}D tensor, but got {list(self.shape)}"
        )
    if any(o < 0 for o in output_size):
        raise RuntimeError(f"{name}: elements of output_size must be greater than or equal to 0")
    return self.shape[:-nd] + output_size


def _adaptive_avg_pool2d_output_shape(self, output_size):
    return TensorMeta(_adaptive("adaptive_avg_pool2d", self, 2, output_size), self.dtype)


def _adaptive_avg_pool3d_output_shape(self, output_size):
    return TensorMeta(_adaptive("adaptive_avg_pool3d", self, 3, output_size), self.dtype)


def _adaptive_avg_pool2d_backward_output_shape(grad_output, self):
    return TensorMeta(self.shape, self.dtype)


def _adaptive_avg_pool3d_backward_output_shape(grad_output, self):
    return TensorMeta(self.shape, self.dtype)


def adaptive_max_pool2d_output_shape(self, output_size):
    shape = _adaptive("adaptive_max_pool2d", self, 2, output_size)
    return TensorMeta(shape, self.dtype), TensorMeta(shape, torch.int64)


def adaptive_max_pool2d_backward_output_shape(grad_output, self, indices):
    return _pool_backward(grad_output, self, indices)


def adaptive_max_pool3d_output_shape(self, output_size):
    shape = _adaptive("adaptive_max_pool3d", self, 3, output_size)
    require_kernel_dtype("adaptive_max_pool3d_cpu", self.dtype, "float")
    return TensorMeta(shape, self.dtype), TensorMeta(shape, torch.int64)


def adaptive_max_pool3d_backward_output_shape(grad_output, self, indices):
    return _pool_backward(grad_output, self, indices)


_FRACTIONAL_DIMS = {2: ("height", "width"), 3: ("time", "height", "width")}


def _fractional(self, nd, kernel_size, output_size, random_samples):
    # CPU's checks, in CPU's order: argument lengths, input rank and sizes, window fit,
    # output allocation, then the random samples and the kernel's dtype dispatch.
    name = f"fractional_max_pool{nd}d"
    where = f"{name}()" if nd == 2 else f"{name}_out()"
    count = "Ints" if nd == 2 else "three Ints"
    if len(kernel_size) != nd:
        raise RuntimeError(f"{name}: kernel_size must either be a single Int or tuple of {count}")
    if len(output_size) != nd:
        raise RuntimeError(f"{name}: output_size must either be a single Int or tuple of {count}")
    if self.ndim not in (nd + 1, nd + 2):
        raise RuntimeError(f"{where}: Expected {nd + 1}D or {nd + 2}D tensor, but got: {list(self.shape)}")
    for i in range(1, self.ndim):
        if self.shape[i] == 0:
            raise RuntimeError(
                f"{where}: Expected input to have non-zero size for non-batch dimensions, but got"
                f"{list(self.shape)} with dimension {i} being empty."
            )
    spatial = self.shape[-nd:]
    for dim, size, k, out in zip(_FRACTIONAL_DIMS[nd], spatial, kernel_size, output_size):
        # 3-d rejects a window ending exactly at the input's end; 2-d allows it.
        if out + k - 1 > size or (nd == 3 and out + k - 1 == size):
            raise RuntimeError(f"{where}: pool {dim} {k} too large relative to input {dim} {size}")
    shape = tuple(self.shape[:-nd]) + tuple(output_size)
    for s in shape:
        if s < 0:
            raise RuntimeError(f"Trying to create tensor with negative dimension {s}: {list(shape)}")
    batch = self.shape[0] if self.ndim == nd + 2 else 1
    if random_samples.dtype != self.dtype:
        raise RuntimeError("Expect _random_samples to have the same dtype as input")
    if random_samples.ndim != 3:
        raise RuntimeError(f"Expect _random_samples to have 3 dimensions, got {random_samples.ndim}")
    if random_samples.shape[0] < batch:
        raise RuntimeError("Expect _random_samples.size(0) no less then input batch size.")
    if random_samples.shape[1] != self.shape[-nd - 1]:
        raise RuntimeError("Expect _random_samples.size(1) equals to input channel size.")
    if random_samples.shape[2] != nd:
        raise RuntimeError(f"Expect _random_samples.size(2) equals to {nd}; got {random_samples.shape[2]}.")
    require_kernel_dtype(f"{name}_out_frame", self.dtype, "float")
    return TensorMeta(shape, self.dtype), TensorMeta(shape, torch.int64)


def fractional_max_pool2d_output_shape(self, kernel_size, output_size, random_samples):
    return _fractional(self, 2, kernel_size, output_size, random_samples)


def fractional_max_pool3d_output_shape(self, kernel_size, output_size, random_samples):
    return _fractional(self, 3, kernel_size, output_size, random_samples)


def _fractional_backward(grad_output, self, nd, output_size, indices):
    name = f"fractional_max_pool{nd}d_backward"
    if nd == 2:
        # CPU compares whole sizes (batch and channels included) against the input's.
        expected = tuple(self.shape[:-nd]) + tuple(output_size)
        if len(output_size) != nd or tuple(grad_output.shape) != expected:
            raise RuntimeError(f"{name}(): gradOutput sizes unexpected")
        if tuple(indices.shape) != expected:
            raise RuntimeError(f"{name}(): indices sizes unexpected")
    else:
        if len(output_size) != nd:
            raise RuntimeError(f"{name}: output_size must either be a single Int or tuple of three Ints")
        first = self.ndim - nd
        for i, (dim, out) in enumerate(zip(_FRACTIONAL_DIMS[nd], output_size)):
            if first + i >= grad_output.ndim or grad_output.shape[first + i] != out:
                raise RuntimeError(f"{name}_out(): gradOutput {dim} unexpected")
        # CPU reads gradOutput and indices as laid out for the input's batch and channels
        # without checking them (out-of-bounds reads when they differ); raise instead.
        expected = tuple(self.shape[:-nd]) + tuple(output_size)
        if tuple(grad_output.shape) != expected:
            raise RuntimeError(
                f"{name}_out(): gradOutput sizes unexpected: expected {list(expected)}, got {list(grad_output.shape)}"
            )
        if tuple(indices.shape) != expected:
            raise RuntimeError(
                f"{name}_out(): indices sizes unexpected: expected {list(expected)}, got {list(indices.shape)}"
            )
    require_kernel_dtype(f"{name}_out_frame", self.dtype, "float")
    if grad_output.dtype != self.dtype:
        raise RuntimeError(
            f"expected scalar type {scalar_type_name(self.dtype)} but found {scalar_type_name(grad_output.dtype)}"
        )
    if indices.dtype != torch.int64:
        raise RuntimeError(f"expected scalar type Long but found {scalar_type_name(indices.dtype)}")
    return TensorMeta(self.shape, self.dtype)


def fractional_max_pool2d_backward_output_shape(grad_output, self, kernel_size, output_size, indices):
    return _fractional_backward(grad_output, self, 2, output_size, indices)


def fractional_max_pool3d_backward_output_shape(grad_output, self, kernel_size, output_size, indices):
    return _fractional_backward(grad_output, self, 3, output_size, indices)
