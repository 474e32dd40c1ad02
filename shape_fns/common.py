"""What lowerings and shape functions share: tensor metadata, dtypes, broadcasting
and PyTorch's elementwise type promotion.

Pure: imports torch only for its dtype objects and dtype arithmetic.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

try:  # bfloat16 for NumPy ships with JAX.
    import ml_dtypes

    _BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - jaxlib always brings ml_dtypes
    _BFLOAT16 = None


@dataclass(frozen=True, slots=True)
class TensorMeta:
    """A tensor as a shape function sees it: its shape and its torch dtype."""

    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n


TORCH_TO_NUMPY: dict[torch.dtype, np.dtype] = {
    torch.bool: np.dtype(np.bool_),
    torch.uint8: np.dtype(np.uint8),
    torch.uint16: np.dtype(np.uint16),
    torch.uint32: np.dtype(np.uint32),
    torch.uint64: np.dtype(np.uint64),
    torch.int8: np.dtype(np.int8),
    torch.int16: np.dtype(np.int16),
    torch.int32: np.dtype(np.int32),
    torch.int64: np.dtype(np.int64),
    torch.float16: np.dtype(np.float16),
    torch.float32: np.dtype(np.float32),
    torch.float64: np.dtype(np.float64),
    torch.complex64: np.dtype(np.complex64),
    torch.complex128: np.dtype(np.complex128),
}
if _BFLOAT16 is not None:
    TORCH_TO_NUMPY[torch.bfloat16] = _BFLOAT16
    for _name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"):
        TORCH_TO_NUMPY[getattr(torch, _name)] = np.dtype(getattr(ml_dtypes, _name))
NUMPY_TO_TORCH: dict[np.dtype, torch.dtype] = {v: k for k, v in TORCH_TO_NUMPY.items()}


def to_numpy_dtype(dtype: torch.dtype) -> np.dtype:
    try:
        return TORCH_TO_NUMPY[dtype]
    except KeyError:
        raise TypeError(f"dtype {dtype} has no JAX equivalent") from None


def to_torch_dtype(dtype: Any) -> torch.dtype:
    return NUMPY_TO_TORCH[np.dtype(dtype)]


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """torch.broadcast_shapes, with PyTorch's error message."""
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for shape in shapes:
        for i, size in enumerate(shape, start=ndim - len(shape)):
            if size == out[i] or size == 1:
                continue
            if out[i] == 1:
                out[i] = size
                continue
            raise RuntimeError(
                f"The size of tensor a ({out[i]}) must match the size of tensor b ({size}) "
                f"at non-singleton dimension {i}"
            )
    return tuple(out)


def normalize_dim(dim: int, ndim: int) -> int:
    """Wrap a possibly negative dim, as ATen's maybe_wrap_dim (a 0-d tensor accepts -1 and 0)."""
    bound = max(ndim, 1)
    if not -bound <= dim < bound:
        raise IndexError(
            f"Dimension out of range (expected to be in range of [{-bound}, {bound - 1}], but got {dim})"
        )
    return dim % bound


# Note [Type promotion]
# PyTorch promotes elementwise operands by category (bool < integer < float < complex)
# and priority (dimensioned tensors > zero-dim tensors > Python scalars): a lower
# priority operand only widens the result when it is of a higher category. The kind
# of an op (torch._prims_common.ELEMENTWISE_TYPE_PROMOTION_KIND) then maps the
# promoted dtype to the dtype the op computes in and the dtype it returns. Each op's
# kind is declared once, in TYPE_PROMOTION below, and both its lowering and its shape
# function read it from there.


class Promotion(enum.Enum):
    DEFAULT = "default"  # promoted dtype
    INT_TO_FLOAT = "int_to_float"  # integers and bool compute in the default float
    ALWAYS_BOOL = "always_bool"  # comparisons
    COMPLEX_TO_FLOAT = "complex_to_float"  # abs of a complex is real
    BOOL_TO_LONG = "bool_to_long"  # sum of bools counts
    NO_OPMATH = "no_opmath"  # like DEFAULT; kept distinct to mirror PyTorch's names


