"""Output metadata of the ops in lowerings/complex_ops.py."""

from __future__ import annotations

import torch

from .common import TensorMeta, broadcast_shapes, scalar_type_name

_TO_COMPLEX = {torch.float32: torch.complex64, torch.float64: torch.complex128, torch.float16: torch.complex32}
_TO_REAL = {torch.complex64: torch.float32, torch.complex128: torch.float64, torch.complex32: torch.float16}


def _from_parts(op, a, b, first, second):
    if a.dtype not in (torch.float32, torch.float64, torch.float16):
        raise RuntimeError(
            f"Expected both inputs to be Half, Float or Double tensors but got {scalar_type_name(a.dtype)} and "
            f"{scalar_type_name(b.dtype)}"
        )
    if a.dtype != b.dtype:
        raise RuntimeError(
            f"Expected object of scalar type {scalar_type_name(a.dtype)} but got scalar type "
            f"{scalar_type_name(b.dtype)} for second argument"
        )
    return TensorMeta(broadcast_shapes(a.shape, b.shape), _TO_COMPLEX[a.dtype])


def complex_output_shape(real, imag):
    return _from_parts("complex", real, imag, "real", "imag")


def polar_output_shape(abs, angle):
    return _from_parts("polar", abs, angle, "abs", "angle")


def angle_output_shape(self):
    if self.dtype.is_complex:
        return TensorMeta(self.shape, _TO_REAL[self.dtype])
    if self.dtype.is_floating_point:
        return TensorMeta(self.shape, self.dtype)
    return TensorMeta(self.shape, torch.get_default_dtype())


def _conj_physical_output_shape(self):
    return TensorMeta(self.shape, self.dtype)


def frexp_Tensor_output_shape(self):
    if not self.dtype.is_floating_point:
        raise RuntimeError(
            "torch.frexp() only supports floating-point dtypes, but got " + scalar_type_name(self.dtype)
        )
    return TensorMeta(self.shape, self.dtype), TensorMeta(self.shape, torch.int32)
