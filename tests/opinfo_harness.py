"""PyTorch's OpInfo database run through this backend, compared with PyTorch CPU.

The engine behind tests/test_opinfo.py, tests/test_shape_fns_meta.py and
scripts/coverage_report.py. One *unit* is (OpInfo key, dtype, mode); running it gives
per-sample counts:

- passed: our result equals PyTorch CPU's (assert_close at the OpInfo's tolerances,
  dtype and shape included; in-place: the same tensor object, the input and its base
  buffer updated; error_inputs: the same exception type; grad: the gradients equal);
- failed: we returned something else (value, dtype, shape, aliasing, no exception);
- errored: we raised; `not_found` counts the subset that raised OperatorNotFound, and
  `missing` names the aten operators (one per sample, the first one hit);
- skipped: PyTorch CPU itself raised on the sample (not counted anywhere else).

Modes: eager, compiled (`xla_native_functions.compile`), inplace (op.inplace_variant on
a contiguous input and on a strided view of a larger buffer), grad (float64, a fixed
random projection of the outputs, gradients w.r.t. every differentiable input),
error_inputs (op.error_inputs, dtype-independent, reported under "any"). One more mode,
not part of the sweep's MODES, is run when asked: operator (eager, through the OpInfo's
Python operator, `x << y` for bitwise_left_shift, whose aten op can differ: __lshift__).

`run_units` runs units in a worker subprocess with a time limit per unit: a hang is
killed and recorded as `timeout`, a process abort (e.g. an exception escaping a C++
autograd thread) as `aborted`, and the worker is restarted for the next unit.
"""

from __future__ import annotations

import itertools
import math
import multiprocessing as mp
import os
import re
import sys
import time
import traceback
import warnings
from typing import Any, Callable, Iterable

MODES = ("eager", "compiled", "inplace", "grad", "error_inputs")
EXTRA_MODES = ("operator",)
DTYPE_NAMES = ("float32", "float64", "int64", "bool", "bfloat16", "float16", "complex64", "complex128")
DEFAULT_DTYPES = ("float32", "float64", "int64", "bool")
ANY_DTYPE = "any"  # error_inputs do not depend on a dtype

# assert_close's defaults (rtol, atol), used when the OpInfo does not override them.
_DEFAULT_TOL = {
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float32": (1.3e-6, 1e-5),
    "float64": (1e-7, 1e-7),
    "complex64": (1.3e-6, 1e-5),
    "complex128": (1e-7, 1e-7),
}
# Overrides an OpInfo declares for the tests that compare a device with CPU (or for
# every test) apply here; others (jit, inductor, reference numerics) do not.
_TOL_TESTS = (None, "test_compare_cpu", "test_noncontiguous_samples", "test_variant_consistency_eager")

_MISSING_RE = re.compile(r"aten operator '([^']+)' is not supported")

_torch = None
_xnf = None


def _dtype(name: str):
    import torch

    return getattr(torch, name)


def opinfo_key(op) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


_OPINFOS: dict[str, Any] | None = None


def opinfos() -> dict[str, Any]:
    """Every OpInfo in PyTorch's op_db, by key, in op_db order."""
    global _OPINFOS
    if _OPINFOS is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from torch.testing._internal.common_methods_invocations import op_db
        _OPINFOS = {}
        for op in op_db:
            _OPINFOS.setdefault(opinfo_key(op), op)
    return _OPINFOS


def unit_id(key: str, dtype: str, mode: str) -> str:
    return f"{key}|{dtype}|{mode}"


def plan_units(keys: Iterable[str], dtypes: Iterable[str], modes: Iterable[str]) -> list[tuple[str, str, str]]:
    """The units that apply: dtypes the OpInfo supports on CPU, in-place only with an
    in-place variant, grad only in float64 and complex128 for autograd OpInfos,
    error_inputs once."""
    from opinfo_skips import NONDETERMINISTIC

    ops = opinfos()
    dtypes, modes = tuple(dtypes), tuple(modes)
    units = []
    for key in keys:
        op = ops[key]
        supported = op.supported_dtypes("cpu")
        for dt in dtypes:
            if _dtype(dt) not in supported:
                continue
            for mode in modes:
                if mode == "inplace" and op.inplace_variant is None:
                    continue
                if mode == "operator" and op.operator_variant is None:
                    continue
                if mode == "grad" and (dt not in ("float64", "complex128") or not op.supports_autograd
                                       or key in NONDETERMINISTIC):
                    continue
                if mode == "error_inputs":
                    continue
                units.append((key, dt, mode))
        if "error_inputs" in modes and op.error_inputs_func is not None:
            units.append((key, ANY_DTYPE, "error_inputs"))
    return units


