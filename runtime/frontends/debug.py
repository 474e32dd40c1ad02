"""The debug settings: print each op, or check each op against PyTorch CPU.

Note [Accuracy check under tracing]
`config.debug_accuracy_for_each_op` runs each op on PyTorch CPU with the same inputs
and reports results beyond `config.accuracy_atol`/`accuracy_rtol`. What is compared
depends on where the op's values are:
  - eager mode: the op's inputs and result, read when it runs;
  - compile() and lazy_mode(): the op is recorded, not run. Its input values and its
    results are kept as extra outputs of the graph (`Trace.keep`), and compared after
    the sync that runs the graph (the end of the compiled call, mark_step(), or a read
    on the host), so the values checked are the ones the fused program computed. An
    input that entered the graph concrete is copied when the op is recorded (the graph
    may take over its buffer). compile() traces every call while the option is on: a
    replayed call runs no Python, so nothing could be checked. The analysis's compiled
    mode (`analyze --accuracy`, frontends/analyze.py) records its ops' checks the same
    way (`check_after_sync`), with a callback that puts the differences in its report;
  - JAX transformations (jax_jit, jax_function under jax.jit/grad/vmap, the
    torch.compile backend): the values are JAX tracers, with nothing to compare while
    the op runs. Those ops are skipped, counted per op in `metrics_report()`, and the
    first one skipped warns once.
The check itself never raises: a reference PyTorch CPU cannot compute is skipped, and so
are random ops (our numbers come from JAX's generator, not PyTorch CPU's).
"""

from __future__ import annotations

import warnings
import weakref
from typing import Any

import jax
import numpy as np
import torch
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from ..core.context import context, pytorch_kernels
from ..core.convert import X64, host_array, jax_to_cpu
from ..core.tensor import DEVICE, Storage, XlaTensor
from ..platform.call_site import user_call_site
from ..platform.config import config
from ..platform.metrics import metrics


def _describe(x: Any) -> str:
    if isinstance(x, torch.Tensor):
        return f"{type(x).__name__}{list(x.shape)}:{str(x.dtype).removeprefix('torch.')}"
    return repr(x)


def _to_cpu(x: Any) -> Any:
    if isinstance(x, XlaTensor):
        with X64:
            return jax_to_cpu(host_array(x))
    return x


def _jax_traced(x: Any) -> bool:
    return isinstance(x, XlaTensor) and isinstance(x._store.array, jax.core.Tracer)


_active = [False]


