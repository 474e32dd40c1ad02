"""The model zoo (scripts/zoo) against PyTorch CPU: numerics, no CPU fallbacks, and one
compile for a steady compiled training loop. Small configs; each model/mode/task is run
once (scripts/run_model.py's `run`) and its record shared by the checks below."""

from __future__ import annotations

import functools

import pytest
import torch

import run_model
from zoo import MODELS

CASES = (
    [(m, "eager", "inference") for m in MODELS]
    + [(m, "compiled", "inference") for m in ("mlp", "resnet", "dlrm", "gpt2", "transformer", "attention")]
    + [(m, "eager", "train-sgd") for m in MODELS]
    + [(m, "compiled", "train-sgd") for m in ("mlp", "resnet", "dlrm", "llama", "lstm_lm", "gru_classifier")]
    + [("mlp", "eager", "train-adamw")]
    + [(m, "compiled", "train-adamw") for m in ("mlp", "dlrm", "gpt2")]
    + [("mlp", "dynamo", "inference"), ("mlp", "dynamo", "train-adamw")]
)


@functools.cache
def record(model: str, mode: str, task: str, attn: str | None = None) -> dict:
    train = task != "inference"
    # compiled mode: three traced calls, then two replayed ones, all compared
    return run_model.run(model, mode, train, task.removeprefix("train-") if train else "sgd",
                         batch=2, steps=5 if mode == "compiled" else 2, timed=1, attn=attn)


def _param(model, mode, task):
    return pytest.param(model, mode, task, id=f"{model}-{mode}-{task}")


@pytest.mark.parametrize("model,mode,task", [_param(*c) for c in CASES])
def test_matches_pytorch_cpu(model, mode, task):
    rec = record(model, mode, task)
    assert rec["status"] == "ok", f"{rec.get('error')} {rec.get('where', '')}"
    assert rec["max_abs"] is not None


@pytest.mark.parametrize("model,mode,task", [_param(*c) for c in CASES])
def test_no_cpu_fallbacks(model, mode, task):
    rec = record(model, mode, task)
    assert rec["status"] != "error", rec.get("error")
    assert rec["fallbacks"] == {}


@pytest.mark.parametrize("model,mode,task", [_param(*c) for c in CASES if c[1] == "compiled"])
def test_compiled_step_compiles_once(model, mode, task):
    rec = record(model, mode, task)
    assert rec["status"] != "error", rec.get("error")
    assert rec["compiles_steady"] == 0, rec["recompile_reasons"]
    # A host read inside the step (transformers' mask code checks values) runs the graph
    # recorded so far: the step is then several graphs, each compiled in the first call.
    graphs = rec["compiles_first_call"]
    assert graphs <= 2, rec["recompile_reasons"]
    if task == "train-adamw":
        # AdamW creates its state (exp_avg, exp_avg_sq) in the first step, so the second
        # step is a different program; from then on nothing compiles.
        assert rec["compiles"] <= 2 * graphs, rec["recompile_reasons"]
    else:
        assert rec["compiles"] == graphs, rec["recompile_reasons"]


@pytest.mark.parametrize("model,mode,task", [_param(*c) for c in CASES if c[1] == "compiled"])
def test_compiled_step_is_replayed(model, mode, task):
    """From the fourth call on, compile() runs the step without its Python: those calls
    were among the ones compared with PyTorch CPU, and every steady-state call timed after
    them was replayed too."""
    rec = record(model, mode, task)
    assert rec["status"] == "ok", rec.get("error")
    replayed, steps = rec["replayed_steps"].split("/")
    assert rec["replayed_compared"] == "2/5" and replayed == steps and int(steps) >= 3, rec.get("replay_notes")


@pytest.mark.parametrize("mode", ["eager", "compiled", "dynamo"])
@pytest.mark.parametrize("model", ["transformer", "attention"])
def test_attention_models_infer_under_inference_mode(model, mode):
    """nn.Transformer with masks and nn.MultiheadAttention in eval run under
    torch.inference_mode(), as serving code does, and every call (replayed ones included)
    returns inference tensors, as PyTorch CPU does: run_model compares their kind."""
    rec = record(model, mode, "inference")
    assert rec["grad_mode"] == "inference_mode"
    assert rec["status"] == "ok", f"{rec.get('error')} {rec.get('where', '')}"


