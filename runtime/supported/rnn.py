"""Recurrent layers. _pack_padded_sequence (nn.utils.rnn.pack_padded_sequence): its
output's shape, and the `batch_sizes` it returns on the CPU, come from the values of
`lengths`, a CPU tensor PyTorch requires, so they are read on the host; the rows are
gathered on our device by one node (pack_padded_rows), in eager mode and while tracing.
nn.LSTM's layers run whole (Note [Whole LSTM layers]), and so do nn.GRU's, and nn.LSTM's
over packed sequences, in eager mode (Note [Whole recurrent layers in eager mode])."""

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
    Note [Whole recurrent layers in eager mode])."""
    if not _LIBRARY:
        lib = torch.library.Library("aten", "IMPL")
        for op, kernel in ((torch.ops.aten.lstm.input, lstm_whole_layers),
                           (torch.ops.aten.lstm.data, lstm_whole_layers_packed),
                           (torch.ops.aten.gru.input, gru_whole_layers),
                           (torch.ops.aten.gru.data, gru_whole_layers_packed)):
            lib.impl(op.__name__, kernel, "AutogradPrivateUse1")
            # Under inference mode, which skips autograd's keys, these composite ops reach
            # our dispatch instead (Note [Inference mode]); the manifest lists only ops
            # that reach a backend in every mode, so they are registered here.
            REGISTRY[op] = kernel
        _LIBRARY.append(lib)


def _time_major(input, batch_first):
    """The (time, batch, features) input of a layer, with PyTorch's check of its length."""
    x = input.transpose(0, 1) if batch_first else input
    if x.size(0) == 0:
        raise RuntimeError("Expected sequence length to be larger than 0 in RNN")
    return x


