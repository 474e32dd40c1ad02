"""Ops whose output shape depends on the values (unique, bincount, repeat_interleave)
or that return a Python value (equal, allclose).

They read their inputs on the host, as PyTorch's own CPU kernels do, and put the
result back on our device with PyTorch's dtypes and shapes. Inside a compiled program
reading a value runs the pending trace first (like nonzero and masked_select), so
these ops work there too but split the program in two.
"""

from __future__ import annotations

import numpy as np
import torch

from ...shape_fns.common import broadcast_shapes, require_kernel_dtype, scalar_type_name
from ..core.convert import X64, cpu_to_jax, host_array, host_tensor
from ..core.tensor import XlaTensor, from_array
from ..exec.registry import DEVICE_KERNEL_CODES, REGISTRY

_REDUCED = (torch.float16, torch.bfloat16)


def _np(t):
    """The values of a tensor argument as a NumPy array; float16/bfloat16 widen to
    float32 (exactly), since NumPy's sorting and comparisons know only the standard
    types."""
    if isinstance(t, XlaTensor):
        with X64:
            arr = host_array(t)
    else:
        with torch._C._DisableTorchDispatch():
            t = t.detach()
            arr = (t.float() if t.dtype in _REDUCED else t).numpy()
    if t.dtype in _REDUCED:
        arr = arr.astype(np.float32)
    return arr


def _dev(arr, dtype):
    """A new tensor on our device holding `arr` as `dtype`."""
    t = host_tensor(np.array(arr, order="C", copy=True))
    with torch._C._DisableTorchDispatch():
        if t.dtype != dtype:
            t = t.to(dtype)
    with X64:
        return from_array(cpu_to_jax(t))


def _empty_long():
    return _dev(np.zeros((0,), np.int64), torch.int64)


def _wrap_dim(dim, ndim):
    if ndim == 0:
        raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
    if not -ndim <= dim < ndim:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-ndim}, {ndim - 1}], but got {dim})")
    return dim % ndim


def _groups(keys, order):
    """Group runs of equal consecutive rows of `keys` (taken in `order`). Returns the
    positions (in `order`) starting each group, the group of every original row, and
    each group's size. NaN never equals NaN, as in PyTorch's kernels."""
    n = keys.shape[0]
    ranked = keys[order]
    if ranked.ndim == 1:
        differs = ranked[1:] != ranked[:-1]
    else:
        differs = (ranked[1:] != ranked[:-1]).any(axis=1) if ranked.shape[1] else np.zeros(n - 1 if n else 0, bool)
    start = np.concatenate([np.ones(min(n, 1), bool), differs])
    group = np.cumsum(start) - 1
    inverse = np.empty(n, np.int64)
    inverse[order] = group
    firsts = np.flatnonzero(start)
    counts = np.diff(np.append(firsts, n)).astype(np.int64)
    return firsts, inverse, counts


def _sort_order(flat):
    # A stable sort keeps the first of equal values (-0.0 before 0.0 when it comes
    # first), and NumPy sorts NaN last, as PyTorch does.
    return np.argsort(flat, kind="stable")


def _lexsort_rows(rows):
    if rows.shape[1] == 0:
        return np.arange(rows.shape[0])
    return np.lexsort(rows.T[::-1])


def _unique_flat(self, sort, return_inverse, return_counts):
    require_kernel_dtype("unique", self.dtype, "bool int float")  # complex numbers have no order
    flat = _np(self).reshape(-1)
    order = _sort_order(flat) if sort else np.arange(flat.size)
    firsts, inverse, counts = _groups(flat, order)
    values = _dev(flat[order][firsts], self.dtype)
    inv = _dev(inverse.reshape(tuple(self.shape)), torch.int64) if return_inverse else _empty_long()
    cnt = _dev(counts, torch.int64) if return_counts else _empty_long()
    return values, inv, cnt


