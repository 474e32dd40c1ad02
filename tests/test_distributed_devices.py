"""Every JAX device is a torch device (docs/distributed.md, "Devices"): jax:0 ... jax:7
in a subprocess with 8 simulated CPU devices, checked against PyTorch's device rules
and CPU values."""

from __future__ import annotations

import pytest

from distributed_harness import WORKER, run_group, run_script, worker_env


@pytest.fixture(scope="module")
def r():
    return run_group("devices")


def test_device_count(r):
    assert r["count"] == 8 and r["distributed_count"] == 8


def test_factory_on_an_indexed_device(r):
    assert r["factory_device"] == "jax:1" and r["factory_err"] == 0


def test_to_moves_values_to_the_device(r):
    assert (r["to_device"], r["moved_device"], r["back_device"]) == ("jax:3", "jax:5", "jax:0")
    assert r["to_err"] == 0
    assert r["back_mixes_with_default"] == 0


def test_ops_run_and_stay_on_their_device(r):
    assert r["op_device"] == "jax:3" and r["op_err"] < 1e-5
    assert r["result_lives_there"] == [3]  # the JAX array itself is on device 3
    assert r["like_device"] == "jax:3" and r["new_device"] == "jax:3"


def test_index_out_of_range_raises(r):
    assert r["out_of_range"].startswith("RuntimeError: jax:8 is not a device") and "8 JAX devices" in r["out_of_range"]
    assert r["to_out_of_range"].startswith("RuntimeError: jax:11 is not a device")


def test_ops_across_devices_raise_pytorchs_error(r):
    assert r["cross_device"] == ("RuntimeError: Expected all tensors to be on the same device, but found at least "
                                 "two devices, jax:3 and jax:0!")
    assert r["cross_device_mm"].startswith("RuntimeError: Expected all tensors to be on the same device")


def test_copy_between_devices_keeps_the_destination(r):
    assert r["copy_keeps_device"] == "jax:2" and r["copy_err"] == 0 and r["copy_lives_there"] == [2]


def test_autograd_on_a_device(r):
    assert r["grad_device"] == "jax:2" and r["grad_err"] < 1e-6


def test_compiled_results_stay_on_the_device(r):
    assert r["compiled_device"] == "jax:3" and r["compiled_err"] < 1e-5 and r["compiled_lives_there"] == [3]


def test_module_to_a_device(r):
    assert r["module_device"] == ["jax:4"] and r["module_out_device"] == "jax:4"


def test_first_calls_on_pytorch_keep_each_device():
    # With first calls answered by PyTorch CPU (the default outside this test suite),
    # results of ops and factories on jax:1..7 must stay there: PyTorch's answers are put
    # on jax:0, so those ops compile at once instead.
    env = {**worker_env(8), "XLA_NATIVE_FUNCTIONS_FIRST_CALLS_ON_CPU": "1"}
    r = run_script([str(WORKER), "devices"], env=env)
    assert r["factory_device"] == "jax:1" and r["op_device"] == "jax:3" and r["result_lives_there"] == [3]
    assert r["grad_device"] == "jax:2" and r["grad_err"] < 1e-5
    assert r["compiled_device"] == "jax:3" and r["copy_keeps_device"] == "jax:2"