def tolerance(op, dtype) -> tuple[float, float] | None:
    """(rtol, atol) from the OpInfo's own tolerance overrides for this dtype, or None
    for assert_close's defaults."""
    from torch.testing._internal.common_device_type import precisionOverride, toleranceOverride
    from torch.testing._internal.opinfo.core import DecorateInfo

    best = None
    for info in op.decorators:
        if (
            not isinstance(info, DecorateInfo)
            or info.cls_name not in (None, "TestCommon")
            or info.test_name not in _TOL_TESTS
        ):
            continue
        if info.dtypes is not None and dtype not in info.dtypes:
            continue
        if info.device_type not in (None, "cpu"):
            continue
        for dec in info.decorators:
            if isinstance(dec, toleranceOverride) and dtype in dec.d:
                t = dec.d[dtype]
                cand = (t.rtol, t.atol)
            elif isinstance(dec, precisionOverride) and dtype in dec.d:
                cand = (_DEFAULT_TOL.get(str(dtype).removeprefix("torch."), (0.0, 0.0))[0], dec.d[dtype])
            else:
                continue
            best = cand if best is None else (max(best[0], cand[0]), max(best[1], cand[1]))
    return best


# ----------------------------------------------------------------- tallies


class Tally:
    def __init__(self):
        self.passed = self.failed = self.errored = self.not_found = self.skipped = 0
        self.arbitrated = 0  # complex64 samples passed by _closer_to_complex128, counted in passed
        self.missing: dict[str, int] = {}
        self.messages: list[str] = []  # first few failures and errors, for the report
        self.truncated = False

    def ok(self):
        self.passed += 1

    def fail(self, msg: str):
        self.failed += 1
        self._note("failed", msg)

    def error(self, exc: BaseException):
        self.errored += 1
        from xla_native_functions import OperatorNotFound

        if isinstance(exc, OperatorNotFound):
            self.not_found += 1
            m = _MISSING_RE.search(str(exc))
            name = m.group(1) if m else "?"
            self.missing[name] = self.missing.get(name, 0) + 1
        else:
            self._note("errored", f"{type(exc).__name__}: {exc}")

    def _note(self, kind: str, msg: str):
        if len(self.messages) < 3:
            # the first line and assert_close's largest difference, if it gives one
            lines = [ln.strip() for ln in msg.strip().splitlines() if ln.strip()]
            detail = lines[:1] + [ln for ln in lines[1:] if ln.startswith("Greatest absolute")][:1]
            self.messages.append(f"{kind}: {' '.join(detail)[:300]}")

    def as_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "failed": self.failed,
            "errored": self.errored,
            "not_found": self.not_found,
            "skipped": self.skipped,
            "arbitrated": self.arbitrated,
            "missing": self.missing,
            "messages": self.messages,
            "truncated": self.truncated,
        }


# ----------------------------------------------------------------- conversions


def _tree_map(fn, tree):
    from torch.utils._pytree import tree_map

    return tree_map(fn, tree)


def _leaves(tree) -> list[Any]:
    from torch.utils._pytree import tree_flatten

    return tree_flatten(tree)[0]


# OpInfos whose tensor arguments PyTorch requires on the CPU whatever the input's device:
# they stay there (the input moves).
HOST_ARGUMENTS = {
    "tensor_split": "tensor_indices_or_sections is read on the host; PyTorch requires it on the CPU",
}


