"""The behaviour snapshot's worker: run in a subprocess by codegen/snapshot.py, with the
package of the checkout it is given imported (codegen/repo_import.py), it runs OpInfo
samples through the backend and records what came out. Not imported by the generator.

    python -m codegen.snapshot_worker REQUEST.json OUT.json
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
import time
import warnings
from pathlib import Path
from typing import Any

# Each sample also runs with its input changed, where that applies: the edges where
# implementations part ways (a matrix that is not positive-definite, zeros, a view,
# NaN and infinities) rather than the typical values OpInfo samples hold.
VARIANTS = ("given", "negated", "zeros", "strided", "nonfinite")
PREVIEW = 6
MAX_DATA = 4096  # elements of an output kept as values (others: their hash only)


def _canonical_bytes(t) -> bytes:
    """A tensor's values as bytes, every NaN the same NaN (their bit patterns are not
    behaviour); -0.0 and 0.0 stay apart."""
    import torch

    t = t.detach().contiguous()
    if t.is_complex():
        t = torch.view_as_real(t)
    if t.is_floating_point():
        t = torch.where(torch.isnan(t), torch.full_like(t, math.nan), t)
    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.view(torch.int16)
    return t.numpy().tobytes() if t.numel() else b""


def _preview(t) -> list[str]:
    flat = t.detach().reshape(-1)[:PREVIEW]
    return [repr(x) for x in flat.tolist()]


def _describe_output(x, inputs: list, outputs_seen: list, values: bool) -> dict:
    import torch
    import xla_native_functions as xnf
    from xla_native_functions.runtime.core.tensor import XlaTensor

    if not isinstance(x, torch.Tensor):
        if isinstance(x, (bool, int, float, complex, str, type(None))):
            return {"kind": type(x).__name__, "value": repr(x)}
        return {"kind": type(x).__name__}
    rec: dict[str, Any] = {
        "kind": "tensor", "device": x.device.type, "dtype": str(x.dtype).removeprefix("torch."),
        "shape": list(x.shape), "stride": list(x.stride()), "offset": x.storage_offset(),
        "requires_grad": bool(x.requires_grad),
    }
    # aliasing: the argument or earlier output whose storage it shares, or is
    for i, a in enumerate(inputs):
        if x is a:
            rec["is"] = f"argument {i}"
            break
    store = x._store if isinstance(x, XlaTensor) else None
    if store is not None:
        for i, a in enumerate(inputs):
            if isinstance(a, XlaTensor) and a._store is store:
                rec["aliases"] = f"argument {i}"
                break
        else:
            for j, o in enumerate(outputs_seen):
                if isinstance(o, XlaTensor) and o._store is store:
                    rec["aliases"] = f"output {j}"
                    break
    if values:
        cpu = xnf.to_torch(x) if isinstance(x, XlaTensor) else x
        rec["values"] = hashlib.sha256(_canonical_bytes(cpu)).hexdigest()[:20]
        rec["preview"] = _preview(cpu)
        if cpu.numel() <= MAX_DATA:  # for the size of a difference, and --atol/--rtol
            flat = cpu.detach().reshape(-1)
            if flat.is_complex():
                flat = torch.view_as_real(flat).reshape(-1)
            rec["data"] = flat.double().tolist() if flat.is_floating_point() else flat.tolist()
    return rec


def _leaves(tree) -> list:
    from torch.utils._pytree import tree_flatten

    return tree_flatten(tree)[0]


def _exception(e: BaseException) -> dict:
    kind = type(e)
    name = kind.__name__ if kind.__module__ in ("builtins", None) else f"{kind.__module__}.{kind.__qualname__}"
    message = (str(e).strip().splitlines() or [""])[0][:200]
    return {"raised": name, "message": message}


def _run(fn, sample, op, values: bool, seed: int = 1234) -> dict:
    """Run one call on our tensors; its outputs (or exception), counters, fallbacks."""
    import torch
    import xla_native_functions as xnf
    import opinfo_harness as h

    try:
        ours = h.to_ours(sample, op)
    except Exception as e:  # noqa: BLE001 - conversion itself failing is behaviour too
        return {"conversion": _exception(e)}
    inputs = _leaves(ours)
    xnf.metrics.reset()
    torch.manual_seed(seed)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with xnf.default_env():
                out = fn(ours[0], *ours[1], **ours[2])
        result: dict[str, Any] = {}
    except Exception as e:  # noqa: BLE001
        out = None
        result = _exception(e)
    result["counters"] = {k: list(v) for k, v in xnf.metrics.counters(section=True).items()}
    result["fallbacks"] = xnf.metrics.executed_fallback_ops()
    if "raised" not in result:
        outs: list = []
        described = []
        for x in _leaves(out):
            described.append(_describe_output(x, inputs, outs, values))
            outs.append(x)
        result["outputs"] = described
        # an in-place call's effect on its arguments
        if getattr(fn, "_snapshot_inplace", False):
            result["argument0"] = _describe_output(inputs[0], [], [], values) if inputs else None
    return result


def _variant(name: str, sample):
    """The sample with its input changed per VARIANTS, or None where it does not apply."""
    import torch

    inp, args, kwargs = sample
    if name == "given":
        return sample
    if not isinstance(inp, torch.Tensor) or inp.is_sparse or inp.layout != torch.strided:
        return None
    if name == "negated":
        if inp.dtype == torch.bool or not (inp.is_floating_point() or inp.is_complex() or inp.is_signed()):
            return None
        new = -inp.detach()
    elif name == "zeros":
        new = torch.zeros_like(inp.detach())
    elif name == "strided":
        if inp.dim() == 0 or inp.numel() == 0:
            return None
        base = torch.zeros(*inp.shape[:-1], 2 * inp.shape[-1] + 1, dtype=inp.dtype)
        new = base[..., 1::2]
        new.copy_(inp.detach())
    elif name == "nonfinite":
        if not inp.is_floating_point() or inp.numel() == 0:
            return None
        new = inp.detach().clone(memory_format=torch.contiguous_format)
        flat = new.view(-1)
        for i, v in enumerate((math.nan, math.inf, -math.inf)[: flat.numel()]):
            flat[i] = v
    else:
        raise ValueError(name)
    if inp.requires_grad:
        new = new.requires_grad_(True)
    return (new, args, kwargs)


def snapshot(request: dict) -> dict:
    import torch
    import opinfo_harness as h
    from opinfo_skips import NONDETERMINISTIC

    ops = h.opinfos()
    records: dict[str, dict] = {}
    notes: list[str] = []
    started = time.perf_counter()
    for key in request["opinfos"]:
        op = ops.get(key)
        if op is None:
            notes.append(f"no OpInfo {key} in this torch version")
            continue
        values = key not in NONDETERMINISTIC
        modes = request["modes"]
        supported = op.supported_dtypes("cpu")
        for dtype_name in request["dtypes"]:
            dtype = getattr(torch, dtype_name)
            if dtype not in supported:
                continue
            # reference inputs are the samples and more (OpInfo's convention)
            samples = None
            if op.reference_inputs_func is not None:
                try:
                    samples = list(op.reference_inputs("cpu", dtype))
                except Exception:  # noqa: BLE001 - a broken generator: the plain samples only
                    notes.append(f"{key} {dtype_name}: reference inputs failed to generate")
            if samples is None:
                samples = list(op.sample_inputs("cpu", dtype))
            limit = request.get("max_samples") or len(samples)
            if len(samples) > limit:
                notes.append(f"{key} {dtype_name}: {limit} of {len(samples)} samples")
                samples = samples[:limit]
            for i, s in enumerate(samples):
                sample = (s.input, tuple(s.args), dict(s.kwargs))
                for variant in request["variants"]:
                    v = _variant(variant, sample)
                    if v is None:
                        continue
                    for mode in modes:
                        fn = _mode_fn(op, mode)
                        if fn is None:
                            continue
                        if mode == "operator" and (v[2] or len(v[1]) != 1):
                            continue
                        records[f"{key}|{dtype_name}|{mode}|{i}|{variant}"] = _run(fn, v, op, values)
        if op.error_inputs_func is not None and "error_inputs" in request.get("extras", ("error_inputs",)):
            for i, ei in enumerate(op.error_inputs("cpu")):
                s = ei.sample_input
                sample = (s.input, tuple(s.args), dict(s.kwargs))
                for mode in ("eager", "compiled"):
                    if mode in modes:
                        records[f"{key}|any|{mode}|error{i}|given"] = _run(_mode_fn(op, mode), sample, op, values)
    return {"records": records, "notes": notes, "seconds": round(time.perf_counter() - started, 2)}


def _mode_fn(op, mode: str):
    import xla_native_functions as xnf

    if mode == "eager":
        return op.op
    if mode == "compiled":
        return xnf.compile(lambda *a, **k: op.op(*a, **k), replay=False)
    if mode == "inplace":
        if op.inplace_variant is None:
            return None

        def inplace(*a, **k):
            return op.inplace_variant(*a, **k)

        inplace._snapshot_inplace = True
        return inplace
    if mode == "operator":
        return op.operator_variant
    raise ValueError(f"unknown mode {mode}")


def main(argv: list[str]) -> int:
    request = json.loads(Path(argv[0]).read_text())
    root = Path(request["root"])
    sys.path[:0] = [str(root), str(root / "tests")]
    warnings.simplefilter("ignore")
    import opinfo_harness as h

    h._setup_worker()  # this checkout's package (codegen/repo_import.py)
    result = snapshot(request)
    Path(argv[1]).write_text(json.dumps(result, indent=0, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
