"""Train a torch model with an optax optimizer through jax.grad.

The module becomes a pure JAX function of (parameters, inputs); JAX differentiates
it and optax updates the parameters, all inside one jax.jit step. The trained
parameters are loaded back into the torch module at the end.

    python examples/train_optax.py
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
import torch
import torch.nn as nn

import xla_native_functions as xnf


def main(steps: int = 200) -> float:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 32), nn.Tanh(), nn.Linear(32, 1))
    fn, params = xnf.jax_function(model)

    # y = sin(3 x0) + x1^2 on random points
    x = torch.rand(256, 2) * 2 - 1
    y = torch.sin(3 * x[:, :1]) + x[:, 1:] ** 2
    xj, yj = xnf.to_jax(x), xnf.to_jax(y)

    optimizer = optax.adam(1e-2)
    opt_state = optimizer.init(params)

    def loss_fn(p, x, y):
        return jnp.mean((fn(p, x) - y) ** 2)

    @jax.jit
    def step(p, s, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(p, x, y)
        updates, s = optimizer.update(grads, s, p)
        return optax.apply_updates(p, updates), s, loss

    for i in range(steps):
        params, opt_state, loss = step(params, opt_state, xj, yj)
        if i % 50 == 0:
            print(f"step {i:4d}  loss {float(loss):.5f}")

    # Back into the torch module, then check it with PyTorch itself.
    model.load_state_dict({k: xnf.to_torch_tensor(v, device="cpu") for k, v in params.items()})
    with torch.no_grad():
        final = nn.functional.mse_loss(model(x), y).item()
    print(f"final loss (PyTorch CPU, trained weights): {final:.5f}")
    return final


if __name__ == "__main__":
    main()