def _storage_key(x):
    """Identifies the memory of a tensor that may alias others, else None (autograd
    leaves move alone; empty tensors share no memory though their data pointers match)."""
    if x.requires_grad or x.is_sparse or x.device.type != "cpu" or x.dtype.is_complex or not x.numel():
        return None
    return x.untyped_storage().data_ptr(), x.dtype


def _aliased_storages(tree) -> set:
    """Storages that sample tensors share, or that one tensor reads twice (an expanded
    out=): those tensors become views of one converted storage, so the backend sees
    the same aliasing as PyTorch. Others are moved alone (autograd leaves stay leaves)."""
    import torch

    tensors = {id(x): x for x in _leaves(tree) if isinstance(x, torch.Tensor)}.values()
    seen, shared = set(), set()
    for x in tensors:
        key = _storage_key(x)
        if key is None:
            continue
        if key in seen or any(st == 0 and n > 1 for n, st in zip(x.shape, x.stride())):
            shared.add(key)
        seen.add(key)
    return shared


def to_ours(tree, op=None):
    """Tensors to XlaTensors (requires_grad kept), device='cpu' arguments to ours."""
    import torch
    import xla_native_functions as xnf
    from xla_native_functions.runtime.core.tensor import DEVICE

    aliased = _aliased_storages(tree)
    converted: dict[int, Any] = {}
    bases: dict[Any, Any] = {}

    def conv(x):
        if isinstance(x, torch.Tensor) and x.device.type == "cpu":
            if id(x) not in converted:  # the same tensor twice (out= its input) stays one
                key = _storage_key(x)
                if key in aliased:
                    if key not in bases:
                        # new_empty, not torch.empty: inside the environment a factory
                        # would make the base on our device
                        whole = x.new_empty(0).set_(x.untyped_storage())
                        bases[key] = xnf.to_xla(whole)
                    converted[id(x)] = bases[key].as_strided(x.shape, x.stride(), x.storage_offset())
                else:
                    converted[id(x)] = xnf.to_xla(x)
            return converted[id(x)]
        if (isinstance(x, torch.device) and x.type == "cpu") or (isinstance(x, str) and x == "cpu"):
            return DEVICE  # a device argument (Tensor.to("cpu")): ours is the analogue
        return x

    inp, args, kwargs = tree
    kwargs = dict(kwargs)
    if kwargs.get("device") in ("cpu", torch.device("cpu")):
        kwargs["device"] = DEVICE
    if op is not None and opinfo_key(op) in HOST_ARGUMENTS:
        return _tree_map(conv, inp), args, kwargs
    return _tree_map(conv, (inp, args, kwargs))


def _check_placement(out) -> str | None:
    import torch
    from xla_native_functions.runtime.core.tensor import XlaTensor

    for x in _leaves(out):
        if isinstance(x, torch.Tensor) and not isinstance(x, XlaTensor):
            return f"an output is a {x.device} tensor, not one of ours"
    return None


def _to_cpu(out):
    import xla_native_functions as xnf

    return xnf.to_torch(out)


def _compare(actual, expected, tol) -> str | None:
    import torch

    if expected is NotImplemented:  # a reflected operator declining the operand (__rsub__)
        return None if actual is NotImplemented else f"expected NotImplemented, got {type(actual).__name__}"
    kw = {} if tol is None else {"rtol": tol[0], "atol": tol[1]}
    try:
        torch.testing.assert_close(actual, expected, equal_nan=True, check_device=False, **kw)
    except AssertionError as e:
        return str(e)
    except (TypeError, ValueError) as e:  # mismatched structure or types
        return f"{type(e).__name__}: {e}"
    return None


def _compare_meta(actual, expected) -> str | None:
    """Shapes and dtypes only (values undefined)."""
    import torch

    a, e = _leaves(actual), _leaves(expected)
    if len(a) != len(e):
        return f"{len(a)} outputs, expected {len(e)}"
    for x, y in zip(a, e):
        if isinstance(y, torch.Tensor):
            if not isinstance(x, torch.Tensor) or x.shape != y.shape or x.dtype != y.dtype:
                return f"got {getattr(x, 'shape', x)} {getattr(x, 'dtype', '')}, expected {tuple(y.shape)} {y.dtype}"
    return None


