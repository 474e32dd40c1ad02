"""torch.compile with the xla_native backend: a CPU model trains as usual, its forward
and backward graphs run on JAX/XLA. No import of xla_native_functions is needed: the
backend is found through its entry point.

    python examples/torch_compile_backend.py
"""

from __future__ import annotations

import torch
import torch.nn as nn


def main() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 4))
    compiled = torch.compile(model, backend="xla_native")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = torch.randn(128, 16), torch.randn(128, 4)
    for step in range(30):
        opt.zero_grad()
        loss = nn.functional.mse_loss(compiled(x), y)
        loss.backward()
        opt.step()
        if step % 10 == 0:
            print(f"step {step:3d}  loss {loss.item():.4f}")

    import xla_native_functions as xnf

    print(xnf.dynamo_report())


if __name__ == "__main__":
    main()
