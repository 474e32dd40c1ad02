"""Lowerings of mixed precision's gradient scaling (torch.amp.GradScaler): unscaling a
gradient and updating the scale, computed in the precision PyTorch's kernels use."""

from __future__ import annotations

import jax.numpy as jnp


def lower_amp_unscale(self, inv_scale):
    compute = jnp.float64 if self.dtype == jnp.float64 else jnp.float32
    return (self.astype(compute) * inv_scale.reshape(()).astype(compute)).astype(self.dtype)


def lower__amp_update_scale(self, growth_tracker, found_inf, scale_growth_factor, scale_backoff_factor,
                            growth_interval):
    """(the new scale, the new count of steps since it last changed): backed off after a
    step with non-finite gradients, grown after `growth_interval` steps without (unless
    the grown scale overflows float32), and the count reset whenever either is due."""
    found = found_inf != 0
    successful = growth_tracker + 1
    due = successful == growth_interval
    scale = self.astype(jnp.float64)
    grown = (scale * scale_growth_factor).astype(jnp.float32)
    backed_off = (scale * scale_backoff_factor).astype(jnp.float32)
    new_scale = jnp.where(found, backed_off, jnp.where(due & jnp.isfinite(grown), grown, self))
    new_tracker = jnp.where(found | due, jnp.zeros_like(growth_tracker), successful)
    return new_scale, new_tracker
