"""torch.distributed on our device (docs/distributed.md, "torch.distributed" and
"Several processes"): the "jax" backend's collectives (all_to_all with split sizes too),
the functional collectives (eagerly and in graphs of the torch.compile backend) and
point-to-point send/recv against their definitions, DistributedDataParallel against one process, in one
process (a world of one rank) and under `torchrun --nproc-per-node 2` on localhost
with 2 simulated devices per process (free ports, a hard timeout), where a mesh over both
processes' 4 devices also trains one model equal to one process. And the golden of a
data-parallel step's collectives on 8 simulated devices."""

from __future__ import annotations

import pytest

from distributed_harness import run_group, run_ranks

COLLECTIVES = ["all_reduce", "all_reduce_max", "all_reduce_avg", "all_gather_into_tensor", "all_gather",
               "reduce_scatter_tensor", "broadcast", "all_to_all_single", "funcol_all_reduce", "funcol_all_gather",
               "funcol_reduce_scatter", "dynamo_funcol", "all_to_all_uneven", "funcol_all_to_all_uneven",
               "all_to_all_list", "after_bad_splits"]
TOL = 1e-5


@pytest.fixture(scope="module")
def one():
    return run_group("one_process", devices=1)


@pytest.fixture(scope="module")
def ranks():
    return run_ranks("processes", world=2, devices=2, timeout=240)


@pytest.mark.parametrize("name", COLLECTIVES)
def test_collectives_in_a_world_of_one(one, name):
    assert one["backend"] == "jax"
    assert one["collectives"][name] == 0, name


def test_functional_collectives_inside_compile_in_a_world_of_one(one):
    assert one["collectives"]["compiled_funcol"] == 0


def test_ddp_in_a_world_of_one(one):
    assert one["ddp"]["loss_err"] < TOL and one["ddp"]["weight_err"] < TOL


@pytest.mark.parametrize("name", COLLECTIVES)
def test_collectives_between_two_processes(ranks, name):
    assert [(r["rank"], r["world"], r["backend"]) for r in ranks] == [(0, 2, "jax"), (1, 2, "jax")]
    for r in ranks:
        assert r["collectives"][name] == 0, (r["rank"], name)


def test_all_to_all_splits_that_do_not_match_raise_in_every_rank(one, ranks):
    assert one["collectives"]["all_to_all_bad_splits"] == \
        "ValueError: all_to_all_single: rank 0 expects [2] rows from the ranks, which send it [1]"
    # rank i sends (i + 2j) % 3 rows to rank j: [[0, 2], [1, 0]]; each rank's expected
    # rows from rank 0 are one too many
    message = ("ValueError: all_to_all_single: rank 0 expects [1, 1] rows from the ranks, which send it [0, 1]; "
               "rank 1 expects [3, 0] rows from the ranks, which send it [2, 0]")
    assert [r["collectives"]["all_to_all_bad_splits"] for r in ranks] == [message, message]


@pytest.mark.parametrize("name", ["send_recv", "isend_then_irecv", "irecv_then_isend", "batch_isend_irecv", "after"])
def test_point_to_point_between_two_processes(ranks, name):
    for r in ranks:
        assert r["point_to_point"][name] == 0, (r["rank"], name)


def test_point_to_point_recvs_wait_for_the_sends_and_check_the_buffer(one, ranks):
    assert all(r["point_to_point"]["irecv_waits"] for r in ranks)
    assert ranks[0]["point_to_point"]["wrong_dtype"] == ""
    assert ranks[1]["point_to_point"]["wrong_dtype"].startswith(
        "RuntimeError: recv from rank 0: it sent 16 bytes of float32 with tag 0 into a buffer of 16 bytes of int32")
    for r in list(ranks) + [{"point_to_point": {"to_itself": one["send_to_itself"]}}]:
        assert r["point_to_point"]["to_itself"].startswith("ValueError: Invalid destination rank")


def test_collectives_across_processes_inside_compile_say_they_run_eagerly(ranks):
    for r in ranks:
        assert r["collectives"]["compiled_funcol"].startswith(
            "RuntimeError: torch.distributed.all_reduce across 2 processes runs eagerly")


def test_ddp_over_two_processes_equals_one_process(ranks):
    for r in ranks:
        assert r["ddp"]["loss_err"] < TOL and r["ddp"]["weight_err"] < TOL, r["ddp"]


def test_one_mesh_over_both_processes_trains_equal_to_one_process(ranks):
    for r in ranks:
        spmd = r["spmd"]
        assert (spmd["devices"], spmd["local_devices"]) == (4, 2)
        assert spmd["loss_err"] < TOL and spmd["weight_err"] < TOL, spmd
        assert spmd["graphs"] and all(devices == 4 and "all-reduce" in kinds for _, devices, kinds in spmd["graphs"])


def test_data_parallel_step_golden():
    """The zoo's MLP (6 parameters, 27,688 bytes), its batch of 16 split over 8
    devices, plain SGD: one program, compiled once, whose optimized HLO has exactly two
    all-reduces: one of 7 buffers (the 6 gradients and a scalar of the loss, fused by
    XLA's all-reduce combiner) and one of a 4-byte scalar; and two small all-gathers
    (128 and 64 bytes: 16 int64 and 16 float32 values, for nll_loss's pick of the
    targets' log-probabilities over the split batch)."""
    r = run_group("dp_step")
    assert r["compiles"] == 1
    assert sum(r["parameter_bytes"]) == 27688 and len(r["parameter_bytes"]) == 6
    (graph,) = r["graphs"]
    assert graph["devices"] == 8
    found = sorted((c["kind"], c["buffers"], c["bytes"]) for c in graph["collectives"])
    assert found == [("all-gather", 1, 64), ("all-gather", 1, 128), ("all-reduce", 1, 4),
                     ("all-reduce", 7, 27688 + 4)]
    assert [c["kind"] for c in graph["collectives"]].count("all-reduce") == 2
    assert "graph 1 (compile(), 8 devices): 4 collectives, 27,888 B" in r["report"]
