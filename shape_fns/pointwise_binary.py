"""Shape functions of the binary and ternary pointwise ops in
lowerings/pointwise_binary.py and of their Scalar overloads (pointwise_scalar.py):
broadcast shape, dtype by promotion kind (TYPE_PROMOTION), and the dtype checks
PyTorch CPU's kernels make."""

from __future__ import annotations

from .common import TensorMeta, checked_meta, cpp_type_name
from .pointwise import no_complex_clamp, no_complex_ordering, sub_Tensor_output_shape


def _no_complex(name, *operands):
    for x in operands:
        if isinstance(x, TensorMeta) and x.dtype.is_complex:
            raise RuntimeError(f"{name} is not yet implemented for complex tensors.")


def ge_Tensor_output_shape(self, other):
    return checked_meta("ge_Tensor", self, other, kernel="ge_cpu", categories="bool int float")


def gt_Tensor_output_shape(self, other):
    return checked_meta("gt_Tensor", self, other, kernel="gt_cpu", categories="bool int float")


def le_Tensor_output_shape(self, other):
    return checked_meta("le_Tensor", self, other, kernel="le_cpu", categories="bool int float")


def ne_Tensor_output_shape(self, other):
    return checked_meta("ne_Tensor", self, other)


def logical_and_output_shape(self, other):
    return checked_meta("logical_and", self, other)


def logical_or_output_shape(self, other):
    return checked_meta("logical_or", self, other)


def logical_xor_output_shape(self, other):
    return checked_meta("logical_xor", self, other)


def bitwise_and_Tensor_output_shape(self, other):
    return checked_meta("bitwise_and_Tensor", self, other, kernel="bitwise_and_cpu", categories="bool int")


def bitwise_or_Tensor_output_shape(self, other):
    return checked_meta("bitwise_or_Tensor", self, other, kernel="bitwise_or_cpu", categories="bool int")


def bitwise_xor_Tensor_output_shape(self, other):
    return checked_meta("bitwise_xor_Tensor", self, other, kernel="bitwise_xor_cpu", categories="bool int")


def bitwise_left_shift_Tensor_output_shape(self, other):
    return checked_meta("bitwise_left_shift_Tensor", self, other, kernel="lshift_cpu", categories="int")


def bitwise_right_shift_Tensor_output_shape(self, other):
    return checked_meta("bitwise_right_shift_Tensor", self, other, kernel="rshift_cpu", categories="int")


def fmod_Tensor_output_shape(self, other):
    return checked_meta("fmod_Tensor", self, other, kernel="fmod_cpu", categories="int float")


def remainder_Tensor_output_shape(self, other):
    return checked_meta("remainder_Tensor", self, other, kernel="remainder_cpu", categories="int float")


def floor_divide_output_shape(self, other):
    return checked_meta("floor_divide", self, other, kernel="div_floor_cpu", categories="int float")


def atan2_output_shape(self, other):
    return checked_meta("atan2", self, other, kernel="atan2_cpu", categories="float")


def fmax_output_shape(self, other):
    no_complex_ordering("fmax", self, other)
    return checked_meta("fmax", self, other)


def fmin_output_shape(self, other):
    no_complex_ordering("fmin", self, other)
    return checked_meta("fmin", self, other)


def hypot_output_shape(self, other):
    return checked_meta("hypot", self, other, kernel="hypot_cpu", categories="float")


def copysign_Tensor_output_shape(self, other):
    return checked_meta("copysign_Tensor", self, other, kernel="copysign_cpu", categories="float")


def nextafter_output_shape(self, other):
    return checked_meta("nextafter", self, other, kernel="nextafter_cpu", categories="float")


def heaviside_output_shape(self, values):
    _no_complex("heaviside", self, values)
    if self.dtype != values.dtype:
        raise RuntimeError("heaviside is not yet implemented for tensors with different dtypes.")
    return checked_meta("heaviside", self, values)


def logaddexp_output_shape(self, other):
    return checked_meta("logaddexp", self, other, kernel="logaddexp_cpu", categories="float complex")


def logaddexp2_output_shape(self, other):
    return checked_meta("logaddexp2", self, other, kernel="logaddexp2_cpu", categories="float")


def xlogy_Tensor_output_shape(self, other):
    return checked_meta("xlogy_Tensor", self, other, kernel="xlogy_cpu", categories="float")


def gcd_output_shape(self, other):
    return checked_meta("gcd", self, other, kernel="gcd_cpu", categories="int")


def lcm_output_shape(self, other):
    return checked_meta("lcm", self, other, kernel="lcm_cpu", categories="int")


def addcmul_output_shape(self, tensor1, tensor2, *, value=1):
    return checked_meta("addcmul", self, tensor1, tensor2, kernel="addcmul_cpu_out", categories="int float complex")


def addcdiv_output_shape(self, tensor1, tensor2, *, value=1):
    if not (tensor1.dtype.is_floating_point or tensor1.dtype.is_complex) and not (
        tensor2.dtype.is_floating_point or tensor2.dtype.is_complex
    ):
        raise RuntimeError(
            "Integer division with addcdiv is no longer supported, and in a future release addcdiv will "
            "perform a true division of tensor1 and tensor2. The historic addcdiv behavior can be implemented "
            "as (input + value * torch.trunc(tensor1 / tensor2)).to(input.dtype) for integer inputs and as "
            "(input + value * tensor1 / tensor2) for float inputs. The future addcdiv behavior can be "
            "implemented with true_divide: (input + value * torch.true_divide(tensor1, tensor2))."
        )
    return checked_meta("addcdiv", self, tensor1, tensor2, kernel="addcdiv_cpu_out", categories="float complex")


def _lerp_check(self, end, weight=None):
    if end.dtype != self.dtype:
        raise RuntimeError(
            f"expected dtype {cpp_type_name(self.dtype)} for `end` but got dtype {cpp_type_name(end.dtype)}"
        )
    if isinstance(weight, TensorMeta) and weight.dtype != self.dtype:
        raise RuntimeError(
            f"expected dtype {cpp_type_name(self.dtype)} for `weight` but got dtype {cpp_type_name(weight.dtype)}"
        )


def lerp_Scalar_output_shape(self, end, weight):
    _lerp_check(self, end)
    return checked_meta("lerp_Scalar", self, end, kernel="lerp_kernel_scalar", categories="float complex")


def lerp_Tensor_output_shape(self, end, weight):
    _lerp_check(self, end, weight)
    return checked_meta("lerp_Tensor", self, end, weight, kernel="lerp_kernel_tensor", categories="float complex")


def clamp_Tensor_output_shape(self, min=None, max=None):
    if min is None and max is None:
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
    no_complex_clamp(self)
    if min is not None and max is not None:
        return checked_meta("clamp_Tensor", self, min, max, kernel="clamp_cpu", categories="int float")
    # one bound: PyTorch CPU runs clamp_min's or clamp_max's kernel, which take bool
    kernel = "maximum_cpu" if max is None else "minimum_cpu"
    return checked_meta("clamp_Tensor", self, min, max, kernel=kernel, categories="bool int float")


def clamp_min_Tensor_output_shape(self, min):
    return checked_meta("clamp_min_Tensor", self, min, kernel="maximum_cpu", categories="bool int float")


def clamp_max_Tensor_output_shape(self, max):
    return checked_meta("clamp_max_Tensor", self, max, kernel="minimum_cpu", categories="bool int float")



def rsub_Tensor_output_shape(self, other, *, alpha=1):
    return sub_Tensor_output_shape(other, self, alpha=alpha)
