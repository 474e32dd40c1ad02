"""An exception raised by an autograd hook during backward reaches the caller of
backward() as itself, and the process goes on, whichever device guard is in use. With
PyTorch's Python device guard each of these used to abort the process ("terminate
called without an active exception", Note [Hook errors during backward] in
runtime/hook_errors.py). Every way the Python guard comes to be used is tried, each in
child processes of its own, with a cache directory of its own."""

from __future__ import annotations

import shutil

import pytest

from runtime_fault_helpers import run_cases

from xla_native_functions.runtime.platform.backend import NO_COMPILATION_CACHE_ENV
from xla_native_functions.runtime.platform.cache_trust import CACHE_DIR_ENV
from xla_native_functions.runtime.platform.device_guard import PYTHON_GUARD_ENV

_PRELUDE = r"""
import torch, xla_native_functions as xnf

class HookFailed(ValueError):
    pass

def boom(*args):
    raise HookFailed("raised by the hook")

def leaf():
    return xnf.to_xla(torch.arange(3.0)).requires_grad_()

def outcome(make_loss):
    loss = make_loss()
    try:
        loss.backward()
    except HookFailed as error:
        return f"caught {type(error).__name__}: {error}"
    except BaseException as error:
        return f"wrong exception {type(error).__name__}: {error}"
    return "no exception"

def tensor_hook():
    def loss():
        y = leaf() * 2
        y.register_hook(boom)
        return (y * 3).sum()
    return outcome(loss)

def leaf_hook():
    def loss():
        x = leaf()
        x.register_hook(boom)
        return (x * 3).sum()
    return outcome(loss)

def post_accumulate_grad_hook():
    def loss():
        x = leaf()
        x.register_post_accumulate_grad_hook(boom)
        return (x * 3).sum()
    return outcome(loss)

def module_full_backward_hook():
    def loss():
        torch.manual_seed(0)
        module = xnf.to_xla(torch.nn.Linear(3, 2))
        module.register_full_backward_hook(boom)
        return module(leaf()).sum()
    return outcome(loss)

def module_full_backward_pre_hook():
    def loss():
        module = xnf.to_xla(torch.nn.Linear(3, 2))
        module.register_full_backward_pre_hook(boom)
        return module(leaf()).sum()
    return outcome(loss)

def node_hook():
    def loss():
        y = leaf() * 2
        y.grad_fn.register_prehook(boom)
        return y.sum()
    return outcome(loss)

def saved_tensor_unpack_hook():
    def loss():
        x = leaf()
        with torch.autograd.graph.saved_tensors_hooks(lambda t: t, boom):
            return (x * x).sum()
    return outcome(loss)

def hooks_that_return_gradients():
    # wrapped hooks hand back what the hook returns
    x = leaf()
    y = x * 2
    y.register_hook(lambda g: g * 10)
    x.register_hook(lambda g: g + 1)
    seen = []
    x.register_post_accumulate_grad_hook(lambda t: seen.append(xnf.to_torch(t.grad).tolist()))
    (y * y).sum().backward()
    return xnf.to_torch(x.grad).tolist(), seen

def still_usable():
    x = leaf()
    (x * x).sum().backward()
    return xnf.to_torch(x.grad).tolist(), float((x.detach() + 1).sum())

def guard():
    return [l.strip() for l in xnf.metrics_report().splitlines() if "device guard" in l][0]
"""

HOOK_KINDS = ["tensor_hook", "leaf_hook", "post_accumulate_grad_hook", "module_full_backward_hook",
              "module_full_backward_pre_hook", "node_hook", "saved_tensor_unpack_hook"]
WAYS = ["environment_variable", "no_compiler", "unwritable_cache", "compiler_command_fails", "damaged_cached_guard",
        "group_writable_cache", "native_guard"]


def _false() -> str:
    found = shutil.which("false")
    if found is None:
        pytest.skip("no `false` program to stand in for a failing compiler")
    return found


