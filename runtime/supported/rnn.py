"""_pack_padded_sequence (nn.utils.rnn.pack_padded_sequence): its output's shape, and
the `batch_sizes` it returns on the CPU, come from the values of `lengths`, a CPU tensor
PyTorch requires, so they are read on the host; the rows are gathered on our device by
one node (pack_padded_rows), in eager mode and while tracing."""

from __future__ import annotations

import numpy as np
import torch

from ...shape_fns.common import scalar_type_name
from ...shape_fns.rnn import pack_padded_rows_output_shape
from ..core.convert import host_tensor
from ..exec.eager import run_node
from ..exec.registry import node


def impl__pack_padded_sequence(input, lengths, batch_first):
    if batch_first and input.dim() < 2:
        pack_padded_rows_output_shape(input, (), batch_first)  # PyTorch swaps the first two dimensions first
    if lengths.dim() != 1 or lengths.device.type != "cpu" or lengths.dtype != torch.int64:
        raise RuntimeError(
            f"'lengths' argument should be a 1D CPU int64 tensor, but got {lengths.dim()}D "
            f"{lengths.device} {scalar_type_name(lengths.dtype)} tensor"
        )
    with torch._C._DisableTorchDispatch():
        values = tuple(int(n) for n in lengths.tolist())
    data = run_node(node("pack_padded_rows"), (input, values, bool(batch_first)))  # checks the lengths
    counts = [sum(1 for n in values if n > t) for t in range(values[0])]
    return data, host_tensor(np.asarray(counts, np.int64))
