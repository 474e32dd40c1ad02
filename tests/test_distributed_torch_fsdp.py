"""torch's own FSDP2 (`torch.distributed.fsdp.fully_shard`) and DTensor
(`torch.distributed.tensor`) on our device (Note [torch's DTensor here] in
runtime/frontends/distributed/torch_fsdp.py), and FSDP2's mixed precision in torch's and
in xd's fully_shard: in one process (a world of one rank, 8 simulated devices) and under
`torchrun --nproc-per-node 2` (2 simulated devices per process, free ports, a hard
timeout), each against PyTorch CPU. The checks run in tests/torch_fsdp_worker.py."""

from __future__ import annotations

import pytest

from distributed_harness import TESTS, run_ranks, run_script

WORKER = TESTS / "torch_fsdp_worker.py"
TOL = 1e-5
BF16_ULP = 2.0 ** -7  # bfloat16's relative spacing: its 8 significant bits


@pytest.fixture(scope="module")
def one():
    return run_script([str(WORKER), "one_process"], devices=8, timeout=600)


@pytest.fixture(scope="module")
def ranks():
    return run_ranks("processes", world=2, devices=2, timeout=300, worker=WORKER)


@pytest.mark.parametrize("mode", ["eager", "compile"])
def test_torch_fully_shard_in_a_world_of_one_equals_one_device(one, mode):
    """The zoo's MLP, each Linear and then the root wrapped by torch's fully_shard, 5
    steps of SGD with momentum, eagerly and in compile() (traced on every call: FSDP2
    keeps the buffers it makes; the graphs compile once, the step without and with
    momentum buffers): PyTorch CPU's losses and weights."""
    assert one["mesh"] == "DeviceMesh((1,), 'jax', stride=((),))"
    fsdp = one["fsdp" if mode == "eager" else "fsdp_compiled"]
    if mode == "compile":
        assert 1 <= fsdp["compiles"] <= 2, fsdp["compiles"]
    assert fsdp["parameter_types"] == ["DTensor"] and fsdp["local_devices"] == ["jax:0"]
    assert fsdp["local_shapes"]["0.weight"] == [64, 32]  # one rank holds the whole parameter
    assert fsdp["loss_err"] < TOL and fsdp["weight_err"] < TOL, fsdp


def test_torch_dtensor_round_trip_in_a_world_of_one(one):
    d = one["dtensor"]
    assert (d["type"], d["local_device"], d["local_shape"]) == ("DTensor", "jax:0", [8, 6])
    assert d["product_placements"] == "(Shard(dim=0),)"
    for key in ("local_err", "product_err", "sum_err", "redistributed_err", "from_local_err"):
        assert d[key] < TOL, key
    assert d["from_local_shape"] == [2, 3]


def test_torch_fully_shard_over_two_processes_equals_one_device(ranks):
    """Each process one rank (torch.jax.set_device(LOCAL_RANK), as a CUDA script does),
    training on its half of the batch; FSDP2's all-gathers and reduce-scatters run
    between the processes."""
    assert [(r["rank"], r["world"]) for r in ranks] == [(0, 2), (1, 2)]
    for r in ranks:
        fsdp = r["fsdp"]
        assert fsdp["parameter_types"] == ["DTensor"]
        assert fsdp["local_devices"] == [f"jax:{r['rank']}"]
        assert fsdp["local_shapes"]["0.weight"] == [32, 32] and fsdp["local_shapes"]["4.bias"] == [5]
        assert fsdp["loss_err"] < TOL and fsdp["weight_err"] < TOL, (r["rank"], fsdp)
    assert ranks[0]["fsdp"]["losses"] == ranks[1]["fsdp"]["losses"]


def test_torch_dtensor_between_two_processes(ranks):
    for r in ranks:
        d = r["dtensor"]
        assert d["local_shape"] == [4, 6] and d["from_local_shape"] == [4, 3]
        for key in ("local_err", "product_err", "sum_err", "redistributed_err", "from_local_err"):
            assert d[key] < TOL, (r["rank"], key)


@pytest.mark.parametrize("which", ["torch", "xd"])
def test_mixed_precision_policy_matches_torch_fsdp2_on_cpu(one, which):
    """MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32): the layers
    compute in bfloat16 (the losses are bfloat16 values), the parameters stay float32
    master weights, and training matches torch's own FSDP2 with the same policy on the
    CPU (gloo) to bfloat16's precision: torch's fully_shard on our device in a world of
    one rank, and xd.fully_shard over 8 devices in compile()."""
    mp = one["mixed_precision"] if which == "torch" else one["xd_mixed_precision"]
    assert mp["activation_dtype"] == "torch.bfloat16"
    assert mp["master_dtypes"] == ["torch.float32"]
    for loss in mp["losses"]:
        assert abs(loss) * 2 ** 8 == int(abs(loss) * 2 ** 8), loss  # a bfloat16 value near 2
    assert mp["loss_err"] <= 2 * BF16_ULP, mp
    assert mp["weight_err"] < 2e-4, mp
    if which == "xd":
        assert mp["placements"] == ["(Shard(dim=0),)"]
        # computing in float32 would have stayed within 1e-6 of float32's weights
        assert mp["vs_fp32_weight_err"] > 1e-5, mp


def test_a_torch_mesh_bigger_than_the_world_points_to_xd(one):
    message = one["too_big"]
    assert message.startswith("RuntimeError: torch's DeviceMesh of 8 ranks over the 'jax' device, in a world of 1")
    for name in ("xd.fully_shard", "xd.distribute_tensor", "torchrun", "init_device_mesh('jax', (1,))"):
        assert name in message, name


def test_empty_like_keeps_the_device_of_a_result_not_computed_yet(one):
    assert one["like_a_made_tensor"] == "jax:1"


def test_set_device_out_of_range_says_each_process_numbers_its_devices(one):
    assert one["device_count"] == 8
    assert one["set_device_out_of_range"].startswith("RuntimeError: torch.jax.set_device(8): this process has 8 JAX")
    assert "jax:LOCAL_RANK" in one["set_device_out_of_range"]
