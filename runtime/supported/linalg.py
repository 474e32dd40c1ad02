"""_linalg_check_errors: PyTorch's linalg functions report singular or non
positive-definite inputs through an `info` tensor and then call this op to raise.

Eagerly the info values are read on the host and checked by PyTorch's own CPU kernel,
so the exceptions and messages are PyTorch's. Inside a compiled program reading
`info` would end the trace on every linalg call, so there the check is skipped: the
results then hold NaN/inf where PyTorch would raise (use the *_ex functions and check
`info` to detect it)."""

from __future__ import annotations

import torch

from ...shape_fns.common import TensorMeta
from ...shape_fns.linalg_solve import lstsq_check
from ..core.context import context
from ..core.convert import X64, host_array, jax_to_cpu
from ..core.tensor import XlaTensor
from ..exec.eager import run_node, value
from ..exec.registry import handler, node


def impl__linalg_check_errors(info, api_name, *, is_matrix):
    if context.trace is not None:
        return None
    if isinstance(info, XlaTensor):
        with X64:
            info = jax_to_cpu(value(info))
    torch.ops.aten._linalg_check_errors(info, api_name, is_matrix=is_matrix)
    return None


def impl_cholesky(self, upper=False):
    # The deprecated torch.cholesky raises on a matrix that is not positive-definite,
    # like linalg.cholesky: the factorization plus the same info check.
    factor, info = handler(torch.ops.aten.linalg_cholesky_ex.default)(self, upper=upper)
    impl__linalg_check_errors(info, "cholesky", is_matrix=self.dim() == 2)
    return factor


def impl_linalg_lstsq(self, b, rcond=None, *, driver=None):
    driver = "gelsy" if driver is None else driver
    lstsq_check(TensorMeta(tuple(self.shape), self.dtype), TensorMeta(tuple(b.shape), b.dtype), driver)
    m, n = self.shape[-2:]
    residuals = m > n and driver != "gelsy"
    solution, res, rank, sv = run_node(node("linalg_lstsq_values"), (self, b, rcond, driver, residuals))
    if residuals and driver in ("gelsd", "gelss"):
        # Their residuals exist only when every matrix has full column rank: a shape
        # that depends on the values, so the ranks are read on the host.
        with X64:
            full = bool((jax_to_cpu(host_array(rank)) == n).all())
        if not full:
            res = handler(torch.ops.aten.new_zeros.default)(res, [0])
    return solution, res, rank, sv
