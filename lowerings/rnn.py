"""The fused LSTM and GRU cells PyTorch calls for every device but the CPU (nn.LSTM,
nn.GRU, nn.LSTMCell, nn.GRUCell), and their backward ops, computed as PyTorch's CUDA
kernels compute them (aten/src/ATen/native/cuda/RNN.cu).

The cells take the two gate projections, `input @ W_ih^T` and `hx @ W_hh^T`, without
their biases, and return the new state with a `workspace` the backward op reads:
  LSTM: (rows, 4 * width) = [input, forget, cell, output] gate activations;
  GRU:  (rows, 5 * width) = [reset, update, new] gate activations, hx, and the hidden
        projection of the new gate with its bias (`hn + b_hn`).
The kernels walk the state in its own (rows, width) shape and read every (rows, k * width)
tensor in that layout, whatever its own 2-d shape: hence the reshapes. Float16 and
bfloat16 compute in float32 and round each stored value, as the kernels do.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..shape_fns.rnn import GRU_GATES, LSTM_GATES
from .common import opmath


def _gates(x, rows, count, width):
    """A (rows, count * width)-element gate tensor as (rows, count, width), in float32 at least."""
    return opmath(x).reshape(rows, count, width)


def _bias(bias, count, width):
    """A bias as (count, width): the kernels index it by the state's width."""
    return opmath(bias)[: count * width].reshape(count, width)


def lower__thnn_fused_lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    rows, width = cx.shape
    dtype = input_gates.dtype
    pre = _gates(input_gates, rows, LSTM_GATES, width) + _gates(hidden_gates, rows, LSTM_GATES, width)
    if input_bias is not None:  # without it the kernel ignores hidden_bias too
        pre = pre + _bias(input_bias, LSTM_GATES, width) + _bias(hidden_bias, LSTM_GATES, width)
    ig = lax.logistic(pre[:, 0])
    fg = lax.logistic(pre[:, 1])
    cg = jnp.tanh(pre[:, 2])
    og = lax.logistic(pre[:, 3])
    cy = fg * opmath(cx) + ig * cg
    hy = og * jnp.tanh(cy)
    workspace = jnp.stack([ig, fg, cg, og], axis=1).astype(dtype).reshape(input_gates.shape)
    return hy.astype(dtype), cy.astype(dtype), workspace