def _reaches_backend(s) -> bool:
    import torch

    return any(isinstance(x, torch.Tensor) for x in _leaves(s)) or "device" in s[2]


def _call(fn, s):
    return fn(s[0], *s[1], **s[2])


def _sample_tuple(s):
    return (s.input, tuple(s.args), dict(s.kwargs))


class Recorder:
    """A TorchDispatchMode that records every aten overload called under it (and, with
    `keep_args`, the calls themselves)."""

    def __new__(cls, keep_args: bool = False):
        from torch.utils._python_dispatch import TorchDispatchMode

        class _Mode(TorchDispatchMode):
            def __init__(self):
                super().__init__()
                self.ops: set[Any] = set()
                self.calls: list[tuple[Any, tuple, dict, Any]] = []

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                out = func(*args, **kwargs)
                self.ops.add(func)
                if keep_args:
                    self.calls.append((func, args, kwargs, out))
                return out

        return _Mode()


def overload_name(func) -> str:
    """`add.Tensor`, `abs` (default overload) as the manifest spells it."""
    name = func._schema.name.split("::")[1]
    ov = func._schema.overload_name
    return f"{name}.{ov}" if ov else name


# ----------------------------------------------------------------- one unit


def _setup_worker() -> None:
    global _xnf
    warnings.simplefilter("ignore")
    # the package of this checkout, whichever copy is installed (codegen/repo_import.py)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if root not in sys.path:
        sys.path.insert(0, root)
    from codegen.repo_import import use_repo

    use_repo(root)
    import jax

    cache = os.environ.get("XNF_JAX_CACHE_DIR")
    if cache:
        jax.config.update("jax_compilation_cache_dir", cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)
    import xla_native_functions as xnf

    _xnf = xnf
    # The comparisons test our lowerings: no first call is answered by PyTorch's own kernel
    # (config.first_calls_on_cpu; Note [First calls on PyTorch CPU] in runtime/exec/first_call.py).
    xnf.config.first_calls_on_cpu = False