def test_adamw_weight_check_admits_elements_exact_arithmetic_leaves_in_place():
    """Note [AdamW weight check]: a key bias, whose exact gradient is zero, random-walks
    in float32 by up to lr per step; the rest of the tensor must still match."""
    initial = torch.linspace(-1, 1, 48)
    steps_bound = 2 * 1e-3 * 6
    moved = initial - 6e-3 * torch.sign(initial)  # query and value parts: a real gradient
    moved[16:32] = initial[16:32]
    exact = moved.double()
    ref = moved.clone()
    ref[16:32] += 8e-4 * torch.cos(torch.arange(16.0))  # PyTorch float32's walk
    ours = moved.clone()
    ours[16:32] -= 1.8e-3 * torch.cos(torch.arange(16.0))  # ours: farther, the other way

    def check(ours, initial=initial):
        return run_model.compare([ours], [ref], 1e-4, 1e-4, names=["in_proj_bias"],
                                 adamw=(steps_bound, lambda: [exact], lambda: [ref], lambda: [initial]))

    assert not run_model.compare([ours], [ref], 1e-4, 1e-4, names=["b"],
                                 adamw=(steps_bound, lambda: [exact], lambda: [ref]))["close"]
    admitted = check(ours)
    assert admitted["close"] and "left in place by float64 training" in admitted["float64_checked"][0]
    wrong_value = ours.clone()
    wrong_value[3] += 1e-3  # the query part, which float64 training moved
    assert not check(wrong_value)["close"]
    assert not check(ours, initial=moved.clone() + 1)["close"]  # float64 moved every element
    too_far = moved.clone()
    too_far[16:32] -= 0.02  # beyond 2 * lr per step
    assert not check(too_far)["close"]


def test_eager_attention_matches():
    rec = record("gpt2", "eager", "inference", attn="eager")
    assert rec["status"] == "ok", rec.get("error")


def test_builders_are_deterministic():
    torch.manual_seed(0)
    a = MODELS["dlrm"].build(2)
    torch.manual_seed(0)
    b = MODELS["dlrm"].build(2)
    for (k, x), y in zip(a.model.state_dict().items(), b.model.state_dict().values()):
        assert torch.equal(x, y), k
    assert all(torch.equal(x, y) for x, y in zip(a.inputs[1], b.inputs[1]))


def test_compare_reports_differences():
    ref = [torch.tensor([1.0, 2.0, 3.0])]
    assert run_model.compare([ref[0].clone()], ref, 1e-5, 1e-5)["close"]
    off = run_model.compare([torch.tensor([1.0, 2.0, 3.1])], ref, 1e-5, 1e-5)
    assert not off["close"] and off["max_abs"] == pytest.approx(0.1, rel=1e-5)
    assert not run_model.compare([torch.zeros(2)], ref, 1e-5, 1e-5)["close"]
    assert not run_model.compare([torch.tensor([1.0, float("nan"), 3.0])], ref, 1e-5, 1e-5)["close"]


