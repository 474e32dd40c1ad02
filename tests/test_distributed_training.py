"""Sharded training against one device (docs/distributed.md, "Parallelisms"): the zoo's
MLP, an attention block and a small transformer trained 5 SGD-with-momentum steps with
data (DP), tensor (Colwise/Rowwise, TP) and fully sharded (FSDP2's fully_shard; HSDP on
a 2-d mesh) parallelism over meshes of 8 simulated CPU devices, in compile(), through
the torch.compile backend and eagerly, give PyTorch CPU's losses and weights. One
subprocess runs them all; the runs cover every mesh shape, style and mode (not their
full product, which tests/distributed_worker.py runs as `training all`)."""

from __future__ import annotations

import pytest

from distributed_harness import run_group

RUNS = [
    "8:mlp:dp:compile", "2x4:mlp:tp:compile", "4x2:mlp:fsdp:compile", "2x2x2:mlp:dp:eager",
    "2x2x2:transformer:tp:compile", "2x4:transformer:fsdp:compile", "4x2:attention:tp:compile",
    "2x4:mlp:dp:dynamo", "4x2:mlp:tp:dynamo", "2x2x2:mlp:fsdp:dynamo", "8:attention:tp:dynamo",
    "8:mlp:fsdp:dynamo",  # the last layer's 10 rows do not divide by 8
]
LOSS_TOL, WEIGHT_TOL = 1e-5, 1e-5


def result(run: str) -> dict:
    return run_group("training", ",".join(RUNS))[run]


@pytest.mark.parametrize("run", RUNS)
def test_sharded_training_matches_one_device(run):
    r = result(run)
    assert r["loss_err"] < LOSS_TOL and r["weight_err"] < WEIGHT_TOL, r


@pytest.mark.parametrize("run", [r for r in RUNS if r.endswith(":compile")])
def test_a_compiled_step_compiles_once_then_replays(run):
    # step 1 has no momentum buffers yet, step 2 does: two programs, then replays
    r = result(run)
    assert (r["compiles"], r["replays"]) == (2, 2), r


def test_parameters_keep_their_placements():
    tp = result("2x4:mlp:tp:compile")["placements"]
    assert tp["0.weight"] == tp["0.bias"] == "(Replicate(), Shard(dim=0))"  # column-wise: output features
    assert tp["2.weight"] == "(Replicate(), Shard(dim=1))"  # row-wise: input features
    assert tp["2.bias"] == tp["4.weight"] == "(Replicate(), Replicate())"
    fsdp = result("4x2:mlp:fsdp:compile")["placements"]  # HSDP: replicated over dp, split over tp
    assert set(fsdp.values()) == {"(Replicate(), Shard(dim=0))"}
    assert set(result("8:mlp:dp:compile")["placements"].values()) == {"(Replicate(),)"}
    layers = result("2x4:transformer:fsdp:compile")["placements"]
    assert layers["blocks.1.attn.q.weight"] == layers["head.weight"] == "(Replicate(), Shard(dim=0))"
    attn = result("4x2:attention:tp:compile")["placements"]
    assert attn["q.weight"] == "(Replicate(), Shard(dim=0))" and attn["out.weight"] == "(Replicate(), Shard(dim=1))"


@pytest.mark.parametrize("run", [r for r in RUNS if not r.endswith(":eager")])
def test_the_step_runs_as_programs_over_the_mesh_with_xlas_collectives(run):
    graphs = result(run)["graphs"]
    program = "torch.compile" if run.endswith(":dynamo") else "compile()"
    assert graphs and all(p == program and devices == 8 for p, devices, _ in graphs), graphs
    assert any("all-reduce" in kinds for _, _, kinds in graphs), graphs  # the gradients' (or row-wise sums')