def _unique_along(self, dim, sort):
    """unique over slices along `dim`; PyTorch returns inverse and counts whatever the
    flags say."""
    require_kernel_dtype("unique_dim", self.dtype, "bool int float")
    dim = _wrap_dim(dim, self.dim())
    shape = tuple(self.shape)
    if self.numel() == 0:
        if sum(s == 0 for s in shape) > 1:
            raise RuntimeError("Number of zero sized dimensions is more than one, so unique cannot be applied ")
        if shape[dim] != 0:
            raise RuntimeError("There are 0 sized dimensions, and they aren't selected, so unique cannot be applied")
        return _dev(np.zeros(shape, np.float32), self.dtype), _empty_long(), _empty_long()
    arr = np.moveaxis(_np(self), dim, 0)
    rows = arr.reshape(shape[dim], -1)
    order = _lexsort_rows(rows) if sort else np.arange(rows.shape[0])
    firsts, inverse, counts = _groups(rows, order)
    kept = np.moveaxis(arr[order][firsts], 0, dim)
    return _dev(kept, self.dtype), _dev(inverse, torch.int64), _dev(counts, torch.int64)


def impl__unique2(self, sorted=True, return_inverse=False, return_counts=False):
    # PyTorch's CPU kernel sorts even when sorted=False; matching it keeps results
    # comparable.
    return _unique_flat(self, True, return_inverse, return_counts)


def impl__unique(self, sorted=True, return_inverse=False):
    values, inverse, _ = _unique_flat(self, True, return_inverse, False)
    return values, inverse


def impl_unique_dim(self, dim, sorted=True, return_inverse=False, return_counts=False):
    return _unique_along(self, dim, True)


def impl_unique_consecutive(self, return_inverse=False, return_counts=False, dim=None):
    # PyTorch takes the flat path for dim=0 (literally) of a 1-d tensor, which
    # honours the flags; every other dim returns inverse and counts regardless.
    if dim is not None and not (dim == 0 and self.dim() == 1):
        return _unique_along(self, dim, False)
    return _unique_flat(self, False, return_inverse, return_counts)


def impl_unique_dim_consecutive(self, dim, return_inverse=False, return_counts=False):
    return _unique_along(self, dim, False)


_INTEGRAL = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint16, torch.uint32, torch.uint64)


def impl_bincount(self, weights=None, minlength=0):
    # PyTorch's checks, in its order: dtype, minlength, the empty shortcut (int64
    # zeros whatever the weights), then rank, sign and the weights' length.
    if self.dtype not in _INTEGRAL:
        raise NotImplementedError(f"\"bincount_cpu\" not implemented for '{scalar_type_name(self.dtype)}'")
    if minlength < 0:
        raise RuntimeError("minlength should be >= 0")
    if self.dim() == 1 and self.numel() == 0:
        return _dev(np.zeros(int(minlength), np.int64), torch.int64)
    x = _np(self).astype(np.int64)
    if self.dim() != 1 or x.min(initial=0) < 0:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if weights is not None and (weights.dim() != 1 or weights.shape[0] != self.shape[0]):
        raise RuntimeError("weights should be 1-d and have the same length as input")
    length = max(int(x.max()) + 1, int(minlength))
    if weights is None:
        return _dev(np.bincount(x, minlength=length).astype(np.int64), torch.int64)
    # PyTorch accumulates float weights in float and every other dtype in double.
    out_dtype = torch.float32 if weights.dtype == torch.float32 else torch.float64
    w = _np(weights).astype(np.float32 if out_dtype == torch.float32 else np.float64)
    out = np.zeros(length, w.dtype)
    np.add.at(out, x, w)
    return _dev(out, out_dtype)


def impl_repeat_interleave_Tensor(repeats, *, output_size=None):
    if repeats.dim() != 1:
        raise RuntimeError("repeat_interleave only accept 1D vector as repeat")
    if repeats.dtype not in (torch.int32, torch.int64):
        raise RuntimeError("repeats has to be Long or Int tensor")
    reps = _np(repeats).astype(np.int64)
    if reps.size and reps.min() < 0:
        raise RuntimeError("repeats can not be negative")
    total = int(reps.sum())
    if output_size is not None and output_size != total:
        raise RuntimeError("allocated size does not match required size")
    return _dev(np.repeat(np.arange(reps.size, dtype=np.int64), reps), repeats.dtype)


def impl_equal(self, other):
    if tuple(self.shape) != tuple(other.shape):
        return False
    # `==` promotes the two dtypes as PyTorch's equal compares them; NaN is unequal.
    return bool(_np((self == other).all()))


