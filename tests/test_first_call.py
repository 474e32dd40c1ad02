"""First calls of an eager op signature answered by PyTorch CPU while the executable
compiles in the background (Note [First calls on PyTorch CPU] in
runtime/exec/first_call.py): values, dtypes, strides, in-place writes and errors as
PyTorch's and as the compiled path's, the switch to the compiled executable, the
setting that turns it off, and threads.

Each test uses shapes no other test uses, so its signatures are new in the process."""

from __future__ import annotations

import copy
import threading

import pytest
import torch

import xla_native_functions as xnf
from xla_native_functions.runtime.exec import first_call
from xla_native_functions.runtime.platform import executable_cache


@pytest.fixture
def on():
    before = xnf.config.first_calls_on_cpu
    xnf.config.first_calls_on_cpu = True
    yield first_call.stats
    xnf.config.first_calls_on_cpu = before
    assert first_call.wait_for_background_compiles(timeout=120)


def _x(t):
    return xnf.to_xla(t)


def _cpu(t):
    return xnf.to_torch(t)


def test_first_call_runs_on_pytorch_and_matches_it(on):
    torch.manual_seed(0)
    a, b = torch.randn(3, 7, 11), torch.randn(3, 7, 11)
    before = on.on_cpu
    got = torch.sin(_x(a)) * _x(b) + 2.5
    assert on.on_cpu >= before + 3  # sin, mul, add: each a new signature
    want = torch.sin(a) * b + 2.5
    assert got.dtype == want.dtype and got.shape == want.shape and got.stride() == want.stride()
    torch.testing.assert_close(_cpu(got), want, rtol=0, atol=0)


@pytest.mark.parametrize("call", [
    lambda t: torch.linalg.pinv(t),  # its CPU kernel multiplies by U.mH(), a conjugate view
    lambda t: torch.linalg.pinv(t, hermitian=True) if t.shape[-1] == t.shape[-2] else torch.linalg.pinv(t.mH),
    lambda t: t.pinverse(),
])
def test_complex_kernels_that_make_conjugate_views_inside_match_pytorch(on, call):
    """Note [PyTorch kernels inside dispatch]: inside __torch_dispatch__ PyTorch excludes
    its conjugate fallback, and complex pinv's first call came back as if U were real."""
    torch.manual_seed(1)
    a = torch.randn(2, 5, 3, dtype=torch.complex64)
    before = on.on_cpu
    got = call(_x(a))
    assert on.on_cpu > before  # answered on PyTorch
    want = call(a)
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(_cpu(got), want, rtol=0, atol=0)


def test_a_cpu_fallback_resolves_conjugate_views_too(monkeypatch):
    from xla_native_functions.runtime.exec import fallback, registry

    op = torch.ops.aten.linalg_pinv.atol_rtol_tensor
    monkeypatch.setitem(registry.REGISTRY, op, lambda *args, **kwargs: fallback.fallback(op, args, kwargs))
    torch.manual_seed(2)
    a = torch.randn(4, 6, dtype=torch.complex128)
    torch.testing.assert_close(_cpu(torch.linalg.pinv(_x(a))), torch.linalg.pinv(a), rtol=0, atol=0)


def test_switches_to_the_compiled_executable(on):
    a = _x(torch.randn(5, 13, 3))
    before = on.on_cpu
    first = torch.cos(a)
    assert on.on_cpu == before + 1
    assert first_call.wait_for_background_compiles(timeout=120)
    compiled_before = on.compiled_at_once
    second = torch.cos(a)
    assert on.on_cpu == before + 1  # compiled: the second call never reached PyTorch
    assert on.compiled_at_once == compiled_before
    torch.testing.assert_close(_cpu(second), _cpu(first))
    torch.testing.assert_close(_cpu(second), torch.cos(_cpu(a)))


def test_off_compiles_before_the_first_call_returns(on):
    xnf.config.first_calls_on_cpu = False
    a = torch.randn(9, 2, 5)
    before = (on.on_cpu, on.compiled_at_once)
    got = torch.tanh(_x(a)) - 1
    assert (on.on_cpu, on.compiled_at_once) == before
    torch.testing.assert_close(_cpu(got), torch.tanh(a) - 1)


def test_views_dtypes_and_scalars_as_pytorch(on):
    a = torch.arange(24, dtype=torch.int32).reshape(4, 6)
    before = on.on_cpu
    got = _x(a).t() * 0.5  # a transposed view operand; int32 * Python float -> float32
    assert on.on_cpu > before
    want = a.t() * 0.5
    assert got.dtype == want.dtype == torch.float32
    assert got.shape == want.shape
    torch.testing.assert_close(_cpu(got), want, rtol=0, atol=0)
    got = _x(torch.ones(4, 6, dtype=torch.float64)) + _x(torch.tensor(3, dtype=torch.int64))
    assert got.dtype == torch.float64


