"""Shape functions of the FFT primitives (lowerings/fft.py).

The aten primitives take dims already wrapped by torch.fft.*: like PyTorch's CPU
kernels they reject negative, out-of-range and repeated dims.
"""

from __future__ import annotations

import torch

from .common import TensorMeta, scalar_type_name

_TO_COMPLEX = {torch.float32: torch.complex64, torch.float64: torch.complex128}
_TO_REAL = {torch.complex64: torch.float32, torch.complex128: torch.float64}


def _check_dtype(dtype, want_complex):
    if dtype in (torch.float16, torch.bfloat16, torch.complex32):
        raise RuntimeError(f"MKL FFT doesn't support tensors of type: {scalar_type_name(dtype)}")
    if want_complex and not dtype.is_complex:
        raise RuntimeError(f"Only supports complex dtypes, but found: {scalar_type_name(dtype)}")
    if not want_complex and not dtype.is_floating_point:
        raise RuntimeError(f"Only supports floating-point dtypes, but found: {scalar_type_name(dtype)}")


def _check_dims(x, dim, allow_empty):
    if not dim and not allow_empty:
        raise RuntimeError("ArrayRef: attempted to access back() of empty list")
    if len(set(dim)) != len(dim) or any(not 0 <= d < x.ndim for d in dim):
        raise RuntimeError(f"FFT dims must be distinct and in range [0, {x.ndim}), got {list(dim)}")
    if x.numel() == 0:
        raise RuntimeError(f"FFT of a tensor with 0 elements (shape {list(x.shape)}) is not supported")


def _fft_r2c_output_shape(self, dim, normalization, onesided):
    _check_dtype(self.dtype, want_complex=False)
    _check_dims(self, dim, allow_empty=False)
    shape = list(self.shape)
    if onesided:
        shape[dim[-1]] = shape[dim[-1]] // 2 + 1
    return TensorMeta(tuple(shape), _TO_COMPLEX[self.dtype])


def _fft_c2r_output_shape(self, dim, normalization, last_dim_size):
    _check_dtype(self.dtype, want_complex=True)
    _check_dims(self, dim, allow_empty=False)
    last = dim[-1]
    if last_dim_size < 1 or self.shape[last] not in (last_dim_size, last_dim_size // 2 + 1):
        raise RuntimeError(
            f"_fft_c2r: input size {self.shape[last]} in dim {last} does not fit an output "
            f"size of {last_dim_size} (expected {last_dim_size // 2 + 1})"
        )
    shape = list(self.shape)
    shape[last] = last_dim_size
    return TensorMeta(tuple(shape), _TO_REAL[self.dtype])


def _fft_c2c_output_shape(self, dim, normalization, forward):
    _check_dtype(self.dtype, want_complex=True)
    _check_dims(self, dim, allow_empty=True)
    return TensorMeta(self.shape, self.dtype)
