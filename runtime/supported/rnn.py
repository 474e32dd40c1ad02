"""Recurrent layers. _pack_padded_sequence (nn.utils.rnn.pack_padded_sequence): its
output's shape, and the `batch_sizes` it returns on the CPU, come from the values of
`lengths`, a CPU tensor PyTorch requires, so they are read on the host; the rows are
gathered on our device by one node (pack_padded_rows), in eager mode and while tracing.
nn.LSTM's layers run whole (Note [Whole LSTM layers]), and so do nn.GRU's when no
gradient is recorded (Note [Whole GRU layers])."""

from __future__ import annotations

import numpy as np
import torch

from ...shape_fns.common import scalar_type_name
from ...shape_fns.rnn import ONEDNN_LSTM, lstm_runs_whole_layers, pack_padded_rows_output_shape
from ..core.convert import host_tensor
from ..core.context import context
from ..core.inference import decompose
from ..exec.eager import run_node
from ..exec.registry import REGISTRY, node


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
# at our device's autograd key, so autograd records the layers' own backward, and is
# our dispatch's handler of aten::lstm under inference mode, which skips that key (a
# 2-layer nn.LSTM(256, 256), batch 16, 64 steps, eager under inference mode: 15.8 ms
# against 102 ms with the cells; PyTorch 8.3 ms). Where the layer op does not apply
# (float16, float64, projections) the cells run.

_LIBRARY: list[torch.library.Library] = []


def install_whole_rnn_layers() -> None:
    """Run nn.LSTM's and nn.GRU's layers whole on our device (Note [Whole LSTM layers],
    Note [Whole GRU layers])."""
    if not _LIBRARY:
        lib = torch.library.Library("aten", "IMPL")
        for op, kernel in ((torch.ops.aten.lstm.input, lstm_whole_layers), (torch.ops.aten.gru.input, gru_whole_layers),
                           (torch.ops.aten.gru.data, gru_whole_layers_packed)):
            lib.impl(op.__name__, kernel, "AutogradPrivateUse1")
            # Under inference mode, which skips autograd's keys, these composite ops reach
            # our dispatch instead (Note [Inference mode]); the manifest lists only ops
            # that reach a backend in every mode, so they are registered here.
            REGISTRY[op] = kernel
        _LIBRARY.append(lib)


def lstm_whole_layers(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    """aten::lstm.input on our device (Note [Whole LSTM layers])."""
    h0, c0 = hx
    if input.dim() != 3 or not lstm_runs_whole_layers(input.dtype, h0.size(2), c0.size(2)):
        return decompose(torch.ops.aten.lstm.input, (input, hx, params, has_biases, num_layers, dropout, train,
                                                     bidirectional, batch_first), {})
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


# Note [Whole GRU layers]
# nn.GRU calls aten::gru, which PyTorch decomposes above every backend into its cells:
# on our device one `_thnn_fused_gru_cell` per step, each a few eager ops, and with a
# packed sequence (the batch shrinking as sequences end) ops of a new shape at every
# step, each compiled anew: the zoo's medium GRU classifier (bidirectional, packed,
# 64 steps) took 94 ms per eager inference, 10x PyTorch CPU, with 170 executables.
# In eager mode, when no gradient is recorded (no_grad, inference_mode, or nothing
# requiring one), each layer and direction runs instead as one `gru_layer` node, a scan
# over time of the same fused cell (lowerings/rnn.py), masked where a packed sequence
# has ended: 14.5 ms, 1.6x, with 17 executables. PyTorch has no GRU layer op whose
# backward autograd could record, so a step that records gradients keeps the cells, and
# so does a compile() trace, where the cells are faster (`_runs_cells`). Float16 and
# bfloat16 keep them too: their cells round the gates' products, which the layer's
# products would not.
_GRU_LAYER_DTYPES = (torch.float32, torch.float64)


def _gru_layers(x, batch_sizes, hx, params, has_biases, num_layers, dropout, train, bidirectional):
    """nn.GRU's layers over a time-major or packed input: (output, last hidden states)."""
    directions = 2 if bidirectional else 1
    per_layer = 4 if has_biases else 2
    last = []
    for layer in range(num_layers):
        if layer and dropout and train:
            x = torch.nn.functional.dropout(x, dropout, training=True)
        outputs = []
        for direction in range(directions):
            k = layer * directions + direction
            w_ih, w_hh, *biases = params[k * per_layer:(k + 1) * per_layer]
            out, h = run_node(node("gru_layer"), (x, w_ih, w_hh, *(biases or (None, None)), hx[k], direction == 1,
                                                  batch_sizes))
            outputs.append(out)
            last.append(h)
        x = outputs[0] if directions == 1 else torch.cat(outputs, -1)
    return x, torch.stack(last)


def _runs_cells(*tensors) -> bool:
    """Whether nn.GRU keeps its cells (Note [Whole GRU layers]): when autograd records
    the step, or in a trace, where XLA runs the unrolled cells of the medium zoo GRU
    classifier's inference in 0.9x the time of its layers' loops (the batch shrinks
    with the packed sequence's steps, and no loop runs between them)."""
    return context.trace is not None or (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))


def gru_whole_layers(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    """aten::gru.input on our device, at its autograd key and below it (under inference
    mode): Note [Whole GRU layers]."""
    if (input.dim() != 3 or input.dtype not in _GRU_LAYER_DTYPES or hx.dtype != input.dtype
            or _runs_cells(input, hx, *params)):
        return decompose(torch.ops.aten.gru.input, (input, hx, params, has_biases, num_layers, dropout, train,
                                                    bidirectional, batch_first), {})
    x = input.transpose(0, 1) if batch_first else input
    out, h = _gru_layers(x, (), hx, params, has_biases, num_layers, dropout, train, bidirectional)
    return out.transpose(0, 1) if batch_first else out, h


def gru_whole_layers_packed(data, batch_sizes, hx, params, has_biases, num_layers, dropout, train, bidirectional):
    """aten::gru.data (a packed sequence) on our device, as gru_whole_layers."""
    if (data.dim() != 2 or data.dtype not in _GRU_LAYER_DTYPES or hx.dtype != data.dtype
            or batch_sizes.device.type != "cpu" or _runs_cells(data, hx, *params)):
        return decompose(torch.ops.aten.gru.data, (data, batch_sizes, hx, params, has_biases, num_layers, dropout,
                                                   train, bidirectional), {})
    with torch._C._DisableTorchDispatch():
        sizes = tuple(int(n) for n in batch_sizes.tolist())
    return _gru_layers(data, sizes, hx, params, has_biases, num_layers, dropout, train, bidirectional)