# The elementwise promotion kind of every op that promotes its operands, keyed by
# unambiguous op name and read by lowerings and shape functions alike (kinds follow
# torch._refs; cat is not elementwise but promotes its inputs as a DEFAULT op does).
# One literal: the generator reads it and checks that every key names a manifest entry.
TYPE_PROMOTION: dict[str, Promotion] = {
    # DEFAULT: the promoted dtype
    "_prelu_kernel": Promotion.DEFAULT,
    "_prelu_kernel_backward": Promotion.DEFAULT,
    "add_Scalar": Promotion.DEFAULT,
    "add_Tensor": Promotion.DEFAULT,
    "addcdiv": Promotion.DEFAULT,
    "addcmul": Promotion.DEFAULT,
    "bitwise_and_Scalar": Promotion.DEFAULT,
    "bitwise_and_Scalar_Tensor": Promotion.DEFAULT,
    "bitwise_and_Tensor": Promotion.DEFAULT,
    "bitwise_left_shift_Scalar_Tensor": Promotion.DEFAULT,
    "bitwise_left_shift_Tensor": Promotion.DEFAULT,
    "bitwise_left_shift_Tensor_Scalar": Promotion.DEFAULT,
    "bitwise_not": Promotion.DEFAULT,
    "bitwise_or_Scalar": Promotion.DEFAULT,
    "bitwise_or_Scalar_Tensor": Promotion.DEFAULT,
    "bitwise_or_Tensor": Promotion.DEFAULT,
    "bitwise_right_shift_Scalar_Tensor": Promotion.DEFAULT,
    "bitwise_right_shift_Tensor": Promotion.DEFAULT,
    "bitwise_right_shift_Tensor_Scalar": Promotion.DEFAULT,
    "bitwise_xor_Scalar": Promotion.DEFAULT,
    "bitwise_xor_Scalar_Tensor": Promotion.DEFAULT,
    "bitwise_xor_Tensor": Promotion.DEFAULT,
    "cat": Promotion.DEFAULT,
    "ceil": Promotion.DEFAULT,
    "celu": Promotion.DEFAULT,
    "clamp": Promotion.DEFAULT,
    "clamp_Tensor": Promotion.DEFAULT,
    "clamp_max": Promotion.DEFAULT,
    "clamp_max_Tensor": Promotion.DEFAULT,
    "clamp_min": Promotion.DEFAULT,
    "clamp_min_Tensor": Promotion.DEFAULT,
    "dist": Promotion.DEFAULT,
    "div_Scalar_mode": Promotion.DEFAULT,
    "div_Tensor_mode": Promotion.DEFAULT,  # with rounding_mode set; without, div_Tensor decides
    "elu": Promotion.DEFAULT,
    "elu_backward": Promotion.DEFAULT,
    "floor": Promotion.DEFAULT,
    "floor_divide": Promotion.DEFAULT,
    "floor_divide_Scalar": Promotion.DEFAULT,
    "fmax": Promotion.DEFAULT,
    "fmin": Promotion.DEFAULT,
    "fmod_Scalar": Promotion.DEFAULT,
    "fmod_Tensor": Promotion.DEFAULT,
    "frac": Promotion.DEFAULT,
    "gcd": Promotion.DEFAULT,
    "gelu": Promotion.DEFAULT,
    "gelu_backward": Promotion.DEFAULT,
    "glu": Promotion.DEFAULT,
    "glu_backward": Promotion.DEFAULT,
    "hardshrink": Promotion.DEFAULT,
    "hardshrink_backward": Promotion.DEFAULT,
    "hardsigmoid": Promotion.DEFAULT,
    "hardsigmoid_backward": Promotion.DEFAULT,
    "hardswish": Promotion.DEFAULT,
    "hardswish_backward": Promotion.DEFAULT,
    "hardtanh": Promotion.DEFAULT,
    "hardtanh_backward": Promotion.DEFAULT,
    "heaviside": Promotion.DEFAULT,
    "hypot": Promotion.DEFAULT,
    "igamma": Promotion.DEFAULT,
    "igammac": Promotion.DEFAULT,
    "lcm": Promotion.DEFAULT,
    "leaky_relu": Promotion.DEFAULT,
    "leaky_relu_backward": Promotion.DEFAULT,
    "lerp_Scalar": Promotion.DEFAULT,
    "lerp_Tensor": Promotion.DEFAULT,
    "log_sigmoid_backward": Promotion.DEFAULT,
    "log_sigmoid_forward": Promotion.DEFAULT,
    "logaddexp": Promotion.DEFAULT,
    "logaddexp2": Promotion.DEFAULT,
    "logit_backward": Promotion.DEFAULT,
    "maximum": Promotion.DEFAULT,
    "minimum": Promotion.DEFAULT,
    "mish": Promotion.DEFAULT,
    "mul_Scalar": Promotion.DEFAULT,
    "mul_Tensor": Promotion.DEFAULT,
    "nan_to_num": Promotion.DEFAULT,
    "neg": Promotion.DEFAULT,
    "nextafter": Promotion.DEFAULT,
    "pow_Scalar": Promotion.DEFAULT,
    "pow_Tensor_Scalar": Promotion.DEFAULT,
    "pow_Tensor_Tensor": Promotion.DEFAULT,
    "relu": Promotion.DEFAULT,
    "remainder_Scalar": Promotion.DEFAULT,
    "remainder_Scalar_Tensor": Promotion.DEFAULT,
    "remainder_Tensor": Promotion.DEFAULT,
    "renorm": Promotion.DEFAULT,
    "round": Promotion.DEFAULT,
    "round_decimals": Promotion.DEFAULT,
    "rsub_Scalar": Promotion.DEFAULT,
    "rsub_Tensor": Promotion.DEFAULT,
    "sgn": Promotion.DEFAULT,
    "sigmoid_backward": Promotion.DEFAULT,
    "sign": Promotion.DEFAULT,
    "silu": Promotion.DEFAULT,
    "softplus": Promotion.DEFAULT,
    "softplus_backward": Promotion.DEFAULT,
    "softshrink": Promotion.DEFAULT,
    "softshrink_backward": Promotion.DEFAULT,
    "sub_Scalar": Promotion.DEFAULT,
    "sub_Tensor": Promotion.DEFAULT,
    "tanh_backward": Promotion.DEFAULT,
    "threshold": Promotion.DEFAULT,
    "threshold_backward": Promotion.DEFAULT,
    "trunc": Promotion.DEFAULT,
    # INT_TO_FLOAT: integers and bool compute in the default float dtype
    "acos": Promotion.INT_TO_FLOAT,
    "acosh": Promotion.INT_TO_FLOAT,
    "asin": Promotion.INT_TO_FLOAT,
    "asinh": Promotion.INT_TO_FLOAT,
    "atan": Promotion.INT_TO_FLOAT,
    "atan2": Promotion.INT_TO_FLOAT,
    "atanh": Promotion.INT_TO_FLOAT,
    "copysign_Scalar": Promotion.INT_TO_FLOAT,
    "copysign_Tensor": Promotion.INT_TO_FLOAT,
    "cos": Promotion.INT_TO_FLOAT,
    "cosh": Promotion.INT_TO_FLOAT,
    "deg2rad": Promotion.INT_TO_FLOAT,
    "digamma": Promotion.INT_TO_FLOAT,
    "div_Scalar": Promotion.INT_TO_FLOAT,
    "div_Tensor": Promotion.INT_TO_FLOAT,
    "erf": Promotion.INT_TO_FLOAT,
    "erfc": Promotion.INT_TO_FLOAT,
    "erfinv": Promotion.INT_TO_FLOAT,
    "exp": Promotion.INT_TO_FLOAT,
    "exp2": Promotion.INT_TO_FLOAT,
    "expm1": Promotion.INT_TO_FLOAT,
    "i0": Promotion.INT_TO_FLOAT,
    "ldexp_Tensor": Promotion.INT_TO_FLOAT,
    "lgamma": Promotion.INT_TO_FLOAT,
    "log": Promotion.INT_TO_FLOAT,
    "log10": Promotion.INT_TO_FLOAT,
    "log1p": Promotion.INT_TO_FLOAT,
    "log2": Promotion.INT_TO_FLOAT,
    "logit": Promotion.INT_TO_FLOAT,
    "mvlgamma": Promotion.INT_TO_FLOAT,
    "polygamma": Promotion.INT_TO_FLOAT,
    "rad2deg": Promotion.INT_TO_FLOAT,
    "reciprocal": Promotion.INT_TO_FLOAT,
    "rsqrt": Promotion.INT_TO_FLOAT,
    "sigmoid": Promotion.INT_TO_FLOAT,
    "sin": Promotion.INT_TO_FLOAT,
    "sinc": Promotion.INT_TO_FLOAT,
    "sinh": Promotion.INT_TO_FLOAT,
    "special_airy_ai": Promotion.INT_TO_FLOAT,
    "special_bessel_j0": Promotion.INT_TO_FLOAT,
    "special_bessel_j1": Promotion.INT_TO_FLOAT,
    "special_bessel_y0": Promotion.INT_TO_FLOAT,
    "special_bessel_y1": Promotion.INT_TO_FLOAT,
    "special_chebyshev_polynomial_t": Promotion.INT_TO_FLOAT,
    "special_chebyshev_polynomial_t_n_scalar": Promotion.INT_TO_FLOAT,
    "special_chebyshev_polynomial_t_x_scalar": Promotion.INT_TO_FLOAT,
    "special_chebyshev_polynomial_u": Promotion.INT_TO_FLOAT,
    "special_chebyshev_polynomial_u_n_scalar": Promotion.INT_TO_FLOAT,
    "special_chebyshev_polynomial_u_x_scalar": Promotion.INT_TO_FLOAT,
    "special_chebyshev_polynomial_v": Promotion.INT_TO_FLOAT,
    "special_chebyshev_polynomial_v_n_scalar": Promotion.INT_TO_FLOAT,
    "special_chebyshev_polynomial_v_x_scalar": Promotion.INT_TO_FLOAT,
    "special_chebyshev_polynomial_w": Promotion.INT_TO_FLOAT,
    "special_chebyshev_polynomial_w_n_scalar": Promotion.INT_TO_FLOAT,
    "special_chebyshev_polynomial_w_x_scalar": Promotion.INT_TO_FLOAT,
    "special_entr": Promotion.INT_TO_FLOAT,
    "special_erfcx": Promotion.INT_TO_FLOAT,
    "special_hermite_polynomial_h": Promotion.INT_TO_FLOAT,
    "special_hermite_polynomial_h_n_scalar": Promotion.INT_TO_FLOAT,
    "special_hermite_polynomial_h_x_scalar": Promotion.INT_TO_FLOAT,
    "special_hermite_polynomial_he": Promotion.INT_TO_FLOAT,
    "special_hermite_polynomial_he_n_scalar": Promotion.INT_TO_FLOAT,
    "special_hermite_polynomial_he_x_scalar": Promotion.INT_TO_FLOAT,
    "special_i0e": Promotion.INT_TO_FLOAT,
    "special_i1": Promotion.INT_TO_FLOAT,
    "special_i1e": Promotion.INT_TO_FLOAT,
    "special_laguerre_polynomial_l": Promotion.INT_TO_FLOAT,
    "special_laguerre_polynomial_l_n_scalar": Promotion.INT_TO_FLOAT,
    "special_laguerre_polynomial_l_x_scalar": Promotion.INT_TO_FLOAT,
    "special_legendre_polynomial_p": Promotion.INT_TO_FLOAT,
    "special_legendre_polynomial_p_n_scalar": Promotion.INT_TO_FLOAT,
    "special_legendre_polynomial_p_x_scalar": Promotion.INT_TO_FLOAT,
    "special_log_ndtr": Promotion.INT_TO_FLOAT,
    "special_modified_bessel_i0": Promotion.INT_TO_FLOAT,
    "special_modified_bessel_i1": Promotion.INT_TO_FLOAT,
    "special_modified_bessel_k0": Promotion.INT_TO_FLOAT,
    "special_modified_bessel_k1": Promotion.INT_TO_FLOAT,
    "special_ndtri": Promotion.INT_TO_FLOAT,
    "special_scaled_modified_bessel_k0": Promotion.INT_TO_FLOAT,
    "special_scaled_modified_bessel_k1": Promotion.INT_TO_FLOAT,
    "special_shifted_chebyshev_polynomial_t": Promotion.INT_TO_FLOAT,
    "special_shifted_chebyshev_polynomial_t_n_scalar": Promotion.INT_TO_FLOAT,
    "special_shifted_chebyshev_polynomial_t_x_scalar": Promotion.INT_TO_FLOAT,
    "special_shifted_chebyshev_polynomial_u": Promotion.INT_TO_FLOAT,
    "special_shifted_chebyshev_polynomial_u_n_scalar": Promotion.INT_TO_FLOAT,
    "special_shifted_chebyshev_polynomial_u_x_scalar": Promotion.INT_TO_FLOAT,
    "special_shifted_chebyshev_polynomial_v": Promotion.INT_TO_FLOAT,
    "special_shifted_chebyshev_polynomial_v_n_scalar": Promotion.INT_TO_FLOAT,
    "special_shifted_chebyshev_polynomial_v_x_scalar": Promotion.INT_TO_FLOAT,
    "special_shifted_chebyshev_polynomial_w": Promotion.INT_TO_FLOAT,
    "special_shifted_chebyshev_polynomial_w_n_scalar": Promotion.INT_TO_FLOAT,
    "special_shifted_chebyshev_polynomial_w_x_scalar": Promotion.INT_TO_FLOAT,
    "special_spherical_bessel_j0": Promotion.INT_TO_FLOAT,
    "special_xlog1py": Promotion.INT_TO_FLOAT,
    "special_xlog1py_other_scalar": Promotion.INT_TO_FLOAT,
    "special_xlog1py_self_scalar": Promotion.INT_TO_FLOAT,
    "special_zeta": Promotion.INT_TO_FLOAT,
    "special_zeta_other_scalar": Promotion.INT_TO_FLOAT,
    "special_zeta_self_scalar": Promotion.INT_TO_FLOAT,
    "sqrt": Promotion.INT_TO_FLOAT,
    "tan": Promotion.INT_TO_FLOAT,
    "tanh": Promotion.INT_TO_FLOAT,
    "xlogy_Scalar_Other": Promotion.INT_TO_FLOAT,
    "xlogy_Scalar_Self": Promotion.INT_TO_FLOAT,
    "xlogy_Tensor": Promotion.INT_TO_FLOAT,
    # ALWAYS_BOOL: comparisons and predicates return bool
    "eq_Scalar": Promotion.ALWAYS_BOOL,
    "eq_Tensor": Promotion.ALWAYS_BOOL,
    "ge_Scalar": Promotion.ALWAYS_BOOL,
    "ge_Tensor": Promotion.ALWAYS_BOOL,
    "gt_Scalar": Promotion.ALWAYS_BOOL,
    "gt_Tensor": Promotion.ALWAYS_BOOL,
    "isinf": Promotion.ALWAYS_BOOL,
    "isnan": Promotion.ALWAYS_BOOL,
    "isneginf": Promotion.ALWAYS_BOOL,
    "isposinf": Promotion.ALWAYS_BOOL,
    "le_Scalar": Promotion.ALWAYS_BOOL,
    "le_Tensor": Promotion.ALWAYS_BOOL,
    "logical_and": Promotion.ALWAYS_BOOL,
    "logical_not": Promotion.ALWAYS_BOOL,
    "logical_or": Promotion.ALWAYS_BOOL,
    "logical_xor": Promotion.ALWAYS_BOOL,
    "lt_Scalar": Promotion.ALWAYS_BOOL,
    "lt_Tensor": Promotion.ALWAYS_BOOL,
    "ne_Scalar": Promotion.ALWAYS_BOOL,
    "ne_Tensor": Promotion.ALWAYS_BOOL,
    "signbit": Promotion.ALWAYS_BOOL,
    # COMPLEX_TO_FLOAT: a complex input gives a real result
    "abs": Promotion.COMPLEX_TO_FLOAT,
    "var_correction": Promotion.COMPLEX_TO_FLOAT,
    # NO_OPMATH: as DEFAULT (PyTorch's name for where)
    "where_self": Promotion.NO_OPMATH,
}