def run_unit(
    key: str, dtype: str, mode: str, time_limit: float = 60.0, reference: bool = True, early_stop: int = 6,
    every: int = 1,
) -> dict[str, Any]:
    """Run one (OpInfo, dtype, mode) in this process and return its counts. With
    `reference`, eager and compiled also run the OpInfo's reference_inputs; `every`: only
    every so many samples (the first, then one in `every`). After
    `early_stop` samples in a row that all stop at a missing operator (and nothing
    else happened), the remaining samples are counted as blocked by it without running
    them (recorded as `extrapolated`); 0 runs everything."""
    import torch
    import xla_native_functions as xnf
    from opinfo_skips import NONDETERMINISTIC, RANDOM, skip_reason

    start = time.perf_counter()
    op = opinfos()[key]
    t = Tally()
    res: dict[str, Any] = {}
    reason = skip_reason(key, dtype, mode)
    if reason:
        res = t.as_dict()
        res.update(status="skip", reason=reason, seconds=0.0)
        return res
    deadline = start + time_limit
    torch.manual_seed(0)
    tdtype = _dtype(dtype) if dtype != ANY_DTYPE else None
    tol = tolerance(op, tdtype) if tdtype is not None else None
    aten_ops: set[str] = set()
    res_extra: dict[str, Any] = {}
    kind = "random" if key in RANDOM else "uninit" if key in NONDETERMINISTIC else "value"

    def samples(requires_grad=False):
        it = op.sample_inputs("cpu", tdtype, requires_grad=requires_grad)
        if reference and mode in ("eager", "compiled") and kind == "value":
            try:
                ref = (
                    op.reference_inputs("cpu", tdtype, requires_grad=requires_grad) if op.reference_inputs_func else ()
                )
            except Exception:
                ref = ()
            it = _chain(it, ref)
        return itertools.islice(it, 0, None, every)

    try:
        if mode in ("eager", "compiled", "operator"):
            fn = op.op if mode == "eager" else op.operator_variant if mode == "operator" else xnf.compile(
                lambda *a, **k: op.op(*a, **k))
            streak = 0
            it = iter(samples())
            for s in it:
                if time.perf_counter() > deadline:
                    t.truncated = True
                    break
                before = (t.not_found, dict(t.missing))
                if mode == "operator" and (s.kwargs or len(s.args) != 1 or not isinstance(s.input, torch.Tensor)):
                    t.skipped += 1  # a binary Python operator takes two operands, no options
                    continue
                _forward_sample(op, fn, _sample_tuple(s), t, tol, kind, aten_ops if mode == "eager" else None,
                                reference_fn=fn if mode == "operator" else None)
                blocked = [m for m, n in t.missing.items() if n > before[1].get(m, 0)]
                if t.passed or t.failed or t.errored > t.not_found:
                    streak = 0
                elif t.not_found > before[0] and blocked:
                    streak += 1
                if early_stop and streak >= early_stop:
                    # every sample so far stopped at a missing operator: the rest would
                    # too. They are counted as blocked by the last one, unrun.
                    rest = sum(1 for _ in it)
                    t.errored += rest
                    t.not_found += rest
                    t.missing[blocked[0]] += rest
                    res_extra["extrapolated"] = rest
                    break
        elif mode == "inplace":
            for s in itertools.islice(op.sample_inputs("cpu", tdtype), 0, None, every):
                if time.perf_counter() > deadline:
                    t.truncated = True
                    break
                _inplace_sample(op, _sample_tuple(s), t, tol, kind)
        elif mode == "grad":
            for s in samples(requires_grad=True):
                if time.perf_counter() > deadline:
                    t.truncated = True
                    break
                _grad_sample(op, s, t, tol)
        elif mode == "error_inputs":
            for ei in op.error_inputs("cpu") if op.error_inputs_func is not None else ():
                if time.perf_counter() > deadline:
                    t.truncated = True
                    break
                _error_sample(op, ei, t)
        else:
            raise ValueError(f"unknown mode {mode}")
        status = "done"
    except Exception as e:  # sample generation itself failed: keep what was counted
        status = "harness_error"
        t._note("harness", f"{type(e).__name__}: {e}")
    res = t.as_dict()
    res.update(res_extra)
    res.update(status=status, seconds=round(time.perf_counter() - start, 3))
    if mode == "eager":
        res["aten_ops"] = sorted(aten_ops)
    return res


def _chain(*iters):
    for it in iters:
        yield from it


def _random_sample(op, s) -> bool:
    from opinfo_skips import RANDOM_SAMPLES

    rule = RANDOM_SAMPLES.get(opinfo_key(op))
    return rule is not None and bool(rule(*(s if isinstance(s, tuple) else _sample_tuple(s))))


def _forward_sample(op, fn, s, t: Tally, tol, kind: str, aten_ops: set | None, reference_fn=None) -> None:
    import torch
    import xla_native_functions as xnf

    if kind == "value" and _random_sample(op, s):
        kind = "random"
    try:
        expected = _call(reference_fn or op.op, s)
    except Exception:
        t.skipped += 1
        return
    if aten_ops is not None:
        # A second CPU run records the aten ops: under a dispatch mode PyTorch CPU itself
        # computes some complex linalg results differently (pinv, lstsq), so the
        # expected values come from the plain run above.
        rec = Recorder()
        try:
            with rec:
                _call(op.op, s)
        except Exception:
            pass
        aten_ops.update(overload_name(f) for f in rec.ops if hasattr(f, "_schema"))
    try:
        ours = to_ours(s, op)
        with xnf.default_env():
            if kind == "random":
                torch.manual_seed(1234)
                got = _call(fn, ours)
                first = _to_cpu(got)
                torch.manual_seed(1234)
                again = _to_cpu(_call(fn, ours))
            else:
                got = _call(fn, ours)
                first = _to_cpu(got)
    except Exception as e:
        t.error(e)
        return
    msg = _check_placement(got)
    if msg is not None and not _reaches_backend(s):
        t.skipped += 1  # e.g. torch.add(2.0, 3.0): no tensor, no device, never dispatched to us
        return
    if msg is None:
        if kind == "value":
            msg = _compare(first, expected, tol)
            if msg is not None and _closer_to_complex128(op, s, first, expected, reference_fn or op.op):
                t.arbitrated += 1
                msg = None
        else:
            msg = _compare_meta(first, expected)
            if msg is None and kind == "random":
                d = _compare(again, first, (0.0, 0.0))
                msg = None if d is None else "the same seed gave different values: " + d
    t.fail(msg) if msg else t.ok()


