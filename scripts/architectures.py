"""Many Hugging Face architectures, tiny and random, on PyTorch CPU and on
xla_native_functions: does each run unmodified, eagerly and compiled, and give
PyTorch's answers? The zoo (scripts/run_model.py) measures five of them in depth; this
sweep is for breadth.

    python scripts/architectures.py                 # every architecture -> docs/reports/architectures.md, .json
    python scripts/architectures.py mixtral wav2vec2 --modes eager
    python scripts/architectures.py --report-only   # rewrite the Markdown from the JSON twin

Each architecture is built from a tiny config with a fixed seed (no downloads, dropout
off) and runs, in each mode: inference under no_grad (its first output: logits, or the
last hidden state), and four SGD steps (MobileNetV2: two, `TRAINING_STEPS_OF`) on the
mean square of that output, comparing the loss of each step and every parameter
afterwards. In compiled mode inference runs four times, and the report says whether the
last call, and the last training step, replayed. Modes: `eager` and `compiled`
(xla_native_functions.compile of the whole step) on a model moved with to_xla, and
`dynamo` (torch.compile(model, backend="xla_native") on the CPU model, the optimizer
on the CPU). CPU fallback is off: an op that is not lowered fails the architecture,
naming the op; in dynamo mode the backend leaves such ops to PyTorch CPU, splitting its
graphs, and the report names them.

A tensor matches when every element is within atol + rtol * |PyTorch's| (rtol 1e-4,
atol 1e-5), or, failing that, when it is at most twice as far from PyTorch's float64
run as PyTorch's own float32 run is (plus atol): MobileNetV2's training is
ill-conditioned at this size (BatchNorm over a few values per channel), where float32
rounding alone moves the result visibly.
"""

from __future__ import annotations

import argparse
import collections
import copy
import json
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, Callable, NamedTuple

import torch

import xla_native_functions as xnf
from xla_native_functions.runtime.frontends import dynamo
from xla_native_functions.runtime.platform.metrics import metrics

# The comparisons test our lowerings: no first call is answered by PyTorch's own kernel
# (config.first_calls_on_cpu; Note [First calls on PyTorch CPU] in runtime/exec/first_call.py).
xnf.config.first_calls_on_cpu = False

REPORTS = Path(__file__).resolve().parent.parent / "docs" / "reports"
MODES = ("eager", "compiled", "dynamo")
DYNAMO_BACKEND = "xla_native"
RTOL, ATOL = 1e-4, 1e-5
FLOAT64_FACTOR = 2.0
LR = 0.1
# compile() replays a call once two consecutive traces agree, and a signature's first
# trace differs from later ones (the .grads it meets): the fourth call is the first replay
INFERENCE_CALLS = 4
TRAINING_STEPS = 4
# MobileNetV2 at this size normalizes a few values per channel: its float32 training
# leaves PyTorch's own float64 run within four steps (the fourth loss 860 apart at this
# learning rate, 4e-3 at 0.001), too far for the float64 bound to separate rounding from
# error. Two steps, so its compiled training does not reach a replay.
TRAINING_STEPS_OF = {"mobilenet_v2": 2}
VOCAB = 64


def _ids(batch: int = 2, seq: int = 8) -> torch.Tensor:
    return torch.randint(3, VOCAB, (batch, seq))


def _text() -> dict:
    return {"input_ids": _ids()}


def _images(side: int, batch: int = 2) -> Callable[[], dict]:
    return lambda: {"pixel_values": torch.randn(batch, 3, side, side)}


def _audio() -> dict:
    return {"input_values": torch.randn(2, 400)}


class Kind(NamedTuple):
    """What the architectures of one kind share: the transformers Auto class that builds
    them, their inputs, and config entries (each architecture's own go on top)."""

    auto_class: str
    inputs: Callable[[], dict]
    config: dict


