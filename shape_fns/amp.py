"""Shape functions of mixed precision's gradient scaling (lowerings/amp.py), with
PyTorch's checks of its arguments."""

from __future__ import annotations

import torch

from .common import TensorMeta


def check_scaling_tensor(name: str, t, dtype: torch.dtype) -> None:
    """GradScaler's one-element state: a scale, an inverse scale, a non-finite flag."""
    if t.numel() != 1:
        raise RuntimeError(f"{name} must be a 1-element tensor.")
    if t.dtype != dtype:
        raise RuntimeError(f"{name} must be {'an int' if dtype == torch.int32 else 'a float'} tensor.")


def amp_unscale_output_shape(self, inv_scale):
    return TensorMeta(tuple(self.shape), self.dtype)


def _amp_update_scale_output_shape(self, growth_tracker, found_inf, scale_growth_factor, scale_backoff_factor,
                                   growth_interval):
    check_scaling_tensor("current_scale", self, torch.float32)
    check_scaling_tensor("growth_tracker", growth_tracker, torch.int32)
    check_scaling_tensor("found_inf", found_inf, torch.float32)
    return TensorMeta(tuple(self.shape), torch.float32), TensorMeta(tuple(growth_tracker.shape), torch.int32)
