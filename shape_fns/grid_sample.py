"""Shape functions of grid sampling and its backward ops, with ATen CPU's checks in its
order (common checks, then the 2-D / 3-D ones, then the kernel's dtype dispatch)."""

from __future__ import annotations

from .common import TensorMeta, require_kernel_dtype, scalar_type_name


def _check(input, grid, interpolation_mode, padding_mode, nd, kernel):
    if input.ndim < 1 or grid.ndim < 1 or input.shape[0] != grid.shape[0]:
        raise RuntimeError(
            "grid_sampler(): expected grid and input to have same batch size, but got input with sizes "
            f"{list(input.shape)} and grid with sizes {list(grid.shape)}"
        )
    if grid.shape[-1] != input.ndim - 2:
        raise RuntimeError(
            f"grid_sampler(): expected grid to have size {input.ndim - 2} in last dimension, but got grid with "
            f"sizes {list(grid.shape)}"
        )
    for i in range(2, input.ndim):
        if input.shape[i] <= 0:
            raise RuntimeError(
                "grid_sampler(): expected input to have non-empty spatial dimensions, but input has sizes "
                f"{list(input.shape)} with dimension {i} being empty"
            )
    if input.ndim != nd + 2 or grid.ndim != input.ndim:
        raise RuntimeError(
            f"grid_sampler(): expected {nd + 2}D input and grid with same number of dimensions, but got input "
            f"with sizes {list(input.shape)} and grid with sizes {list(grid.shape)}"
        )
    if nd == 3 and interpolation_mode == 2:
        raise RuntimeError("grid_sampler(): bicubic interpolation only supports 4D input")
    # ATen CPU leaves the output unwritten for an unknown mode; refuse it instead.
    if interpolation_mode not in (0, 1, 2):
        raise RuntimeError(f"Invalid interpolation mode {interpolation_mode}")
    if padding_mode not in (0, 1, 2):
        raise RuntimeError(f"Invalid padding mode {padding_mode}")
    require_kernel_dtype(kernel, input.dtype, "float")
    if grid.dtype != input.dtype:
        raise RuntimeError(
            f"expected scalar type {scalar_type_name(input.dtype)} but found {scalar_type_name(grid.dtype)}"
        )
    return (input.shape[0], input.shape[1]) + tuple(grid.shape[1:-1])


def grid_sampler_2d_output_shape(input, grid, interpolation_mode, padding_mode, align_corners):
    return TensorMeta(
        _check(input, grid, interpolation_mode, padding_mode, 2, "grid_sampler_2d_cpu_kernel_impl"), input.dtype
    )


def grid_sampler_3d_output_shape(input, grid, interpolation_mode, padding_mode, align_corners):
    return TensorMeta(_check(input, grid, interpolation_mode, padding_mode, 3, "grid_sampler3d_cpu"), input.dtype)


def _backward(grad_output, input, grid, interpolation_mode, padding_mode, output_mask, nd, kernel):
    shape = _check(input, grid, interpolation_mode, padding_mode, nd, kernel)
    if tuple(grad_output.shape) != shape:
        raise RuntimeError(f"Expected grad_output of size {list(shape)}, but got {list(grad_output.shape)}")
    grad_input = TensorMeta(tuple(input.shape), input.dtype) if output_mask[0] else None
    return grad_input, TensorMeta(tuple(grid.shape), grid.dtype)


def grid_sampler_2d_backward_output_shape(
    grad_output, input, grid, interpolation_mode, padding_mode, align_corners, output_mask
):
    return _backward(
        grad_output,
        input,
        grid,
        interpolation_mode,
        padding_mode,
        output_mask,
        2,
        "grid_sampler_2d_backward_cpu_kernel_impl",
    )


def grid_sampler_3d_backward_output_shape(
    grad_output, input, grid, interpolation_mode, padding_mode, align_corners, output_mask
):
    return _backward(
        grad_output, input, grid, interpolation_mode, padding_mode, output_mask, 3, "grid_sampler_3d_backward_cpu"
    )


def _affine_dims(size) -> int:
    if len(size) not in (4, 5):
        raise RuntimeError("AffineGridGenerator needs 4d (spatial) or 5d (volumetric) inputs.")
    return len(size) - 2


def affine_grid_generator_output_shape(theta, size, align_corners):
    d = _affine_dims(size)
    if tuple(theta.shape) != (size[0], d, d + 1):
        raise RuntimeError(
            f"Expected theta of size [{size[0]}, {d}, {d + 1}] for an output of size {list(size)}, "
            f"but got {list(theta.shape)}"
        )
    return TensorMeta((size[0],) + tuple(size[2:]) + (d,), theta.dtype)