# Most decoders since Llama share these config names.
DECODER = Kind("AutoModelForCausalLM", _text, dict(
    vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
    max_position_embeddings=64, use_cache=False,
))
# Causal LMs with config names of their own.
CAUSAL_LM = Kind("AutoModelForCausalLM", _text, dict(vocab_size=VOCAB))
# BERT's config names, dropout off.
ENCODER = Kind("AutoModelForMaskedLM", _text, dict(
    vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
    max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
))
MASKED_LM = Kind("AutoModelForMaskedLM", _text, dict(vocab_size=VOCAB))
# BART's config names.
SEQ2SEQ = Kind("AutoModelForSeq2SeqLM", lambda: {"input_ids": _ids(), "decoder_input_ids": _ids()}, dict(
    vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
    decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64, dropout=0.0,
    attention_dropout=0.0, use_cache=False, pad_token_id=0, decoder_start_token_id=0,
))
SPEECH_SEQ2SEQ = Kind(
    "AutoModelForSpeechSeq2Seq",
    lambda: {"input_features": torch.randn(2, 8, 32), "decoder_input_ids": _ids()},
    dict(vocab_size=VOCAB),
)
# T5's config names.
SEQ2SEQ_T5 = Kind("AutoModelForSeq2SeqLM", SEQ2SEQ.inputs, dict(
    vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4,
    dropout_rate=0.0, use_cache=False, decoder_start_token_id=0, pad_token_id=0,
))
IMAGE_CLASSIFIER = Kind("AutoModelForImageClassification", _images(32), dict(num_labels=5))
SEGMENTER = Kind("AutoModelForSemanticSegmentation", _images(32), {})
TEXT_AND_IMAGE = Kind("AutoModel", lambda: {"input_ids": _ids(), "pixel_values": torch.randn(2, 3, 16, 16)}, {})
# weight-normalised positional convolutions
SPEECH_CTC = Kind("AutoModelForCTC", _audio, dict(
    vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
    conv_dim=(8, 8), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=4,
    num_conv_pos_embedding_groups=2, hidden_dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
    feat_proj_dropout=0.0, final_dropout=0.0, layerdrop=0.0, mask_time_prob=0.0,
))

# config entries several architectures share
_GPT2_NAMES = dict(n_embd=32, n_layer=2, n_head=4, n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                   use_cache=False, bos_token_id=0, eos_token_id=0)
_MOE = dict(num_key_value_heads=2, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)
_MAMBA = dict(hidden_size=32, num_hidden_layers=2, state_size=4, expand=2, conv_kernel=4, use_cache=False)
_VIT = dict(image_size=16, patch_size=4, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, drop_path_rate=0.0)
_TEXT_TOWER = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                   max_position_embeddings=64)
_VISION_TOWER = dict(image_size=16, patch_size=4, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64)