def _python_scalar_dtype(value: Any) -> torch.dtype:
    if isinstance(value, bool):
        return torch.bool
    if isinstance(value, int):
        return torch.int64
    if isinstance(value, float):
        return torch.get_default_dtype()
    if isinstance(value, complex):
        return _TO_COMPLEX[torch.get_default_dtype()]
    raise TypeError(f"not a scalar operand: {value!r}")


def _operand(x: Any) -> tuple[torch.dtype, int]:
    """(dtype, priority) of an operand: 2 for tensors with dims, 1 for zero-dim tensors,
    0 for Python scalars (including a JAX scalar traced from a Python number, which JAX
    marks weakly typed)."""
    cls = x.__class__
    if cls is TensorMeta:
        return x.dtype, 2 if x.shape else 1
    if cls is bool or cls is int or cls is float or cls is complex or isinstance(x, (bool, int, float, complex)):
        return _python_scalar_dtype(x), 0
    dtype = to_torch_dtype(x.dtype)
    if getattr(x, "weak_type", False) or _is_weak(x):
        # JAX widens weak Python scalars to 64 bits; PyTorch sees a float scalar as the
        # default dtype and a complex one as its complex counterpart.
        if dtype.is_floating_point:
            dtype = torch.get_default_dtype()
        elif dtype.is_complex:
            dtype = _python_scalar_dtype(1j)
        return dtype, 0
    return dtype, 2 if x.shape else 1


