"""Models built from torch.nn's own attention modules, whose eval-mode inference takes
PyTorch's fused "fast path" kernels (_native_multi_head_attention,
_transformer_encoder_layer_fwd, and the nested tensor a TransformerEncoder makes of a
padded batch); training takes their composite path. Dropout is off so training runs can
be compared with PyTorch CPU."""

from __future__ import annotations

import torch
from torch import nn

from .common import SMALL, Case, Size

VOCAB = 64


def _padding_mask(batch: int, seq: int, lengths: list[int]) -> torch.Tensor:
    """A key padding mask (True = padding) of sequences of the given lengths, padded at
    the end; lengths repeat over the batch."""
    positions = torch.arange(seq)
    return torch.stack([positions >= lengths[b % len(lengths)] for b in range(batch)])


class Seq2Seq(nn.Module):
    """nn.Transformer between token embeddings and a vocabulary head, with a causal
    target mask and padding masks on source and target."""

    def __init__(self, size: Size, tgt_len: int):
        super().__init__()
        self.src_embed = nn.Embedding(VOCAB, size.width)
        self.tgt_embed = nn.Embedding(VOCAB, size.width)
        self.transformer = nn.Transformer(
            size.width, size.heads, size.layers, size.layers, 2 * size.width, dropout=0.0, batch_first=True
        )
        self.head = nn.Linear(size.width, VOCAB)
        # Boolean, like the padding masks: PyTorch warns about masks of mixed types.
        self.register_buffer("causal", torch.ones(tgt_len, tgt_len, dtype=torch.bool).triu(1), persistent=False)

    def forward(self, src, tgt, src_padding, tgt_padding):
        hidden = self.transformer(
            self.src_embed(src), self.tgt_embed(tgt), tgt_mask=self.causal, tgt_is_causal=True,
            src_key_padding_mask=src_padding, tgt_key_padding_mask=tgt_padding, memory_key_padding_mask=src_padding,
        )
        return self.head(hidden)


def _token_loss(out, target):
    return nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), target.reshape(-1))


def build_transformer(batch: int, size: Size = SMALL) -> Case:
    tgt_len = max(2, size.seq // 2)
    model = Seq2Seq(size, tgt_len)
    src = torch.randint(0, VOCAB, (batch, size.seq))
    tgt = torch.randint(0, VOCAB, (batch, tgt_len))
    # Sequences of several lengths: in inference the encoder packs the source into a
    # nested tensor and returns zeros at its padded positions.
    src_padding = _padding_mask(batch, size.seq, [size.seq, size.seq - 3, 1])
    tgt_padding = _padding_mask(batch, tgt_len, [tgt_len, tgt_len - 1])
    target = torch.randint(0, VOCAB, (batch, tgt_len))
    # Inference under torch.inference_mode(), as serving code runs it: the decoder's
    # cross-attention takes views of projection weights made outside it.
    return Case(model, (src, tgt, src_padding, tgt_padding), target, _token_loss, inference_mode=True)


class AttentionClassifier(nn.Module):
    """Token embeddings through one nn.MultiheadAttention self-attention block with a key
    padding mask, mean-pooled into class logits; returns the logits and the attention
    weights averaged over heads."""

    def __init__(self, size: Size, classes: int = 5):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, size.width)
        self.attn = nn.MultiheadAttention(size.width, size.heads, dropout=0.0, batch_first=True)
        self.norm = nn.LayerNorm(size.width)
        self.head = nn.Linear(size.width, classes)

    def forward(self, tokens, padding):
        x = self.embed(tokens)
        attended, weights = self.attn(x, x, x, key_padding_mask=padding)
        x = self.norm(x + attended)
        keep = (~padding).unsqueeze(-1).to(x.dtype)
        pooled = (x * keep).sum(1) / keep.sum(1)
        return self.head(pooled), weights


def build_attention_classifier(batch: int, size: Size = SMALL) -> Case:
    model = AttentionClassifier(size)
    tokens = torch.randint(0, VOCAB, (batch, size.seq))
    padding = _padding_mask(batch, size.seq, [size.seq, size.seq // 2, 2])
    target = torch.randint(0, 5, (batch,))
    # Inference under torch.inference_mode(), where nn.MultiheadAttention takes its fast path.
    return Case(model, (tokens, padding), target, lambda out, t: nn.functional.cross_entropy(out[0], t),
                inference_mode=True)
