"""Hugging Face transformers models with tiny random configs (no downloads), built from
unmodified library code. Dropout is off in every config so training runs can be
compared with PyTorch CPU; `use_cache=False` keeps outputs plain tensors.

`attn` picks `attn_implementation` ("eager" or "sdpa"); None keeps the library's
default, which is what users get ("sdpa" in transformers 5)."""

from __future__ import annotations

import torch
from torch import nn

from .common import Case

VOCAB = 64
SEQ = 8


def _lm_loss(out, labels):
    logits = out.logits
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def _attn_kwargs(attn: str | None) -> dict:
    return {} if attn is None else {"attn_implementation": attn}


def _ids(batch: int, seq: int = SEQ) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, seq))


def build_bert(batch: int, attn: str | None = None) -> Case:
    from transformers import BertConfig, BertForMaskedLM

    config = BertConfig(
        vocab_size=VOCAB, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=32, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **_attn_kwargs(attn),
    )
    model = BertForMaskedLM(config)
    ids = _ids(batch)
    mask = torch.ones(batch, SEQ, dtype=torch.long)
    mask[0, -3:] = 0  # padding in one sequence: exercises the attention mask
    return Case(model, (), _ids(batch), _lm_loss, kwargs={"input_ids": ids, "attention_mask": mask})


def build_gpt2(batch: int, attn: str | None = None) -> Case:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=VOCAB, n_positions=32, n_embd=16, n_layer=2, n_head=2, resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0, use_cache=False, **_attn_kwargs(attn),
    )
    model = GPT2LMHeadModel(config)
    return Case(model, (), _ids(batch), _lm_loss, kwargs={"input_ids": _ids(batch)})


def build_llama(batch: int, attn: str | None = None) -> Case:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=32, attention_dropout=0.0, use_cache=False, **_attn_kwargs(attn),
    )
    model = LlamaForCausalLM(config)
    return Case(model, (), _ids(batch), _lm_loss, kwargs={"input_ids": _ids(batch)})


def build_t5(batch: int, attn: str | None = None) -> Case:
    from transformers import T5Config, T5ForConditionalGeneration

    config = T5Config(
        vocab_size=VOCAB, d_model=16, d_kv=8, d_ff=32, num_layers=2, num_decoder_layers=2, num_heads=2,
        relative_attention_num_buckets=8, relative_attention_max_distance=16, dropout_rate=0.0,
        decoder_start_token_id=0, use_cache=False, **_attn_kwargs(attn),
    )
    model = T5ForConditionalGeneration(config)
    return Case(model, (), _ids(batch), _lm_loss,
                kwargs={"input_ids": _ids(batch), "decoder_input_ids": _ids(batch)})


def build_vit(batch: int, attn: str | None = None) -> Case:
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(
        image_size=16, patch_size=4, num_channels=3, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=32, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=10,
        **_attn_kwargs(attn),
    )
    model = ViTForImageClassification(config)
    target = torch.randint(0, 10, (batch,))
    return Case(model, (), target, lambda out, t: nn.functional.cross_entropy(out.logits, t),
                kwargs={"pixel_values": torch.randn(batch, 3, 16, 16)})