def _is_weak(x: Any) -> bool:
    aval = getattr(x, "aval", None)
    return bool(getattr(aval, "weak_type", False))


_TO_COMPLEX = {
    torch.float16: torch.complex32,
    torch.float32: torch.complex64,
    torch.float64: torch.complex128,
}


def _combine_categories(higher: torch.dtype | None, lower: torch.dtype | None) -> torch.dtype | None:
    # ATen's combine_categories (TypeProperties.cpp): a lower priority group only
    # counts when it is of a higher category.
    if higher is None:
        return lower
    if higher.is_complex:
        return higher
    if lower is not None and lower.is_complex:
        return _TO_COMPLEX.get(higher, lower) if higher.is_floating_point else lower
    if higher.is_floating_point:
        return higher
    if lower is not None and (higher is torch.bool or lower.is_floating_point):
        return torch.promote_types(higher, lower)
    return higher


def promote_dtypes(*operands: Any) -> torch.dtype:
    """The dtype torch.result_type gives for these operands (TensorMeta, jax arrays or
    Python scalars; None is skipped)."""
    key = tuple(_operand(x) for x in operands if x is not None)
    result = _PROMOTED.get(key)
    if result is None:
        best: list[torch.dtype | None] = [None, None, None]
        for dtype, priority in key:
            cur = best[priority]
            best[priority] = dtype if cur is None else torch.promote_types(cur, dtype)
        result = _combine_categories(best[2], _combine_categories(best[1], best[0]))
        if result is None:
            raise TypeError("type promotion needs at least one operand")
        _PROMOTED[key] = result
    return result


