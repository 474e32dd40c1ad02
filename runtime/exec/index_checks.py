"""Bounds checks on index values (and on binary_cross_entropy's probabilities), raised
as PyTorch CPU raises them.

JAX cannot raise from inside a compiled computation: an out-of-range index held in a
tensor makes our gathers read a fill value and our scatters drop the update (Note
[Out-of-bounds indices] in lowerings/indexing.py). PyTorch CPU raises instead (a wrong
vocabulary size in an embedding, a class id past the last logit). In eager mode the
ops below therefore look at their index values first, at the cost of one small
reduction and one read back to the host per call; a compiled program cannot stop, so
there the fill/drop behaviour stands (docs/semantics.md).
`config.check_index_values = False` turns the eager checks off.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import torch

from ..core.context import context
from ..core.convert import X64, host_array
from ..core.tensor import XlaTensor
from ..platform.config import config
from .eager import value


@jax.jit
def _min_max(index):
    return jnp.min(index), jnp.max(index)


def value_range(index: Any, ignore: int | None = None) -> tuple[Any, Any] | None:
    """Smallest and largest value of an index tensor (ignoring `ignore`; floats for a
    floating tensor, NaN if it holds one), or None if there is none. On the CPU NumPy
    reads them from the array's buffer (2.6 us for 34 indices, 0.16 ms for a million,
    against 27 us and 3.2 ms for a jitted min and max and two reads of their results);
    elsewhere only the two results leave the device."""
    if index is None or not index.numel():
        return None
    array = index._store.array if isinstance(index, XlaTensor) else None
    if isinstance(array, jax.core.Tracer):  # inside a jitted torch.compile graph: no values
        return None
    if isinstance(array, jax.Array) and array.is_fully_addressable and _on_cpu(array):
        host = host_array(index)
        if ignore is not None:
            host = np.where(host == ignore, 0, host)
        lo, hi = host.min(), host.max()
    else:
        v = value(index)
        with X64:
            if ignore is not None:
                v = jnp.where(v == ignore, 0, v)
            lo, hi = _min_max(v)
    number = float if index.is_floating_point() else int
    return number(lo), number(hi)


def _on_cpu(array: jax.Array) -> bool:
    return all(d.platform == "cpu" for d in array.devices())


def _dim_size(t: torch.Tensor, dim: int) -> int | None:
    """The size along `dim`, or None when `dim` is invalid (the op raises that itself)."""
    if not isinstance(dim, int) or not -max(t.dim(), 1) <= dim < max(t.dim(), 1):
        return None
    return t.shape[dim] if t.dim() else 1


def _first_outside(index: Any, low: int, high: int) -> int:
    """The first index value, in the index's order, outside [low, high): the one PyTorch's
    loops stop at. Read only once an error is certain."""
    if isinstance(index, XlaTensor):
        flat = np.asarray(host_array(index)).reshape(-1)
    else:  # a zero-dim CPU index, as PyTorch accepts
        with torch._C._DisableTorchDispatch():
            flat = index.detach().reshape(-1).numpy()
    return int(flat[np.argmax((flat < low) | (flat >= high))])


def _along_dim(error: type, message: str, negative_ok: bool = False) -> Callable[..., None]:
    """Indices into `self` along `dim`: [0, size), or [-size, size) with `negative_ok`.
    PyTorch names the dimension counted from the front."""

    def check(self, dim, index, **_):
        size = _dim_size(self, dim)
        ext = None if size is None else value_range(index)
        if ext is None:
            return
        low = -size if negative_ok else 0
        if not (low <= ext[0] and ext[1] < size):
            wrapped = dim % max(self.dim(), 1)
            raise error(message.format(index=_first_outside(index, low, size), dim=wrapped, size=size))

    return check


_OUT_OF_RANGE = "index out of range in self"


def _size_if_outside(self, dim, index) -> int | None:
    """`self`'s size along `dim` when an index value falls outside [0, size) (a 0-d or
    1-D `self` counts its elements); None when every value is inside, or there is no
    value to read. Raises index_select's and index_add's IndexError where `self` is 1-D
    or 0-d."""
    size = _dim_size(self, dim)
    ext = None if size is None else value_range(index)
    if ext is None or (0 <= ext[0] and ext[1] < (size if self.dim() > 1 else self.numel())):
        return None
    if self.dim() <= 1:
        raise IndexError(_OUT_OF_RANGE)
    return size


def _index_select(self, dim, index, **_):
    """index_select_out_cpu_'s checks: a 2-D or larger `self` is read along dim 1 by a
    fast path with its own RuntimeError, and an empty one checks only the range; every
    other case raises IndexError."""
    size = _size_if_outside(self, dim, index)
    if size is None:
        return
    if self.numel() == 0 and size == 0:
        raise RuntimeError("index_select(): self indexing axis dim should be positive")
    if self.numel() == 0 or dim % self.dim() == 1:
        raise RuntimeError(
            f"INDICES element is out of DATA bounds, id={_first_outside(index, 0, size)} axis_dim={size}"
        )
    raise IndexError(_OUT_OF_RANGE)


def _index_add(self, dim, index, source, alpha=1, **_):
    """index_add_cpu_'s checks: along the first or last dim of a 2-D or larger `self`,
    with int64 indices, alpha 1 and a source of self's shape elsewhere, it is a
    scatter_add and raises scatter's RuntimeError; otherwise its loop raises IndexError."""
    if self.dim() > 1 and self.numel() == 0:
        return
    size = _size_if_outside(self, dim, index)
    if size is None:
        return
    d = dim % self.dim()
    same_elsewhere = source.dim() == self.dim() and all(
        a == b for i, (a, b) in enumerate(zip(self.shape, source.shape)) if i != d)
    if ((d == 0 or d == self.dim() - 1) and alpha == 1 and index.dtype == torch.int64 and same_elsewhere
            and torch.complex32 not in (self.dtype, source.dtype)):
        raise RuntimeError(_OUT_OF_BOUNDS.format(index=_first_outside(index, 0, size), dim=d, size=size))
    raise IndexError(_OUT_OF_RANGE)


