"""Running code that may abort or hang the process in child processes, with a timeout.

`run_cases` runs several cases in as few processes as it can: every case reports its
result on a line of its own, and when a case kills its process (an abort, a hang past
the timeout) it is reported as such and the cases after it go on in a fresh process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

TIMEOUT = 300  # seconds per child process; the machine may be shared and slow

_RUNNER = r"""
import json, sys
{prelude}
for _name, _expr in json.loads(sys.argv[1]):
    print("START " + _name, flush=True)
    try:
        _value = eval(_expr)
        _out = {{"ok": True, "value": repr(_value)[:500]}}
    except BaseException as _error:
        _out = {{"ok": False, "type": type(_error).__name__, "mro": [c.__name__ for c in type(_error).__mro__],
                 "message": str(_error)}}
    print("RESULT " + json.dumps([_name, _out]), flush=True)
"""


def child_env(changes: dict[str, str | None] | None = None) -> dict[str, str]:
    """This process's environment with `changes` (None removes a variable)."""
    env = dict(os.environ)
    for key, value in (changes or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def run_python(code: str, env: dict[str, str | None] | None = None, timeout: float = TIMEOUT,
               args: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """`python -c code` in a child process; a hang raises subprocess.TimeoutExpired."""
    return subprocess.run([sys.executable, "-c", code, *args], env=child_env(env), capture_output=True, text=True,
                          timeout=timeout)


def run_cases(prelude: str, cases: dict[str, str], env: dict[str, str | None] | None = None,
              timeout: float = TIMEOUT) -> dict[str, dict]:
    """Evaluate each case's expression after `prelude`. Returns, per case, {"ok": True,
    "value": repr} or {"ok": False, "type", "mro", "message"} for an exception, or
    {"ok": False, "died": description} when the case killed its process."""
    code = _RUNNER.format(prelude=prelude)
    pending = list(cases.items())
    results: dict[str, dict] = {}
    while pending:
        started = None
        try:
            done = run_python(code, env, timeout, args=(json.dumps(pending),))
            stdout, stderr, died = done.stdout, done.stderr, f"exit status {done.returncode}"
        except subprocess.TimeoutExpired as expired:
            stdout = expired.stdout.decode() if isinstance(expired.stdout, bytes) else (expired.stdout or "")
            stderr = expired.stderr.decode() if isinstance(expired.stderr, bytes) else (expired.stderr or "")
            died = f"no answer within {timeout} s"
        for line in stdout.splitlines():
            if line.startswith("START "):
                started = line[len("START "):]
            elif line.startswith("RESULT "):
                name, out = json.loads(line[len("RESULT "):])
                results[name] = out
                started = None
        names = [name for name, _ in pending]
        if started is None and all(name in results for name in names):
            break
        if started is None:  # died before the first case: the prelude failed
            for name in names:
                results.setdefault(name, {"ok": False, "died": f"{died} before the case ran", "stderr": stderr[-3000:]})
            break
        results[started] = {"ok": False, "died": died, "stderr": stderr[-3000:]}
        pending = pending[names.index(started) + 1:]
    return results


def outcome(fn) -> dict:
    """What calling fn() gives, in run_cases' terms (for the PyTorch CPU side)."""
    try:
        value = fn()
    except BaseException as error:
        return {"ok": False, "type": type(error).__name__, "mro": [c.__name__ for c in type(error).__mro__],
                "message": str(error)}
    return {"ok": True, "value": repr(value)[:500]}