# promote_dtypes by the operands' (dtype, priority): shape functions run on every op
# while tracing, and the answer depends on nothing else.
_PROMOTED: dict[tuple[tuple[torch.dtype, int], ...], torch.dtype] = {}


def elementwise_dtypes(op: str, *operands: Any) -> tuple[torch.dtype, torch.dtype]:
    """(compute dtype, result dtype) of the elementwise op `op` (an unambiguous name
    listed in TYPE_PROMOTION) over these operands."""
    kind = TYPE_PROMOTION[op]
    promoted = promote_dtypes(*operands)
    if kind is Promotion.INT_TO_FLOAT:
        if not (promoted.is_floating_point or promoted.is_complex):
            promoted = torch.get_default_dtype()
        return promoted, promoted
    if kind is Promotion.ALWAYS_BOOL:
        return promoted, torch.bool
    if kind is Promotion.COMPLEX_TO_FLOAT:
        if promoted.is_complex:
            return promoted, torch.float64 if promoted is torch.complex128 else torch.float32
        return promoted, promoted
    if kind is Promotion.BOOL_TO_LONG:
        if promoted is torch.bool:
            return torch.int64, torch.int64
        return promoted, promoted
    return promoted, promoted


def elementwise_meta(op: str, *operands: Any) -> TensorMeta:
    """Output metadata of a broadcasting elementwise op: shape of all tensor operands
    broadcast together, dtype by the op's declared promotion kind."""
    shapes = [x.shape for x in operands if isinstance(x, TensorMeta)]
    _, result = elementwise_dtypes(op, *operands)
    return TensorMeta(broadcast_shapes(*shapes), result)


