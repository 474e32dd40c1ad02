"""Mixed precision's gradient unscaling (torch.amp.GradScaler.unscale_): each gradient
times the inverse scale, and a flag set where any gradient holds an inf or a NaN."""

from __future__ import annotations

import torch

from ...shape_fns.amp import check_scaling_tensor
from ...shape_fns.common import scalar_type_name
from ..exec.registry import handler
from .foreach import each, impl__foreach_norm_Scalar

_aten = torch.ops.aten


def impl__amp_foreach_non_finite_check_and_unscale(self, found_inf, inv_scale):
    check_scaling_tensor("found_inf", found_inf, torch.float32)
    check_scaling_tensor("inv_scale", inv_scale, torch.float32)
    for g in self:
        if not g.dtype.is_floating_point:
            raise NotImplementedError(
                f"\"_amp_foreach_non_finite_check_and_unscale_cpu\" not implemented for '{scalar_type_name(g.dtype)}'"
            )
    checked = [g for g in self if g.numel()]
    if not checked:
        return [], handler(_aten.clone.default)(found_inf)
    # The largest magnitude of each gradient is inf or NaN exactly where the gradient has
    # one (a sum of squares could overflow); in float64, which every finite value fits.
    largest = handler(_aten.stack.default)(impl__foreach_norm_Scalar(checked, float("inf"), dtype=torch.float64))
    all_finite = handler(_aten.all.default)(handler(_aten.lt.Scalar)(largest, float("inf")))  # NaN < inf is False
    found = handler(_aten.where.self)(all_finite, found_inf, handler(_aten.ones_like.default)(found_inf))
    return each("amp_unscale", [(g, inv_scale) for g in self]), found
