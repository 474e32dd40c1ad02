"""Copies, device transfers, aliases and ops whose result lives on the host or whose
shape depends on data."""

from __future__ import annotations

import numpy as np
import torch

from ...shape_fns.common import TensorMeta, to_numpy_dtype
from .. import state
from ..dispatch import X64, cpu_to_jax, jax_to_cpu, run_node, value, _alias
from ..inference import of_kind
from ..ir import ATTR, SCALAR, TENSOR, Node, Value
from ..lazy import materialize_value, traced_value
from ..tensor import XlaTensor, from_array


class CopyTo(Node):
    """`src` broadcast to a shape and cast to a dtype: the value copy_ writes."""

    __slots__ = ()
    op = name = "copy_to"
    arg_kinds = (TENSOR, ATTR, ATTR)

    @staticmethod
    def lower(src, shape, dtype):
        import jax.numpy as jnp

        from ...lowerings.common import cast

        return jnp.broadcast_to(cast(src, to_numpy_dtype(dtype)), shape)

    @staticmethod
    def output_shape(src, shape, dtype):
        from ...shape_fns.common import broadcast_shapes

        if broadcast_shapes(tuple(src.shape), tuple(shape)) != tuple(shape):
            raise RuntimeError(f"The size of tensor a ({shape}) must match the size of tensor b ({src.shape})")
        return TensorMeta(tuple(shape), dtype)


def _host_value(t):
    """The concrete array of a tensor, running the pending trace if needed."""
    if state.tracing:
        return materialize_value(traced_value(t))
    return value(t)


def host_array(t) -> np.ndarray:
    """A tensor's values as a read-only NumPy array, for reads on the host (`.cpu()`,
    `.item()`, `to_torch`, data-dependent ops). A view of a concrete storage is applied
    to the storage's buffer with NumPy strides, as PyTorch reads a CPU view, instead of
    running a strided read in JAX: a call into XLA costs more than the copy that follows."""
    if state.tracing:
        return np.asarray(materialize_value(traced_value(t)))
    store = t._store
    base = store.value
    if base.__class__ is not Value:
        host = np.asarray(base)
        if t._whole:
            return host
        shape = tuple(t.shape)
        if 0 in shape:  # PyTorch lets an empty view's offset lie past the storage's end
            return np.empty(shape, host.dtype)
        if host.flags.c_contiguous:
            itemsize = host.itemsize
            return np.ndarray(shape, host.dtype, buffer=host.reshape(-1), offset=t.storage_offset() * itemsize,
                              strides=tuple(s * itemsize for s in t.stride()))
    return np.asarray(value(t))


def _on_device(t):
    """An XlaTensor for a tensor argument that may be a CPU tensor of any shape."""
    if isinstance(t, XlaTensor):
        return t
    return from_array(cpu_to_jax(t))


def impl__local_scalar_dense(self):
    with X64:
        return jax_to_cpu(host_array(self)).item()


def impl__to_copy(self, *, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False, memory_format=None):
    target = torch.device(device) if device is not None else self.device
    dtype = dtype or self.dtype
    if target.type == "cpu":
        if not isinstance(self, XlaTensor):
            with torch._C._DisableTorchDispatch():
                return self.to(dtype=dtype, copy=True)
        with X64:
            return jax_to_cpu(host_array(self)).to(dtype)
    return run_node(CopyTo, (_on_device(self), tuple(self.shape), dtype))


def impl_copy(self, src, non_blocking=False):
    if not isinstance(self, XlaTensor):
        with X64:
            return from_array(cpu_to_jax(_host_cpu(src).to(self.dtype).expand(self.shape).contiguous()))
    return run_node(CopyTo, (_on_device(src), tuple(self.shape), self.dtype))


def _host_cpu(t):
    if isinstance(t, XlaTensor):
        return jax_to_cpu(host_array(t))
    return t


def impl_alias(self):
    return _alias(self._store, self.dtype, tuple(self.shape), tuple(self.stride()), self.storage_offset(), base=self)


def impl_detach(self):
    return impl_alias(self)


