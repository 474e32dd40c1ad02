"""Shape functions of the ops in lowerings/statistics.py."""

from __future__ import annotations

import torch

from .common import TensorMeta, reduction_dims, require_kernel_dtype, scalar_type_name, sum_dtype
from .reduction import _check_dim_given, _check_nonempty, _reduced_shape


def logical_reduction_dtype(dtype: torch.dtype) -> torch.dtype:
    """any/all return uint8 for uint8 input (a legacy of masks), bool otherwise."""
    return torch.uint8 if dtype is torch.uint8 else torch.bool


def float_result_dtype(dtype: torch.dtype) -> torch.dtype:
    """The real dtype of a variance or norm: complex inputs give their real part's dtype."""
    return {torch.complex64: torch.float32, torch.complex128: torch.float64, torch.complex32: torch.float16}.get(
        dtype, dtype
    )


def norm_result_dtype(dtype: torch.dtype, requested: torch.dtype | None) -> torch.dtype:
    return float_result_dtype(requested if requested is not None else dtype)


def _meta(self, dims, keepdim, dtype):
    return TensorMeta(_reduced_shape(self.shape, dims, keepdim), dtype)


def _arg_reduction(op, self, dim, keepdim):
    if self.dtype is torch.bool or self.dtype.is_complex:
        raise RuntimeError(f"{op}(): does not support {'complex' if self.dtype.is_complex else 'bool'} input")
    if dim is None:
        if self.numel() == 0:
            raise IndexError(f"{op}(): Expected reduction dim to be specified for input.numel() == 0.")
        return TensorMeta((1,) * self.ndim if keepdim else (), torch.int64)
    dims = reduction_dims(dim, self.ndim)
    _check_nonempty(op, self.shape, dims)
    return _meta(self, dims, keepdim, torch.int64)


def amin_output_shape(self, dim=(), keepdim=False):
    _check_dim_given("amin", self, dim)
    dims = reduction_dims(dim, self.ndim)
    _check_nonempty("amin", self.shape, dims)
    require_kernel_dtype("min_values_cpu", self.dtype, "bool int float")
    return _meta(self, dims, keepdim, self.dtype)


def argmin_output_shape(self, dim=None, keepdim=False):
    return _arg_reduction("argmin", self, dim, keepdim)


def min_dim_output_shape(self, dim, keepdim=False):
    if self.dtype.is_complex:
        raise RuntimeError("min(): does not support complex input")
    dims = reduction_dims(dim, self.ndim)
    _check_nonempty("min", self.shape, dims)
    shape = _reduced_shape(self.shape, dims, keepdim)
    return TensorMeta(shape, self.dtype), TensorMeta(shape, torch.int64)


def _full_extremum(op, self):
    if self.numel() == 0:
        raise RuntimeError(
            f"{op}(): Expected reduction dim to be specified for input.numel() == 0. "
            "Specify the reduction dim with the 'dim' argument."
        )
    require_kernel_dtype(f"{op}_all", self.dtype, "bool int float")
    return TensorMeta((), self.dtype)


def min_output_shape(self):
    return _full_extremum("min", self)


def max_output_shape(self):
    return _full_extremum("max", self)


def aminmax_output_shape(self, *, dim=None, keepdim=False):
    if dim is None:
        if self.numel() == 0:
            raise RuntimeError(
                "aminmax(): cannot compute aminmax over an empty dimension as the operation has no identity."
            )
        shape = (1,) * self.ndim if keepdim else ()
    else:
        dims = reduction_dims(dim, self.ndim)
        for d in dims:
            if self.shape[d] == 0:
                raise IndexError(
                    "aminmax(): Expected reduction dim " + str(d) + " to have non-zero size."
                )
        shape = _reduced_shape(self.shape, dims, keepdim)
    require_kernel_dtype("aminmax_cpu", self.dtype, "bool int float")
    return TensorMeta(shape, self.dtype), TensorMeta(shape, self.dtype)


def any_output_shape(self):
    return TensorMeta((), logical_reduction_dtype(self.dtype))


def any_dim_output_shape(self, dim, keepdim=False):
    return _meta(self, reduction_dims(dim, self.ndim), keepdim, logical_reduction_dtype(self.dtype))


def any_dims_output_shape(self, dim=None, keepdim=False):
    dims = () if dim is not None and len(dim) == 0 else reduction_dims(dim, self.ndim)
    return _meta(self, dims, keepdim, logical_reduction_dtype(self.dtype))