def lower__thnn_fused_lstm_cell_backward_impl(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    if grad_hy is None and grad_cy is None:
        return None, None, None
    rows, width = cx.shape
    dtype = workspace.dtype
    saved = _gates(workspace, rows, LSTM_GATES, width)
    ig, fg, cg, og = saved[:, 0], saved[:, 1], saved[:, 2], saved[:, 3]
    go = opmath(grad_hy) if grad_hy is not None else jnp.zeros((rows, width), ig.dtype)
    gc = opmath(grad_cy) if grad_cy is not None else jnp.zeros((rows, width), ig.dtype)
    tanh_cy = jnp.tanh(opmath(cy))
    grad_cell = go * og * (1 - tanh_cy * tanh_cy) + gc
    grad_gates = jnp.stack(
        [
            grad_cell * cg * (1 - ig) * ig,
            grad_cell * opmath(cx) * (1 - fg) * fg,
            grad_cell * ig * (1 - cg * cg),
            go * tanh_cy * (1 - og) * og,
        ],
        axis=1,
    )
    grad_gates = grad_gates.astype(dtype).reshape(workspace.shape)
    grad_cx = (grad_cell * fg).astype(dtype)
    grad_bias = jnp.sum(opmath(grad_gates), axis=0).astype(dtype) if has_bias else None
    return grad_gates, grad_cx, grad_bias


def lower__thnn_fused_gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    rows, width = hx.shape
    dtype = input_gates.dtype
    i = _gates(input_gates, rows, GRU_GATES, width)
    h = _gates(hidden_gates, rows, GRU_GATES, width)
    pre = i[:, :2] + h[:, :2]
    inew, hn = i[:, 2], h[:, 2]
    if input_bias is not None:  # without it the kernel ignores hidden_bias too
        b_i, b_h = _bias(input_bias, GRU_GATES, width), _bias(hidden_bias, GRU_GATES, width)
        pre = pre + b_i[:2] + b_h[:2]
        inew, hn = inew + b_i[2], hn + b_h[2]
    rg = lax.logistic(pre[:, 0])
    zg = lax.logistic(pre[:, 1])
    ng = jnp.tanh(inew + rg * hn)  # hn: the hidden projection of the new gate, with its bias
    hy = ng + zg * (opmath(hx) - ng)
    workspace = jnp.concatenate(
        [rg.astype(dtype), zg.astype(dtype), ng.astype(dtype), hx.astype(dtype), hn.astype(dtype)], axis=1
    )
    return hy.astype(dtype), workspace


def lower__thnn_fused_gru_cell_backward(grad_hy, workspace, has_bias):
    rows, width = grad_hy.shape
    dtype = workspace.dtype
    saved = opmath(workspace).reshape(rows, 5, width)
    rg, zg, ng, hx, hn = (saved[:, k] for k in range(5))
    go = opmath(grad_hy)
    grad_update = go * (hx - ng) * (1 - zg) * zg
    grad_hx = go * zg
    grad_new = go * (1 - zg) * (1 - ng * ng)
    grad_reset = grad_new * hn * (1 - rg) * rg
    grad_input_gates = jnp.concatenate([grad_reset, grad_update, grad_new], axis=1).astype(dtype)
    grad_hidden_gates = jnp.concatenate([grad_reset, grad_update, grad_new * rg], axis=1).astype(dtype)
    if has_bias:
        grad_input_bias = jnp.sum(opmath(grad_input_gates), axis=0).astype(dtype)
        grad_hidden_bias = jnp.sum(opmath(grad_hidden_gates), axis=0).astype(dtype)
    else:
        grad_input_bias = grad_hidden_bias = None
    return grad_input_gates, grad_hidden_gates, grad_hx.astype(grad_hy.dtype), grad_input_bias, grad_hidden_bias


def lower_pack_padded_rows(input, lengths, batch_first):
    """The data of `_pack_padded_sequence`: time step by time step, the rows of the
    sequences still running then (`lengths` sorted in decreasing order, a tuple).
    PyTorch slices the time axis up to each length, so a length past the input's end
    packs only the steps the input has."""
    steps = input.shape[1] if batch_first else input.shape[0]
    batch = len(lengths)
    index = [
        (b * steps + t) if batch_first else (t * batch + b)
        for t in range(min(lengths[0], steps))
        for b in range(sum(1 for n in lengths if n > t))
    ]
    flat = input.reshape((input.shape[0] * input.shape[1],) + input.shape[2:])
    return jnp.take(flat, jnp.asarray(index, dtype=jnp.int32), axis=0)


# ------------------------------------------------------------------ whole LSTM layers
# mkldnn_rnn_layer is one LSTM layer (oneDNN's kernel on the CPU). nn.LSTM's float32
# and bfloat16 layers run as this op on our device (Note [Whole LSTM layers] in
# runtime/supported/rnn.py) and reach the torch.compile backend as it (Note [LSTM
# layers under torch.compile] in runtime/frontends/dynamo.py). Here a layer is one
# scan over time.


# Note [Unrolled recurrent scans]
# XLA CPU pays for every iteration of a loop and fuses nothing across iterations, so the
# forward scans of whole LSTM and GRU layers run SCAN_UNROLL steps per iteration. At
# width 256, batch 16, 64 steps (pure JAX, one layer): an LSTM layer took 6.0 ms unrolled
# by 8, 5.9 by 16, 4.6 by 32 and 7.2 fully unrolled (compiling in 0.27, 0.42, 0.94 and
# 1.5 s); a GRU layer 11.5, 8.4, 6.1 and 6.9 ms. The zoo's medium LSTM LM under compile():
# inference 19.0 and 16.7 against 20.7 and 21.3 ms by 8, SGD step 58.9 and 57.1 against
# 61.3 and 62.7 ms. The LSTM backward's reverse scan did not gain from unrolling.
SCAN_UNROLL = 32


def _packed_positions(batch_sizes):
    """For a packed sequence (rows of step t: the first batch_sizes[t] sequences), the
    packed row of every (step, sequence) position, or the row count (a zero row) where
    the sequence has ended; and whether each position is running."""
    steps, batch = len(batch_sizes), batch_sizes[0]
    running = np.arange(batch)[None, :] < np.asarray(batch_sizes)[:, None]
    rows = np.full((steps, batch), sum(batch_sizes), np.int32)
    rows[running] = np.arange(sum(batch_sizes), dtype=np.int32)
    return rows, running


def _recurrent_scan(cell, input, weight_ih, weight_hh, state, reverse, batch_sizes, unroll, input_bias=None):
    """A recurrent layer over a time-major input, or a packed one (batch_sizes not
    empty): `cell(state, input_gates, hidden_gates)` gives the next state, whose first
    element (the hidden state) is the step's output and multiplies weight_hh. A packed
    sequence that has ended keeps its state. Returns (outputs, last state)."""
    x = input
    if batch_sizes:
        rows, running = _packed_positions(batch_sizes)
        x = jnp.concatenate([input, jnp.zeros((1, input.shape[1]), input.dtype)])[rows]  # (steps, batch, features)
    input_gates = jnp.einsum("tbi,gi->tbg", x, weight_ih)
    if input_bias is not None:
        input_gates = input_gates + input_bias
    # transposed once, outside the loop: XLA's product of (batch, width) by a transposed
    # operand inside it took 107 us a step at width 256, batch 16; by this one, 78 us
    weight_hh_t = weight_hh.T

    def step(state, inputs):
        gates, keep = inputs
        new = cell(state, gates, state[0] @ weight_hh_t)
        if keep is not None:
            new = tuple(jnp.where(keep[:, None], n, old) for n, old in zip(new, state))
        return new, new[0]

    keep = jnp.asarray(running) if batch_sizes else None
    state, outputs = lax.scan(step, tuple(state), (input_gates, keep), reverse=reverse, unroll=unroll)
    if batch_sizes:
        outputs = outputs.reshape(-1, outputs.shape[-1])[np.flatnonzero(running.reshape(-1))]
    return outputs, state


def _activated_gates(gates):
    """The input, forget, cell and output gates' activations of (..., 4 * width)
    pre-activations."""
    gates = gates.reshape(gates.shape[:-1] + (LSTM_GATES, gates.shape[-1] // LSTM_GATES))
    i, f, g, o = (gates[..., k, :] for k in range(LSTM_GATES))
    return lax.logistic(i), lax.logistic(f), jnp.tanh(g), lax.logistic(o)


def _lstm_layer(input, weight_ih, weight_hh, bias, hx, cx, reverse):
    """One LSTM layer over a time-major sequence: (outputs, last h, last c)."""
    def cell(state, input_gates, hidden_gates):
        i, f, g, o = _activated_gates(input_gates + hidden_gates)
        c = f * state[1] + i * g
        return o * jnp.tanh(c), c

    outputs, (h, c) = _recurrent_scan(cell, input, weight_ih, weight_hh, (hx, cx), reverse, (), SCAN_UNROLL, bias)
    return outputs, h, c


def _layer_operands(input, weight0, weight1, weight2, weight3, hx_, cx_, hidden_size, has_biases):
    batch = input.shape[1]
    bias = opmath(weight2) + opmath(weight3) if has_biases else jnp.zeros((LSTM_GATES * hidden_size,), jnp.float32)
    return (opmath(input), opmath(weight0), opmath(weight1), bias,
            opmath(hx_).reshape(batch, hidden_size), opmath(cx_).reshape(batch, hidden_size))


def lower_mkldnn_rnn_layer(input, weight0, weight1, weight2, weight3, hx_, cx_, reverse, batch_sizes, mode,
                           hidden_size, num_layers, has_biases, bidirectional, batch_first, train):
    operands = _layer_operands(input, weight0, weight1, weight2, weight3, hx_, cx_, hidden_size, has_biases)
    outputs, h, c = _lstm_layer(*operands, reverse)
    # oneDNN's workspace is its own; the backward below recomputes what it needs
    workspace = jnp.zeros((0,), jnp.uint8)
    return (outputs.astype(input.dtype), h.reshape(hx_.shape).astype(hx_.dtype),
            c.reshape(cx_.shape).astype(cx_.dtype), workspace)


def _previous(states, first, reverse):
    """The state each step of a scan over time read: `first`, then the steps' results
    in the order the scan visits them."""
    if reverse:
        return jnp.concatenate([states[1:], first[None]])
    return jnp.concatenate([first[None], states[:-1]])


def _lstm_layer_backward(x, w_ih, w_hh, bias, h0, c0, outputs, d_outputs, d_h, d_c, reverse):
    """The gradients of `_lstm_layer`: Note [LSTM layer backward]."""
    h_prev = _previous(outputs, h0, reverse)
    i, f, g, o = _activated_gates(jnp.einsum("tbi,gi->tbg", x, w_ih) + jnp.einsum("tbh,gh->tbg", h_prev, w_hh)
                                  + bias)

    def cell_step(c, step):
        forget, written = step
        c = forget * c + written
        return c, c

    _, cells = lax.scan(cell_step, c0, (f, i * g), reverse=reverse)
    c_prev = _previous(cells, c0, reverse)
    tanh_c = jnp.tanh(cells)

    def step_back(carry, step):
        d_h_next, d_c_next = carry
        d_out, i, f, g, o, tanh_c, c_prev = step
        d_h = d_out + d_h_next
        d_c = d_c_next + d_h * o * (1 - tanh_c * tanh_c)
        d_gates = jnp.concatenate([d_c * g * i * (1 - i), d_c * c_prev * f * (1 - f), d_c * i * (1 - g * g),
                                   d_h * tanh_c * o * (1 - o)], axis=-1)
        return (d_gates @ w_hh, d_c * f), d_gates

    (d_h0, d_c0), d_gates = lax.scan(step_back, (d_h, d_c), (d_outputs, i, f, g, o, tanh_c, c_prev),
                                     reverse=not reverse)
    return (jnp.einsum("tbg,gi->tbi", d_gates, w_ih), jnp.einsum("tbg,tbi->gi", d_gates, x),
            jnp.einsum("tbg,tbh->gh", d_gates, h_prev), d_gates.sum((0, 1)), d_h0, d_c0)


# Note [LSTM layer backward]
# The backward of a layer computed as the vjp of its forward scan recomputes the forward
# (the per-step products included), then accumulates each weight's gradient step by
# step inside the reverse scan: 64 products over a batch of 16 rows where one product
# over all 1024 (step, row) pairs does the same work. Here the forward's outputs give
# every step's previous hidden state, so its gates come from two products over all
# steps; the cell states from an elementwise scan; and the reverse scan keeps only
# what is sequential, the product carrying the hidden state's gradient back one step.
# The weights', input's and bias's gradients are then products and a sum over all
# steps at once.


def lower_mkldnn_rnn_layer_backward(input, weight1, weight2, weight3, weight4, hx_, cx_tmp, output, hy_, cy_,
                                    grad_output, grad_hy, grad_cy, reverse, mode, hidden_size, num_layers,
                                    has_biases, train, bidirectional, batch_sizes, batch_first, workspace):
    if grad_output is None and grad_hy is None and grad_cy is None:
        return (None,) * 7
    x, w_ih, w_hh, bias, h0, c0 = _layer_operands(input, weight1, weight2, weight3, weight4, hx_, cx_tmp,
                                                   hidden_size, has_biases)
    batch = input.shape[1]

    def cotangent(g, shape):
        return jnp.zeros(shape, jnp.float32) if g is None else opmath(g).astype(jnp.float32).reshape(shape)

    grads = _lstm_layer_backward(
        x, w_ih, w_hh, bias, h0, c0, opmath(output).astype(jnp.float32),
        cotangent(grad_output, (input.shape[0], batch, hidden_size)),
        cotangent(grad_hy, (batch, hidden_size)), cotangent(grad_cy, (batch, hidden_size)), reverse)
    d_x, d_w_ih, d_w_hh, d_bias, d_h, d_c = (g.astype(jnp.float32) for g in grads)
    # oneDNN returns every gradient in float32, both biases' the same
    return d_x, d_w_ih, d_w_hh, d_bias, d_bias, d_h.reshape(hx_.shape), d_c.reshape(cx_tmp.shape)


# ------------------------------------------------------------------ whole layers in eager mode
# nn.GRU's layers, and nn.LSTM's over packed sequences, in eager mode (Note [Whole
# recurrent layers in eager mode] in runtime/supported/rnn.py): one scan over time of the
# fused cell's formula, masked where a packed sequence has ended, and its vjp.


def _fused_cell_layer(kind, input, weight_ih, weight_hh, bias_ih, bias_hh, state, reverse, batch_sizes, unroll):
    """A GRU ("gru", state (h,)) or LSTM ("lstm", state (h, c)) layer stepping with the
    fused cell above: (outputs, *last state)."""
    def cell(state, input_gates, hidden_gates):
        if kind == "gru":
            return lower__thnn_fused_gru_cell(input_gates, hidden_gates, state[0], bias_ih, bias_hh)[:1]
        return lower__thnn_fused_lstm_cell(input_gates, hidden_gates, state[1], bias_ih, bias_hh)[:2]

    outputs, state = _recurrent_scan(cell, input, weight_ih, weight_hh, state, reverse, batch_sizes, unroll)
    return outputs, *state


def _fused_cell_layer_backward(kind, input, weight_ih, weight_hh, bias_ih, bias_hh, state, output_grads, reverse,
                               batch_sizes):
    """The vjp of _fused_cell_layer: its forward loop again, then the reverse loop, neither
    unrolled (Note [Unrolled recurrent scans]: the medium GRU layer's backward took 25.9
    ms not unrolled, 24-25 ms by 8 and 27 ms by 32, compiling in 0.5, 1.4 and 5.7 s).
    The gradients of input, weights, biases (None without biases) and state."""
    biased = bias_ih is not None

    def layer(x, w_ih, w_hh, *rest):
        biases, start = (rest[:2], rest[2:]) if biased else ((None, None), rest)
        return _fused_cell_layer(kind, x, w_ih, w_hh, *biases, start, reverse, batch_sizes, 1)

    primals = (input, weight_ih, weight_hh) + ((bias_ih, bias_hh) if biased else ()) + tuple(state)
    _, vjp = jax.vjp(layer, *primals)
    grads = vjp(tuple(g.astype(t.dtype) for g, t in zip(output_grads, (input, *state))))
    d_biases = grads[3:5] if biased else (None, None)
    return (*grads[:3], *d_biases, *grads[5 if biased else 3:])


def lower_gru_layer(input, weight_ih, weight_hh, bias_ih, bias_hh, hx, reverse, batch_sizes):
    return _fused_cell_layer("gru", input, weight_ih, weight_hh, bias_ih, bias_hh, (hx,), reverse, batch_sizes,
                             SCAN_UNROLL)


def lower_gru_layer_backward(input, weight_ih, weight_hh, bias_ih, bias_hh, hx, grad_output, grad_hy, reverse,
                             batch_sizes):
    return _fused_cell_layer_backward("gru", input, weight_ih, weight_hh, bias_ih, bias_hh, (hx,),
                                      (grad_output, grad_hy), reverse, batch_sizes)


def lower_lstm_layer(input, weight_ih, weight_hh, bias_ih, bias_hh, hx, cx, reverse, batch_sizes):
    return _fused_cell_layer("lstm", input, weight_ih, weight_hh, bias_ih, bias_hh, (hx, cx), reverse, batch_sizes,
                             SCAN_UNROLL)


def lower_lstm_layer_backward(input, weight_ih, weight_hh, bias_ih, bias_hh, hx, cx, grad_output, grad_hy, grad_cy,
                              reverse, batch_sizes):
    return _fused_cell_layer_backward("lstm", input, weight_ih, weight_hh, bias_ih, bias_hh, (hx, cx),
                                      (grad_output, grad_hy, grad_cy), reverse, batch_sizes)