# Helpers for ops whose lowering and shape function must agree on more than promotion.


def reduction_dims(dim: Any, ndim: int) -> tuple[int, ...]:
    """The dims a reduction over `dim` (None, an int or a sequence of ints) covers:
    None or () means all dims. A 0-d tensor accepts dims 0 and -1 and reduces nothing."""
    if dim is None or (not isinstance(dim, int) and len(dim) == 0):
        return tuple(range(ndim))
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    seen: list[int] = []
    for d in dims:
        d = normalize_dim(d, ndim)
        if d in seen:
            raise RuntimeError(f"dim {d} appears multiple times in the list of dims")
        seen.append(d)
    return tuple(seen) if ndim else ()


def sum_dtype(dtype: torch.dtype, requested: torch.dtype | None) -> torch.dtype:
    """Result dtype of sum: the requested one, else bool and integers sum to int64."""
    if requested is not None:
        return requested
    if dtype is torch.bool or not (dtype.is_floating_point or dtype.is_complex):
        return torch.int64
    return dtype


def mean_dtype(dtype: torch.dtype, requested: torch.dtype | None) -> torch.dtype:
    """Result dtype of mean, which unlike sum never silently turns integers into floats."""
    if requested is not None:
        if not (requested.is_floating_point or requested.is_complex):
            raise RuntimeError(
                "mean(): could not infer output dtype. Optional dtype must be either "
                f"a floating point or complex dtype. Got: {scalar_type_name(requested)}"
            )
        return requested
    if not (dtype.is_floating_point or dtype.is_complex):
        raise RuntimeError(
            "mean(): could not infer output dtype. Input dtype must be either "
            f"a floating point or complex dtype. Got: {scalar_type_name(dtype)}"
        )
    return dtype