def all_output_shape(self):
    return any_output_shape(self)


def all_dim_output_shape(self, dim, keepdim=False):
    return any_dim_output_shape(self, dim, keepdim)


def all_dims_output_shape(self, dim=None, keepdim=False):
    return any_dims_output_shape(self, dim, keepdim)


def _is_all_true_output_shape(self):
    return _bool_test("_is_all_true", self)


def _is_any_true_output_shape(self):
    return _bool_test("_is_any_true", self)


def _bool_test(op, self):
    """torch.distributions' argument validation: whether a bool tensor is all (any) True."""
    if self.dtype != torch.bool:
        raise RuntimeError(f"{op}(): expected a bool tensor, got {scalar_type_name(self.dtype)}")
    return TensorMeta((), torch.bool)


def prod_output_shape(self, *, dtype=None):
    return TensorMeta((), sum_dtype(self.dtype, dtype))


def prod_dim_int_output_shape(self, dim, keepdim=False, *, dtype=None):
    return _meta(self, reduction_dims(dim, self.ndim), keepdim, sum_dtype(self.dtype, dtype))


def nansum_output_shape(self, dim=None, keepdim=False, *, dtype=None):
    if self.dtype.is_complex:
        raise RuntimeError("nansum does not support complex inputs")
    return _meta(self, reduction_dims(dim, self.ndim), keepdim, sum_dtype(self.dtype, dtype))


def _var_meta(self, dim, keepdim):
    if not (self.dtype.is_floating_point or self.dtype.is_complex):
        raise RuntimeError("std and var only support floating point and complex dtypes")
    return _meta(self, reduction_dims(dim, self.ndim), keepdim, float_result_dtype(self.dtype))


def std_correction_output_shape(self, dim=None, *, correction=None, keepdim=False):
    return _var_meta(self, dim, keepdim)


def var_mean_correction_output_shape(self, dim=None, *, correction=None, keepdim=False):
    var = _var_meta(self, dim, keepdim)
    return var, TensorMeta(var.shape, self.dtype)


def std_mean_correction_output_shape(self, dim=None, *, correction=None, keepdim=False):
    return var_mean_correction_output_shape(self, dim, correction=correction, keepdim=keepdim)


def logsumexp_output_shape(self, dim, keepdim=False):
    dtype = self.dtype if (self.dtype.is_floating_point or self.dtype.is_complex) else torch.get_default_dtype()
    return _meta(self, reduction_dims(dim, self.ndim), keepdim, dtype)


def linalg_vector_norm_output_shape(self, ord=2, dim=None, keepdim=False, *, dtype=None):
    if not (self.dtype.is_floating_point or self.dtype.is_complex):
        raise RuntimeError(
            "linalg.vector_norm: Expected a floating point or complex tensor as input. Got "
            f"{scalar_type_name(self.dtype)}"
        )
    dims = reduction_dims(dim, self.ndim)
    if self.numel() == 0 and _is_number(ord) and (ord < 0 or ord == float("inf")):
        if dim is None or len(dim) == 0 or any(self.shape[d] == 0 for d in dims):
            raise RuntimeError(
                f"linalg.vector_norm cannot compute the {_ord_text(ord)} norm on an empty tensor because the operation "
                "does not have an identity"
            )
    if dtype is not None and not (dtype.is_floating_point or dtype.is_complex):
        raise RuntimeError(
            f"linalg.vector_norm: dtype should be floating point or complex. Got {scalar_type_name(dtype)} instead."
        )
    return _meta(self, dims, keepdim, norm_result_dtype(self.dtype, dtype))


def _ord_text(ord):
    return "inf" if ord == float("inf") else str(ord)


def _is_number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def norm_ScalarOpt_dim_output_shape(self, p, dim, keepdim=False):
    if not (self.dtype.is_floating_point or self.dtype.is_complex):
        raise RuntimeError(
            "linalg.vector_norm: Expected a floating point or complex tensor as input. Got "
            f"{scalar_type_name(self.dtype)}"
        )
    return _meta(self, reduction_dims(dim, self.ndim), keepdim, float_result_dtype(self.dtype))


def count_nonzero_dim_IntList_output_shape(self, dim):
    return _meta(self, reduction_dims(dim, self.ndim), False, torch.int64)


def count_nonzero_output_shape(self, dim=None):
    dims = tuple(range(self.ndim)) if dim is None else reduction_dims(dim, self.ndim)
    return _meta(self, dims, False, torch.int64)