# model_type -> (kind, its config entries). Grouped by kind; the zoo has BERT, GPT-2, Llama, T5, ViT.
TABLE: dict[str, tuple[Kind, dict]] = {
    # decoders
    "mistral": (DECODER, dict(num_key_value_heads=2, sliding_window=4)),
    "qwen2": (DECODER, dict(num_key_value_heads=2)),
    "qwen3": (DECODER, dict(num_key_value_heads=2, head_dim=8)),
    "gemma": (DECODER, dict(num_key_value_heads=2, head_dim=8)),
    "gemma2": (DECODER, dict(num_key_value_heads=2, head_dim=8, sliding_window=4)),
    "gemma3_text": (DECODER, dict(num_key_value_heads=2, head_dim=8, sliding_window=4)),
    "phi": (DECODER, dict(resid_pdrop=0.0, embd_pdrop=0.0, attention_dropout=0.0)),
    "phi3": (DECODER, dict(num_key_value_heads=2, pad_token_id=0)),
    "falcon": (DECODER, dict(hidden_dropout=0.0, attention_dropout=0.0)),
    "gpt_neox": (DECODER, dict(hidden_dropout=0.0, attention_dropout=0.0)),
    "stablelm": (DECODER, dict(num_key_value_heads=2)),
    "starcoder2": (DECODER, dict(num_key_value_heads=2, residual_dropout=0.0, embedding_dropout=0.0)),
    "cohere": (DECODER, dict(num_key_value_heads=2)),
    "olmo2": (DECODER, dict(num_key_value_heads=2)),
    "granite": (DECODER, dict(num_key_value_heads=2)),
    "gpt_neo": (CAUSAL_LM, dict(
        hidden_size=32, num_layers=2, num_heads=4, attention_types=[[["global", "local"], 1]], window_size=4,
        max_position_embeddings=64, resid_dropout=0.0, embed_dropout=0.0, attention_dropout=0.0, use_cache=False,
        bos_token_id=0, eos_token_id=0,
    )),
    "gptj": (CAUSAL_LM, dict(_GPT2_NAMES, rotary_dim=4)),
    "gpt_bigcode": (CAUSAL_LM, _GPT2_NAMES),
    "opt": (CAUSAL_LM, dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, ffn_dim=64,
                            max_position_embeddings=64, dropout=0.0, word_embed_proj_dim=32, use_cache=False)),
    "bloom": (CAUSAL_LM, dict(hidden_size=32, n_layer=2, n_head=4, hidden_dropout=0.0, attention_dropout=0.0,
                              use_cache=False)),
    "xlnet": (CAUSAL_LM, dict(d_model=32, n_layer=2, n_head=4, d_inner=64, dropout=0.0, use_mems_train=False)),
    "olmo": (DECODER, dict(num_key_value_heads=2)),
    "helium": (DECODER, dict(num_key_value_heads=2, head_dim=8)),
    "glm4": (DECODER, dict(num_key_value_heads=2, head_dim=8, pad_token_id=0)),
    "smollm3": (DECODER, dict(num_key_value_heads=2, pad_token_id=0)),
    "nemotron": (DECODER, dict(num_key_value_heads=2, head_dim=8)),
    "persimmon": (DECODER, dict(hidden_dropout=0.0, attention_dropout=0.0)),
    "exaone4": (DECODER, dict(num_key_value_heads=2, head_dim=8, sliding_window=4)),
    "apertus": (DECODER, dict(num_key_value_heads=2, head_dim=8)),
    "biogpt": (DECODER, dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, activation_dropout=0.0,
                             layerdrop=0.0)),
    "codegen": (CAUSAL_LM, dict(_GPT2_NAMES, rotary_dim=4, n_ctx=64)),
    "ctrl": (CAUSAL_LM, dict(n_embd=32, n_layer=2, n_head=4, dff=64, n_positions=64, resid_pdrop=0.0,
                             embd_pdrop=0.0, use_cache=False)),
    "xglm": (CAUSAL_LM, dict(d_model=32, num_layers=2, attention_heads=4, ffn_dim=64, max_position_embeddings=64,
                             dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, layerdrop=0.0,
                             use_cache=False)),
    "mpt": (CAUSAL_LM, dict(d_model=32, n_layers=2, n_heads=4, max_seq_len=64, use_cache=False)),
    # mixtures of experts
    "mixtral": (DECODER, dict(num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2)),
    "qwen2_moe": (DECODER, dict(_MOE, shared_expert_intermediate_size=32)),
    "olmoe": (DECODER, _MOE),
    "gpt_oss": (DECODER, dict(
        num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, head_dim=8, sliding_window=4,
        layer_types=["sliding_attention", "full_attention"],
    )),
    "deepseek_v3": (DECODER, dict(
        num_key_value_heads=4, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
        n_shared_experts=1, first_k_dense_replace=1, kv_lora_rank=16, q_lora_rank=16, qk_rope_head_dim=4,
        v_head_dim=8, qk_nope_head_dim=4, n_group=2, topk_group=1,
    )),
    "qwen3_moe": (DECODER, dict(_MOE, head_dim=8)),
    "granitemoe": (DECODER, dict(num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2)),
    "phimoe": (DECODER, dict(num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
                             router_jitter_noise=0.0)),
    "jetmoe": (DECODER, dict(num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, kv_channels=8)),
    # state-space and recurrent models
    "mamba": (CAUSAL_LM, _MAMBA),
    "mamba2": (CAUSAL_LM, dict(_MAMBA, num_heads=8, head_dim=8, n_groups=1, chunk_size=4)),
    "falcon_mamba": (CAUSAL_LM, _MAMBA),
    "recurrent_gemma": (DECODER, dict(num_key_value_heads=2, head_dim=8, lru_width=32, attention_window_size=4,
                                      block_types=["recurrent", "attention"], conv1d_width=4)),
    # encoders
    "distilbert": (MASKED_LM, dict(dim=32, n_layers=2, n_heads=4, hidden_dim=64, dropout=0.0,
                                   attention_dropout=0.0)),
    "roberta": (ENCODER, {}),
    "albert": (ENCODER, dict(embedding_size=16)),
    "electra": (ENCODER, dict(embedding_size=16)),
    "deberta-v2": (ENCODER, {}),
    "mpnet": (ENCODER, {}),
    "longformer": (ENCODER, dict(attention_window=4, pad_token_id=0)),
    "big_bird": (ENCODER, dict(attention_type="original_full")),
    "funnel": (MASKED_LM, dict(d_model=32, n_head=4, d_head=8, d_inner=64, block_sizes=[1, 1], hidden_dropout=0.0,
                               attention_dropout=0.0, activation_dropout=0.0)),
    "roformer": (ENCODER, {}),
    "rembert": (ENCODER, dict(input_embedding_size=16, output_embedding_size=16)),
    "squeezebert": (ENCODER, dict(embedding_size=32)),
    "mobilebert": (ENCODER, dict(embedding_size=16, intra_bottleneck_size=16, num_feedforward_networks=2)),
    "convbert": (ENCODER, dict(embedding_size=32)),
    "esm": (ENCODER, dict(pad_token_id=1, mask_token_id=2)),
    "modernbert": (ENCODER, dict(global_attn_every_n_layers=2, local_attention=4, pad_token_id=0)),
    "deberta": (ENCODER, {}),
    "xlm": (MASKED_LM, dict(emb_dim=32, n_layers=2, n_heads=4, dropout=0.0, attention_dropout=0.0)),
    # encoder-decoders
    "bart": (SEQ2SEQ, {}),
    "pegasus": (SEQ2SEQ, {}),
    "marian": (SEQ2SEQ, {}),
    "mbart": (SEQ2SEQ, {}),
    "led": (SEQ2SEQ, dict(attention_window=4, max_encoder_position_embeddings=64, max_decoder_position_embeddings=64)),
    "bigbird_pegasus": (SEQ2SEQ, dict(attention_type="original_full")),
    "nllb-moe": (SEQ2SEQ, dict(num_experts=4, expert_capacity=8, router_dtype="float32", encoder_sparse_step=2,
                               decoder_sparse_step=2, moe_token_dropout=0.0, encoder_layerdrop=0.0,
                               decoder_layerdrop=0.0)),
    "mt5": (SEQ2SEQ_T5, {}),
    "longt5": (SEQ2SEQ_T5, dict(local_radius=2)),
    "switch_transformers": (SEQ2SEQ_T5, dict(num_experts=4, expert_capacity=8, num_sparse_encoder_layers=1,
                                             num_sparse_decoder_layers=1, router_jitter_noise=0.0)),
    "whisper": (SPEECH_SEQ2SEQ, dict(
        num_mel_bins=8, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_source_positions=16,
        max_target_positions=16, dropout=0.0, use_cache=False, pad_token_id=0, bos_token_id=1, eos_token_id=2,
        decoder_start_token_id=1,
    )),
    # vision
    "swin": (IMAGE_CLASSIFIER, dict(
        image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=2,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, drop_path_rate=0.0,
    )),
    "convnext": (IMAGE_CLASSIFIER, dict(hidden_sizes=[8, 16], depths=[1, 1], num_stages=2, image_size=32)),
    "mobilenet_v2": (IMAGE_CLASSIFIER._replace(inputs=_images(96, batch=4)),
                     dict(image_size=96, depth_multiplier=0.25, classifier_dropout_prob=0.0)),
    "dinov2": (IMAGE_CLASSIFIER._replace(inputs=_images(16)), dict(_VIT, mlp_ratio=2)),
    "beit": (IMAGE_CLASSIFIER._replace(inputs=_images(16)),
             dict(_VIT, intermediate_size=64, use_relative_position_bias=True)),
    "segformer": (SEGMENTER, dict(
        num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[8, 16], patch_sizes=[3, 3],
        strides=[2, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2], decoder_hidden_size=16, num_labels=3,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.0, drop_path_rate=0.0,
    )),
    "regnet": (IMAGE_CLASSIFIER, dict(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], groups_width=8)),
    "resnet": (IMAGE_CLASSIFIER, dict(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1])),
    "bit": (IMAGE_CLASSIFIER, dict(embedding_size=32, hidden_sizes=[32, 64], depths=[1, 1], num_groups=8)),
    "convnextv2": (IMAGE_CLASSIFIER, dict(hidden_sizes=[8, 16], depths=[1, 1], num_stages=2, image_size=32)),
    "mobilevit": (IMAGE_CLASSIFIER, dict(
        image_size=32, hidden_sizes=[16, 24, 32], neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64],
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.0,
    )),
    "poolformer": (IMAGE_CLASSIFIER, dict(hidden_sizes=[8, 16, 24, 32], depths=[1, 1, 1, 1])),
    "pvt_v2": (IMAGE_CLASSIFIER, dict(hidden_sizes=[8, 16, 24, 32], depths=[1, 1, 1, 1],
                                      num_attention_heads=[1, 2, 2, 4])),
    "cvt": (IMAGE_CLASSIFIER, dict(embed_dim=[8, 16, 24], depth=[1, 2, 3], num_heads=[1, 2, 2],
                                   drop_path_rate=[0.0, 0.0, 0.0])),
    "focalnet": (IMAGE_CLASSIFIER, dict(embed_dim=8, depths=[1, 1], hidden_sizes=[8, 16], image_size=32,
                                        drop_path_rate=0.0)),
    "swinv2": (IMAGE_CLASSIFIER, dict(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2],
                                      window_size=4, drop_path_rate=0.0)),
    "data2vec-vision": (IMAGE_CLASSIFIER._replace(inputs=_images(16)), dict(_VIT, use_mean_pooling=True)),
    "siglip": (TEXT_AND_IMAGE, dict(text_config=_TEXT_TOWER, vision_config=_VISION_TOWER)),
    "owlvit": (TEXT_AND_IMAGE, dict(text_config=_TEXT_TOWER, vision_config=_VISION_TOWER)),
    "clip": (TEXT_AND_IMAGE, dict(
        text_config=dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=64, max_position_embeddings=16, bos_token_id=0, eos_token_id=1),
        vision_config=dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                           image_size=16, patch_size=4),
    )),
    # speech
    "wav2vec2": (SPEECH_CTC, {}),
    "hubert": (SPEECH_CTC, {}),
    "wavlm": (SPEECH_CTC, {}),
    "sew-d": (SPEECH_CTC, {}),
    "wav2vec2-conformer": (SPEECH_CTC, dict(conformer_conv_dropout=0.0)),
}