def _index_reduce(self, dim, index, source, reduce=None, include_self=True, **_):
    """index_reduce_func_impl: without include_self it first fills the indexed slices
    (index_fill_'s error for values outside [-size, size)), then its loop raises
    IndexError for any value outside [0, size)."""
    if self.dim() > 1 and not index.numel():
        return
    size = _dim_size(self, dim)
    ext = None if size is None else value_range(index)
    if ext is None:
        return
    if not include_self and not (-size <= ext[0] and ext[1] < size):
        raise IndexError(_OUT_OF_BOUNDS.format(index=_first_outside(index, -size, size), dim=dim % max(self.dim(), 1),
                                               size=size))
    if not (0 <= ext[0] and ext[1] < (size if self.dim() > 1 else self.numel())):
        raise IndexError(_OUT_OF_RANGE)


def _take(self, index, **_):
    ext = value_range(index)
    n = self.numel()
    for v in ext or ():
        if not -n <= v < n:
            raise IndexError(f"out of range: tried to access index {v} on a tensor of {n} elements.")


def _embedding(weight, indices, **_):
    ext = value_range(indices) if weight.dim() == 2 else None  # else the op raises its own error
    if ext is not None and (ext[0] < 0 or ext[1] >= weight.shape[0]):
        raise IndexError("index out of range in self")


def _embedding_bag(weight, indices, **_):
    ext = value_range(indices) if weight.dim() == 2 else None
    n = weight.shape[0]
    for v in ext or ():
        if not 0 <= v < n:
            raise RuntimeError(f"Index of input takes value {v} which is not in the valid range [0, {n})")


def _nll_loss(self, target, ignore_index=-100, **_):
    if self.dim() not in (1, 2, 3, 4) or target.dim() != max(self.dim() - 1, 0):
        return  # the op raises its own shape error
    ext = value_range(target, ignore=ignore_index)
    classes = self.shape[-1] if self.dim() == 1 else self.shape[1]
    for v in ext or ():
        if not 0 <= v < classes:
            raise IndexError(f"Target {v} is out of bounds.")


def _binary_cross_entropy(self, target, **_):
    # NaN fails too, as in PyTorch's kernel (its min and max are NaN)
    for tensor, name in ((self, "input"), (target, "target")):
        ext = value_range(tensor) if tensor.is_floating_point() else None
        if ext is not None and not (0 <= ext[0] and ext[1] <= 1):
            raise RuntimeError(f"all elements of {name} should be between 0 and 1")


_OUT_OF_BOUNDS = "index {index} is out of bounds for dimension {dim} with size {size}"

# check name (the manifest's policy `eager_value_checks` gives each op its check) -> the
# check, called with the op's arguments bound to their schema names.
CHECKS: dict[str, Callable[..., None]] = {
    "index_along_dim": _along_dim(RuntimeError, _OUT_OF_BOUNDS),
    "index_add": _index_add,
    "index_copy": _along_dim(IndexError, "index_copy_(): " + _OUT_OF_BOUNDS),
    "index_fill": _along_dim(IndexError, _OUT_OF_BOUNDS, negative_ok=True),
    "index_reduce": _index_reduce,
    "index_select": _index_select,
    "take": _take,
    "embedding": _embedding,
    "embedding_bag": _embedding_bag,
    "nll_loss": _nll_loss,
    "probabilities": _binary_cross_entropy,
}


def _checked(op: Any, handler: Callable[..., Any], check: Callable[..., None],
             functional: Callable[..., Any] | None) -> Callable[..., Any]:
    names = [a.name for a in op._schema.arguments]

    def run(*args, **kwargs):
        if context.trace is None and config.check_index_values:
            bound = dict(zip(names, args))
            bound.update(kwargs)
            try:
                check(**bound)
            except (IndexError, RuntimeError):
                # PyTorch checks shapes and dtypes before any value: the op's functional
                # form raises those errors (it writes nothing).
                if functional is not None:
                    functional(*args, **{k: v for k, v in kwargs.items() if k != "out"})
                raise
        return handler(*args, **kwargs)

    run.__name__ = getattr(handler, "__name__", "handler")
    run.__wrapped__ = handler
    return run


def _functional_form(op: Any) -> Any:
    """The functional overload of an in-place or out= op (index_copy_ -> index_copy)."""
    packet = op._schema.name.removeprefix("aten::").removesuffix("_")
    overload = op._overloadname
    overload = "default" if overload == "out" else overload.removesuffix("_out")
    packet_ops = getattr(torch.ops.aten, packet, None)
    return None if packet_ops is None else getattr(packet_ops, overload, None)


def wrap(op: Any, handler: Callable[..., Any], check: str, registry: dict[Any, Any]) -> Callable[..., Any]:
    """`handler` of `op` run after the index check named `check`."""
    return _checked(op, handler, CHECKS[check], registry.get(_functional_form(op)))