def test_adamw_weight_check_admits_few_elements_or_float64_accuracy():
    """Note [AdamW weight check] in scripts/run_model.py."""
    ref = torch.linspace(-1, 1, 2000)
    exact = ref.double() + 1e-4 * torch.sin(torch.arange(2000.0)).double()  # PyTorch float32 is 1e-4 off
    float64_calls, nudged_calls = [], []
    nudged = [ref]

    def float64_weights():
        float64_calls.append(1)
        return [exact]

    def nudged_weights():
        nudged_calls.append(1)
        return nudged

    def check(ours, bound=0.01):
        return run_model.compare([ours], [ref], 1e-5, 1e-5, names=["w"], adamw=(bound, float64_weights, nudged_weights))

    two_flipped = ref.clone()
    two_flipped[[3, 700]] += 0.005
    few = check(two_flipped)
    assert few["close"] and few["outliers"] == 2 and not float64_calls
    assert not run_model.compare([two_flipped], [ref], 1e-5, 1e-5)["close"]  # only AdamW rows admit them
    assert not check(two_flipped, bound=0.001)["close"]  # beyond 2 * lr per step

    everywhere = ref + 0.005  # a wrong update moves every element
    assert not check(everywhere)["close"] and float64_calls
    as_exact = exact.float() + 5e-5 * torch.cos(torch.arange(2000.0))  # noisy, but nearer exact than PyTorch
    nudged_calls.clear()
    admitted = check(as_exact)
    assert admitted["close"] and admitted["outliers"] == 0 and admitted["float64_checked"][0].startswith("w:")
    assert not nudged_calls  # the second PyTorch training runs only when the first bound fails
    assert not check(exact.float() + 3e-4)["close"]  # 3x farther from exact than PyTorch's float32
    assert not check(torch.where(ref > 0.99, float("nan"), ref))["close"]

    # Rows switched by a ReLU input near zero: PyTorch's float32 training from weights one
    # ulp apart lands as far from exact as ours.
    switched = ref.clone()
    switched[100:110] += 0.004
    assert not check(switched)["close"] and nudged_calls
    nudged[0] = ref.clone()
    nudged[0][100:110] += 0.004
    admitted = check(switched)
    assert admitted["close"] and "one ulp apart 4.1e-03" in admitted["float64_checked"][0]


def test_adamw_loss_check_holds_later_losses_to_float64():
    # Weights AdamW moved apart give later losses that differ as much: a loss beyond the
    # tolerance passes when as close to PyTorch's float64 training's as PyTorch's is.
    ref = [torch.tensor(3.0), torch.tensor(2.5)]
    exact = [torch.tensor(3.0, dtype=torch.float64), torch.tensor(2.5001, dtype=torch.float64)]

    def check(second):
        return run_model.compare([ref[0], torch.tensor(second)], ref, 1e-5, 1e-5,
                                 adamw=(0.0, lambda: exact, lambda: ref))

    assert not run_model.compare([ref[0], torch.tensor(2.50012)], ref, 1e-5, 1e-5)["close"]
    admitted = check(2.50012)
    assert admitted["close"] and admitted["float64_checked"][0].startswith("1:")
    assert not check(2.4995)["close"]  # 6x farther from float64 than PyTorch's float32


def test_one_ulp_apart_moves_every_parameter_by_one_ulp():
    model = torch.nn.Linear(4, 3)
    nudged = run_model._one_ulp_apart(model)
    for p, q in zip(model.parameters(), nudged.parameters()):
        step = torch.nextafter(p, torch.full_like(p, torch.inf)) - p
        moved = (q - p).abs()
        assert torch.equal(moved <= step * 1.01, torch.ones_like(p, dtype=torch.bool)) and (moved > 0).all()
    assert not any(torch.equal(p, q) for p, q in zip(model.parameters(), nudged.parameters()))


def test_dynamo_mode_without_backend(monkeypatch):
    monkeypatch.setattr(run_model, "DYNAMO_BACKEND", "no-such-backend")
    rec = run_model.run("mlp", "dynamo", train=True)
    assert rec["status"] == "unavailable" and "not available" in rec["error"]


def test_cli_prints_a_report(capsys):
    assert run_model.main(["mlp", "--timed", "1"]) == 0
    out = capsys.readouterr().out
    assert "status:            ok" in out and "CPU fallbacks:     none" in out


def test_eager_floor_benchmark_runs_the_pass_through_subclass():
    import bench_eager_floor

    # measure() itself checks that the pass-through step returned its subclass and
    # PyTorch's values; a step that bypassed __torch_dispatch__ would raise there.
    row = bench_eager_floor.measure("mlp", "train-sgd", turns=1, seconds=0.0)
    assert row["torch_ms"] > 0 and row["pass_through"] > 0 and row["ours"] > 0

    x = bench_eager_floor.pass_through(torch.randn(3, 4))
    y = (x.t() @ x).sum(0)
    assert type(y) is bench_eager_floor.PassThroughTensor
    torch.testing.assert_close(y.elem, (x.elem.t() @ x.elem).sum(0))