def _builder(model_type: str, kind: Kind, entries: dict) -> Callable[[], tuple]:
    def build():
        import transformers

        config = transformers.AutoConfig.for_model(model_type, **{**kind.config, **entries})
        return getattr(transformers, kind.auto_class).from_config(config), kind.inputs()

    return build


# name -> () -> (model, keyword inputs), built from a tiny config under the caller's seed
ARCHITECTURES: dict[str, Callable[[], tuple]] = {
    name: _builder(name, kind, entries) for name, (kind, entries) in TABLE.items()
}


def first_output(out: Any) -> torch.Tensor:
    """The output a user reads first: logits (per image for CLIP), else the last hidden state."""
    if isinstance(out, torch.Tensor):
        return out
    for key in ("logits", "logits_per_image", "last_hidden_state"):
        value = getattr(out, key, None)
        if value is not None:
            return value
    return out[0]


def _to(obj: Any, convert: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    return {k: convert(v) for k, v in obj.items()}


def _float64(t: torch.Tensor) -> torch.Tensor:
    return t.double() if t.is_floating_point() else t


def _run(model: torch.nn.Module, inputs: dict, train: bool, step_fn: Callable | None = None,
         steps: int = TRAINING_STEPS) -> list[torch.Tensor]:
    """Inference: [output of the last call]. Training: the loss of each step, then every
    parameter. Each run starts from the same random state, should a model draw random
    numbers. With a step_fn (compile), the last call is the first that can replay."""
    torch.manual_seed(1)
    if not train:
        def infer():
            with torch.no_grad():
                return first_output(model(**inputs))

        infer = (step_fn or (lambda f: f))(infer)
        return [[infer() for _ in range(INFERENCE_CALLS if step_fn else 1)][-1]]
    opt = torch.optim.SGD(model.parameters(), lr=LR)

    def step():
        opt.zero_grad()
        out = first_output(model(**inputs))
        loss = (out * out).mean()
        loss.backward()
        opt.step()
        return loss.detach()

    step = (step_fn or (lambda f: f))(step)
    losses = [step() for _ in range(steps)]
    return losses + [p.detach() for p in model.parameters()]


def _distance(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.double() - b.double()).abs().max().item() if a.numel() else 0.0


def compare(ours: list[torch.Tensor], expected: list[torch.Tensor], exact: Callable[[], list[torch.Tensor]]) -> dict:
    """Whether `ours` matches PyTorch's float32 `expected` (module docstring), the
    largest difference, and how many tensors needed the float64 bound."""
    worst, by_float64, why = 0.0, 0, None
    float64 = None
    for i, (a, b) in enumerate(zip(ours, expected)):
        a = xnf.to_torch(a)
        if a.shape != b.shape or a.dtype != b.dtype:
            why = why or f"tensor {i}: {tuple(a.shape)} {a.dtype}, expected {tuple(b.shape)} {b.dtype}"
            continue
        worst = max(worst, _distance(a, b))
        if torch.allclose(a, b, rtol=RTOL, atol=ATOL, equal_nan=True):
            continue
        float64 = exact() if float64 is None else float64
        ours_error, torch_error = _distance(a, float64[i]), _distance(b, float64[i])
        if ours_error <= FLOAT64_FACTOR * torch_error + ATOL:
            by_float64 += 1
            continue
        why = why or f"tensor {i}: {ours_error:.1e} from float64, PyTorch float32 {torch_error:.1e}"
    return {"ok": why is None, "max_abs": worst, "float64_bound": by_float64, "why": why}


def check(name: str, mode: str, task: str) -> dict:
    """One architecture, mode and task ("inference" or "train-sgd") against PyTorch CPU."""
    record = {"name": name, "mode": mode, "task": task}
    start = time.perf_counter()
    try:
        torch.manual_seed(0)
        model, inputs = ARCHITECTURES[name]()
        model.train(task != "inference")
        train = task != "inference"
        steps = TRAINING_STEPS_OF.get(name, TRAINING_STEPS)
        expected = _run(copy.deepcopy(model), inputs, train, steps=steps)

        def exact():
            return _run(copy.deepcopy(model).double(), _to(inputs, _float64), train, steps=steps)

        if mode == "dynamo":
            torch._dynamo.reset()
            split_before = collections.Counter(dynamo.stats.split_ops)
            ours = _run(torch.compile(copy.deepcopy(model), backend=DYNAMO_BACKEND), inputs, train, steps=steps)
            record["cpu_ops"] = sorted(collections.Counter(dynamo.stats.split_ops) - split_before)
        else:
            step_fn = xnf.compile if mode == "compiled" else None
            replays = metrics.replays
            ours = _run(xnf.to_xla(copy.deepcopy(model)), _to(inputs, xnf.to_xla), train, step_fn, steps)
            if mode == "compiled" and (steps == TRAINING_STEPS or not train):
                record["replays"] = metrics.replays - replays
        record.update(compare(ours, expected, exact))
    except Exception as e:  # noqa: BLE001 - a sweep reports every failure and goes on
        first = (str(e).strip().splitlines() or [""])[0]
        record.update(ok=False, why=f"{type(e).__name__}: {first[:300]}", traceback=traceback.format_exc(limit=-4))
    record["seconds"] = round(time.perf_counter() - start, 1)
    return record


def _status(rec: dict) -> str:
    if not rec["ok"]:
        return "FAIL"
    notes = (["float64 bound"] if rec.get("float64_bound") else []) + [f"CPU: {op}" for op in rec.get("cpu_ops", ())]
    if rec.get("replays") == 0:
        notes.append("traced every call")
    return "ok" + (f" ({'; '.join(notes)})" if notes else "")


def write_docs(records: list[dict], out: Path = REPORTS) -> None:
    names = sorted({r["name"] for r in records}, key=list(ARCHITECTURES).index)
    passed = sum(r["ok"] for r in records)
    compiled = [r for r in records if r["mode"] == "compiled" and r.get("replays") is not None]
    replayed = sum(bool(r.get("replays")) for r in compiled)
    lines = [
        "Generated by `python scripts/architectures.py` (rebuild from the JSON twin: "
        "`python scripts/architectures.py --report-only`); do not edit.",
        "",
        "# Hugging Face architectures",
        "",
        "What runs and the comparison rule: the docstring of `scripts/architectures.py`.",
        "Tiny random configurations, float32, PyTorch CPU fallback off.",
        f"Inference runs under no_grad; training is {TRAINING_STEPS} SGD steps ("
        + ", ".join(f"{name} {n}" for name, n in TRAINING_STEPS_OF.items()) + "), comparing every loss and",
        "every parameter with PyTorch CPU. In compiled mode inference runs four times too, and the",
        "fourth call, the first that `compile()` can replay, is the one compared (in training, like",
        "the others); \"traced every call\": it did not replay. \"float64 bound\": some tensor differs",
        "from PyTorch's float32 result beyond tolerance but is no further from PyTorch's float64 result",
        "than twice PyTorch's own float32 error. \"CPU: op\": in dynamo mode, an op the backend left to",
        "PyTorch CPU. The model zoo (`docs/reports/models.md`) covers BERT, GPT-2, Llama, T5 and ViT",
        "with timings.",
        "",
        f"{passed} of {len(records)} runs pass ({len(names)} architectures, modes {', '.join(MODES)}); "
        f"{replayed} of {len(compiled)} compiled runs of four calls replay.",
        "",
        "| architecture | " + " | ".join(f"{m} inference | {m} training" for m in MODES) + " |",
        "|---|" + "---|" * (2 * len(MODES)),
    ]
    by_key = {(r["name"], r["mode"], r["task"]): r for r in records}
    for name in names:
        cells = []
        for mode in MODES:
            for task in ("inference", "train-sgd"):
                rec = by_key.get((name, mode, task))
                cells.append("-" if rec is None else _status(rec) if rec["ok"] else f"FAIL: {rec['why']}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    out.joinpath("architectures.md").write_text("\n".join(lines) + "\n")
    slim = [{k: v for k, v in r.items() if k != "traceback"} for r in records]
    out.joinpath("architectures.json").write_text(json.dumps(slim, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help=f"architectures (default: all {len(ARCHITECTURES)})")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated: {', '.join(MODES)}")
    parser.add_argument(
        "--report-only", action="store_true", help="rewrite architectures.md from architectures.json only"
    )
    args = parser.parse_args(argv)
    if args.report_only:
        write_docs(json.loads(REPORTS.joinpath("architectures.json").read_text()))
        return 0
    unknown = [n for n in args.names if n not in ARCHITECTURES]
    if unknown:
        parser.error(f"unknown architectures {unknown}; known: {', '.join(ARCHITECTURES)}")
    warnings.filterwarnings("ignore")
    import transformers

    transformers.logging.set_verbosity_error()  # tiny vocabularies make configs warn about their token ids
    names = args.names or list(ARCHITECTURES)
    plan = [(n, m, t) for n in names for m in args.modes.split(",") for t in ("inference", "train-sgd")]
    records = []
    for i, (name, mode, task) in enumerate(plan, 1):
        rec = check(name, mode, task)
        records.append(rec)
        detail = f"max abs {rec['max_abs']:.1e}" if rec["ok"] else rec["why"]
        print(f"[{i}/{len(plan)}] {name} {mode} {task}: {_status(rec)} ({detail}, {rec['seconds']} s)", flush=True)
    if not args.names:
        write_docs(records)
        print(f"wrote {REPORTS / 'architectures.md'} and architectures.json")
    return 0 if all(r["ok"] for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