def test_in_place_writes_through_views(on):
    base = torch.randn(6, 10)
    other = torch.randn(6, 10)
    xb = _x(base.clone())
    alias = xb.view(60)
    before = on.on_cpu
    out = xb.mul_(_x(other))
    assert on.on_cpu > before
    assert out is xb
    want = base * other
    torch.testing.assert_close(_cpu(xb), want, rtol=0, atol=0)
    torch.testing.assert_close(_cpu(alias), want.view(60), rtol=0, atol=0)


def test_in_place_cast_error_is_the_compiled_paths(on):
    def error(first_calls):
        xnf.config.first_calls_on_cpu = first_calls
        t = _x(torch.zeros(7, 3, dtype=torch.int64))
        with pytest.raises(RuntimeError) as info:
            t.add_(_x(torch.full((7, 3), 0.5)))
        return str(info.value), _cpu(t)

    on_message, on_value = error(True)
    off_message, off_value = error(False)
    assert on_message == off_message
    assert "can't be cast" in on_message
    assert torch.equal(on_value, off_value) and not on_value.any()


def test_shape_errors_are_the_compiled_paths(on):
    def error(first_calls):
        xnf.config.first_calls_on_cpu = first_calls
        with pytest.raises(RuntimeError) as info:
            _x(torch.ones(2, 17)) + _x(torch.ones(3, 17))
        return str(info.value)

    assert error(True) == error(False)


def test_random_ops_keep_our_stream(on):
    def draw(first_calls):
        xnf.config.first_calls_on_cpu = first_calls
        torch.manual_seed(7)
        return _cpu(torch.nn.functional.dropout(_x(torch.ones(11, 19)), 0.5, training=True))

    assert torch.equal(draw(True), draw(False))


def test_a_training_step_matches_the_compiled_one(on):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 5, 3, padding=1), torch.nn.BatchNorm2d(5), torch.nn.SiLU(),
                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(5, 4))
    x, y = torch.randn(2, 3, 9, 9), torch.tensor([1, 3])

    def step(first_calls):
        xnf.config.first_calls_on_cpu = first_calls
        m = xnf.to_xla(copy.deepcopy(model))
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        loss = torch.nn.functional.cross_entropy(m(_x(x)), _x(y))
        loss.backward()
        opt.step()
        return float(_cpu(loss.detach())), [_cpu(p) for p in m.parameters()], [_cpu(b) for b in m.buffers()]

    before = on.on_cpu
    loss_on, params_on, buffers_on = step(True)
    assert on.on_cpu > before
    loss_off, params_off, buffers_off = step(False)
    assert loss_on == pytest.approx(loss_off, rel=1e-5)
    for p, q in zip(params_on + buffers_on, params_off + buffers_off):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)


def test_threads_answer_and_compile_safely(on):
    torch.manual_seed(1)
    inputs = [torch.randn(8, 23) for _ in range(6)]
    results, errors = [None] * 6, []

    def work(i):
        try:
            x = _x(inputs[i])
            results[i] = _cpu(torch.exp(x) / (x * x + 1))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for x, got in zip(inputs, results):
        torch.testing.assert_close(got, torch.exp(x) / (x * x + 1))
    assert first_call.wait_for_background_compiles(timeout=120)
    before = on.on_cpu
    x = _x(inputs[0])
    torch.testing.assert_close(_cpu(torch.exp(x) / (x * x + 1)), torch.exp(inputs[0]) / (inputs[0] ** 2 + 1))
    assert on.on_cpu == before  # every signature compiled once, whichever thread asked first


def test_traced_calls_run_on_pytorch_only_through_the_graph(on):
    a = _x(torch.randn(4, 29))
    before, interpreted = on.on_cpu, on.graphs_interpreted
    step = xnf.compile(lambda t: torch.sinh(t) * 3)
    got = step(a)
    torch.testing.assert_close(_cpu(got), torch.sinh(_cpu(a)) * 3)
    # the ops were recorded, not run; the new graph's first call was interpreted, its two
    # nodes answered on PyTorch (Note [First calls of compiled graphs] in graph_first_call.py)
    assert on.graphs_interpreted == interpreted + 1
    assert on.on_cpu == before + 2


