"""native_batch_norm: in training mode it updates running_mean and running_var in
place, although its schema does not mark them as mutated, so it cannot be a generated
functional op. Its node computes the new running statistics as extra outputs, which are
then written into the buffers (eagerly, or as graph outputs while tracing)."""

from __future__ import annotations

import torch

from ..exec.first_call import run_node  # Note [First calls on PyTorch CPU]
from ..exec.mutation import write_inplace
from ..exec.registry import node


def impl_native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps):
    out, mean, invstd, new_mean, new_var = run_node(
        node("batch_norm_with_update"),
        (input, weight, bias, running_mean, running_var, bool(training), float(momentum), float(eps)),
    )
    if new_mean is not None:
        write_inplace(running_mean, new_mean)
    if new_var is not None:
        write_inplace(running_var, new_var)
    return out, mean, invstd


def impl__native_batch_norm_legit(input, weight, bias, running_mean, running_var, training, momentum, eps):
    # The same op with running statistics that are always given (and marked as written).
    return impl_native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps)


def impl__batch_norm_with_update(input, weight, bias, running_mean, running_var, momentum, eps):
    # The training-mode batch norm of torch.export and pre-dispatch graphs; the fourth
    # result is cuDNN's reserve space, empty on every other device.
    out, mean, invstd = impl_native_batch_norm(input, weight, bias, running_mean, running_var, True, momentum, eps)
    return out, mean, invstd, torch.empty(0, dtype=torch.uint8, device=input.device)
