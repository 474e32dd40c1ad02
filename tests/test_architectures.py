"""A representative part of the architecture sweep (scripts/architectures.py) against
PyTorch CPU: a mixture of experts (grouped products, integer histc), a speech encoder
(weight-normalised convolution), a state-space model, a recurrent model that keeps its
final state in a module attribute (which every replay sets again), an audio
encoder-decoder and a windowed vision transformer, in every mode, inference and
training (compiled: the last call a replay). The whole sweep writes
docs/reports/architectures.md."""

from __future__ import annotations


import pytest
import torch

import architectures

REPRESENTATIVE = ("mixtral", "wav2vec2", "mamba", "recurrent_gemma", "whisper", "swin")


@pytest.mark.parametrize("task", ["inference", "train-sgd"])
@pytest.mark.parametrize("mode", architectures.MODES)
@pytest.mark.parametrize("name", REPRESENTATIVE)
def test_architecture_matches_cpu(name, mode, task):
    record = architectures.check(name, mode, task)
    assert record["ok"], record.get("traceback") or record["why"]
    assert record["float64_bound"] == 0, record  # these match PyTorch's float32 results directly
    if mode == "compiled":  # the last call, compared above, is a replay
        assert record["replays"] == 1, record
    if mode == "dynamo" and name != "mixtral":  # transformers runs its own grouped-product op under Dynamo
        assert record["cpu_ops"] == [], record


def test_compare_admits_float32_rounding_only():
    exact = torch.tensor([1.0, 2.0], dtype=torch.float64)
    torch_f32 = torch.tensor([1.001, 2.0])  # PyTorch's own float32 error: 1e-3
    within_tolerance = [torch.tensor([1.001, 2.0000001])]
    closer_to_float64 = [torch.tensor([1.0015, 2.0])]
    far = [torch.tensor([1.01, 2.0])]
    matched = architectures.compare(within_tolerance, [torch_f32], lambda: [exact])
    assert matched["ok"] and matched["float64_bound"] == 0 and matched["why"] is None
    admitted = architectures.compare(closer_to_float64, [torch_f32], lambda: [exact])
    assert admitted["ok"] and admitted["float64_bound"] == 1
    rejected = architectures.compare(far, [torch_f32], lambda: [exact])
    assert not rejected["ok"] and "from float64" in rejected["why"]


def test_unknown_architecture_is_named():
    with pytest.raises(SystemExit):
        architectures.main(["no_such_model"])
