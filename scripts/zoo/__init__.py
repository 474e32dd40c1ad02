"""The model zoo: NAME -> how to build the model, its inputs and loss, and the
tolerances it is compared with against PyTorch CPU.

Note [Zoo tolerances]
All comparisons are float32 against PyTorch CPU eager on the same weights and inputs.
XLA fuses and reorders floating-point work (matmul blocking, reductions in a
different order, exp/tanh/erf approximations), so results differ in the last bits;
deep stacks amplify that, hence the per-model entries below. After training steps
the weights differ by the accumulated gradient differences times the learning rate,
except with AdamW: its update is m / (sqrt(v) + eps), about lr * sign(grad) for a
tiny gradient, so a last-bit difference in a near-zero gradient moves a weight by up
to ~2 * lr per step. Its weight tolerance is therefore absolute, a fraction of lr, and
the few elements (or the gradient-free tensors) that such differences move further are
checked as Note [AdamW weight check] in scripts/run_model.py describes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .common import SIZES, Case, Size, Tolerance
from .dlrm import build_dlrm
from .hf import build_bert, build_gpt2, build_llama, build_t5, build_vit
from .mlp import build_mlp
from .nn_attention import build_attention_classifier, build_transformer
from .rnn import build_gru_classifier, build_lstm_lm
from .vision import build_resnet

# Learning rates of the training runs; the AdamW weight tolerance is read against them.
SGD_LR = 0.05
ADAMW_LR = 1e-3

_SMALL = Tolerance(
    output=(1e-5, 1e-5), loss=(1e-5, 1e-5), weights_sgd=(1e-5, 1e-5), weights_adamw=(1e-4, 1e-5),
    reason="shallow float32 network: only last-bit differences from reassociated sums",
)
_CONV = Tolerance(
    output=(1e-4, 1e-4), loss=(1e-5, 1e-5), weights_sgd=(1e-4, 1e-5), weights_adamw=(1e-4, 1e-4),
    reason="convolutions accumulate in a different order than oneDNN; batch statistics "
           "divide by small variances",
)
_RECURRENT = Tolerance(
    output=(1e-5, 1e-5), loss=(1e-5, 1e-5), weights_sgd=(1e-5, 1e-5), weights_adamw=(1e-4, 1e-5),
    reason="the fused cells add the gate terms in another order than PyTorch CPU's unfused "
           "cells, and the difference passes through every time step",
)
_TRANSFORMER = Tolerance(
    output=(1e-4, 1e-4), loss=(1e-5, 1e-5), weights_sgd=(1e-4, 1e-5), weights_adamw=(1e-4, 1e-4),
    reason="softmax, layer norm and GELU/SiLU approximations differ from PyTorch's in the "
           "last bits and pass through several layers",
)


@dataclass(frozen=True)
class ZooModel:
    name: str
    family: str
    build: Callable[..., Case]
    tolerance: Tolerance
    hf: bool = False  # accepts attn= (attn_implementation)


MODELS: dict[str, ZooModel] = {
    m.name: m
    for m in [
        ZooModel("mlp", "mlp", build_mlp, _SMALL),
        ZooModel("resnet", "vision", build_resnet, _CONV),
        ZooModel("dlrm", "recommender", build_dlrm, _SMALL),
        ZooModel("bert", "transformers", build_bert, _TRANSFORMER, hf=True),
        ZooModel("gpt2", "transformers", build_gpt2, _TRANSFORMER, hf=True),
        ZooModel("llama", "transformers", build_llama, _TRANSFORMER, hf=True),
        ZooModel("t5", "transformers", build_t5, _TRANSFORMER, hf=True),
        ZooModel("vit", "transformers", build_vit, _TRANSFORMER, hf=True),
        ZooModel("transformer", "torch.nn", build_transformer, _TRANSFORMER),
        ZooModel("attention", "torch.nn", build_attention_classifier, _TRANSFORMER),
        ZooModel("lstm_lm", "recurrent", build_lstm_lm, _RECURRENT),
        ZooModel("gru_classifier", "recurrent", build_gru_classifier, _RECURRENT),
    ]
}

__all__ = ["ADAMW_LR", "MODELS", "SGD_LR", "SIZES", "Case", "Size", "Tolerance", "ZooModel"]
