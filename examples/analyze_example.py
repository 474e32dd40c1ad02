"""A small masked-token model trained for a few steps: plain PyTorch, with no import of
xla_native_functions. docs/analyze.md shows what

    python -m xla_native_functions.analyze --steps 3 examples/analyze_example.py

reports for it: two of its operators are not lowered (`torch.isin` with a scalar, and
`torch.poisson`, which it uses for noise), and the analysis finds both in one run, at
their lines, while the script trains on.
"""

import torch
from torch import nn

PAD = 0


class Encoder(nn.Module):
    def __init__(self, vocab: int = 32, width: int = 16):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.mix = nn.Sequential(nn.Linear(width, width), nn.GELU(), nn.LayerNorm(width))
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        padding = torch.isin(tokens, PAD)  # a mask of the padding tokens
        h = self.embed(tokens)
        h = h + 0.01 * torch.poisson(torch.ones_like(h))  # count noise on the embeddings
        h = self.mix(h).masked_fill(padding.unsqueeze(-1), 0.0)
        return self.head(h)


def main() -> None:
    torch.manual_seed(0)
    model = Encoder()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(5):
        tokens = torch.randint(0, 32, (4, 12))
        logits = model(tokens)
        loss = nn.functional.cross_entropy(logits.reshape(-1, 32), tokens.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step}: loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