def expand_shape(shape: tuple[int, ...], size: tuple[int, ...]) -> tuple[int, ...]:
    """The shape `expand(size)` gives a tensor of `shape`: -1 keeps a size, new dims
    may only be added in front, and only size-1 dims can grow."""
    size = tuple(size)
    lead = len(size) - len(shape)
    if lead < 0:
        raise RuntimeError(
            f"expand: the number of sizes provided ({len(size)}) must be greater or equal "
            f"to the number of dimensions in the tensor ({len(shape)})"
        )
    out = []
    for i, target in enumerate(size):
        if i < lead:
            if target < 0:
                raise RuntimeError(
                    f"The expanded size of the tensor ({target}) isn't allowed in a leading, "
                    f"non-existing dimension {i}"
                )
            out.append(target)
            continue
        current = shape[i - lead]
        if target == -1:
            target = current
        elif current != target and current != 1:
            raise RuntimeError(
                f"The expanded size of the tensor ({target}) must match the existing size "
                f"({current}) at non-singleton dimension {i}.  Target sizes: {list(size)}.  "
                f"Tensor sizes: {list(shape)}"
            )
        out.append(target)
    return tuple(out)


def layer_norm_stats_dtype(input: torch.dtype, weight: torch.dtype | None) -> torch.dtype:
    """dtype of native_layer_norm's mean and rstd on CPU: the input's, except that a
    float16/bfloat16 input with float32 weight or bias ("mixed type") keeps float32
    statistics. (The meta kernel always uses float32 for reduced-precision inputs.)"""
    if input in (torch.float16, torch.bfloat16) and weight is torch.float32:
        return torch.float32
    return input




