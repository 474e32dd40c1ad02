"""Shape functions of the fused LSTM and GRU cells and their backward ops, with the
argument checks of PyTorch's CUDA kernels (aten/src/ATen/native/cuda/RNN.cu), the only
kernels these ops have: PyTorch runs them for every device but the CPU."""

from __future__ import annotations

import torch

from .common import TensorMeta, scalar_type_name

# the hidden state's width times these is the width of a cell's saved workspace
LSTM_GATES = 4
GRU_GATES = 3
GRU_WORKSPACE_MULTIPLIER = 5

_FLOATING = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _arg(pos, name):
    return f"argument #{pos} '{name}'"


def _sizes(shape):
    return "[" + ", ".join(str(s) for s in shape) + "]"


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def _check_dim(where, t, pos, name, dim):
    if t.ndim != dim:
        raise RuntimeError(
            f"Expected {dim}-dimensional tensor, but got {t.ndim}-dimensional tensor for {_arg(pos, name)} "
            f"(while checking arguments for {where})"
        )


def _check_numel(where, t, pos, name, numel):
    if t.numel() != numel:
        raise RuntimeError(
            f"Expected tensor for {_arg(pos, name)} to have {numel} elements; but it actually has {t.numel()} "
            f"elements (while checking arguments for {where})"
        )


def _check_same_size(where, t1, pos1, name1, t2, pos2, name2):
    if t1.shape != t2.shape:
        raise RuntimeError(
            f"Expected tensor for {_arg(pos1, name1)} to have same size as tensor for {_arg(pos2, name2)}; but "
            f"{_sizes(t1.shape)} does not equal {_sizes(t2.shape)} (while checking arguments for {where})"
        )


def _check_size(where, t, pos, name, shape):
    _check_dim(where, t, pos, name, len(shape))
    if tuple(t.shape) != tuple(shape):
        raise RuntimeError(
            f"Expected tensor of size {_sizes(shape)}, but got tensor of size {_sizes(t.shape)} for "
            f"{_arg(pos, name)} (while checking arguments for {where})"
        )


def _check_dtypes(kernel, first, others):
    """The kernels run in the first tensor's floating dtype and read every other tensor
    as that type."""
    if first.dtype not in _FLOATING:
        raise NotImplementedError(f'"{kernel}" not implemented for \'{scalar_type_name(first.dtype)}\'')
    for name, t in others:
        if t is not None and t.dtype != first.dtype:
            raise RuntimeError(
                f"{kernel}: expected every tensor to have the dtype of the first, "
                f"{scalar_type_name(first.dtype)}, but {name} is {scalar_type_name(t.dtype)}; "
                f"cast it with .to({first.dtype})"
            )


