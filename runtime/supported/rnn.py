"""Recurrent layers. _pack_padded_sequence (nn.utils.rnn.pack_padded_sequence): its
output's shape, and the `batch_sizes` it returns on the CPU, come from the values of
`lengths`, a CPU tensor PyTorch requires, so they are read on the host; the rows are
gathered on our device by one node (pack_padded_rows), in eager mode and while tracing.
nn.LSTM's layers run whole (Note [Whole LSTM layers])."""

from __future__ import annotations

import numpy as np
import torch

from ...shape_fns.common import scalar_type_name
from ...shape_fns.rnn import ONEDNN_LSTM, lstm_runs_whole_layers, pack_padded_rows_output_shape
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


# Note [Whole LSTM layers]
# nn.LSTM calls aten::lstm, which PyTorch decomposes above every backend into its cells:
# on our device one `_thnn_fused_lstm_cell` per step, plus its backward op per step in
# training. XLA then fuses the cell state's gradient, a chain of pointwise ops running
# through all steps, into every step's fusion, so the backward's work grows with the
# square of the sequence: the zoo's medium LSTM LM (64 steps, width 256, batch 16) took
# 215 ms per compiled SGD step, 5.2x PyTorch CPU, fusions of 1000 ops each. On our
# device the layers are instead run whole, as the CPU's oneDNN kernel is: one
# `mkldnn_rnn_layer` per layer and direction (a scan over time, lowerings/rnn.py),
# whose backward op PyTorch's autograd formula calls (75 ms, 1.9x). The kernel stands
# at our device's autograd key, so autograd records the layers' own backward; under
# inference mode, which skips that key, the cells run as before. Where the layer op
# does not apply (float16, float64, projections) the cells run too.

_LIBRARY: list[torch.library.Library] = []


def install_whole_lstm_layers() -> None:
    """Run nn.LSTM's layers whole on our device (Note [Whole LSTM layers])."""
    if not _LIBRARY:
        lib = torch.library.Library("aten", "IMPL")
        lib.impl("lstm.input", lstm_whole_layers, "AutogradPrivateUse1")
        _LIBRARY.append(lib)


def lstm_whole_layers(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    """aten::lstm.input on our device (Note [Whole LSTM layers])."""
    h0, c0 = hx
    if input.dim() != 3 or not lstm_runs_whole_layers(input.dtype, h0.size(2), c0.size(2)):
        return torch.ops.aten.lstm.input._op_dk(torch._C.DispatchKey.CompositeImplicitAutograd, input, hx, params,
                                                has_biases, num_layers, dropout, train, bidirectional, batch_first)
    directions = 2 if bidirectional else 1
    per_layer = 4 if has_biases else 2
    x = input.transpose(0, 1) if batch_first else input
    last_h, last_c = [], []
    for layer in range(num_layers):
        if layer and dropout and train:
            x = torch.nn.functional.dropout(x, dropout, training=True)
        outputs = []
        for direction in range(directions):
            k = layer * directions + direction
            w_ih, w_hh, *biases = params[k * per_layer:(k + 1) * per_layer]
            if not has_biases:  # the layer op adds two biases, read only when has_biases
                biases = [w_ih.new_zeros(w_ih.size(0))] * 2
            out, h, c, _ = torch.ops.aten.mkldnn_rnn_layer(
                x, w_ih, w_hh, *biases, h0[k], c0[k], direction == 1, [], ONEDNN_LSTM, h0.size(2), 1,
                has_biases, False, False, train)
            outputs.append(out)
            last_h.append(h)
            last_c.append(c)
        x = outputs[0] if directions == 1 else torch.cat(outputs, -1)
    return x.transpose(0, 1) if batch_first else x, torch.stack(last_h), torch.stack(last_c)
