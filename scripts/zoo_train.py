"""Train a model of the zoo (scripts/zoo) for a few steps: a plain PyTorch script, with no
import of xla_native_functions, as a user would write it. It runs on PyTorch CPU as it
is, and is what `python -m xla_native_functions.analyze` runs in its tests and in
docs/analyze.md:

    python scripts/zoo_train.py mlp --steps 3
    python -m xla_native_functions.analyze scripts/zoo_train.py bert --steps 2
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from zoo import ADAMW_LR, MODELS, SGD_LR, SIZES  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", choices=sorted(MODELS))
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--batch", type=int, default=None, help="default: the size's batch")
    parser.add_argument("--optimizer", choices=("sgd", "adamw"), default="sgd")
    args = parser.parse_args()

    torch.manual_seed(0)
    spec, size = MODELS[args.model], SIZES[args.size]
    batch = args.batch or size.batch
    case = spec.build(batch, size=size)
    model = case.model
    model.train()
    if args.optimizer == "sgd":
        optimizer = torch.optim.SGD(model.parameters(), lr=SGD_LR)
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=ADAMW_LR)
    for step in range(args.steps):
        optimizer.zero_grad()
        out = model(*case.inputs, **(case.kwargs or {}))
        loss = case.loss_fn(out, case.target)
        loss.backward()
        optimizer.step()
        print(f"step {step}: loss {loss.item():.5f}")


if __name__ == "__main__":
    main()
