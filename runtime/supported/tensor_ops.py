"""Copies, device transfers, aliases and ops whose result lives on the host or whose
shape depends on data."""

from __future__ import annotations

import math

import numpy as np
import torch

from ...lowerings.storage import as_complex_layout, as_real_layout
from ...shape_fns.common import scalar_type_name
from ...shape_fns.storage_size import check_strided_storage_size
from ..core.context import context
from ..core.convert import X64, cpu_to_jax, host_array, jax_to_cpu
from ..core.tensor import XlaTensor, from_array
from ..core.views import memory_numel
from ..exec.eager import run_node
from ..exec.mutation import alias, of_kind, write_inplace
from ..exec.registry import handler, node


def _on_device(t):
    """An XlaTensor for a tensor argument that may be a CPU tensor of any shape."""
    if isinstance(t, XlaTensor):
        return t
    return from_array(cpu_to_jax(t))


def impl__local_scalar_dense(self):
    with X64:
        return jax_to_cpu(host_array(self)).item()


def impl__assert_async(self):
    _assert_nonzero(self, "Expected Tensor with single nonzero value, but got zero")


def impl__assert_async_msg(self, assert_msg):
    _assert_nonzero(self, assert_msg)


def _assert_nonzero(t, message):
    """torch._assert_async: PyTorch CPU checks at once; a compiled program cannot raise,
    so there the check is left out, as a CUDA device's assertion is asynchronous."""
    if context.trace is not None:
        return
    if t.numel() != 1:
        raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
    if not impl__local_scalar_dense(t):
        raise RuntimeError(message)


def impl__to_copy(
    self, *, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False, memory_format=None
):
    target = torch.device(device) if device is not None else self.device
    dtype = dtype or self.dtype
    if target.type == "cpu":
        if not isinstance(self, XlaTensor):
            with torch._C._DisableTorchDispatch():
                return self.to(dtype=dtype, copy=True)
        with X64:
            return jax_to_cpu(host_array(self)).to(dtype)
    return run_node(node("copy_to"), (_on_device(self), tuple(self.shape), dtype))


def impl_copy(self, src, non_blocking=False):
    if not isinstance(self, XlaTensor):
        with X64:
            return from_array(cpu_to_jax(_host_cpu(src).to(self.dtype).expand(self.shape).contiguous()))
    return run_node(node("copy_to"), (_on_device(src), tuple(self.shape), self.dtype))


def _host_cpu(t):
    if isinstance(t, XlaTensor):
        return jax_to_cpu(host_array(t))
    return t


def impl_alias(self):
    return alias(self._store, self.dtype, tuple(self.shape), tuple(self.stride()), self.storage_offset(),
                 reinterprets=self._reinterprets, base=self)


def impl_detach(self):
    return impl_alias(self)