def impl_allclose(self, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    if self.dtype != other.dtype:
        raise RuntimeError(f"{scalar_type_name(self.dtype)} did not match {scalar_type_name(other.dtype)}")
    if self.is_complex() and equal_nan:
        raise RuntimeError("isclose with equal_nan=True is not supported for complex inputs.")
    if rtol < 0:
        raise RuntimeError(f"rtol must be greater than or equal to zero, but got {rtol}")
    if atol < 0:
        raise RuntimeError(f"atol must be greater than or equal to zero, but got {atol}")
    a, b = _np(self), _np(other)
    shape = broadcast_shapes(tuple(self.shape), tuple(other.shape))
    a, b = np.broadcast_to(a, shape), np.broadcast_to(b, shape)
    close = a == b
    floating = self.is_floating_point() or self.is_complex()
    if equal_nan and floating:
        close |= np.isnan(a) & np.isnan(b)
    if rtol == 0 and atol == 0:
        return bool(close.all())
    # PyTorch's isclose: bools compare as the default float dtype, integers compute the
    # error exactly and the tolerance in the default float dtype, floats in their own.
    if self.dtype == torch.bool:
        a, b = a.astype(np.float32), b.astype(np.float32)
    tol_type = a.real.dtype.type if floating else np.float32
    with np.errstate(all="ignore"):
        allowed = tol_type(atol) + np.abs(tol_type(rtol) * b)
        actual = np.abs(a - b)
        if not floating:
            actual = actual.astype(np.float32)
        close |= np.isfinite(actual) & (actual <= allowed)
    return bool(close.all())


def _lengths(t):
    if t.dim() != 1 or t.dtype not in _INTEGRAL:
        raise RuntimeError("input_lengths and target_lengths must be 1-d integer tensors")
    return [int(n) for n in _np(t)]


def impl__ctc_loss_Tensor(log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    # The lengths fix the shapes of the dynamic program: read them, then run the
    # lowered int[] overload.
    return torch.ops.aten._ctc_loss(
        log_probs, targets, _lengths(input_lengths), _lengths(target_lengths), blank, zero_infinity
    )


# Note [CTC lengths on the CPU]
# F.ctc_loss's lengths are usually CPU tensors next to device log-probs, as PyTorch's
# docs show; its ctc_loss.Tensor reads them to the host and runs the int[] overload. For
# a tensor subclass (ours) its decomposition keeps them tensors instead and ends in
# `loss / target_lengths`, a device tensor divided by a CPU one, which PyTorch refuses.
# Our device's kernel reads them to the host as PyTorch's does.

_LIBRARY: list[torch.library.Library] = []


def ctc_loss_host_lengths(log_probs, targets, input_lengths, target_lengths, blank=0, reduction=1,
                          zero_infinity=False):
    for name, lengths in (("input_lengths", input_lengths), ("target_lengths", target_lengths)):
        if lengths.dtype not in _INTEGRAL:
            raise RuntimeError(f"{name} must be integral")
    return torch.ops.aten.ctc_loss.IntList(log_probs, targets, [int(n) for n in _np(input_lengths).reshape(-1)],
                                           [int(n) for n in _np(target_lengths).reshape(-1)], blank, reduction,
                                           zero_infinity)


def install_ctc_loss_host_lengths() -> None:
    """Note [CTC lengths on the CPU]: the kernel stands at our device's autograd key, and
    is the handler of the op under inference mode, which skips that key."""
    if not _LIBRARY:
        lib = torch.library.Library("aten", "IMPL")
        lib.impl("ctc_loss.Tensor", ctc_loss_host_lengths, "AutogradPrivateUse1")
        REGISTRY[torch.ops.aten.ctc_loss.Tensor] = ctc_loss_host_lengths
        DEVICE_KERNEL_CODES.append(ctc_loss_host_lengths.__code__)
        _LIBRARY.append(lib)


def impl__ctc_loss_backward_Tensor(
    grad, log_probs, targets, input_lengths, target_lengths, neg_log_likelihood, log_alpha, blank, zero_infinity=False
):
    return torch.ops.aten._ctc_loss_backward(
        grad, log_probs, targets, _lengths(input_lengths), _lengths(target_lengths), neg_log_likelihood,
        log_alpha, blank, zero_infinity,
    )
