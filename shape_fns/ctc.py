"""Shape functions of the CTC loss, with the CPU kernel's argument checks."""

from __future__ import annotations

import torch

from .common import TensorMeta
from .common import scalar_type_name

_WHERE = " (while checking arguments for ctc_loss_allocate_outputs)"


def _check_ctc(log_probs, targets, input_lengths, target_lengths, blank):
    if log_probs.ndim != 3:
        raise RuntimeError(
            f"Expected 3-dimensional tensor, but got {log_probs.ndim}-dimensional tensor for argument #1 "
            f"'log_probs'{_WHERE}"
        )
    T, N, C = log_probs.shape
    if not 0 <= blank < C:
        raise RuntimeError("blank must be in label range")
    if len(input_lengths) != N:
        raise RuntimeError("input_lengths must be of size batch_size")
    if len(target_lengths) != N:
        raise RuntimeError("target_lengths must be of size batch_size")
    if targets.dtype not in (torch.int32, torch.int64):
        raise RuntimeError(
            f"Expected tensor for argument #2 'targets' to have scalar type Long; but got "
            f"torch.{scalar_type_name(targets.dtype)}Tensor instead{_WHERE}"
        )
    for n in target_lengths:
        if n < 0:
            raise RuntimeError(f"Expected target_lengths to have value at least 0, but got value {n}{_WHERE}")
    for n in input_lengths:
        if n < 0:
            raise RuntimeError(f"Expected input_lengths to have value at least 0, but got value {n}{_WHERE}")
        if n > T:
            raise RuntimeError(f"Expected input_lengths to have value at most {T}, but got value {n}{_WHERE}")
    max_target = max(target_lengths, default=0)
    if targets.ndim == 1:
        if targets.shape[0] != sum(target_lengths):
            raise RuntimeError(
                f"Expected tensor to have size {sum(target_lengths)} at dimension 0, but got size {targets.shape[0]} "
                f"for argument #2 'targets'{_WHERE}"
            )
    elif targets.shape[1] < max_target:
        raise RuntimeError(
            f"Expected tensor to have size at least {max_target} at dimension 1, but got size {targets.shape[1]} "
            f"for argument #2 'targets'{_WHERE}"
        )
    return T, N, max_target


def _ctc_loss_output_shape(log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    T, N, max_target = _check_ctc(log_probs, targets, input_lengths, target_lengths, blank)
    return TensorMeta((N,), log_probs.dtype), TensorMeta((N, T, 2 * max_target + 1), log_probs.dtype)


def _ctc_loss_backward_output_shape(
    grad, log_probs, targets, input_lengths, target_lengths, neg_log_likelihood, log_alpha, blank, zero_infinity=False
):
    _check_ctc(log_probs, targets, input_lengths, target_lengths, blank)
    return TensorMeta(log_probs.shape, log_probs.dtype)
