"""Eager mode on ever-new input shapes stays within config.eager_cache_bytes (Note [Memory
of eager executables] in runtime/platform/executable_cache.py): memory is measured in a
fresh process, where nothing else the test run did is counted."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    import torch
    import xla_native_functions as xnf
    try:
        from xla_native_functions.runtime.platform.executable_cache import EXECUTABLE_BYTES, eager_executables
    except ImportError:  # a runtime without the budget: measure it all the same
        class eager_executables:
            evicted_executables = 0
            cached = staticmethod(lambda: 0)
        EXECUTABLE_BYTES = 0

    budget = json.loads(sys.argv[1])
    xnf.config.eager_cache_bytes = budget

    def rss_mb():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    def step(n):
        x = torch.linspace(-1, 1, n * 8).reshape(n, 8)
        y = (xnf.to_xla(x) * 2 + 1).relu().sum(0)
        torch.testing.assert_close(xnf.to_torch(y), (x * 2 + 1).relu().sum(0))
        return eager_executables.cached() * EXECUTABLE_BYTES

    for n in range(1, 16):  # warm up: imports, first compiles, allocator pools
        step(n)
    start = rss_mb()
    peak = 0
    shapes = int(sys.argv[2])
    for n in range(100, 100 + shapes):
        peak = max(peak, step(n))
    print(json.dumps({"mb_per_shape": (rss_mb() - start) / shapes, "peak_held": peak,
                      "evicted": eager_executables.evicted_executables, "held": eager_executables.cached()}))
    """
)


def _run(budget, shapes):
    out = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(budget), str(shapes)], capture_output=True,
                         text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_new_shapes_stay_within_the_eager_cache_budget():
    budget = 40 << 20
    got = _run(budget, 80)
    # an op compiling for a new shape may add one executable past the budget before the
    # next compile evicts
    assert got["peak_held"] <= budget + 2 * 1_250_000, got
    assert got["evicted"] > 0, got
    # about 1.25 MB per executable, five per shape, unbounded: far above this
    assert got["mb_per_shape"] < 0.5, got


def test_an_unbounded_cache_keeps_every_executable():
    got = _run(None, 12)
    assert got["evicted"] == 0
    assert got["held"] >= 12 * 3  # at least the three ops of each new shape


@pytest.mark.parametrize("setting", [0])
def test_a_zero_budget_still_computes_right(setting):
    got = _run(setting, 10)
    assert got["held"] <= 2, got  # only what the last op compiled