def test_inside_a_jax_transformation_the_op_compiles(on):
    import jax

    before = (on.on_cpu, on.compiled_at_once)
    fn = xnf.jax_jit(lambda t: torch.atan(t) * 2)
    a = torch.randn(6, 31)
    got = fn(_x(a))
    torch.testing.assert_close(_cpu(got) if not isinstance(got, jax.Array) else torch.from_numpy(jax.device_get(got)),
                               torch.atan(a) * 2)
    assert on.on_cpu == before[0]  # tracers: nothing for PyTorch to run on


def test_lowering_an_executable_never_stops_at_a_first_call(on):
    from xla_native_functions import dispatch as stubs
    from xla_native_functions.runtime.core.convert import X64
    from xla_native_functions.runtime.exec.eager import operand

    x = _x(torch.randn(3, 37))
    with X64:
        text = stubs._eager_erf.lower(operand(x)).as_text()
    assert "erf" in text


def test_exit_with_compiles_pending_is_clean():
    import os
    import subprocess
    import sys

    program = (
        "import torch, xla_native_functions as xnf\n"
        "xnf.config.first_calls_on_cpu = True\n"
        "x = xnf.to_xla(torch.randn(4, 41))\n"
        "for f in (torch.sin, torch.cos, torch.tan, torch.exp, torch.log1p, torch.sqrt, torch.abs, torch.neg):\n"
        "    y = f(x)\n"
        "from xla_native_functions.runtime.exec import first_call\n"
        "assert first_call.stats.on_cpu >= 8, first_call.stats.__dict__\n"
        "print('done', flush=True)\n"
    )
    out = subprocess.run([sys.executable, "-c", program], env=dict(os.environ), capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "done"


def test_factories_with_our_device(on):
    before = on.on_cpu
    got = torch.full((3, 43), 1.5, device=_x(torch.ones(1)).device) * 2
    assert on.on_cpu > before
    assert got.device == _x(torch.ones(1)).device and got.dtype == torch.float32
    torch.testing.assert_close(_cpu(got), torch.full((3, 43), 3.0))


def test_once_compiled_calls_take_jaxs_fast_path(on, monkeypatch):
    from jax._src import pjit

    a = _x(torch.randn(7, 47))
    torch.expm1(a)  # answered by PyTorch; its signature compiles in the background
    torch.expm1(a)  # still pending, or compiled: either way, correct
    assert first_call.wait_for_background_compiles(timeout=120)
    torch.expm1(a)  # the first call after the compile refills JAX's C++ cache
    python_calls = []
    real = pjit._run_python_pjit
    monkeypatch.setattr(pjit, "_run_python_pjit",
                        lambda *args, **kwargs: python_calls.append(1) or real(*args, **kwargs))
    got = torch.expm1(a)
    assert not python_calls  # not sent through JAX's Python path by the earlier FirstCall
    torch.testing.assert_close(_cpu(got), torch.expm1(_cpu(a)))


@pytest.mark.parametrize("evict", ["jax.clear_caches", "function's executables"])
def test_signatures_compiled_again_take_jaxs_fast_path(on, monkeypatch, evict):
    # A signature compiled before and evicted since raises FirstCall at its next call and
    # compiles at once; that call must not leave JAX's C++ cache an entry that sends
    # every later call through JAX's Python path.
    import jax
    from jax._src import pjit

    a = _x(torch.rand(5, 53))
    torch.log1p(a)
    assert first_call.wait_for_background_compiles(timeout=120)
    torch.log1p(a)
    if evict == "jax.clear_caches":
        jax.clear_caches()
    else:  # what the eager executables' budget does (Note [Memory of eager executables])
        for fn in list(executable_cache.eager_executables.order.values()):
            fn.clear_cache()
    before = on.compiled_at_once
    torch.log1p(a)  # compiles at once: the signature is known, its executable gone
    assert on.compiled_at_once == before + 1
    torch.log1p(a)  # refills JAX's C++ cache
    python_calls = []
    real = pjit._run_python_pjit
    monkeypatch.setattr(pjit, "_run_python_pjit",
                        lambda *args, **kwargs: python_calls.append(1) or real(*args, **kwargs))
    got = torch.log1p(a)
    assert not python_calls
    torch.testing.assert_close(_cpu(got), torch.log1p(_cpu(a)))


def test_ops_whose_pytorch_kernel_differs_by_design_compile(on):
    # PyTorch's _grouped_mm leaves rows outside every group unset; ours are zeros
    a, b = torch.randn(7, 4), torch.randn(2, 4, 8)
    offs = torch.tensor([3, 6], dtype=torch.int32)
    before = on.on_cpu
    got = _cpu(torch._grouped_mm(_x(a), _x(b), _x(offs)))
    assert on.on_cpu == before
    torch.testing.assert_close(got[:3], a[:3] @ b[0])
    assert torch.equal(got[6], torch.zeros(8))
