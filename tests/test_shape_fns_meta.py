"""Every full_codegen shape function against torch's meta kernel, over OpInfo samples.

OpInfo samples run on the meta device under a TorchDispatchMode that records each aten
call (overload, arguments, result or exception). Each call to a full_codegen overload
is replayed through `<name>_output_shape` the way the runtime calls it (tensors as
TensorMeta, Python numbers that torch wrapped into CPU scalars as numbers, int lists
as tuples) and must give the meta kernel's shapes and dtypes, or raise the exception
type it raised.

Which OpInfos reach which overload comes from docs/reports/coverage.json (written by
scripts/coverage_report.py; a property of torch, not of the manifest), plus the
OpInfos named like the op.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

import opinfo_harness as h
from xla_native_functions import ir
from xla_native_functions.runtime.core.ir import ATTR_LIST
from xla_native_functions.shape_fns.common import TensorMeta

COVERAGE = Path(__file__).resolve().parent.parent / "docs" / "reports" / "coverage.json"
MAX_OPINFOS = 4  # per overload
MAX_CALLS = 40  # per overload
DTYPES = (torch.float32, torch.int64, torch.bool)


def _full_codegen_classes() -> dict[str, type]:
    out = {}
    for v in vars(ir).values():
        if isinstance(v, type) and getattr(v, "section", None) == "full_codegen" and getattr(v, "op", None):
            out[v.op] = v
    return dict(sorted(out.items()))


CLASSES = _full_codegen_classes()


def _overload(name: str):
    base, _, ov = name.partition(".")
    return getattr(getattr(torch.ops.aten, base), ov or "default")


def _opinfos_for(op_name: str) -> list[str]:
    keys = list(h.opinfos())
    # backward ops are reached through the forward op's OpInfo (its gradient)
    base = re.sub(r"_backward(_data)?$", "", op_name.split(".")[0]).lstrip("_").removeprefix("native_")
    base = {"threshold": "relu"}.get(base, base)
    named = [
        k
        for k in keys
        if k.split(".")[-1] == base or k.split(".")[0] == base or k in (base + "_", "nn.functional." + base)
    ]
    hits = []
    if COVERAGE.exists():
        data = json.loads(COVERAGE.read_text()).get("opinfos", {})
        hits = sorted(
            (k for k, v in data.items() if op_name in v.get("aten_ops", ()) and k in h.opinfos()),
            key=lambda k: len(data[k]["aten_ops"]),
        )
    seen, out = set(), []
    for k in named + hits:
        if k not in seen:
            seen.add(k)
            out.append(k)
    return out[:MAX_OPINFOS]


def _to_meta(tree):
    def conv(x):
        if not isinstance(x, torch.Tensor):
            return x
        m = x.detach().to("meta")
        return m.requires_grad_(True) if x.requires_grad and (m.is_floating_point() or m.is_complex()) else m

    return h._tree_map(conv, tree)


class _Snap:
    """A tensor argument's metadata at the time of the call."""

    def __init__(self, t: torch.Tensor):
        self.shape, self.dtype = tuple(t.shape), t.dtype
        self.is_number = t.device.type == "cpu" and t.dim() == 0
        self.number = t.item() if self.is_number else None


