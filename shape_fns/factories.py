"""Output metadata of the factory ops in lowerings/factories.py."""

from __future__ import annotations

import torch

from .common import TensorMeta, scalar_type_name
from .storage_size import check_strided_storage_size


def _check_size(size) -> tuple[int, ...]:
    for s in size:
        if s < 0:
            raise RuntimeError(f"Trying to create tensor with negative dimension {s}: {list(size)}")
    return tuple(size)


def _default(dtype):
    return dtype if dtype is not None else torch.get_default_dtype()


def zeros_output_shape(size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return TensorMeta(_check_size(size), _default(dtype))


def ones_output_shape(size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return TensorMeta(_check_size(size), _default(dtype))


def zeros_like_output_shape(self, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return TensorMeta(self.shape, dtype or self.dtype)


def ones_like_output_shape(self, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return TensorMeta(self.shape, dtype or self.dtype)


def empty_like_output_shape(self, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return TensorMeta(self.shape, dtype or self.dtype)


def full_like_output_shape(
    self, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None
):
    return TensorMeta(self.shape, dtype or self.dtype)


def new_zeros_output_shape(self, size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return TensorMeta(_check_size(size), dtype or self.dtype)


def new_ones_output_shape(self, size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return TensorMeta(_check_size(size), dtype or self.dtype)


def new_empty_output_shape(self, size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return TensorMeta(_check_size(size), dtype or self.dtype)


def new_full_output_shape(self, size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None):
    return TensorMeta(_check_size(size), dtype or self.dtype)


def fill_Scalar_output_shape(self, value):
    return self


def fill_Tensor_output_shape(self, value):
    if len(value.shape) != 0:
        raise RuntimeError(f"fill_ only supports 0-dimension value tensor but got tensor with {len(value.shape)} "
                           "dimensions.")
    return self


def zero_output_shape(self):
    return self


def new_empty_strided_output_shape(self, size, stride, *, dtype=None, layout=None, device=None, pin_memory=None):
    # The result is contiguous: the requested strides only matter to memory layout, and
    # to whether PyTorch could allocate it.
    size = _check_size(size)
    check_strided_storage_size(size, stride, dtype or self.dtype)
    return TensorMeta(size, dtype or self.dtype)


def _check_eye(n, m):
    if n < 0:
        raise RuntimeError(f"n must be greater or equal to 0, got {n}")
    if m < 0:
        raise RuntimeError(f"m must be greater or equal to 0, got {m}")


def eye_output_shape(n, *, dtype=None, layout=None, device=None, pin_memory=None):
    _check_eye(n, n)
    return TensorMeta((n, n), _default(dtype))


def eye_m_output_shape(n, m, *, dtype=None, layout=None, device=None, pin_memory=None):
    _check_eye(n, m)
    return TensorMeta((n, m), _default(dtype))


def _is_complex(x) -> bool:
    if isinstance(x, TensorMeta):
        return x.dtype.is_complex
    if isinstance(x, complex):
        return True
    kind = getattr(getattr(x, "dtype", None), "kind", None)
    return kind == "c"


def _range_meta(op, start, end, steps, dtype):
    if steps < 0:
        raise RuntimeError("number of steps must be non-negative")
    for name, t in (("start", start), ("end", end)):
        if isinstance(t, TensorMeta) and t.ndim != 0:
            dims = [s.ndim if isinstance(s, TensorMeta) else 0 for s in (start, end)]
            raise RuntimeError(
                f"{op} only supports 0-dimensional start and end tensors, but got start with {dims[0]} "
                f"dimension(s) and end with {dims[1]} dimension(s)."
            )
    if dtype is None:
        dtype = torch.get_default_dtype()
        if _is_complex(start) or _is_complex(end):
            dtype = {torch.float64: torch.complex128, torch.float16: torch.complex32}.get(dtype, torch.complex64)
    if dtype == torch.bool and steps > 1:
        raise RuntimeError(f"\"{op}_cpu\" not implemented for 'Bool'")
    return TensorMeta((steps,), dtype)


def linspace_output_shape(start, end, steps, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _range_meta("linspace", start, end, steps, dtype)


def linspace_Tensor_Tensor_output_shape(start, end, steps, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _range_meta("linspace", start, end, steps, dtype)


def linspace_Tensor_Scalar_output_shape(start, end, steps, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _range_meta("linspace", start, end, steps, dtype)


def linspace_Scalar_Tensor_output_shape(start, end, steps, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _range_meta("linspace", start, end, steps, dtype)


def logspace_output_shape(start, end, steps, base=10.0, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _range_meta("logspace", start, end, steps, dtype)


def logspace_Tensor_Tensor_output_shape(
    start, end, steps, base=10.0, *, dtype=None, layout=None, device=None, pin_memory=None
):
    return _range_meta("logspace", start, end, steps, dtype)


def logspace_Tensor_Scalar_output_shape(
    start, end, steps, base=10.0, *, dtype=None, layout=None, device=None, pin_memory=None
):
    return _range_meta("logspace", start, end, steps, dtype)


def logspace_Scalar_Tensor_output_shape(
    start, end, steps, base=10.0, *, dtype=None, layout=None, device=None, pin_memory=None
):
    return _range_meta("logspace", start, end, steps, dtype)


def empty_permuted_output_shape(size, physical_layout, *, dtype=None, layout=None, device=None, pin_memory=None):
    if len(size) != len(physical_layout):
        raise RuntimeError(
            "Number of dimensions in size does not match the length of the physical_layout; i.e. "
            f"len(size) = {len(size)} is not equal to len(physical_layout) = {len(physical_layout)}"
        )
    for i, d in enumerate(physical_layout):
        if not 0 <= d < len(size):
            raise RuntimeError(
                f"Dimension out of range (expected to be between 0 and {len(size) - 1}, but got {d} at index {i}).  "
                "NB: negative dims not currently supported; file an issue if you want it."
            )
    if len(set(physical_layout)) != len(physical_layout):
        raise RuntimeError("Duplicate dim not allowed")
    return TensorMeta(_check_size(size), _default(dtype))


def integer_range_output_shape(start, step, length, dtype):
    return TensorMeta((length,), dtype)


def _window_meta(name, window_length, dtype, layout):
    # PyTorch's window_function_checks, then arange's refusal of complex dtypes (reached
    # from two elements on).
    dtype = _default(dtype)
    if layout is not None and layout != torch.strided:
        raise RuntimeError(f"{name} is not implemented for sparse types, got: {layout}")
    if not (dtype.is_floating_point or dtype.is_complex):
        raise RuntimeError(f"{name} expects floating point dtypes, got: {dtype}")
    if window_length < 0:
        raise RuntimeError(f"{name} requires non-negative window_length, got window_length={window_length}")
    if dtype.is_complex and window_length > 1:
        raise NotImplementedError(f"\"arange_cpu\" not implemented for '{scalar_type_name(dtype)}'")
    return TensorMeta((window_length,), dtype)


def kaiser_window_output_shape(window_length, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _window_meta("kaiser_window", window_length, dtype, layout)


def kaiser_window_periodic_output_shape(
    window_length, periodic, *, dtype=None, layout=None, device=None, pin_memory=None
):
    return _window_meta("kaiser_window", window_length, dtype, layout)


def kaiser_window_beta_output_shape(window_length, periodic, beta, *, dtype=None, layout=None, device=None,
                                    pin_memory=None):
    return _window_meta("kaiser_window", window_length, dtype, layout)
