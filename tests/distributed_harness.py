"""Running the distributed checks of tests/distributed_worker.py in a subprocess whose
JAX has several simulated CPU devices (XLA_FLAGS=--xla_force_host_platform_device_count,
which must be set before JAX starts, so the test process itself keeps one device), and
getting their results back as JSON. One subprocess runs a whole group of checks, so JAX
and torch start once per group; tests then assert on the group's results."""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
WORKER = TESTS / "distributed_worker.py"
RESULT_MARK = "DISTRIBUTED-RESULT:"
RESULT_DIR = "XNF_TEST_RESULT_DIR"  # set by run_ranks: each rank writes its result there


def report(result: dict) -> None:
    """A worker's last step: its result as one `RESULT_MARK` line on stdout, or, under
    run_ranks, as `<rank>.json` in RESULT_DIR (the ranks share one stdout pipe, and a
    long line from one rank can interleave with the other's)."""
    text = json.dumps(result)
    folder = os.environ.get(RESULT_DIR)
    if folder is None:
        print(RESULT_MARK + text, flush=True)
        return
    path = Path(folder) / f"{os.environ.get('RANK', '0')}.json"
    partial = path.with_suffix(".tmp")
    partial.write_text(text)
    partial.replace(path)  # whole or absent: run_ranks reads every *.json


def worker_env(devices: int) -> dict[str, str]:
    env = dict(os.environ)
    flags = " ".join(f for f in env.get("XLA_FLAGS", "").split() if "xla_force_host_platform_device_count" not in f)
    env["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={devices}".strip()
    paths = [str(TESTS), str(REPO), str(REPO / "scripts")] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def run_script(args: list[str], devices: int = 8, timeout: float = 600, env: dict | None = None) -> dict:
    """Run a worker command line and return the JSON it reports."""
    proc = subprocess.run([sys.executable, *args], cwd=REPO, env=env or worker_env(devices), capture_output=True,
                          text=True, timeout=timeout)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_MARK):
            return json.loads(line[len(RESULT_MARK):])
    raise AssertionError(f"{' '.join(args)} reported nothing (exit {proc.returncode}):\n"
                         f"{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")


def once_per_session(fn):
    """`fn`'s result computed once per test session: once per process, and under
    pytest-xdist once for all its workers (the first computes it under a file lock and
    leaves it as JSON for the others), so that `-n auto` does not run a group's
    subprocess in every worker that has one of its tests."""
    @functools.lru_cache(maxsize=None)
    def cached(*args: Any, **kwargs: Any) -> Any:
        run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
        if not run:
            return fn(*args, **kwargs)
        folder = Path(tempfile.gettempdir()) / f"xnf-distributed-{run}"
        folder.mkdir(exist_ok=True)
        key = hashlib.sha256(repr((fn.__name__, args, sorted(kwargs.items()))).encode()).hexdigest()[:24]
        path = folder / f"{key}.json"
        with open(folder / f"{key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if path.exists():
                found = json.loads(path.read_text())
            else:
                found = fn(*args, **kwargs)
                path.write_text(json.dumps(found))
        return tuple(found) if isinstance(found, list) else found

    return cached


@once_per_session
def run_group(group: str, *args: str, devices: int = 8, timeout: float = 900) -> dict:
    """The results of one group of checks."""
    return run_script([str(WORKER), group, *args], devices=devices, timeout=timeout)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@once_per_session
def run_ranks(group: str, world: int = 2, devices: int = 2, timeout: float = 240, worker: Path = WORKER
              ) -> tuple[dict, ...]:
    """The results of `group` run by `torchrun --nproc-per-node WORLD` on localhost
    (`python -m torch.distributed.run`, a free master port, and the port after it free
    for JAX's coordinator), `devices` simulated devices per process, by rank. The whole
    process group is killed when the time is up."""
    while True:
        port = free_port()
        try:  # the coordinator takes port + 1 (initialize())
            with socket.socket() as s:
                s.bind(("127.0.0.1", port + 1))
            break
        except OSError:
            continue
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={world}", "--master-addr=127.0.0.1",
               f"--master-port={port}", str(worker), group]
    with tempfile.TemporaryDirectory() as folder:
        env = {**worker_env(devices), RESULT_DIR: folder}
        proc = subprocess.Popen(command, cwd=REPO, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise AssertionError(f"torchrun {group}: {world} processes did not finish in {timeout} s") from None
        found = [json.loads(path.read_text()) for path in sorted(Path(folder).glob("*.json"))]
    if proc.returncode != 0 or len(found) != world:
        raise AssertionError(f"torchrun {group}: exit {proc.returncode}, {len(found)} of {world} ranks reported:\n"
                             f"{out[-3000:]}\n{err[-6000:]}")
    return tuple(sorted(found, key=lambda r: r["rank"]))
