"""Single OpInfo samples of PyTorch's op_db run on our tensors and compared with PyTorch
CPU, for the per-family test files' OpInfo tests (the whole database is the sweep's:
opinfo_harness.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pytest
import torch

import xla_native_functions as xnf


def op_db_entries(names: Iterable[str]) -> list:
    """The OpInfos of op_db named `names` (every variant)."""
    from torch.testing._internal.common_methods_invocations import op_db  # large: imported when asked for

    names = set(names)
    return [op for op in op_db if op.name in names]


def op_db_entry(name: str, variant: str = "") -> Any:
    from torch.testing._internal.common_methods_invocations import op_db

    return next(op for op in op_db if op.name == name and op.variant_test_name == variant)


def opinfo_id(op) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def map_tensors(fn: Callable[[torch.Tensor], Any], tree: Any) -> Any:
    return torch.utils._pytree.tree_map(lambda v: fn(v) if isinstance(v, torch.Tensor) else v, tree)


def _call_on_xla(op, sample, move: Callable[[torch.Tensor], Any] = xnf.to_xla) -> Any:
    # input, args, kwargs: the order `move` sees the tensors in, as a call would
    moved_input = map_tensors(move, sample.input)
    args, kwargs = map_tensors(move, list(sample.args)), map_tensors(move, sample.kwargs)
    return op(moved_input, *args, **kwargs)


def forward_matches_cpu(op, sample) -> bool:
    """`op` on the sample moved to our device gives PyTorch CPU's values; where CPU refuses
    the sample, ours raises the same exception type. True when values were compared."""
    try:
        expected = op(sample.input, *sample.args, **sample.kwargs)
    except Exception as exc:  # invalid sample for CPU: ours must raise too
        with pytest.raises(type(exc)):
            _call_on_xla(op, sample)
        return False
    got = _call_on_xla(op, sample)
    torch.testing.assert_close(map_tensors(xnf.to_torch, got), expected, equal_nan=True)
    return True


def float64_gradients_match_cpu(op, sample) -> bool:
    """The gradients of every differentiable output of a float64 sample (random output
    gradients) with respect to every input that requires grad, ours against PyTorch
    CPU's. True when the sample had such an output and input to compare."""
    leaves = [t for t in torch.utils._pytree.tree_leaves([sample.input, list(sample.args), sample.kwargs])
              if isinstance(t, torch.Tensor) and t.requires_grad]
    out = op(sample.input, *sample.args, **sample.kwargs)
    outs = [o for o in (out if isinstance(out, (tuple, list)) else [out])
            if isinstance(o, torch.Tensor) and o.requires_grad]
    if not outs or not leaves:
        return False
    gouts = [torch.randn_like(o) for o in outs]
    expected = torch.autograd.grad(outs, leaves, gouts, allow_unused=True)
    moved = {}

    def move(t):
        y = xnf.to_xla(t.detach())
        if t.requires_grad:
            y.requires_grad_()
            moved[id(t)] = y
        return y

    got_out = _call_on_xla(op, sample, move)
    got_outs = [o for o in (got_out if isinstance(got_out, (tuple, list)) else [got_out])
                if isinstance(o, torch.Tensor) and o.requires_grad]
    got = torch.autograd.grad(got_outs, [moved[id(t)] for t in leaves], [xnf.to_xla(g) for g in gouts],
                              allow_unused=True)
    for g, e in zip(got, expected):
        if e is not None:
            torch.testing.assert_close(xnf.to_torch(g), e, equal_nan=True)
    return True


def sample_on_xla(sample):
    """The sample with its tensors moved to our device (detached, keeping requires_grad)."""
    return sample.transform(
        lambda t: xnf.to_xla(t.detach()).requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) else t
    )


def _grad_inputs(sample) -> list[torch.Tensor]:
    args = [sample.input, *sample.args, *sample.kwargs.values()]
    return [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]


def sample_and_first_gradient_match_cpu(op, sample) -> None:
    """A float64 sample's outputs, and the gradient of its first output (a random output
    gradient) with respect to its top-level inputs that require grad, ours against
    PyTorch CPU's."""
    ours = sample_on_xla(sample)
    expected = op(sample.input, *sample.args, **sample.kwargs)
    got = op(ours.input, *ours.args, **ours.kwargs)
    torch.testing.assert_close(xnf.to_torch(got), expected, equal_nan=True)
    expected0 = expected[0] if isinstance(expected, (tuple, list)) else expected
    got0 = got[0] if isinstance(got, (tuple, list)) else got
    leaves, our_leaves = _grad_inputs(sample), _grad_inputs(ours)
    if not leaves or not expected0.requires_grad:
        return
    g = torch.randn_like(expected0)
    want = torch.autograd.grad(expected0, leaves, g, allow_unused=True)
    have = torch.autograd.grad(got0, our_leaves, xnf.to_xla(g), allow_unused=True)
    for h, w in zip(have, want):
        if w is not None:
            torch.testing.assert_close(xnf.to_torch(h), w)
