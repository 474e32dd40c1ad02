"""Every core aten operator (torchgen's `core` tag) is covered: a manifest entry, or a
CompositeImplicitAutograd op that PyTorch decomposes before a backend sees it. The
decomposed ones are run here on our device against PyTorch CPU, with no CPU fallback,
so a decomposition that started reaching a missing operator would fail."""

from __future__ import annotations

import pytest
import torch

import xla_native_functions as xnf
from codegen.schemas import load_schema_database
from xla_native_functions.runtime.platform.metrics import metrics

aten = torch.ops.aten


def _core_records():
    return [r for r in load_schema_database().records.values() if "core" in r.tags]


def test_every_core_op_is_lowered_or_decomposed_by_pytorch():
    records = _core_records()
    assert len(records) == 193  # torch 2.13's core set
    uncovered = [r.name for r in records if r.name not in xnf.SECTIONS and not r.composite_implicit]
    assert uncovered == []
    assert not any(xnf.SECTIONS.get(r.name) == "fallback" for r in records)


def _x(*shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0))


# The core ops that are CompositeImplicitAutograd and not manifest entries, each with
# a call (the sym_* ops answer from tensor metadata and are checked separately in
# tests/test_ops_reduction.py).
DECOMPOSED = {
    "adaptive_avg_pool1d": lambda x: aten.adaptive_avg_pool1d(x, [3]),
    "avg_pool1d": lambda x: aten.avg_pool1d(x, [2], [2], [1], True, False),
    "upsample_bilinear2d.vec": lambda x: aten.upsample_bilinear2d.vec(x.reshape(1, 2, 3, 4), [5, 7], True, None),
    "upsample_nearest2d.vec": lambda x: aten.upsample_nearest2d.vec(x.reshape(1, 2, 3, 4), None, [2.0, 1.5]),
    "var.dim": lambda x: aten.var.dim(x, [1], True, True),
}


def test_decomposed_list_is_the_uncovered_non_sym_core_ops():
    expected = {
        r.name
        for r in _core_records()
        if r.name not in xnf.SECTIONS and r.composite_implicit and not r.name.startswith("sym_")
    }
    assert expected == set(DECOMPOSED)


@pytest.mark.parametrize("name", sorted(DECOMPOSED))
def test_decomposed_core_op_matches_cpu(name):
    fn = DECOMPOSED[name]
    x = _x(2, 3, 4)
    expected = fn(x)
    xnf.reset_metrics()
    got = fn(xnf.to_xla(x))
    assert not metrics.fallback_calls
    assert got.dtype == expected.dtype and got.shape == expected.shape
    torch.testing.assert_close(xnf.to_torch(got), expected)