def check_cell_sizes(where, input_gates, hidden_gates, input_bias, hidden_bias, factor, prev_hidden):
    """checkSizes of RNN.cu (`factor` gates per hidden unit: 4 for an LSTM, 3 for a GRU).
    The state only needs as many elements as the gates have per gate; the kernels walk it
    in its own shape, (rows, width), reading the gates as (rows, factor * width)."""
    _check_dim(where, input_gates, 1, "input_gates", 2)
    _check_same_size(where, input_gates, 1, "input_gates", hidden_gates, 2, "hidden_gates")
    gates_size = input_gates.shape[1]
    if input_bias is not None:
        _check_dim(where, input_bias, 3, "input_bias", 1)
        _check_numel(where, input_bias, 3, "input_bias", gates_size)
        if hidden_bias is None:
            raise RuntimeError(
                f"{where}: hidden_bias is None but input_bias is given; pass both biases or neither"
            )
        _check_same_size(where, input_bias, 3, "input_bias", hidden_bias, 4, "hidden_bias")
    _check_dim(where, prev_hidden, 5, "prev_hidden", 2)
    _check_numel(where, prev_hidden, 5, "prev_hidden", input_gates.shape[0] * gates_size // factor)
    if input_bias is not None and factor * prev_hidden.shape[1] > gates_size:
        # the kernels index the biases by the state's width: a wider state reads past them
        raise RuntimeError(
            f"{where}: prev_hidden of shape {_sizes(prev_hidden.shape)} is wider than the "
            f"{gates_size // factor} hidden units per gate of the biases; give it shape "
            f"[{input_gates.shape[0]}, {gates_size // factor}]"
        )


def _thnn_fused_lstm_cell_output_shape(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    check_cell_sizes("_thnn_fused_lstm_cell_cuda", input_gates, hidden_gates, input_bias, hidden_bias, LSTM_GATES, cx)
    _check_dtypes(
        "_thnn_fused_lstm_cell_cuda",
        input_gates,
        [("hidden_gates", hidden_gates), ("input_bias", input_bias), ("hidden_bias", hidden_bias), ("cx", cx)],
    )
    state = TensorMeta(tuple(cx.shape), cx.dtype)
    return state, state, TensorMeta(tuple(input_gates.shape), input_gates.dtype)


def _thnn_fused_lstm_cell_backward_impl_output_shape(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    if grad_hy is None and grad_cy is None:
        return None, None, None
    where = "fused_lstm_cell_backward"
    grad, pos, name = (grad_hy, 1, "grad_hy") if grad_hy is not None else (grad_cy, 2, "grad_cy")
    _check_dim(where, grad, pos, name, 2)
    size = tuple(grad.shape)
    if grad_hy is not None:
        _check_size(where, grad_hy, 1, "grad_hy", size)
    if grad_cy is not None:
        _check_size(where, grad_cy, 2, "grad_cy", size)
    _check_size(where, cx, 3, "cx", size)
    _check_size(where, cy, 4, "cy", size)
    _check_dim(where, workspace, 5, "workspace", 2)
    _check_numel(where, workspace, 5, "workspace", size[0] * size[1] * LSTM_GATES)
    _check_dtypes(
        "_thnn_fused_lstm_cell_cuda_backward",
        workspace,
        [("grad_hy", grad_hy), ("grad_cy", grad_cy), ("cx", cx), ("cy", cy)],
    )
    grad_gates = TensorMeta(tuple(workspace.shape), workspace.dtype)
    grad_bias = TensorMeta((workspace.shape[1],), workspace.dtype) if has_bias else None
    return grad_gates, TensorMeta(tuple(cx.shape), cx.dtype), grad_bias


def _thnn_fused_gru_cell_output_shape(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    check_cell_sizes("_thnn_fused_gru_cell_cuda", input_gates, hidden_gates, input_bias, hidden_bias, GRU_GATES, hx)
    _check_dtypes(
        "_thnn_fused_gru_cell_cuda",
        input_gates,
        [("hidden_gates", hidden_gates), ("input_bias", input_bias), ("hidden_bias", hidden_bias), ("hx", hx)],
    )
    rows, width = hx.shape
    return TensorMeta((rows, width), hx.dtype), TensorMeta((rows, width * GRU_WORKSPACE_MULTIPLIER), hx.dtype)


def _thnn_fused_gru_cell_backward_output_shape(grad_hy, workspace, has_bias):
    where = "fused_gru_cell_backward"
    _check_dim(where, grad_hy, 1, "grad_hy", 2)
    rows, width = grad_hy.shape
    _check_size(where, workspace, 2, "workspace", (rows, width * GRU_WORKSPACE_MULTIPLIER))
    _check_dtypes("_thnn_fused_gru_cell_cuda_backward", grad_hy, [("workspace", workspace)])
    gates = TensorMeta((rows, width * GRU_GATES), workspace.dtype)
    bias = TensorMeta((width * GRU_GATES,), workspace.dtype) if has_bias else None
    return gates, gates, TensorMeta((rows, width), grad_hy.dtype), bias, bias


def pack_padded_rows_output_shape(input, lengths, batch_first):
    """The argument checks of `_pack_padded_sequence` (lengths: a Python tuple) and the
    shape of its data: one row per (time step, running sequence)."""
    if input.ndim < 2:  # PyTorch's kernel reads (or swaps) dimension 1
        raise IndexError(f"Dimension out of range (expected to be in range of [-{max(input.ndim, 1)}, "
                         f"{max(input.ndim, 1) - 1}], but got 1)")
    steps, batch = (input.shape[1], input.shape[0]) if batch_first else (input.shape[0], input.shape[1])
    if input.numel() == 0:
        raise RuntimeError("Cannot pack empty tensors.")
    if len(lengths) != batch:
        raise RuntimeError(
            f"Expected `len(lengths)` to be equal to batch_size, but got {len(lengths)} (batch_size={batch})"
        )
    if lengths[-1] <= 0:
        raise RuntimeError(
            "Length of all samples has to be greater than 0, but found an element in 'lengths' that is <= 0"
        )
    if any(lengths[i + 1] > lengths[i] for i in range(batch - 1)):
        raise RuntimeError(
            "`lengths` array must be sorted in decreasing order when `enforce_sorted` is True. You can pass "
            "`enforce_sorted=False` to pack_padded_sequence and/or pack_sequence to sidestep this requirement "
            "if you do not need ONNX exportability."
        )
    rows = sum(min(n, steps) for n in lengths)
    return TensorMeta((rows,) + tuple(input.shape[2:]), input.dtype)


def _layer_output_shapes(gates, input, weight_ih, weight_hh, biases, states, batch_sizes):
    """A whole layer's outputs (time-major, or packed when batch_sizes is not empty) and
    last states (hidden, then cell); the sizes nn.GRU and nn.LSTM check before calling
    aten::gru and aten::lstm, and the packed sequence's batch sizes."""
    width = states[0].shape[-1]
    if input.ndim != (2 if batch_sizes else 3):
        raise RuntimeError(f"rnn layer: input must have {2 if batch_sizes else 3} dimensions, got {input.ndim}")
    if batch_sizes and (input.shape[0] != sum(batch_sizes) or list(batch_sizes) != sorted(batch_sizes, reverse=True)
                        or batch_sizes[-1] < 1):
        raise RuntimeError(f"rnn layer: batch_sizes {list(batch_sizes)} do not describe a packed sequence of "
                           f"{input.shape[0]} rows (positive, non-increasing, summing to the rows)")
    batch = batch_sizes[0] if batch_sizes else input.shape[1]
    expected = [("weight_ih", weight_ih, (gates * width, input.shape[-1])),
                ("weight_hh", weight_hh, (gates * width, width))]
    expected += [("bias", b, (gates * width,)) for b in biases if b is not None]
    expected += [("state", t, (batch, width)) for t in states]
    for name, t, shape in expected:
        if tuple(t.shape) != shape:
            raise RuntimeError(f"rnn layer: {name} has shape {list(t.shape)}, expected {list(shape)}")
    return (TensorMeta(tuple(input.shape[:-1]) + (width,), input.dtype),
            *(TensorMeta(tuple(t.shape), t.dtype) for t in states))


def _gradient_shapes(outputs, grads, operands):
    for grad, expected in zip(grads, outputs):
        if tuple(grad.shape) != expected.shape:
            raise RuntimeError(f"rnn layer: a gradient has shape {list(grad.shape)}, expected {list(expected.shape)}")
    return tuple(None if t is None else TensorMeta(tuple(t.shape), t.dtype) for t in operands)


def gru_layer_output_shape(input, weight_ih, weight_hh, bias_ih, bias_hh, hx, reverse, batch_sizes):
    return _layer_output_shapes(GRU_GATES, input, weight_ih, weight_hh, (bias_ih, bias_hh), (hx,), batch_sizes)


def gru_layer_backward_output_shape(input, weight_ih, weight_hh, bias_ih, bias_hh, hx, grad_output, grad_hy,
                                   reverse, batch_sizes):
    outputs = gru_layer_output_shape(input, weight_ih, weight_hh, bias_ih, bias_hh, hx, reverse, batch_sizes)
    return _gradient_shapes(outputs, (grad_output, grad_hy), (input, weight_ih, weight_hh, bias_ih, bias_hh, hx))


def lstm_layer_output_shape(input, weight_ih, weight_hh, bias_ih, bias_hh, hx, cx, reverse, batch_sizes):
    return _layer_output_shapes(LSTM_GATES, input, weight_ih, weight_hh, (bias_ih, bias_hh), (hx, cx), batch_sizes)


def lstm_layer_backward_output_shape(input, weight_ih, weight_hh, bias_ih, bias_hh, hx, cx, grad_output, grad_hy,
                                    grad_cy, reverse, batch_sizes):
    outputs = lstm_layer_output_shape(input, weight_ih, weight_hh, bias_ih, bias_hh, hx, cx, reverse, batch_sizes)
    return _gradient_shapes(outputs, (grad_output, grad_hy, grad_cy),
                            (input, weight_ih, weight_hh, bias_ih, bias_hh, hx, cx))


# ------------------------------------------------------------------ whole LSTM layers

_ONEDNN_TYPES = (torch.float32, torch.bfloat16, torch.float16)
ONEDNN_LSTM = 2  # ideep::rnn_kind::LSTM


def lstm_runs_whole_layers(dtype, hidden_size: int, cell_size: int) -> bool:
    """Whether an nn.LSTM runs each layer as one mkldnn_rnn_layer (float32 and bfloat16,
    as PyTorch's decomposition takes it; no projections), on our device and through
    the torch.compile backend."""
    return dtype in (torch.float32, torch.bfloat16) and hidden_size == cell_size


def _check_lstm_layer(input, weights, hx_, cx_, mode, hidden_size, batch_first, has_biases):
    if mode != ONEDNN_LSTM:
        raise RuntimeError(f"mkldnn_rnn_layer: mode {mode} is not supported; only LSTM layers (mode 2) are")
    if batch_first:
        raise RuntimeError(
            "mkldnn_rnn_layer: batch_first=True is not supported (PyTorch's CPU kernel reads the input as "
            "time-major whatever the flag, and its meta function does not); transpose the input to "
            "(time, batch, features) and pass batch_first=False"
        )
    for t in (input, *weights, hx_, cx_):
        if t.dtype not in _ONEDNN_TYPES:
            raise RuntimeError("get_mkldnn_dtype: unsupported data type")
    if input.ndim != 3:
        raise RuntimeError(f"mkldnn_rnn_layer: expected a 3-d (time, batch, features) input, got shape "
                           f"{_sizes(input.shape)}")
    batch, features = input.shape[1], input.shape[2]
    expected = [(LSTM_GATES * hidden_size, features), (LSTM_GATES * hidden_size, hidden_size),
                (LSTM_GATES * hidden_size,), (LSTM_GATES * hidden_size,)]
    # without biases, the ones passed (zeros shaped like the weights) are not read
    for name, w, shape in list(zip(("weight_ih", "weight_hh", "bias_ih", "bias_hh"), weights, expected))[
            : 4 if has_biases else 2]:
        if _numel(w.shape) != _numel(shape) or (len(w.shape) == 2 and tuple(w.shape) != shape):
            raise RuntimeError(f"mkldnn_rnn_layer: {name} has shape {_sizes(w.shape)}, expected {_sizes(shape)} "
                               f"for hidden_size {hidden_size} and {features} input features")
    for name, t in (("hx_", hx_), ("cx_", cx_)):
        if t.numel() != batch * hidden_size:
            raise RuntimeError(f"mkldnn_rnn_layer: {name} has shape {_sizes(t.shape)}, expected "
                               f"{batch} x {hidden_size} elements (batch x hidden_size)")


def mkldnn_rnn_layer_output_shape(input, weight0, weight1, weight2, weight3, hx_, cx_, reverse, batch_sizes, mode,
                                  hidden_size, num_layers, has_biases, bidirectional, batch_first, train):
    _check_lstm_layer(input, (weight0, weight1, weight2, weight3), hx_, cx_, mode, hidden_size, batch_first,
                      has_biases)
    return (TensorMeta((input.shape[0], input.shape[1], hidden_size), input.dtype),
            TensorMeta(tuple(hx_.shape), hx_.dtype), TensorMeta(tuple(cx_.shape), cx_.dtype),
            TensorMeta((0,), torch.uint8))


def mkldnn_rnn_layer_backward_output_shape(input, weight1, weight2, weight3, weight4, hx_, cx_tmp, output, hy_, cy_,
                                           grad_output, grad_hy, grad_cy, reverse, mode, hidden_size, num_layers,
                                           has_biases, train, bidirectional, batch_sizes, batch_first, workspace):
    if grad_output is None and grad_hy is None and grad_cy is None:
        return (None,) * 7
    _check_lstm_layer(input, (weight1, weight2, weight3, weight4), hx_, cx_tmp, mode, hidden_size, batch_first,
                      has_biases)
    for name, g, like in (("grad_output", grad_output, output), ("grad_hy", grad_hy, hy_), ("grad_cy", grad_cy, cy_)):
        if g is not None and g.numel() != like.numel():
            raise RuntimeError(f"mkldnn_rnn_layer_backward: {name} has shape {_sizes(g.shape)}, expected "
                               f"{_sizes(like.shape)}")
    f32 = torch.float32
    bias = TensorMeta((LSTM_GATES * hidden_size,), f32)
    return (TensorMeta(tuple(input.shape), f32), TensorMeta(tuple(weight1.shape), f32),
            TensorMeta(tuple(weight2.shape), f32), bias, bias, TensorMeta(tuple(hx_.shape), f32),
            TensorMeta(tuple(cx_tmp.shape), f32))