def _snapshot(x):
    if isinstance(x, torch.Tensor):
        return _Snap(x)
    if isinstance(x, dict):
        return {k: _snapshot(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_snapshot(v) for v in x)
    return x


def _record(opinfo_key: str, target) -> list[tuple]:
    """(args, kwargs, result or exception) of every call to `target` the OpInfo's
    samples make on the meta device."""
    op = h.opinfos()[opinfo_key]
    calls = []

    from torch.utils._python_dispatch import TorchDispatchMode

    class Rec(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            try:
                out = func(*args, **kwargs)
            except Exception as e:
                if func is target:
                    calls.append((_snapshot(args), _snapshot(kwargs), e))
                raise
            if func is target:
                # Metadata now: a sample may resize or reuse these tensors afterwards.
                calls.append((_snapshot(args), _snapshot(kwargs), _metas(out)))
            return out

    supported = op.supported_dtypes("cpu")
    for dtype in DTYPES:
        if dtype not in supported:
            continue
        torch.manual_seed(0)
        grad = dtype.is_floating_point and op.supports_autograd
        # taken lazily: an OpInfo may have far more samples than MAX_CALLS needs
        for s in _samples(op, dtype, grad):
            meta = _to_meta(h._sample_tuple(s))
            try:
                with Rec():
                    out = h._call(op.op, meta)
                    if grad:
                        # the backward formulas' ops (gelu_backward, mul.Scalar, ...)
                        outs = [o for o in h._leaves(out) if isinstance(o, torch.Tensor) and o.requires_grad]
                        if outs:
                            sum(o.sum() for o in outs).backward()
            except Exception:
                pass  # data-dependent ops cannot run on meta; calls before that still count
            if len(calls) >= MAX_CALLS:
                return calls
    return calls


def _samples(op, dtype, requires_grad: bool):
    """The OpInfo's samples as they come, ending where generating them fails; without
    requires_grad if none could be made with it."""
    for grad in (True, False) if requires_grad else (False,):
        made = 0
        try:
            for s in op.sample_inputs("cpu", dtype, requires_grad=grad):
                made += 1
                yield s
        except Exception:
            pass
        if made:
            return


def _shape_fn_args(cls, func, args, kwargs) -> list:
    schema = func._schema
    values = []
    for i, a in enumerate(schema.arguments):
        if a.kwarg_only and a.name in kwargs:
            v = kwargs[a.name]
        elif i < len(args) and not a.kwarg_only:
            v = args[i]
        elif a.name in kwargs:
            v = kwargs[a.name]
        else:
            v = a.default_value
        values.append(v)
    values = values[: len(cls.arg_names)]
    out = []
    for kind, v in zip(cls.arg_kinds, values):
        out.append(_convert(kind, v))
    return out


def _convert(kind, v):
    if isinstance(v, _Snap):
        if v.is_number:
            return v.number  # a Python number torch wrapped: the runtime passes it as a number
        return TensorMeta(v.shape, v.dtype)
    if isinstance(v, (list, tuple)):
        conv = [_convert(kind, x) for x in v]
        return tuple(conv) if kind == ATTR_LIST else conv
    return v


def _metas(out):
    if isinstance(out, (tuple, list)):
        return tuple(_metas(o) for o in out)
    if out is None:
        return None
    if isinstance(out, torch.Tensor):
        return (tuple(out.shape), out.dtype)
    return ("value", type(out).__name__)


def _ours(res):
    if isinstance(res, (tuple, list)):
        return tuple(_ours(r) for r in res)
    if res is None:
        return None
    return (tuple(res.shape), res.dtype)


# Where torch's meta kernel and its CPU kernel disagree, shape functions follow CPU.
META_DISAGREES_WITH_CPU = {
    "_embedding_bag": "offset2bag, bag_size and max_indices have CPU's shapes, which differ from meta's by mode",
}


@pytest.mark.parametrize("op_name", list(CLASSES))
def test_shape_fn_matches_meta(op_name):
    if op_name in META_DISAGREES_WITH_CPU:
        pytest.skip(META_DISAGREES_WITH_CPU[op_name] + " (tests/test_ops_indexing.py compares them with CPU)")
    cls = CLASSES[op_name]
    try:
        target = _overload(op_name)
    except AttributeError:
        pytest.skip(f"torch has no aten.{op_name}")
    keys = _opinfos_for(op_name)
    calls = []
    for k in keys:
        calls += _record(k, target)
        if len(calls) >= MAX_CALLS:
            break
    if not calls:
        pytest.skip(
            f"no OpInfo sample reaches aten.{op_name} on the meta device (looked at: {', '.join(keys) or 'none'})"
        )
    problems = []
    for args, kwargs, expected in calls:
        try:
            margs = _shape_fn_args(cls, target, args, kwargs)
        except Exception as e:  # noqa: BLE001
            problems.append(f"could not convert arguments: {e}")
            continue
        desc = ", ".join(repr(a) for a in margs)[:300]
        try:
            got = cls.output_shape(*margs)
        except Exception as e:  # noqa: BLE001
            if isinstance(expected, Exception):
                if not isinstance(e, type(expected)):
                    problems.append(f"({desc}): raised {type(e).__name__}, meta raises {type(expected).__name__}")
            else:
                problems.append(f"({desc}): raised {type(e).__name__}: {e}")
            continue
        if isinstance(expected, Exception):
            if isinstance(expected, NotImplementedError):
                continue  # no meta kernel for this input; nothing to compare
            problems.append(
                f"({desc}): returned {_ours(got)}, meta raises {type(expected).__name__}: {str(expected)[:100]}"
            )
            continue
        exp = expected
        g = _ours(got)
        if isinstance(exp, tuple) and len(exp) == 2 and isinstance(exp[1], torch.dtype):
            g = (
                g[0]
                if isinstance(g, tuple) and len(g) == 1 and isinstance(g[0], tuple) and isinstance(g[0][1], torch.dtype)
                else g
            )
        if g != exp:
            problems.append(f"({desc}): got {g}, meta {exp}")
    assert not problems, f"{len(problems)} of {len(calls)} calls disagree:\n" + "\n".join(problems[:10])