def _closer_to_complex128(op, s, got, expected, fn) -> bool:
    """For complex64 samples only: whether ours is at least as close as PyTorch CPU's
    complex64 result to PyTorch CPU's complex128 result on the same inputs, in every
    output tensor (largest absolute difference over elements both give finite values
    for, with non-finite values required to agree). Complex products and powers round
    differently on each backend, and PyTorch's complex64 results are not always the
    closer ones (pow: up to 3x further). The float sweeps do not arbitrate."""
    import torch

    def widened(x):
        return x.to(torch.complex128) if isinstance(x, torch.Tensor) and x.dtype == torch.complex64 else x

    leaves = [x for x in _leaves(s) if isinstance(x, torch.Tensor)]
    if not any(x.dtype == torch.complex64 for x in leaves):
        return False
    try:
        reference = _call(fn, _tree_map(widened, s))
    except Exception:
        return False
    ours, theirs, ref = _leaves(got), _leaves(expected), _leaves(reference)
    if not (len(ours) == len(theirs) == len(ref)):
        return False
    for a, e, r in zip(ours, theirs, ref):
        if not isinstance(e, torch.Tensor):
            if a != e:
                return False
            continue
        if not isinstance(a, torch.Tensor) or a.shape != e.shape or a.dtype != e.dtype or r.shape != e.shape:
            return False
        if not (a.is_complex() or a.is_floating_point()):
            if not torch.equal(a, e):
                return False
            continue
        a, e, r = (x.to(torch.complex128) for x in (a, e, r))
        finite = torch.isfinite(a) & torch.isfinite(e) & torch.isfinite(r)
        same_nonfinite = (a == e) | (torch.isnan(a) & torch.isnan(e))
        if not bool((finite | same_nonfinite).all()):
            return False
        if finite.any() and (a - r)[finite].abs().max() > (e - r)[finite].abs().max():
            return False
    return True


def _strided_copy(x):
    """(base, view): `view` holds x's values and is a strided view into a larger buffer
    `base` whose other elements are filler."""
    import torch

    if x.dim() == 0:
        base = torch.zeros(3, dtype=x.dtype)
        base[1] = x
        return base, base[1]
    shape = list(x.shape)
    last = shape[-1]
    base = torch.ones(*shape[:-1], 2 * last + 1, dtype=x.dtype)
    view = base[..., 1::2]
    view.copy_(x)
    return base, view


def _inplace_sample(op, s, t: Tally, tol, kind: str) -> None:
    import torch
    import xla_native_functions as xnf

    inp, args, kwargs = s
    if not isinstance(inp, torch.Tensor):
        t.skipped += 1
        return
    fn = op.inplace_variant
    try:
        exp_plain = inp.clone()
        fn(exp_plain, *args, **kwargs)
        base_cpu, view_cpu = _strided_copy(inp)
        fn(view_cpu, *args, **kwargs)
    except Exception:
        t.skipped += 1
        return
    try:
        with xnf.default_env():
            x = xnf.to_xla(inp.clone())
            _, oargs, okwargs = to_ours((None, args, kwargs), op)
            r1 = fn(x, *oargs, **okwargs)
            base_x = xnf.to_xla(_strided_copy(inp)[0])
            view_x = base_x[..., 1::2] if inp.dim() else base_x[1]
            r2 = fn(view_x, *oargs, **okwargs)
            got_plain, got_base = _to_cpu(x), _to_cpu(base_x)
    except Exception as e:
        t.error(e)
        return
    if r1 is not x or r2 is not view_x:
        t.fail("the in-place variant did not return its input tensor")
        return
    if kind == "value":
        msg = _compare(got_plain, exp_plain, tol)
        if msg is None:
            msg = _compare(got_base, base_cpu, tol)
            msg = None if msg is None else "through a view: " + msg
    else:
        msg = _compare_meta(got_plain, exp_plain)
    t.fail(msg) if msg else t.ok()