def lstm_whole_layers(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    """aten::lstm.input on our device (Note [Whole LSTM layers])."""
    h0, c0 = hx
    if input.dim() != 3 or not lstm_runs_whole_layers(input.dtype, h0.size(2), c0.size(2)):
        return decompose(torch.ops.aten.lstm.input, (input, hx, params, has_biases, num_layers, dropout, train,
                                                     bidirectional, batch_first), {})

    def layer(x, k, w_ih, w_hh, biases, reverse):
        if not has_biases:  # the layer op adds two biases, read only when has_biases
            biases = [w_ih.new_zeros(w_ih.size(0))] * 2
        out, h, c, _ = torch.ops.aten.mkldnn_rnn_layer(x, w_ih, w_hh, *biases, h0[k], c0[k], reverse, [], ONEDNN_LSTM,
                                                       h0.size(2), 1, has_biases, False, False, train)
        return out, h, c

    out, h, c = _stacked_layers(layer, _time_major(input, batch_first), params, has_biases, num_layers, dropout,
                                train, bidirectional)
    return out.transpose(0, 1) if batch_first else out, h, c


def _stacked_layers(layer, x, params, has_biases, num_layers, dropout, train, bidirectional):
    """A recurrent module's layers, each direction's by `layer(x, k, w_ih, w_hh, biases,
    reverse)` -> (output, *last states), k counting layers and directions; dropout
    between layers in training: (output, *last states stacked)."""
    directions = 2 if bidirectional else 1
    per_layer = 4 if has_biases else 2
    last = []
    for n in range(num_layers):
        if n and dropout and train:
            x = torch.nn.functional.dropout(x, dropout, training=True)
        outputs = []
        for direction in range(directions):
            k = n * directions + direction
            w_ih, w_hh, *biases = params[k * per_layer:(k + 1) * per_layer]
            out, *states = layer(x, k, w_ih, w_hh, biases, direction == 1)
            outputs.append(out)
            last.append(states)
        x = outputs[0] if directions == 1 else torch.cat(outputs, -1)
    return x, *(torch.stack(s) for s in zip(*last))


# Note [Whole recurrent layers in eager mode]
# nn.GRU calls aten::gru, which PyTorch decomposes above every backend into its cells:
# on our device one `_thnn_fused_gru_cell` per step, each a few eager ops (and its
# backward op per step in training), and with a packed sequence (the batch shrinking as
# sequences end) ops of a new shape at every step, each compiled anew: the zoo's medium
# GRU classifier (bidirectional, packed, 64 steps) took 94 ms per eager inference, 10x
# PyTorch CPU, with 170 executables, and 0.4 s per SGD step, with 448. In eager mode
# each layer and direction runs instead as one `gru_layer` node, a loop over time of the
# same fused cell (lowerings/rnn.py), masked where a packed sequence has ended; in
# training, through `_WholeLayer`, an autograd.Function whose backward is one
# `gru_layer_backward` node (the loop's vjp): 15 ms inference and a 98 ms SGD step
# (1.5x PyTorch), 17 and 180 executables. A backward that is itself recorded
# (create_graph=True, for a double backward) recomputes the layer with the cells
# instead, which autograd differentiates. A compile() trace keeps the cells, which XLA
# runs faster there (the batch shrinks with the packed sequence's steps, and no loop
# runs between them: the classifier's inference 0.9x the time of the layers' loops), and
# so do float16 and bfloat16, whose cells round the gates' products, which the layer's
# products would not. nn.LSTM over a packed sequence, which mkldnn_rnn_layer does not
# take, runs the same way (`lstm_layer`): a bidirectional nn.LSTM(256, 256), batch 16,
# 32 to 64 steps, eager: 22.6 ms inference and 96 ms forward and backward, against
# 108 and 344 ms with the cells (PyTorch: 13.7 and 85.6 ms).
_LAYER_DTYPES = (torch.float32, torch.float64)


def _cells(kind, x, w_ih, w_hh, b_ih, b_hh, *state, reverse, batch_sizes):
    """One GRU or LSTM layer and direction as its cells, step by step, as PyTorch
    decomposes it: (output, last states). Packed: step t holds the first batch_sizes[t]
    rows."""
    gates = torch.nn.functional.linear(x, w_ih)
    steps = len(batch_sizes) if batch_sizes else x.size(0)
    starts = np.cumsum((0,) + tuple(batch_sizes)).tolist()  # of each step's packed rows
    outputs = [None] * steps
    for t in reversed(range(steps)) if reverse else range(steps):
        rows = batch_sizes[t] if batch_sizes else x.size(1)
        step_gates = gates[starts[t]:starts[t + 1]] if batch_sizes else gates[t]
        running = [s[:rows] for s in state]
        hidden_gates = torch.nn.functional.linear(running[0], w_hh)
        if kind == "gru":
            new = torch.ops.aten._thnn_fused_gru_cell(step_gates, hidden_gates, running[0], b_ih, b_hh)[:1]
        else:
            new = torch.ops.aten._thnn_fused_lstm_cell(step_gates, hidden_gates, running[1], b_ih, b_hh)[:2]
        outputs[t] = new[0]
        state = [torch.cat([n, s[rows:]]) if rows < s.size(0) else n for n, s in zip(new, state)]
    return torch.cat(outputs) if batch_sizes else torch.stack(outputs), *state


class _WholeLayer(torch.autograd.Function):
    """A `gru_layer` or `lstm_layer` node, with its backward node as its derivative
    (Note [Whole recurrent layers in eager mode])."""

    @staticmethod
    def forward(ctx, kind, reverse, batch_sizes, *operands):
        ctx.save_for_backward(*operands)
        ctx.kind, ctx.reverse, ctx.batch_sizes = kind, reverse, batch_sizes
        return run_node(node(f"{kind}_layer"), (*operands, reverse, batch_sizes))

    @staticmethod
    def backward(ctx, *output_grads):
        operands, needs = ctx.saved_tensors, ctx.needs_input_grad[3:]
        if torch.is_grad_enabled():  # recorded: the cells' own derivatives, differentiable again
            outputs = _cells(ctx.kind, *operands, reverse=ctx.reverse, batch_sizes=ctx.batch_sizes)
            grads = iter(torch.autograd.grad(outputs, [t for t, need in zip(operands, needs) if need], output_grads,
                                             create_graph=True, allow_unused=True))
            grads = [next(grads) if need else None for need in needs]
        else:
            grads = run_node(node(f"{ctx.kind}_layer_backward"), (*operands, *output_grads, ctx.reverse,
                                                                    ctx.batch_sizes))
        return (None, None, None, *(g if need else None for g, need in zip(grads, needs)))


def _whole_layers(kind, x, batch_sizes, states, params, has_biases, num_layers, dropout, train, bidirectional):
    """nn.GRU's or nn.LSTM's layers over a time-major or packed input, each one
    _WholeLayer: the output and the last states, stacked (h for a GRU; h and c for an
    LSTM)."""
    def layer(x, k, w_ih, w_hh, biases, reverse):
        return _WholeLayer.apply(kind, reverse, batch_sizes, x, w_ih, w_hh, *(biases or (None, None)),
                                 *(s[k] for s in states))

    return _stacked_layers(layer, x, params, has_biases, num_layers, dropout, train, bidirectional)


def _runs_cells(dtype, states) -> bool:
    """Whether nn.GRU, or nn.LSTM over a packed sequence, keeps its cells (Note [Whole
    recurrent layers in eager mode])."""
    return context.trace is not None or dtype not in _LAYER_DTYPES or any(s.dtype != dtype for s in states)


def gru_whole_layers(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    """aten::gru.input on our device, at its autograd key and below it (under inference
    mode): Note [Whole recurrent layers in eager mode]."""
    if input.dim() != 3 or _runs_cells(input.dtype, (hx,)):
        return decompose(torch.ops.aten.gru.input, (input, hx, params, has_biases, num_layers, dropout, train,
                                                    bidirectional, batch_first), {})
    x = _time_major(input, batch_first)
    out, h = _whole_layers("gru", x, (), (hx,), params, has_biases, num_layers, dropout, train, bidirectional)
    return out.transpose(0, 1) if batch_first else out, h


def _batch_sizes(batch_sizes):
    with torch._C._DisableTorchDispatch():
        return tuple(int(n) for n in batch_sizes.tolist())


def gru_whole_layers_packed(data, batch_sizes, hx, params, has_biases, num_layers, dropout, train, bidirectional):
    """aten::gru.data (a packed sequence) on our device, as gru_whole_layers."""
    if data.dim() != 2 or batch_sizes.device.type != "cpu" or _runs_cells(data.dtype, (hx,)):
        return decompose(torch.ops.aten.gru.data, (data, batch_sizes, hx, params, has_biases, num_layers, dropout,
                                                   train, bidirectional), {})
    return _whole_layers("gru", data, _batch_sizes(batch_sizes), (hx,), params, has_biases, num_layers, dropout,
                         train, bidirectional)


def lstm_whole_layers_packed(data, batch_sizes, hx, params, has_biases, num_layers, dropout, train, bidirectional):
    """aten::lstm.data (a packed sequence) on our device, as gru_whole_layers_packed; the
    padded form takes mkldnn_rnn_layer (Note [Whole LSTM layers])."""
    h0, c0 = hx
    if (data.dim() != 2 or batch_sizes.device.type != "cpu" or h0.size(2) != c0.size(2)
            or _runs_cells(data.dtype, hx)):
        return decompose(torch.ops.aten.lstm.data, (data, batch_sizes, hx, params, has_biases, num_layers, dropout,
                                                    train, bidirectional), {})
    return _whole_layers("lstm", data, _batch_sizes(batch_sizes), hx, params, has_biases, num_layers, dropout, train,
                         bidirectional)
