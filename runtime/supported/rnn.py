"""Recurrent layers. _pack_padded_sequence (nn.utils.rnn.pack_padded_sequence): its
output's shape, and the `batch_sizes` it returns on the CPU, come from the values of
`lengths`, a CPU tensor PyTorch requires, so they are read on the host; the rows are
gathered on our device by one node (pack_padded_rows), in eager mode and while tracing.
nn.LSTM's layers run whole (Note [Whole LSTM layers]), and so do nn.GRU's in eager mode
(Note [Whole GRU layers])."""

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
# on our device one `_thnn_fused_gru_cell` per step, each a few eager ops (and its
# backward op per step in training), and with a packed sequence (the batch shrinking as
# sequences end) ops of a new shape at every step, each compiled anew: the zoo's medium
# GRU classifier (bidirectional, packed, 64 steps) took 94 ms per eager inference, 10x
# PyTorch CPU, with 170 executables, and 0.4 s per SGD step, with 448. In eager mode
# each layer and direction runs instead as one `gru_layer` node, a loop over time of the
# same fused cell (lowerings/rnn.py), masked where a packed sequence has ended; in
# training, through `_GRULayer`, an autograd.Function whose backward is one
# `gru_layer_backward` node (the loop's vjp): 15 ms inference and a 98 ms SGD step
# (1.5x PyTorch), 17 and 180 executables. A backward that is itself recorded
# (create_graph=True, for a double backward) recomputes the layer with the cells
# instead, which autograd differentiates. A compile() trace keeps the cells, which XLA
# runs faster there (the batch shrinks with the packed sequence's steps, and no loop
# runs between them: the classifier's inference 0.9x the time of the layers' loops), and
# so do float16 and bfloat16, whose cells round the gates' products, which the layer's
# products would not.
_GRU_LAYER_DTYPES = (torch.float32, torch.float64)


def _gru_cells(x, w_ih, w_hh, b_ih, b_hh, h0, reverse, batch_sizes):
    """One GRU layer and direction as its cells, step by step, as PyTorch decomposes it:
    (output, last hidden state). Packed: step t holds the first batch_sizes[t] rows."""
    gates = torch.nn.functional.linear(x, w_ih)
    steps = len(batch_sizes) if batch_sizes else x.size(0)
    starts = np.cumsum((0,) + tuple(batch_sizes)).tolist()  # of each step's packed rows
    h, outputs = h0, [None] * steps
    for t in reversed(range(steps)) if reverse else range(steps):
        rows = batch_sizes[t] if batch_sizes else h0.size(0)
        step_gates = gates[starts[t]:starts[t + 1]] if batch_sizes else gates[t]
        state = h[:rows] if batch_sizes else h
        new, _ = torch.ops.aten._thnn_fused_gru_cell(step_gates, torch.nn.functional.linear(state, w_hh), state,
                                                     b_ih, b_hh)
        outputs[t] = new
        h = torch.cat([new, h[rows:]]) if batch_sizes and rows < h.size(0) else new
    return torch.cat(outputs) if batch_sizes else torch.stack(outputs), h


class _GRULayer(torch.autograd.Function):
    """gru_layer with gru_layer_backward as its derivative (Note [Whole GRU layers])."""

    @staticmethod
    def forward(ctx, x, w_ih, w_hh, b_ih, b_hh, h0, reverse, batch_sizes):
        ctx.save_for_backward(x, w_ih, w_hh, b_ih, b_hh, h0)
        ctx.reverse, ctx.batch_sizes = reverse, batch_sizes
        return run_node(node("gru_layer"), (x, w_ih, w_hh, b_ih, b_hh, h0, reverse, batch_sizes))

    @staticmethod
    def backward(ctx, grad_output, grad_h):
        operands = ctx.saved_tensors
        if torch.is_grad_enabled():  # recorded: the cells' own derivatives, differentiable again
            needed = [t for t, need in zip(operands, ctx.needs_input_grad) if need]
            outputs = _gru_cells(*operands, ctx.reverse, ctx.batch_sizes)
            grads = iter(torch.autograd.grad(outputs, needed, (grad_output, grad_h), create_graph=True,
                                             allow_unused=True))
            return (*(next(grads) if need else None for need in ctx.needs_input_grad[:6]), None, None)
        grads = run_node(node("gru_layer_backward"), (*operands, grad_output, grad_h, ctx.reverse, ctx.batch_sizes))
        return (*(g if need else None for g, need in zip(grads, ctx.needs_input_grad)), None, None)


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
            out, h = _GRULayer.apply(x, w_ih, w_hh, *(biases or (None, None)), hx[k], direction == 1, batch_sizes)
            outputs.append(out)
            last.append(h)
        x = outputs[0] if directions == 1 else torch.cat(outputs, -1)
    return x, torch.stack(last)


def _runs_cells(dtype, hx) -> bool:
    """Whether nn.GRU keeps its cells (Note [Whole GRU layers])."""
    return context.trace is not None or dtype not in _GRU_LAYER_DTYPES or hx.dtype != dtype


def gru_whole_layers(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    """aten::gru.input on our device, at its autograd key and below it (under inference
    mode): Note [Whole GRU layers]."""
    if input.dim() != 3 or _runs_cells(input.dtype, hx):
        return decompose(torch.ops.aten.gru.input, (input, hx, params, has_biases, num_layers, dropout, train,
                                                    bidirectional, batch_first), {})
    x = input.transpose(0, 1) if batch_first else input
    out, h = _gru_layers(x, (), hx, params, has_biases, num_layers, dropout, train, bidirectional)
    return out.transpose(0, 1) if batch_first else out, h


def gru_whole_layers_packed(data, batch_sizes, hx, params, has_biases, num_layers, dropout, train, bidirectional):
    """aten::gru.data (a packed sequence) on our device, as gru_whole_layers."""
    if data.dim() != 2 or batch_sizes.device.type != "cpu" or _runs_cells(data.dtype, hx):
        return decompose(torch.ops.aten.gru.data, (data, batch_sizes, hx, params, has_biases, num_layers, dropout,
                                                   train, bidirectional), {})
    with torch._C._DisableTorchDispatch():
        sizes = tuple(int(n) for n in batch_sizes.tolist())
    return _gru_layers(data, sizes, hx, params, has_biases, num_layers, dropout, train, bidirectional)