def _projection(outs, seed: int = 0):
    import torch

    g = torch.Generator().manual_seed(seed)
    return [torch.randn(o.shape, dtype=o.dtype, generator=g) for o in outs]


def _diff_outputs(out):
    import torch

    return [
        o
        for o in _leaves(out)
        if isinstance(o, torch.Tensor) and o.requires_grad and (o.is_floating_point() or o.is_complex())
    ]


def _real_part(x):
    # a complex output's projection is differentiated through its real part (a real loss)
    return x.real if x.is_complex() else x


def _grad_sample(op, sample, t: Tally, tol) -> None:
    import torch
    import xla_native_functions as xnf

    s = _sample_tuple(sample)
    flat = _leaves(s)
    diff = [i for i, x in enumerate(flat) if isinstance(x, torch.Tensor) and x.requires_grad]
    if not diff:
        t.skipped += 1
        return
    try:
        outs = _diff_outputs(sample.output_process_fn_grad(_call(op.op, s)))
        if not outs:
            t.skipped += 1
            return
        ws = _projection(outs)
        loss = sum(_real_part((o * w).sum()) for o, w in zip(outs, ws))
        leaves = [flat[i] for i in diff]
        expected = torch.autograd.grad(loss, leaves, allow_unused=True)
        expected = [torch.zeros_like(leaf) if g is None else g for leaf, g in zip(leaves, expected)]
    except Exception:
        t.skipped += 1
        return
    try:
        with xnf.default_env():
            ours = to_ours(s, op)
            oflat = _leaves(ours)
            oleaves = [oflat[i] for i in diff]
            oouts = _diff_outputs(sample.output_process_fn_grad(_call(op.op, ours)))
            if len(oouts) != len(outs):
                t.fail(f"{len(oouts)} differentiable outputs, expected {len(outs)}")
                return
            oloss = sum(_real_part((o * xnf.to_xla(w)).sum()) for o, w in zip(oouts, ws))
            got = torch.autograd.grad(oloss, oleaves, allow_unused=True)
            got = [_to_cpu(torch.zeros_like(leaf) if g is None else g) for leaf, g in zip(oleaves, got)]
    except Exception as e:
        t.error(e)
        return
    msg = _compare_meta(got, expected) if _random_sample(op, s) else _compare(got, expected, tol)
    t.fail(msg) if msg else t.ok()


def _error_sample(op, ei, t: Tally) -> None:
    import xla_native_functions as xnf

    s = _sample_tuple(ei.sample_input)
    try:
        _call(op.op, s)
    except Exception as e:
        cpu_exc = e
    else:
        t.skipped += 1  # PyTorch CPU accepts it (e.g. a CUDA-only error)
        return
    try:
        with xnf.default_env():
            ours = to_ours(s, op)
            _call(op.op, ours)
    except xnf.OperatorNotFound as e:
        t.error(e)
        return
    except Exception as e:
        if isinstance(e, type(cpu_exc)):
            t.ok()
        else:
            t.fail(f"raised {type(e).__name__}: {str(e)[:120]}; PyTorch raises {type(cpu_exc).__name__}")
        return
    t.fail(f"no exception; PyTorch raises {type(cpu_exc).__name__}")


# ----------------------------------------------------------------- worker pool


def _worker_main(
    conn, sys_path: list[str], runner: str = "opinfo_harness:run_unit", warm: str | None = "opinfo_harness:opinfos"
) -> None:
    """Serve calls of `runner` ("module:function", imported here) until told to stop;
    `warm` is called once first (e.g. to build the OpInfo database before the clock of
    the first unit starts)."""
    import importlib

    def resolve(spec: str):
        mod, _, name = spec.partition(":")
        return getattr(importlib.import_module(mod), name)

    sys.path[:0] = [p for p in sys_path if p not in sys.path]
    _setup_worker()
    fn = resolve(runner)
    if warm:
        resolve(warm)()
    conn.send(("ready", None))
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        try:
            res = fn(*msg)
        except BaseException as e:  # noqa: BLE001 - anything escaping a unit is recorded
            res = Tally().as_dict()
            res.update(
                status="harness_error",
                seconds=0.0,
                messages=[f"{type(e).__name__}: {e}", traceback.format_exc()[-500:]],
            )
        conn.send(("result", res))