_SCALAR_TYPE_NAMES = {
    torch.bool: "Bool",
    torch.uint8: "Byte",
    torch.int8: "Char",
    torch.int16: "Short",
    torch.int32: "Int",
    torch.int64: "Long",
    torch.uint16: "UInt16",
    torch.uint32: "UInt32",
    torch.uint64: "UInt64",
    torch.float16: "Half",
    torch.bfloat16: "BFloat16",
    torch.float32: "Float",
    torch.float64: "Double",
    torch.complex32: "ComplexHalf",
    torch.complex64: "ComplexFloat",
    torch.complex128: "ComplexDouble",
    torch.float8_e5m2: "Float8_e5m2",
    torch.float8_e4m3fn: "Float8_e4m3fn",
    torch.float8_e5m2fnuz: "Float8_e5m2fnuz",
    torch.float8_e4m3fnuz: "Float8_e4m3fnuz",
}


def scalar_type_name(dtype: torch.dtype) -> str:
    """ATen's name for a dtype, as its error messages spell it ('Long', 'Float')."""
    return _SCALAR_TYPE_NAMES.get(dtype, str(dtype))


_CPP_TYPE_NAMES = {
    torch.float32: "float", torch.float64: "double", torch.float16: "c10::Half", torch.bfloat16: "c10::BFloat16",
    torch.int64: "long int", torch.int32: "int", torch.int16: "short int", torch.int8: "signed char",
    torch.uint8: "unsigned char", torch.bool: "bool",
}


def cpp_type_name(dtype: torch.dtype) -> str:
    """The C++ type of a dtype, as the messages that print one spell it ('float', 'c10::BFloat16')."""
    return _CPP_TYPE_NAMES.get(dtype, str(dtype))


def checked_meta(op, *operands, kernel=None, categories="bool int float complex", reduced=True):
    """elementwise_meta, raising the NotImplementedError of a CPU kernel that has no
    instance for the compute dtype."""
    if kernel is not None:
        compute, _ = elementwise_dtypes(op, *operands)
        require_kernel_dtype(kernel, compute, categories, reduced)
    return elementwise_meta(op, *operands)


def dtype_category(dtype: torch.dtype) -> str:
    """'bool', 'int', 'float' or 'complex': the kernels' dispatch categories."""
    if dtype is torch.bool:
        return "bool"
    if dtype.is_complex:
        return "complex"
    if dtype.is_floating_point:
        return "float"
    return "int"


def require_kernel_dtype(kernel: str, dtype: torch.dtype, categories: str, reduced: bool = True) -> None:
    """Raise the NotImplementedError a CPU kernel `kernel` raises at dispatch when it has
    no instance for `dtype`. `categories` lists the supported ones ("int bool float");
    `reduced=False` when float16/bfloat16 are missing too."""
    ok = dtype_category(dtype) in categories.split()
    if ok and not reduced and dtype in (torch.float16, torch.bfloat16):
        ok = False
    if not ok:
        raise NotImplementedError(f'"{kernel}" not implemented for \'{scalar_type_name(dtype)}\'')
