"""Recurrent sequence models: an LSTM language model and a bidirectional GRU
classifier over sequences of different lengths (packed, unsorted)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

from .common import SMALL, Case, Size


class LSTMLanguageModel(nn.Module):
    """Embedding, a 2-layer LSTM and a linear layer predicting the next token."""

    def __init__(self, vocab: int, width: int, layers: int = 2):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.lstm = nn.LSTM(width, width, num_layers=layers, batch_first=True)
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens):
        out, _ = self.lstm(self.embed(tokens))
        return self.head(out)


class GRUClassifier(nn.Module):
    """A bidirectional GRU over the unpadded part of each sequence (packed, in any order
    of lengths); both directions' final states classify the sequence."""

    def __init__(self, vocab: int, width: int, classes: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, width, padding_idx=0)
        self.gru = nn.GRU(width, width, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * width, classes)

    def forward(self, tokens, lengths):
        packed = pack_padded_sequence(self.embed(tokens), lengths, batch_first=True, enforce_sorted=False)
        _, h = self.gru(packed)  # (2, batch, width), in the input's order of sequences
        return self.head(torch.cat([h[0], h[1]], dim=1))


def build_lstm_lm(batch: int, size: Size = SMALL) -> Case:
    vocab = 4 * size.width
    model = LSTMLanguageModel(vocab, size.width)
    tokens = torch.randint(0, vocab, (batch, size.seq + 1))

    def loss_fn(logits, target):
        return nn.functional.cross_entropy(logits.reshape(-1, vocab), target.reshape(-1))

    return Case(model, (tokens[:, :-1],), tokens[:, 1:], loss_fn)


def build_gru_classifier(batch: int, size: Size = SMALL) -> Case:
    vocab, classes = 4 * size.width, 4
    model = GRUClassifier(vocab, size.width, classes)
    gen = torch.Generator().manual_seed(1)
    # a Python list: pack_padded_sequence makes it the CPU tensor PyTorch requires
    lengths = torch.randint(size.seq // 2, size.seq + 1, (batch,), generator=gen)
    lengths[0] = size.seq // 2  # the shortest first: enforce_sorted=False reorders
    lengths[-1] = size.seq
    tokens = torch.randint(1, vocab, (batch, size.seq), generator=gen)
    tokens = tokens.masked_fill(torch.arange(size.seq)[None, :] >= lengths[:, None], 0)
    target = torch.randint(0, classes, (batch,), generator=gen)
    return Case(model, (tokens, lengths.tolist()), target, lambda out, t: nn.functional.cross_entropy(out, t))