class WorkerPool:
    """One worker subprocess (spawned: no JAX state is forked), restarted after a
    timeout or an abort. It runs `runner` ("module:function" importable from the tests
    directory or sys.path; run_unit of this module by default) through `call`, and
    `warm` once at start."""

    def __init__(
        self,
        startup_timeout: float = 300.0,
        runner: str = "opinfo_harness:run_unit",
        warm: str | None = "opinfo_harness:opinfos",
    ):
        self.ctx = mp.get_context("spawn")
        self.proc = None
        self.conn = None
        self.startup_timeout = startup_timeout
        self.runner, self.warm = runner, warm

    def _start(self):
        here = os.path.dirname(os.path.abspath(__file__))
        parent, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(
            target=_worker_main, args=(child, [here] + sys.path, self.runner, self.warm), daemon=True
        )
        self.proc.start()
        child.close()
        self.conn = parent
        if not self.conn.poll(self.startup_timeout):
            raise RuntimeError(f"the worker ({self.runner}) did not start")
        self.conn.recv()

    def stop(self):
        if self.proc is not None:
            try:
                self.conn.send(None)
                self.proc.join(5)
            except (OSError, BrokenPipeError):
                pass
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join()
            self.proc = None

    def run(self, key: str, dtype: str, mode: str, time_limit: float, reference: bool = True,
            every: int = 1) -> dict[str, Any]:
        return self.call((key, dtype, mode, time_limit, reference, 6, every), time_limit)

    def call(self, args: tuple, time_limit: float) -> dict[str, Any]:
        """runner(*args) in the worker; a worker that dies or gives no result within
        1.5 * time_limit + 30 s is recorded as `aborted` / `timeout` and restarted."""
        if self.proc is None or not self.proc.is_alive():
            self._start()
        start = time.perf_counter()
        self.conn.send(tuple(args))
        hard = time_limit * 1.5 + 30
        try:
            ready = self.conn.poll(hard)
            if ready:
                kind, res = self.conn.recv()
                return res
        except (EOFError, OSError):
            self.proc.join(30)  # the pipe closed: the process is exiting
        # died or hung: record and restart for the next unit
        res = Tally().as_dict()
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
            res.update(status="timeout", messages=[f"no result after {hard:.0f}s; worker killed"])
        else:
            self.proc.join()
            res.update(
                status="aborted",
                exitcode=self.proc.exitcode,
                messages=[f"worker process died (exit code {self.proc.exitcode})"],
            )
        res["seconds"] = round(time.perf_counter() - start, 3)
        self.proc = None
        return res


def run_units(
    units,
    on_result: Callable[[tuple[str, str, str], dict], None],
    time_limit: float = 60.0,
    isolate: bool = True,
    reference: bool = True,
) -> None:
    """Run units (in a worker subprocess unless `isolate` is False) and hand each result
    to `on_result`."""
    if not isolate:
        _setup_worker()
        for u in units:
            on_result(u, run_unit(*u, time_limit=time_limit, reference=reference))
        return
    pool = WorkerPool()
    try:
        for u in units:
            on_result(u, pool.run(*u, time_limit=time_limit, reference=reference))
    finally:
        pool.stop()


def all_lowered(res_eager: dict, registry_names: set[str]) -> bool | None:
    ops = res_eager.get("aten_ops")
    if not ops:
        return None
    return all(o in registry_names for o in ops)


def registry_names() -> set[str]:
    """Every overload the backend handles, as the manifest spells it."""
    import xla_native_functions as xnf

    return {overload_name(f) for f in xnf.REGISTRY if hasattr(f, "_schema")}


def pass_rate(counts: dict) -> float:
    total = counts.get("passed", 0) + counts.get("failed", 0) + counts.get("errored", 0)
    return math.nan if total == 0 else counts["passed"] / total
