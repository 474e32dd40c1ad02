"""Hugging Face transformers models with tiny random configs (no downloads), built from
unmodified library code. Dropout is off in every config so training runs can be
compared with PyTorch CPU; `use_cache=False` keeps outputs plain tensors.

`attn` picks `attn_implementation` ("eager" or "sdpa"); None keeps the library's
default, which is what users get ("sdpa" in transformers 5)."""

from __future__ import annotations

import torch
from torch import nn

from .common import SMALL, Case, Size

VOCAB = 64


def _lm_loss(out, labels):
    logits = out.logits
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def _attn_kwargs(attn: str | None) -> dict:
    return {} if attn is None else {"attn_implementation": attn}


def _ids(batch: int, size: Size) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, size.seq))


def _common(size: Size) -> dict:
    """The config entries every model here shares, under each library's own names."""
    return {"positions": 4 * size.seq, "ff": 2 * size.width if size is SMALL else 4 * size.width}


def build_bert(batch: int, attn: str | None = None, size: Size = SMALL) -> Case:
    c = _common(size)
    from transformers import BertConfig, BertForMaskedLM

    config = BertConfig(
        vocab_size=VOCAB,
        hidden_size=size.width,
        num_hidden_layers=size.layers,
        num_attention_heads=size.heads,
        intermediate_size=c["ff"],
        max_position_embeddings=c["positions"],
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        **_attn_kwargs(attn),
    )
    model = BertForMaskedLM(config)
    ids = _ids(batch, size)
    mask = torch.ones(batch, size.seq, dtype=torch.long)
    mask[0, -3:] = 0  # padding in one sequence: exercises the attention mask
    return Case(model, (), _ids(batch, size), _lm_loss, kwargs={"input_ids": ids, "attention_mask": mask})


def build_gpt2(batch: int, attn: str | None = None, size: Size = SMALL) -> Case:
    c = _common(size)
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=VOCAB, n_positions=c["positions"], n_embd=size.width, n_layer=size.layers, n_head=size.heads,
        n_inner=4 * size.width, resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0, use_cache=False, **_attn_kwargs(attn),
    )
    model = GPT2LMHeadModel(config)
    return Case(model, (), _ids(batch, size), _lm_loss, kwargs={"input_ids": _ids(batch, size)})


def build_llama(batch: int, attn: str | None = None, size: Size = SMALL) -> Case:
    c = _common(size)
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=size.width, intermediate_size=c["ff"], num_hidden_layers=size.layers,
        num_attention_heads=size.heads, num_key_value_heads=size.heads // 2, max_position_embeddings=c["positions"],
        attention_dropout=0.0, use_cache=False, **_attn_kwargs(attn),
    )
    model = LlamaForCausalLM(config)
    return Case(model, (), _ids(batch, size), _lm_loss, kwargs={"input_ids": _ids(batch, size)})


def build_t5(batch: int, attn: str | None = None, size: Size = SMALL) -> Case:
    c = _common(size)
    from transformers import T5Config, T5ForConditionalGeneration

    config = T5Config(
        vocab_size=VOCAB, d_model=size.width, d_kv=size.width // size.heads, d_ff=c["ff"], num_layers=size.layers,
        num_decoder_layers=size.layers, num_heads=size.heads, relative_attention_num_buckets=8,
        relative_attention_max_distance=2 * size.seq, dropout_rate=0.0,
        decoder_start_token_id=0, use_cache=False, **_attn_kwargs(attn),
    )
    model = T5ForConditionalGeneration(config)
    return Case(model, (), _ids(batch, size), _lm_loss,
                kwargs={"input_ids": _ids(batch, size), "decoder_input_ids": _ids(batch, size)})


def build_vit(batch: int, attn: str | None = None, size: Size = SMALL) -> Case:
    c = _common(size)
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(
        image_size=size.image,
        patch_size=4,
        num_channels=3,
        hidden_size=size.width,
        num_hidden_layers=size.layers,
        num_attention_heads=size.heads,
        intermediate_size=c["ff"],
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        num_labels=10,
        **_attn_kwargs(attn),
    )
    model = ViTForImageClassification(config)
    target = torch.randint(0, 10, (batch,))
    return Case(model, (), target, lambda out, t: nn.functional.cross_entropy(out.logits, t),
                kwargs={"pixel_values": torch.randn(batch, 3, size.image, size.image)})
