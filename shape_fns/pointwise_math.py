"""Shape functions of the unary pointwise ops in lowerings/pointwise_math.py: the
input's shape, dtype by the op's promotion kind (TYPE_PROMOTION), and the dtype
checks PyTorch CPU's kernels make."""

from __future__ import annotations

from .common import elementwise_dtypes, elementwise_meta, require_kernel_dtype


def _meta(op, self, kernel=None, categories="bool int float complex", reduced=True):
    if kernel is not None:
        compute, _ = elementwise_dtypes(op, self)
        require_kernel_dtype(kernel, compute, categories, reduced)
    return elementwise_meta(op, self)


def acos_output_shape(self):
    return _meta("acos", self)


def acosh_output_shape(self):
    return _meta("acosh", self)


def asin_output_shape(self):
    return _meta("asin", self)


def asinh_output_shape(self):
    return _meta("asinh", self)


def atan_output_shape(self):
    return _meta("atan", self)


def atanh_output_shape(self):
    return _meta("atanh", self)


def cosh_output_shape(self):
    return _meta("cosh", self)


def sinh_output_shape(self):
    return _meta("sinh", self)


def tan_output_shape(self):
    return _meta("tan", self)


def erf_output_shape(self):
    return _meta("erf", self, "erf_vml_cpu", "float")


def expm1_output_shape(self):
    return _meta("expm1", self)


def exp2_output_shape(self):
    return _meta("exp2", self)


def log10_output_shape(self):
    return _meta("log10", self)


def log1p_output_shape(self):
    return _meta("log1p", self)


def log2_output_shape(self):
    return _meta("log2", self)


def reciprocal_output_shape(self):
    return _meta("reciprocal", self)


def _no_complex(op, self):
    if self.dtype.is_complex:
        raise RuntimeError(f"{op} is not supported for complex tensors.")


def deg2rad_output_shape(self):
    _no_complex("deg2rad", self)
    return _meta("deg2rad", self)


def rad2deg_output_shape(self):
    _no_complex("rad2deg", self)
    return _meta("rad2deg", self)


def _rounding(op, self):
    if self.dtype.is_complex:
        raise NotImplementedError(f"{op} is not supported for complex inputs")
    return _meta(op, self, f"{op}_vml_cpu", "int float")


def ceil_output_shape(self):
    return _rounding("ceil", self)


def floor_output_shape(self):
    return _rounding("floor", self)


def trunc_output_shape(self):
    return _rounding("trunc", self)


def round_output_shape(self):
    return _meta("round", self, "round_vml_cpu", "int float")


def round_decimals_output_shape(self, *, decimals):
    return _meta("round_decimals", self, "round_cpu", "float")


def frac_output_shape(self):
    return _meta("frac", self, "frac_cpu", "float")


def sign_output_shape(self):
    if self.dtype.is_complex:
        raise NotImplementedError(
            "Unlike NumPy, torch.sign is not intended to support complex numbers. Please use torch.sgn instead."
        )
    return _meta("sign", self)


def sgn_output_shape(self):
    return _meta("sgn", self)


def signbit_output_shape(self):
    return _meta("signbit", self, "signbit_cpu", "bool int float")


def isnan_output_shape(self):
    return _meta("isnan", self)


def isinf_output_shape(self):
    return _meta("isinf", self)


def isposinf_output_shape(self):
    if self.dtype.is_complex:
        raise RuntimeError("isposinf does not support complex inputs.")
    return _meta("isposinf", self)


def isneginf_output_shape(self):
    if self.dtype.is_complex:
        raise RuntimeError("isneginf does not support complex inputs.")
    return _meta("isneginf", self)


def nan_to_num_output_shape(self, nan=None, posinf=None, neginf=None):
    return _meta("nan_to_num", self)


def bitwise_not_output_shape(self):
    return _meta("bitwise_not", self, "bitwise_not_cpu", "bool int")


def logical_not_output_shape(self):
    return _meta("logical_not", self)

