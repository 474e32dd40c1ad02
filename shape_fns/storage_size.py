"""PyTorch's storage-size arithmetic and its overflow errors.

Note [Overflowing sizes]
~~~~~~~~~~~~~~~~~~~~~~~~
XLA represents an array's byte size as int64 and aborts the whole process (absl's
BadStatusOrAccess, "overflow in static extent product") when asked for an array whose
elements times their size do not fit: `x.new_empty(2**62, 4)`, `torch.zeros(2**61)` in
float32, an expanded view read as a whole. PyTorch raises a RuntimeError for the same
sizes. So every size that reaches XLA is checked first, with PyTorch's own arithmetic
(unsigned 64-bit products, then at most 2**63 - 1 bytes), and raises PyTorch's error:
the results and operands of every op's executable, the arrays a compiled trace records,
strided reads and writes of views, `resize_` and `empty_strided`. All but the last two
run once per new signature (at trace time), never per call of a cached executable.
A size that fits in int64 but not in memory is left to the allocator, which raises
its own out-of-memory error. One shape PyTorch accepts cannot be made at all: an empty
array whose dimensions ahead of a zero exceed 2**63 - 1 bytes ((2**61, 0) in float32),
which XLA rejects as well; it raises the same RuntimeError.
"""

from __future__ import annotations

import math

import torch

_U64 = 1 << 64
MAX_STORAGE_BYTES = (1 << 63) - 1
# Below this many elements no size can overflow, whatever the dtype (16 bytes at most).
_SAFE_NUMEL = 1 << 59


def numel_overflows(size) -> bool:
    """c10's safe_multiplies_u64 over `size` (a zero after an overflow does not undo it),
    or a product beyond int64."""
    product = 1
    for n in size:
        product *= n
        if product >= _U64:
            return True
    return product > MAX_STORAGE_BYTES


def contiguous_nbytes_overflow(size, itemsize: int, offset: int = 0) -> bool:
    """Whether PyTorch's computeStorageNbytesContiguous overflows."""
    return numel_overflows(size) or (math.prod(size) + offset) * itemsize > MAX_STORAGE_BYTES


def strided_nbytes_overflow(size, stride, itemsize: int, offset: int = 0) -> bool:
    """Whether PyTorch's computeStorageNbytes (a strided layout) overflows."""
    if any(n == 0 for n in size):
        return False
    extent = offset + 1
    for n, s in zip(size, stride):
        step = s * (n - 1)
        if not 0 <= step < _U64:
            return True
        extent += step
    return extent >= _U64 or extent * itemsize > MAX_STORAGE_BYTES


def xla_extent_overflows(size, itemsize: int) -> bool:
    """Whether XLA rejects the shape: it multiplies the dims from the first on and
    requires each partial product, in bytes, to fit in int64, also ahead of a zero-sized
    dim that makes the array empty ((2**61, 0) in float32 aborts; (0, 2**61) does not)."""
    product = itemsize
    for n in size:
        product *= n
        if product > MAX_STORAGE_BYTES:
            return True
    return False


def check_storage_size(size, dtype: torch.dtype) -> None:
    """PyTorch's error for a contiguous tensor of `size` whose bytes overflow int64
    (Note [Overflowing sizes]). Costs one product for ordinary sizes."""
    numel = math.prod(size)
    if 0 < numel <= _SAFE_NUMEL:
        return
    if contiguous_nbytes_overflow(size, dtype.itemsize):
        raise RuntimeError(f"Storage size calculation overflowed with sizes={list(size)}")
    if xla_extent_overflows(size, dtype.itemsize):
        # PyTorch allows this empty tensor; XLA cannot represent it.
        raise RuntimeError(f"Storage size calculation overflowed with sizes={list(size)}: XLA cannot represent an "
                           "empty array whose leading dimensions alone exceed 2**63 - 1 bytes")


def check_strided_storage_size(size, stride, dtype: torch.dtype) -> None:
    """PyTorch's error for a tensor of this size and stride (empty_strided, as_strided)."""
    if strided_nbytes_overflow(size, stride, dtype.itemsize):
        raise RuntimeError(f"Storage size calculation overflowed with sizes={list(size)} and strides={list(stride)}")


def check_result_sizes(metas) -> None:
    """check_storage_size for each TensorMeta of a shape function's result (every op a
    trace records calls this: ordinary sizes cost one product)."""
    if isinstance(metas, (tuple, list)):
        for m in metas:
            check_result_sizes(m)
    elif metas is not None and not 0 < math.prod(metas.shape) <= _SAFE_NUMEL:
        check_storage_size(metas.shape, metas.dtype)