def impl_empty_memory_format(size, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    # Zeros, from the zeros op's cached executable: jnp.zeros called eagerly runs JAX's
    # op-by-op dispatch, 75 to 113 us per torch.empty against 17 us this way, and every
    # BatchNorm call makes one (cuDNN's empty reserve space).
    from ... import ir  # the generated IR classes (ir.py imports this module)

    return run_node(ir.Zeros, (tuple(size), dtype or torch.get_default_dtype(), None, None, None))


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


class IntegerRange(Node):
    """start + step * [0, n) in int64, cast to an integer dtype: what PyTorch's arange
    computes for integer start and step (its accumulator type for integers is int64)."""

    __slots__ = ()
    op = name = "integer_range"
    arg_kinds = (SCALAR, SCALAR, ATTR, ATTR)

    @staticmethod
    def lower(start, step, n, dtype):
        import jax.numpy as jnp

        iota = jnp.arange(n, dtype=jnp.int64)
        return (jnp.int64(start) + jnp.int64(step) * iota).astype(to_numpy_dtype(dtype))

    @staticmethod
    def output_shape(start, step, n, dtype):
        return TensorMeta((n,), dtype)


def impl_arange_start_step(start, end, step=1, *, dtype=None, layout=None, device=None, pin_memory=None):
    # The length depends on the values: PyTorch computes it (and validates the
    # arguments) on the host, and so do we. A range of Python integers (positions,
    # indices) is then computed on the device; anything else is PyTorch's CPU result,
    # whose floating-point rounding (vectorized or not, by position) we do not reproduce.
    n = _integer_range_length(start, end, step, dtype)
    if n is not None:
        return run_node(IntegerRange, (start, step, n, dtype or torch.int64))
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


def impl_empty_strided(size, stride, *, dtype=None, layout=None, device=None, pin_memory=None):
    # A fresh contiguous tensor: nothing can observe the requested strides before a
    # write, and PyTorch's own users (copy, clone) only need the size.
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


def impl_lift_fresh(self):
    # torch.tensor(data, device=...) marks its fresh result; nothing to do for a value.
    return self


def impl__conj(self):
    # PyTorch returns a view with the conjugate bit set, resolved lazily. The runtime has
    # no conjugated views: the conjugate is materialised, so a write into it does not
    # reach `self` (documented in docs/coverage.md).
    return of_kind(self, torch.ops.aten._conj_physical.default(self))


def impl_polygamma_(self, n):
    # The in-place form puts `self` first, so torchgen does not group it with the
    # functional polygamma(n, self) and nothing derives it.
    from ..dispatch import write_inplace

    return write_inplace(self, torch.ops.aten.polygamma.default(n, self))


def impl_conj_physical_(self):
    # A real tensor is its own conjugate: PyTorch returns it untouched.
    if not self.is_complex():
        return self
    from ..dispatch import write_inplace

    return write_inplace(self, torch.ops.aten._conj_physical.default(self))


# view_as_real / view_as_complex reinterpret PyTorch's memory (a complex element is two
# reals side by side). A storage here holds one JAX array of one dtype, so these return
# the reinterpreted values as new tensors: right values everywhere, but a write into the
# result does not reach `self` (docs/semantics.md).


class ViewAsReal(Node):
    __slots__ = ()
    op = name = "view_as_real"
    arg_kinds = (TENSOR,)

    @staticmethod
    def lower(self):
        import jax.numpy as jnp

        return jnp.stack([jnp.real(self), jnp.imag(self)], axis=-1)

    @staticmethod
    def output_shape(self):
        if not self.dtype.is_complex:
            raise RuntimeError("view_as_real is only supported for complex tensors")
        return TensorMeta(tuple(self.shape) + (2,), self.dtype.to_real())


class ViewAsComplex(Node):
    __slots__ = ()
    op = name = "view_as_complex"
    arg_kinds = (TENSOR,)

    @staticmethod
    def lower(self):
        return self[..., 0] + 1j * self[..., 1]

    @staticmethod
    def output_shape(self):
        if self.dtype not in (torch.float32, torch.float64):
            raise RuntimeError(
                "view_as_complex is only supported for float and double tensors, but got a tensor of scalar type: "
                f"{self.dtype}"
            )
        if not self.shape or self.shape[-1] != 2:
            raise RuntimeError("Tensor must have a last dimension of size 2")
        return TensorMeta(tuple(self.shape[:-1]), self.dtype.to_complex())


def impl_view_as_real(self):
    return of_kind(self, run_node(ViewAsReal, (self,)))


def impl_view_as_complex(self):
    if self.dim() and self.shape[-1] == 2:
        if self.stride(-1) != 1:
            raise RuntimeError("Tensor must have a last dimension with stride 1")
        if any(s % 2 for s in self.stride()[:-1]):
            raise RuntimeError("Tensor must have a stride divisible by 2 for all but last dimension")
        if self.storage_offset() % 2:
            raise RuntimeError("Tensor must have a storage_offset divisible by 2")
    return of_kind(self, run_node(ViewAsComplex, (self,)))
