"""jax.vmap over a torch function: per-example outputs and per-example gradients.

    python examples/vmap_torch_function.py
"""

from __future__ import annotations

import jax
import numpy as np
import torch

import xla_native_functions as xnf


def score(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Written for one example: x is (features,), w is (features, classes)."""
    return torch.log_softmax(x.unsqueeze(0) @ w, dim=-1)[0, 0]


def main() -> None:
    torch.manual_seed(0)
    xs, w = torch.randn(8, 5), torch.randn(5, 3)
    fn, _ = xnf.jax_function(score)  # fn(params, x, w); params is {} for a plain function

    per_example = jax.vmap(lambda x: fn({}, x, xnf.to_jax(w)))(xnf.to_jax(xs))
    # per-example gradient with respect to w, one (5, 3) matrix per example
    grads = jax.jit(jax.vmap(jax.grad(lambda wj, x: fn({}, x, wj)), in_axes=(None, 0)))(xnf.to_jax(w), xnf.to_jax(xs))

    expected = torch.stack([score(x, w) for x in xs])
    np.testing.assert_allclose(np.asarray(per_example), expected.numpy(), rtol=1e-5, atol=1e-6)
    w_t = w.clone().requires_grad_(True)
    score(xs[3], w_t).backward()
    np.testing.assert_allclose(np.asarray(grads[3]), w_t.grad.numpy(), rtol=1e-5, atol=1e-6)
    print("per-example outputs", np.asarray(per_example).round(3))
    print("per-example gradient shape", grads.shape, "- matches torch autograd")


if __name__ == "__main__":
    main()
