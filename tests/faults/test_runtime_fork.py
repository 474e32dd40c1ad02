"""A process forked after JAX started gets a clear error at its first op instead of
hanging (Note [Fork after JAX started] in runtime/fork_guard.py); forking before the
first op, and worker processes started with "spawn", work. Every test runs in child
processes with a timeout: before the fix the forked child hung."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from runtime_fault_helpers import run_python

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX's")

# The forked grandchild reports on a pipe; the parent waits for it at most CHILD_TIMEOUT
# seconds (a hang), then kills it.
_FORK = r"""
import json, os, signal, sys, time, warnings
warnings.simplefilter("ignore")  # JAX's own warning about os.fork()
import torch, xla_native_functions as xnf
CHILD_TIMEOUT = 60

def in_forked_child(work):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            out = {"ok": True, "value": repr(work())}
        except BaseException as error:
            out = {"ok": False, "type": type(error).__name__, "message": str(error)}
        os.write(write, json.dumps(out).encode())
        os._exit(0)
    os.close(write)
    deadline = time.monotonic() + CHILD_TIMEOUT
    while time.monotonic() < deadline:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        return {"ok": False, "hung": True}
    data = os.read(read, 1 << 16)
    return json.loads(data) if data else {"ok": False, "died": True}

def in_environment(make):
    with xnf.default_env():
        return make()

WHAT = sys.argv[1]
if WHAT != "fork_right_after_import":
    x = xnf.to_xla(torch.arange(4.0))
    assert float((x * 2).sum()) == 12.0  # JAX has started and compiled
works = {
    "fork_right_after_import": lambda: float((xnf.to_xla(torch.arange(4.0)) * 3).sum()),
    "op_on_parent_tensor": lambda: float((x * 3).sum()),
    "already_compiled_op": lambda: float((x * 2).sum()),
    "factory_on_device": lambda: torch.ones(2, device="jax"),
    "factory_in_environment": lambda: in_environment(lambda: torch.ones(2)),
    "new_tensor_then_op": lambda: xnf.to_xla(torch.ones(2)) + 1,
    "to_xla_of_a_new_dtype": lambda: xnf.to_xla(torch.ones(2, dtype=torch.int16)),
    "jax_compile": lambda: __import__("jax").jit(lambda a: a * 7)(__import__("numpy").ones(3)),
    "compiled_replay": lambda: STEP(x),
}
if WHAT == "compiled_replay":
    STEP = xnf.compile(lambda a: (a * 5).sum())
    for _ in range(4):
        STEP(x)  # traced, then replayed
print(json.dumps(in_forked_child(works[WHAT])))
print(json.dumps({"parent_after_fork": float((xnf.to_xla(torch.arange(4.0)) + 1).sum())}))
"""

AFTER_JAX_STARTED = ["op_on_parent_tensor", "already_compiled_op", "factory_on_device", "factory_in_environment",
                     "new_tensor_then_op", "to_xla_of_a_new_dtype", "jax_compile", "compiled_replay"]


def _fork(what: str) -> tuple[dict, dict]:
    import json

    done = run_python(_FORK, args=(what,), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    child, parent = (json.loads(line) for line in done.stdout.strip().splitlines()[-2:])
    return child, parent


@pytest.mark.parametrize("what", AFTER_JAX_STARTED)
def test_child_forked_after_jax_started_raises_naming_spawn(what):
    child, parent = _fork(what)
    assert not child.get("hung"), "the forked child hung"
    assert child["ok"] is False and child["type"] == "RuntimeError", child
    assert "multiprocessing" in child["message"] and "'spawn'" in child["message"]
    assert parent == {"parent_after_fork": 10.0}  # the parent is unaffected


def test_fork_right_after_import_works():
    child, parent = _fork("fork_right_after_import")
    assert child == {"ok": True, "value": "18.0"} and parent == {"parent_after_fork": 10.0}


_SPAWN = r"""
import multiprocessing as mp

def work(n):
    import torch, xla_native_functions as xnf
    x = xnf.to_xla(torch.arange(float(n)))
    return float((x * x).sum())

if __name__ == "__main__":
    import torch, xla_native_functions as xnf
    assert float(xnf.to_xla(torch.ones(3)).sum()) == 3.0  # JAX started in the parent
    with mp.get_context("spawn").Pool(2) as pool:
        print(pool.map(work, [3, 4]))
"""


def test_spawned_workers_compute_with_the_backend(tmp_path):
    script = tmp_path / "spawn_workers.py"
    script.write_text(_SPAWN)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[5.0, 14.0]"
