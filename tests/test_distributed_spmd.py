"""Ranks as devices of one process (docs/distributed.md, "Ranks as devices"):
`xd.spmd` runs code written for torch.distributed once per device of a mesh, as one
SPMD program. In one subprocess with 8 simulated CPU devices
(tests/distributed_spmd_worker.py): every collective on the group of one mesh dim of
meshes (8,) and (2, 4), against the same computation done by hand on the stacked
per-rank values; a DDP-style training step of the zoo's MLP over 8 ranks against one
device; the errors."""

from __future__ import annotations

import pytest

from distributed_harness import TESTS, once_per_session, run_script

COLLECTIVES = ["rank", "group_rank", "world", "group_size", "all_reduce_sum", "all_reduce_avg", "all_reduce_max",
               "all_reduce_min", "all_reduce_product", "all_reduce_world", "all_gather_into_tensor", "all_gather",
               "reduce_scatter_tensor", "broadcast", "all_to_all_single", "funcol_all_reduce", "funcol_all_gather",
               "funcol_reduce_scatter", "funcol_all_to_all", "funcol_broadcast", "where_rank"]


@once_per_session
def results() -> dict:
    return run_script([str(TESTS / "distributed_spmd_worker.py")], devices=8, timeout=300)


@pytest.mark.parametrize("mesh", ["mesh8", "mesh24_tp", "mesh24_dp"])
@pytest.mark.parametrize("name", COLLECTIVES)
def test_collective_equals_the_stacked_computation(mesh, name):
    assert results()[mesh][name] < 1e-6, (mesh, name, results()[mesh][name])


def test_results_are_laid_out_over_the_mesh():
    assert results()["mesh8"]["placements"] == "(Shard(dim=0),)"
    assert results()["mesh24_tp"]["placements"] == "(Shard(dim=0), Shard(dim=1))"


def test_ddp_style_step_over_8_ranks_equals_one_device():
    ddp = results()["ddp"]
    assert len(ddp["losses"]) == 5
    assert ddp["loss_err"] < 1e-5 and ddp["weight_err"] < 1e-5, ddp


def test_rank_as_a_python_value_says_to_use_torch_where():
    errors = results()["errors"]
    for name in ("branch", "int"):
        assert errors[name].startswith("RuntimeError: inside xla_native_functions.distributed.spmd every rank runs "
                                       "one program"), errors[name]
        assert "torch.where(rank == 0, a, b)" in errors[name]


def test_a_mesh_group_outside_spmd_and_a_wrong_shape_raise():
    errors = results()["errors"]
    assert errors["outside"].startswith("RuntimeError: torch.distributed.all_reduce on a group of a mesh's devices "
                                        "runs inside xla_native_functions.distributed.spmd")
    assert errors["shape"].startswith("ValueError: spmd: a tensor argument holds every rank's value stacked")


def test_a_tensor_made_where_a_dropped_one_lived_is_still_written_back(monkeypatch):
    # A storage made in the call and dropped frees its address, which the next one may
    # get: it must still count as made, or its value stays a tracer of the finished
    # trace. Every storage's id() is made the same here, as such a reuse makes it.
    import gc
    import importlib

    import torch

    import xla_native_functions as xnf

    spmd = importlib.import_module("xla_native_functions.runtime.frontends.distributed.spmd")
    monkeypatch.setattr(spmd, "id", lambda obj: 0, raising=False)
    call = spmd._Call(None, None)
    dropped = xnf.to_xla(torch.zeros(2))
    call.made(dropped)
    del dropped
    gc.collect()
    later = xnf.to_xla(torch.ones(2))
    call.made(later)
    assert call.kept() == [later._store]