def _way_env(way: str, root) -> dict:
    """The environment of a child that uses the Python guard for `way` (the C++ one for
    "native_guard"), in a cache directory of its own under `root`."""
    cache = root / "cache"
    env = {CACHE_DIR_ENV: str(cache), PYTHON_GUARD_ENV: None, "CXX": None, NO_COMPILATION_CACHE_ENV: "1"}
    if way == "environment_variable":
        env[PYTHON_GUARD_ENV] = "1"
    elif way == "no_compiler":
        empty = root / "empty-path"
        empty.mkdir()
        env["PATH"] = str(empty)  # neither c++ nor g++
    elif way == "unwritable_cache":
        blocker = root / "a-file"
        blocker.write_text("")
        env[CACHE_DIR_ENV] = str(blocker / "cache")  # cannot be created, even by root
    elif way == "compiler_command_fails":
        env["CXX"] = f"{_false()} --with-an-argument"
    elif way == "damaged_cached_guard":
        _plant_truncated_guard(cache)
        env["CXX"] = _false()  # and the rebuild fails
    elif way == "group_writable_cache":
        cache.mkdir(mode=0o700)
        cache.chmod(0o770)
    elif way == "native_guard":
        if shutil.which("c++") is None and shutil.which("g++") is None:
            pytest.skip("no C++ compiler to build the guard")
    return env


def _plant_truncated_guard(cache) -> None:
    import os

    from xla_native_functions.runtime.platform import device_guard

    previous = os.environ.get(CACHE_DIR_ENV)
    os.environ[CACHE_DIR_ENV] = str(cache)
    try:
        path = device_guard.library_path()
    finally:
        if previous is None:
            del os.environ[CACHE_DIR_ENV]
        else:
            os.environ[CACHE_DIR_ENV] = previous
    path.write_bytes(b"\x7fELF" + bytes(4000))
    path.chmod(0o700)


_RESULTS: dict[str, dict] = {}


def _results(way: str, tmp_path_factory) -> dict:
    if way not in _RESULTS:
        env = _way_env(way, tmp_path_factory.mktemp(way))
        cases = {"guard": "guard()"} | {kind: f"{kind}()" for kind in HOOK_KINDS}
        cases |= {"hooks_that_return_gradients": "hooks_that_return_gradients()", "still_usable": "still_usable()"}
        _RESULTS[way] = run_cases(_PRELUDE, cases, env)
    return _RESULTS[way]


def _value(result: dict):
    assert "died" not in result, f"the child process died ({result['died']}):\n{result.get('stderr')}"
    assert result["ok"], result
    return eval(result["value"])


@pytest.mark.parametrize("way", WAYS)
def test_the_way_uses_the_guard_it_should(way, tmp_path_factory):
    line = _value(_results(way, tmp_path_factory)["guard"])
    assert line.startswith("device guard: C++" if way == "native_guard" else "device guard: Python"), line


@pytest.mark.parametrize("kind", HOOK_KINDS)
@pytest.mark.parametrize("way", WAYS)
def test_hook_exception_reaches_the_caller_of_backward(way, kind, tmp_path_factory):
    assert _value(_results(way, tmp_path_factory)[kind]) == "caught HookFailed: raised by the hook"


def _hooks_that_return_gradients_on_cpu():
    import torch

    x = torch.arange(3.0).requires_grad_()
    y = x * 2
    y.register_hook(lambda g: g * 10)
    x.register_hook(lambda g: g + 1)
    seen = []
    x.register_post_accumulate_grad_hook(lambda t: seen.append(t.grad.tolist()))
    (y * y).sum().backward()
    return x.grad.tolist(), seen


@pytest.mark.parametrize("way", WAYS)
def test_process_stays_usable_and_hooks_keep_their_results(way, tmp_path_factory):
    import torch

    results = _results(way, tmp_path_factory)
    assert _value(results["hooks_that_return_gradients"]) == _hooks_that_return_gradients_on_cpu()
    x = torch.arange(3.0).requires_grad_()
    (x * x).sum().backward()
    assert _value(results["still_usable"]) == (x.grad.tolist(), float((x.detach() + 1).sum()))