def impl_empty_memory_format(size, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    # Zeros, from the zeros op's cached executable: jnp.zeros called eagerly runs JAX's
    # op-by-op dispatch, 75 to 113 us per torch.empty against 17 us this way, and every
    # BatchNorm call makes one (cuDNN's empty reserve space).
    return run_node(node("zeros"), (tuple(size), dtype or torch.get_default_dtype(), None, None, None))


def impl__efficientzerotensor(size, *, dtype=None, layout=None, device=None, pin_memory=None):
    # Backward formulas (sgn's, for one) return these zeros; PyTorch's ZeroTensor is an
    # optimisation that plain zeros stand in for.
    return impl_empty_memory_format(size, dtype=dtype)


def impl_nonzero(self):
    import jax.numpy as jnp

    with X64:
        host = host_array(self)
        if not host.ndim:  # one row without columns if the scalar is nonzero
            return from_array(jnp.zeros((int(bool(host)), 0), jnp.int64))
        idx = np.stack(np.nonzero(host), axis=-1).astype(np.int64)
        return from_array(jnp.asarray(idx.reshape(-1, self.dim())))


def impl_arange_start_step(start, end, step=1, *, dtype=None, layout=None, device=None, pin_memory=None):
    # The length depends on the values: PyTorch computes it (and validates the
    # arguments) on the host, and so do we. A range of Python integers (positions,
    # indices) is then computed on the device; anything else is PyTorch's CPU result,
    # whose floating-point rounding (vectorized or not, by position) we do not reproduce.
    n = _integer_range_length(start, end, step, dtype)
    if n is not None:
        return run_node(node("integer_range"), (start, step, n, dtype or torch.int64))
    with torch._C._DisableTorchDispatch():
        cpu = torch.arange(start, end, step, dtype=dtype)
    return from_array(cpu_to_jax(cpu))


def _integer_range_length(start, end, step, dtype) -> int | None:
    """arange's length for Python integers and an integer dtype, as PyTorch computes it;
    None for every other case, including those PyTorch rejects."""
    if not (type(start) is int and type(end) is int and type(step) is int):
        return None
    if dtype is not None and (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool):
        return None
    if not (step > 0 and end >= start or step < 0 and end <= start) or max(abs(start), abs(end)) >= 2**53:
        return None
    return (end - start + step - (1 if step > 0 else -1)) // step


def impl_arange(end, *, dtype=None, layout=None, device=None, pin_memory=None):
    return impl_arange_start_step(0, end, 1, dtype=dtype)


def impl_arange_start(start, end, *, dtype=None, layout=None, device=None, pin_memory=None):
    return impl_arange_start_step(start, end, 1, dtype=dtype)


def impl_range_step(start, end, step=1, *, dtype=None, layout=None, device=None, pin_memory=None):
    # torch.range (deprecated, end included): a short host computation, like arange's
    # floating ranges, with PyTorch's checks and its accumulation order.
    with torch._C._DisableTorchDispatch():
        cpu = torch.ops.aten.range.step(start, end, step, dtype=dtype)
    return from_array(cpu_to_jax(cpu))


def impl_range(start, end, *, dtype=None, layout=None, device=None, pin_memory=None):
    return impl_range_step(start, end, 1, dtype=dtype)


def impl_empty_strided(size, stride, *, dtype=None, layout=None, device=None, pin_memory=None):
    # Zeros of the size; runtime/exec/layouts.py gives them the strides asked for (Note
    # [Result layouts]). The strides decide whether PyTorch can allocate it (Note
    # [Overflowing sizes]).
    if all(n >= 0 for n in size):  # else the zeros below raise PyTorch's error for that
        check_strided_storage_size(size, stride, dtype or torch.get_default_dtype())
    return impl_empty_memory_format(size, dtype=dtype)


def _triangle_indices(row, col, offset, dtype, upper):
    with torch._C._DisableTorchDispatch():
        make = torch.triu_indices if upper else torch.tril_indices
        cpu = make(row, col, offset, dtype=dtype)
    return from_array(cpu_to_jax(cpu))


def impl_tril_indices(row, col, offset=0, *, dtype=torch.int64, layout=None, device=None, pin_memory=None):
    # A small host computation (its length depends on the arguments, like arange's).
    return _triangle_indices(row, col, offset, dtype or torch.int64, upper=False)


def impl_triu_indices(row, col, offset=0, *, dtype=torch.int64, layout=None, device=None, pin_memory=None):
    return _triangle_indices(row, col, offset, dtype or torch.int64, upper=True)


def impl_dequantize_self(self):
    """A tensor that is not quantized (ours never are) in float32: itself if it is one,
    as PyTorch's `self.to(torch.float)`."""
    if self.dtype == torch.float32:
        return self
    return handler(torch.ops.aten._to_copy.default)(self, dtype=torch.float32)


def impl_sparse_dim(self):
    return 0  # a strided tensor's, as PyTorch answers (the jax device has no sparse layouts)


def impl_dense_dim(self):
    return self.dim()


def impl_is_set_to(self, tensor):
    """Whether both tensors view the same memory the same way (PyTorch compares storage,
    offset, sizes and strides)."""
    return (
        isinstance(tensor, XlaTensor) and tensor._store is self._store
        and tensor.storage_offset() == self.storage_offset()
        and tuple(tensor.shape) == tuple(self.shape) and tuple(tensor.stride()) == tuple(self.stride())
    )


def impl__has_same_storage_numel(self, other):
    # Forward-mode AD asks whether a tangent can take its primal's layout.
    return _storage_numel(self) == _storage_numel(other)


def _storage_numel(t: torch.Tensor) -> int:
    """Elements of t's dtype in its whole storage (PyTorch's placeholder storage of a view
    on our device ends at the view's last element: Note [Device addresses])."""
    if not isinstance(t, XlaTensor):
        return t.untyped_storage().nbytes() // t.element_size()
    numel = math.prod(t._store.shape())
    return memory_numel(numel, t._store.dtype(), t.dtype) if t._reinterprets else numel


def impl_is_same_size(self, other):
    # Forward-mode AD asks it of a primal and its tangent (fwAD.make_dual).
    return tuple(self.shape) == tuple(other.shape)


def impl_is_pinned(self, device=None):
    return False  # as for any tensor not in host memory


def impl__pin_memory(self, device=None):
    raise RuntimeError(f"cannot pin '{self.type()}' only dense CPU tensors can be pinned")


def impl_lift_fresh(self):
    # torch.tensor(data, device=...) marks its fresh result; nothing to do for a value.
    return self


def impl__conj(self):
    # PyTorch returns a view with the conjugate bit set, resolved lazily. The runtime has
    # no conjugated views: the conjugate is materialised, so a write into it does not
    # reach `self` (docs/semantics.md).
    return of_kind(self, torch.ops.aten._conj_physical.default(self))


def impl_polygamma_(self, n):
    # The in-place form puts `self` first, so torchgen does not group it with the
    # functional polygamma(n, self) and nothing derives it.
    return write_inplace(self, torch.ops.aten.polygamma.default(n, self))


def impl_conj_physical_(self):
    # A real tensor is its own conjugate: PyTorch returns it untouched.
    if not self.is_complex():
        return self
    return write_inplace(self, torch.ops.aten._conj_physical.default(self))


# Note [Views as another dtype]
# view_as_real, view_as_complex and x.view(dtype) reinterpret PyTorch's memory (a
# complex element is two reals side by side; x.view(torch.int32) reads a float32's
# bits). Each is a view of the storage, with the layout PyTorch computes counted in
# elements of the new dtype: one of the storage's own dtype is a plain view, one of
# another dtype reads and writes the storage's memory as its own (`_reinterprets`,
# Note [Views and mutation] in runtime/core/tensor.py), so z.real.mul_(2) and
# x.view(torch.int32)[0] = 0 land in z and x. z.real and z.imag are views PyTorch builds
# on view_as_real.


def _view_as(self, dtype, size, stride, offset):
    """A view of self's storage as `dtype` with this layout (in elements of `dtype`)."""
    return alias(self._store, dtype, size, stride, offset, reinterprets=dtype != self._store.dtype(), base=self)


def impl_view_as_real(self):
    if self.__class__ is not XlaTensor or not self.is_complex():
        return run_node(node("complex_as_pairs"), (self,))  # raises PyTorch's error for a real tensor
    return _view_as(self, self.dtype.to_real(), *as_real_layout(tuple(self.shape), self.stride(),
                                                                 self.storage_offset()))


def impl_view_as_complex(self):
    if self.dim() and self.shape[-1] == 2:
        if self.stride(-1) != 1:
            raise RuntimeError("Tensor must have a last dimension with stride 1")
        if any(s % 2 for s in self.stride()[:-1]):
            raise RuntimeError("Tensor must have a stride divisible by 2 for all but last dimension")
        if self.storage_offset() % 2:
            raise RuntimeError("Tensor must have a storage_offset divisible by 2")
    if self.__class__ is XlaTensor and self.dtype in (torch.float32, torch.float64):
        layout = as_complex_layout(tuple(self.shape), self.stride(), self.storage_offset())
        if layout is not None:
            return _view_as(self, self.dtype.to_complex(), *layout)
    return of_kind(self, run_node(node("pairs_as_complex"), (self,)))  # PyTorch's errors, or not our tensor


def impl_view_dtype(self, dtype):
    if dtype == self.dtype:
        return impl_alias(self)
    size, stride, offset = tuple(self.shape), tuple(self.stride()), self.storage_offset()
    what = f"to view {scalar_type_name(self.dtype)} as {scalar_type_name(dtype)}"
    if self.dtype.itemsize != dtype.itemsize:  # PyTorch's checks, in its order
        if not size:
            raise RuntimeError(f"self.dim() cannot be 0 {what} (different element sizes)")
        if stride[-1] != 1:
            raise RuntimeError(f"self.stride(-1) must be 1 {what} (different element sizes), but got {stride[-1]}")
    if self.dtype.itemsize > dtype.itemsize:  # each element becomes n
        n = self.dtype.itemsize // dtype.itemsize
        size = size[:-1] + (size[-1] * n,)
        stride = tuple(st * n for st in stride[:-1]) + (1,)
        offset *= n
    elif self.dtype.itemsize < dtype.itemsize:  # n elements become one
        n = dtype.itemsize // self.dtype.itemsize
        if size[-1] % n:
            raise RuntimeError(f"self.size(-1) must be divisible by {n} {what} (different element sizes), but got "
                               f"{size[-1]}")
        if offset % n:
            raise RuntimeError(f"self.storage_offset() must be divisible by {n} {what} (different element sizes), "
                               f"but got {offset}")
        for i, st in enumerate(stride[:-1]):
            if st % n:
                raise RuntimeError(f"self.stride({i}) must be divisible by {n} {what} (different element sizes), "
                                   f"but got {st}")
        size = size[:-1] + (size[-1] // n,)
        stride = tuple(st // n for st in stride[:-1]) + (1,)
        offset //= n
    if self.__class__ is not XlaTensor:
        raise NotImplementedError(f"x.view({dtype}) of a {type(self).__name__} on the {self.device} device")
    return _view_as(self, dtype, size, stride, offset)
