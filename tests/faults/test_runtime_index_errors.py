"""Out-of-range index values raise PyTorch CPU's exception type and message in eager
mode (runtime/index_checks.py): PyTorch's own kernels differ by path (index_select
along dim 1 of a matrix, index_add_ as a scatter_add along the first or last dim), and
its argument checks come before any value check."""

from __future__ import annotations

import pytest
import torch

import xla_native_functions as xnf

from runtime_fault_helpers import outcome

SHAPES_AND_DIMS = [((4,), 0), ((4,), -1), ((4, 3), 0), ((4, 3), 1), ((4, 3), -1), ((4, 3), -2),
                   ((2, 4, 3), 1), ((2, 4, 3), 2), ((2, 4, 3), -3), ((), 0)]
INDEX_VALUES = ["past_the_end", "minus_one", "before_the_start", "several"]

OPS = {
    "index_select": lambda t, dim, i, src: t.index_select(dim, i),
    "index_select_out": lambda t, dim, i, src: torch.index_select(t, dim, i, out=t.new_empty(0)),
    "index_add_": lambda t, dim, i, src: t.index_add_(dim, i, src),
    "index_add_alpha": lambda t, dim, i, src: t.index_add_(dim, i, src, alpha=2),
    "index_add": lambda t, dim, i, src: torch.index_add(t, dim, i, src),
    "index_copy_": lambda t, dim, i, src: t.index_copy_(dim, i, src),
    "index_fill_": lambda t, dim, i, src: t.index_fill_(dim, i, 1.5),
    "index_reduce_": lambda t, dim, i, src: t.index_reduce_(dim, i, src, "prod"),
    "index_reduce_exclude_self": lambda t, dim, i, src: t.index_reduce_(dim, i, src, "amax", include_self=False),
    # (PyTorch CPU does not check an expanded int32 index of gather: contiguous here)
    "gather": lambda t, dim, i, src: torch.gather(t, dim, i.reshape([-1] + [1] * (t.dim() - 1)).expand(
        [len(i)] + list(t.shape[1:])).movedim(0, dim % max(t.dim(), 1)).contiguous() if t.dim() else i[:1].reshape(())),
    "scatter_add_": lambda t, dim, i, src: t.scatter_add_(dim, i.reshape([-1] + [1] * (t.dim() - 1)).movedim(
        0, dim % max(t.dim(), 1)) if t.dim() else i[:1].reshape(()), src),
}


def _index(values: str, size: int) -> list[int]:
    return {"past_the_end": [size], "minus_one": [-1], "before_the_start": [-size - 1],
            "several": [0, size + 2, -size - 3]}[values]


def _case(op, shape, dim, values, index_dtype, on_xla: bool):
    size = shape[dim] if shape else 1
    index = torch.tensor(_index(values, size), dtype=index_dtype)
    self = torch.zeros(shape)
    source_shape = list(shape)
    if shape:
        source_shape[dim] = len(index)
    source = torch.ones(source_shape) if shape else torch.ones(len(index) if len(index) > 1 else ())
    if on_xla:
        self, index, source = xnf.to_xla(self), xnf.to_xla(index), xnf.to_xla(source)
    return outcome(lambda: xnf.to_torch(OPS[op](self, dim, index, source)).tolist())


@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32], ids=str)
@pytest.mark.parametrize("values", INDEX_VALUES)
@pytest.mark.parametrize("shape,dim", SHAPES_AND_DIMS, ids=str)
@pytest.mark.parametrize("op", sorted(OPS))
def test_out_of_range_index_raises_pytorch_error(op, shape, dim, values, index_dtype):
    expected = _case(op, shape, dim, values, index_dtype, on_xla=False)
    ours = _case(op, shape, dim, values, index_dtype, on_xla=True)
    assert {k: v for k, v in ours.items() if k != "mro"} == {k: v for k, v in expected.items() if k != "mro"}


def test_index_select_and_index_add_raise_index_error():
    # the common cases: a vocabulary lookup past the end, an accumulation into a row that is not there
    table = xnf.to_xla(torch.zeros(4, 3))
    with pytest.raises(IndexError, match="index out of range in self"):
        table.index_select(0, xnf.to_xla(torch.tensor([1, 4])))
    with pytest.raises(IndexError, match="index out of range in self"):
        table.index_add_(1, xnf.to_xla(torch.tensor([3])), xnf.to_xla(torch.ones(4, 1)), alpha=2)


def test_checks_read_values_only_in_eager_mode():
    table = xnf.to_xla(torch.arange(12.0).reshape(4, 3))
    index = xnf.to_xla(torch.tensor([1, 3]))
    out = xnf.compile(lambda t, i: t.index_select(0, i), replay=False)(table, index)
    assert xnf.to_torch(out).tolist() == torch.arange(12.0).reshape(4, 3).index_select(0, torch.tensor([1, 3])).tolist()