def debug_call(func: Any, handler: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if _active[0]:  # ops run by the checks themselves
        return handler(*args, **kwargs)
    _active[0] = True
    try:
        return _debug_call(func, handler, args, kwargs)
    finally:
        _active[0] = False


def _run(handler: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    # ops the handler calls through dispatch are checked too
    saved, _active[0] = _active[0], False
    try:
        return handler(*args, **kwargs)
    finally:
        _active[0] = saved


def _debug_call(func: Any, handler: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if config.debug_print_each_op:
        shown = ", ".join([_describe(a) for a in args] + [f"{k}={_describe(v)}" for k, v in kwargs.items()])
        print(f"[xla_native_functions] {func}({shown})")
    if not config.debug_accuracy_for_each_op or _random(func):
        return _run(handler, args, kwargs)
    trace = context.trace
    if trace is not None:
        return check_after_sync(trace, func, handler, args, kwargs)
    flat, _ = tree_flatten((args, kwargs))
    if any(_jax_traced(x) for x in flat):
        out = _run(handler, args, kwargs)
        _skipped(func)
        return out
    cpu_args, cpu_kwargs = tree_map(_to_cpu, (args, kwargs))
    reference = _reference(func, cpu_args, cpu_kwargs)
    out = _run(handler, args, kwargs)
    if reference is not None:
        out_flat, _ = tree_flatten(out)
        if any(_jax_traced(x) for x in out_flat):  # made inside a JAX transformation
            _skipped(func)
        else:
            _compare(func, tree_map(_to_cpu, out), reference, user_call_site())
    return out


def _random(func: Any) -> bool:
    # Random numbers come from another generator than PyTorch CPU's: nothing to compare.
    return torch.Tag.nondeterministic_seeded in getattr(func, "tags", ())


def cpu_reference(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """`func` run by PyTorch on CPU copies of its arguments (None if PyTorch raises): the
    reference of the accuracy check. Taken before the op runs, which may write into its
    arguments."""
    cpu_args, cpu_kwargs = tree_map(_to_cpu, (args, kwargs))
    return _reference(func, cpu_args, cpu_kwargs)


def _reference(func: Any, args: Any, kwargs: Any) -> Any:
    device = kwargs.get("device")
    if device is not None and torch.device(device).type == DEVICE.type:  # a factory: made on the CPU
        kwargs = {**kwargs, "device": torch.device("cpu")}
    with torch._C._DisableTorchDispatch(), pytorch_kernels():
        try:
            return func(*args, **kwargs)
        except Exception:  # the op itself will raise, or has no CPU meaning
            return None


_warned_skip = [False]


def _skipped(func: Any) -> None:
    name = str(func)
    metrics.accuracy_skipped[name] += 1
    if not _warned_skip[0]:
        _warned_skip[0] = True
        warnings.warn(
            f"debug_accuracy_for_each_op: {name}, called from {user_call_site()}, ran on values traced by JAX "
            "(jax_jit, jax_function under a JAX transformation, or the torch.compile backend), which have no "
            "concrete value to compare with PyTorch CPU; such ops are skipped, and metrics_report() lists them. "
            "Run the same code eagerly, or under compile() or lazy_mode(), to check them", stacklevel=2)


# ---------------------------------------------------------------- under compile() and lazy_mode()


class _PendingCheck:
    """One recorded op whose values become concrete at the next sync."""

    __slots__ = ("func", "spec", "inputs", "out_spec", "outputs", "site", "compare")

    def __init__(self, func, spec, inputs, out_spec, outputs, site, compare):
        self.func, self.spec, self.inputs = func, spec, inputs
        self.out_spec, self.outputs, self.site, self.compare = out_spec, outputs, site, compare


# trace -> its pending checks, settled by a callback the trace runs after each sync
_PENDING: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _pending_checks(trace: Any) -> list[_PendingCheck]:
    checks = _PENDING.get(trace)
    if checks is None:
        checks = _PENDING[trace] = []
        trace.after_sync.append(lambda: _settle(checks))
    return checks


def _kept(trace: Any, x: Any) -> Any:
    """What stands for a traced op's argument or result until the sync: a storage the
    sync fills (`Trace.keep`), or a CPU copy of a value that is concrete already."""
    if isinstance(x, XlaTensor):
        v = trace.value_of(x)
        if v.node is not None:
            return trace.keep(v)
        return _array_to_cpu(v.data)
    if isinstance(x, torch.Tensor):
        with torch._C._DisableTorchDispatch():
            return x.detach().clone()
    return x


class _Traced:
    """A value JAX traces: nothing to compare."""


def _array_to_cpu(array: Any) -> Any:
    if isinstance(array, jax.core.Tracer):
        return _Traced
    with X64:
        return jax_to_cpu(np.asarray(array))


def check_after_sync(trace: Any, func: Any, handler: Any, args: tuple, kwargs: dict, site: Any = None,
                     compare: Any = None) -> Any:
    """Run `handler`, which records the op `func` into `trace`, and compare it with
    PyTorch CPU after the sync that computes its values: `compare(func, out, reference,
    site)` with CPU tensors (by default, print the differences, with the call site)."""
    flat, spec = tree_flatten((args, kwargs))
    inputs = [_kept(trace, x) for x in flat]
    site = user_call_site() if site is None else site
    out = _run(handler, args, kwargs)
    out_flat, out_spec = tree_flatten(out)
    outputs = [_kept(trace, o) if isinstance(o, XlaTensor) else o for o in out_flat]
    _pending_checks(trace).append(_PendingCheck(func, spec, inputs, out_spec, outputs, site, compare or _compare))
    return out


def _settle(checks: list[_PendingCheck]) -> None:
    """After a sync: copy what became concrete to the CPU (a later graph may take over the
    buffers), and compare the checks whose values are all there."""
    remaining = []
    for check in checks:
        try:
            if _settle_one(check):
                remaining.append(check)
        except Exception as error:  # the check must not stop the program it checks
            print(f"[xla_native_functions] accuracy: could not compare {check.func} with PyTorch CPU ({error}), "
                  f"at {check.site}")
    checks[:] = remaining


def _settle_one(check: _PendingCheck) -> bool:
    """Compare one check if its values are concrete; True while it waits for a sync."""
    check.inputs = [_settled(x) for x in check.inputs]
    check.outputs = [_settled(x) for x in check.outputs]
    values = check.inputs + check.outputs
    if any(isinstance(x, Storage) for x in values):
        # recorded after this sync began: the next one; or the trace was dropped (Note
        # [Failed traces] in exec/trace.py): nothing to compare
        return not any(isinstance(x, Storage) and x.pending is None and x.array is None for x in values)
    if any(x is _Traced for x in values):
        _skipped(check.func)
        return False
    args, kwargs = tree_unflatten(check.inputs, check.spec)
    reference = _reference(check.func, args, kwargs)
    if reference is not None:
        check.compare(check.func, tree_unflatten(check.outputs, check.out_spec), reference, check.site)
    return False


def _settled(x: Any) -> Any:
    if isinstance(x, Storage) and x.pending is None and x.array is not None:
        return _array_to_cpu(x.array)
    return x


# ---------------------------------------------------------------- comparison


def _compare(func: Any, out: Any, reference: Any, site: str) -> None:
    try:
        _compare_values(func, out, reference, site)
    except Exception as error:  # the check must not stop the program it checks
        print(f"[xla_native_functions] accuracy: could not compare {func} with PyTorch CPU ({error}), at {site}")


def _compare_values(func: Any, out: Any, reference: Any, site: str) -> None:
    metrics.accuracy_checked += 1
    for max_abs, max_rel in differences(out, reference):
        metrics.accuracy_differences += 1
        print(
            f"[xla_native_functions] accuracy: {func} differs from PyTorch CPU: max abs {max_abs:.3g}, "
            f"max rel {max_rel:.3g}, at {site}"
        )


def differences(out: Any, reference: Any) -> list[tuple[float, float]]:
    """(max abs, max rel) difference of every result of ours that differs from PyTorch's
    beyond `config.accuracy_atol`/`accuracy_rtol` (`torch.allclose`; integer and bool
    results must be equal, and count their unequal elements)."""
    ours, _ = tree_flatten(tree_map(_to_cpu, out))
    ref, _ = tree_flatten(reference)
    found = []
    for a, b in zip(ours, ref):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.shape != b.shape:
            continue
        if a.is_floating_point() or a.is_complex():
            diff = (a.double() - b.double()).abs()
            max_abs = diff.max().item() if diff.numel() else 0.0
            denom = b.double().abs().clamp_min(1e-30)
            max_rel = (diff / denom).max().item() if diff.numel() else 0.0
            bad = not torch.allclose(
                a.to(b.dtype), b, atol=config.accuracy_atol, rtol=config.accuracy_rtol, equal_nan=True
            )
        else:
            max_abs = max_rel = float((a != b).sum().item())
            bad = bool(max_abs)
        if bad:
            found.append((max_abs, max_rel))
    return found
