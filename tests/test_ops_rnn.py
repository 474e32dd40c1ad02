"""Recurrent layers against PyTorch CPU.

On every device but the CPU, nn.LSTM, nn.GRU, nn.LSTMCell and nn.GRUCell run their
cells as _thnn_fused_lstm_cell / _thnn_fused_gru_cell (and the backward ops autograd
picks for them), which have CUDA kernels only. So the ops are checked against the
unfused formulas computed with PyTorch CPU ops (and PyTorch CPU autograd through them
for the backward ops), and the modules against the same modules on the CPU, which take
the unfused path: outputs, final states, input and parameter gradients and the
parameters after an SGD step, eagerly and in one compiled program, in float64 (tight)
and float32. Also: packed sequences, dropout between layers, the multi-step compiled
loop (compiled once, then replayed), torch.compile, and the errors. A float32 or
bfloat16 nn.LSTM runs whole layers instead (mkldnn_rnn_layer, checked against
oneDNN's CPU kernel), and so do a float32 or float64 nn.GRU in eager mode (gru_layer)
and nn.LSTM over a packed sequence (lstm_layer); their modules are checked the same way.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import xla_native_functions as xnf
from xla_native_functions.runtime.exec import graph
from xla_native_functions.runtime.frontends.dynamo import stats as dynamo_stats
from xla_native_functions.runtime.platform.metrics import metrics

aten = torch.ops.aten
ROWS, WIDTH = 3, 4
# float32: the fused cells add the four gate terms in another order than the CPU
F32 = {"rtol": 1e-5, "atol": 1e-5}


def cpu(t):
    return xnf.to_torch(t) if t is not None else None


def xla(t):
    return xnf.to_xla(t) if t is not None else None


# ----------------------------------------------------------------------------- the ops


def lstm_reference(input_gates, hidden_gates, cx, input_bias, hidden_bias):
    """The cell as the unfused CPU path computes it: hy, cy and the saved gate activations."""
    rows, width = cx.shape
    gates = (input_gates.reshape(rows, 4, width) + hidden_gates.reshape(rows, 4, width))
    if input_bias is not None:
        gates = gates + input_bias.reshape(4, width) + hidden_bias.reshape(4, width)
    i, f, c, o = gates.unbind(1)
    i, f, c, o = i.sigmoid(), f.sigmoid(), c.tanh(), o.sigmoid()
    cy = f * cx + i * c
    hy = o * cy.tanh()
    return hy, cy, torch.stack([i, f, c, o], 1).reshape(input_gates.shape)


def gru_reference(input_gates, hidden_gates, hx, input_bias, hidden_bias):
    rows, width = hx.shape
    i, h = input_gates.reshape(rows, 3, width), hidden_gates.reshape(rows, 3, width)
    if input_bias is not None:
        i, h = i + input_bias.reshape(3, width), h + hidden_bias.reshape(3, width)
    r = (i[:, 0] + h[:, 0]).sigmoid()
    z = (i[:, 1] + h[:, 1]).sigmoid()
    n = (i[:, 2] + r * h[:, 2]).tanh()
    hy = (1 - z) * n + z * hx
    return hy, torch.cat([r, z, n, hx, h[:, 2]], 1)


def _cell_args(gates, dtype, bias):
    g = torch.Generator().manual_seed(0)
    make = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64).to(dtype)  # noqa: E731
    args = [make(ROWS, gates * WIDTH), make(ROWS, gates * WIDTH), make(ROWS, WIDTH)]
    biases = [make(gates * WIDTH), make(gates * WIDTH)] if bias else [None, None]
    return args + biases


def _tolerance(dtype):
    return {"rtol": 1e-3, "atol": 1e-3} if dtype in (torch.float16, torch.bfloat16) else {}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16])
@pytest.mark.parametrize("bias", [True, False])
def test_fused_lstm_cell_and_backward_match_cpu_formulas(bias, dtype):
    args = _cell_args(4, dtype, bias)
    hy, cy, workspace = aten._thnn_fused_lstm_cell(*xnf.to_xla(args))
    assert (hy.dtype, cy.dtype, workspace.dtype) == (dtype,) * 3
    assert (hy.shape, cy.shape, workspace.shape) == ((ROWS, WIDTH), (ROWS, WIDTH), (ROWS, 4 * WIDTH))
    # the kernels compute half precision in float32 and round once
    wide = [a.float() if dtype == torch.float16 and a is not None else a for a in args]
    wide = [a.detach().requires_grad_() if a is not None else None for a in wide]
    ref = lstm_reference(*wide)
    for ours, expected in zip((hy, cy, workspace), ref):
        torch.testing.assert_close(cpu(ours), expected.detach().to(dtype), **_tolerance(dtype))

    grad_hy, grad_cy = torch.randn(ROWS, WIDTH, dtype=torch.float64).to(dtype), torch.randn(ROWS, WIDTH).to(dtype)
    grad_gates, grad_cx, grad_bias = aten._thnn_fused_lstm_cell_backward_impl(
        xla(grad_hy), xla(grad_cy), xla(args[2]), cy, workspace, bias
    )
    # backward of the unfused formula on the CPU: the gates' gradient is that of the
    # pre-activations, the same for both projections
    wrt = [wide[0], wide[2]] + ([wide[3]] if bias else [])
    expected = torch.autograd.grad(ref[:2], wrt, [grad_hy.to(wide[0].dtype), grad_cy.to(wide[0].dtype)])
    torch.testing.assert_close(cpu(grad_gates), expected[0].to(dtype), **_tolerance(dtype))
    torch.testing.assert_close(cpu(grad_cx), expected[1].to(dtype), **_tolerance(dtype))
    if bias:
        torch.testing.assert_close(cpu(grad_bias), expected[2].to(dtype), **_tolerance(dtype))
    else:
        assert grad_bias is None


@pytest.mark.parametrize("which", ["grad_hy", "grad_cy", "neither"])
def test_fused_lstm_backward_with_a_missing_gradient(which):
    args = _cell_args(4, torch.float64, True)
    hy, cy, workspace = aten._thnn_fused_lstm_cell(*xnf.to_xla(args))
    grads = {name: torch.randn(ROWS, WIDTH, dtype=torch.float64) for name in ("grad_hy", "grad_cy")}
    if which == "neither":
        grads = {}
    else:
        grads.pop(which)
    out = aten._thnn_fused_lstm_cell_backward_impl(
        xla(grads.get("grad_hy")), xla(grads.get("grad_cy")), xla(args[2]), cy, workspace, True
    )
    if which == "neither":
        assert out == (None, None, None)
        return
    wide = [a.detach().requires_grad_() for a in args]
    ref = lstm_reference(*wide)
    outputs = [r for r, name in zip(ref[:2], ("grad_hy", "grad_cy")) if name in grads]
    expected = torch.autograd.grad(outputs, [wide[0], wide[2], wide[3]], list(grads.values()))
    for ours, e in zip(out, expected):
        torch.testing.assert_close(cpu(ours), e)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bias", [True, False])
def test_fused_gru_cell_and_backward_match_cpu_formulas(bias, dtype):
    args = _cell_args(3, dtype, bias)
    hy, workspace = aten._thnn_fused_gru_cell(*xnf.to_xla(args))
    assert (hy.dtype, workspace.dtype) == (dtype, dtype)
    assert (hy.shape, workspace.shape) == ((ROWS, WIDTH), (ROWS, 5 * WIDTH))
    wide = [a.float() if dtype == torch.bfloat16 and a is not None else a for a in args]
    wide = [a.detach().requires_grad_() if a is not None else None for a in wide]
    ref_hy, ref_workspace = gru_reference(*wide)
    tol = {"rtol": 1.6e-2, "atol": 1e-2} if dtype == torch.bfloat16 else {}
    torch.testing.assert_close(cpu(hy), ref_hy.detach().to(dtype), **tol)
    torch.testing.assert_close(cpu(workspace), ref_workspace.detach().to(dtype), **tol)

    grad_hy = torch.randn(ROWS, WIDTH, dtype=torch.float64).to(dtype)
    out = aten._thnn_fused_gru_cell_backward(xla(grad_hy), workspace, bias)
    # the backward sees the new gate's hidden projection only through the workspace
    wrt = [wide[0], wide[1], wide[2]] + (wide[3:] if bias else [])
    expected = torch.autograd.grad(ref_hy, wrt, grad_hy.to(wide[0].dtype))
    for ours, e in zip(out, expected):
        torch.testing.assert_close(cpu(ours), e.to(dtype), **tol)
    if not bias:
        assert out[3] is None and out[4] is None


def test_cells_ignore_hidden_bias_without_input_bias():
    # the kernels read both biases only when input_bias is given
    for op, gates in ((aten._thnn_fused_lstm_cell, 4), (aten._thnn_fused_gru_cell, 3)):
        ig, hg, state, _, hidden_bias = _cell_args(gates, torch.float64, True)
        with_hidden = op(*xnf.to_xla([ig, hg, state]), None, xla(hidden_bias))
        without = op(*xnf.to_xla([ig, hg, state]))
        for a, b in zip(with_hidden, without):
            torch.testing.assert_close(cpu(a), cpu(b))


def test_cells_walk_a_reshaped_state_in_its_own_shape():
    # checkSizes only counts the state's elements; the kernels then read the gates in
    # the state's (rows, width) layout
    ig, hg, _, ib, hb = _cell_args(4, torch.float64, True)
    cx = torch.randn(2 * ROWS, WIDTH // 2, dtype=torch.float64)
    hy, cy, workspace = aten._thnn_fused_lstm_cell(*xnf.to_xla([ig, hg, cx]), None, None)
    ref = lstm_reference(ig.reshape(2 * ROWS, 2 * WIDTH), hg.reshape(2 * ROWS, 2 * WIDTH), cx, None, None)
    torch.testing.assert_close(cpu(hy), ref[0])
    torch.testing.assert_close(cpu(cy), ref[1])
    torch.testing.assert_close(cpu(workspace), ref[2].reshape(ig.shape))
    with pytest.raises(RuntimeError, match="wider than"):  # the kernels would read past the biases
        aten._thnn_fused_lstm_cell(*xnf.to_xla([ig, hg, cx.reshape(1, -1), ib, hb]))


def _meta(args):
    return [a.to("meta") if isinstance(a, torch.Tensor) else a for a in args]


LSTM_ERRORS = {
    "gates_1d": lambda a: [a[0].reshape(-1), a[1].reshape(-1), *a[2:]],
    "gates_differ": lambda a: [a[0], a[1][:, :-4], *a[2:]],
    "bias_2d": lambda a: [*a[:3], a[3].reshape(4, -1), a[4]],
    "bias_size": lambda a: [*a[:3], a[3][:-1], a[4][:-1]],
    "biases_differ": lambda a: [*a[:3], a[3], a[4][:, None]],
    "state_1d": lambda a: [a[0], a[1], a[2].reshape(-1), *a[3:]],
    "state_size": lambda a: [a[0], a[1], a[2][:, :-1], *a[3:]],
}


@pytest.mark.parametrize("case", list(LSTM_ERRORS))
def test_fused_lstm_cell_errors(case):
    # PyTorch's meta kernel makes the CUDA kernel's checks (the CPU has no kernel)
    args = LSTM_ERRORS[case](_cell_args(4, torch.float32, True))
    with pytest.raises(RuntimeError) as expected:
        aten._thnn_fused_lstm_cell(*_meta(args))
    with pytest.raises(type(expected.value), match="while checking arguments for _thnn_fused_lstm_cell_cuda"):
        aten._thnn_fused_lstm_cell(*xnf.to_xla(args))


@pytest.mark.parametrize("case", list(LSTM_ERRORS))
def test_fused_gru_cell_errors(case):
    args = LSTM_ERRORS[case](_cell_args(3, torch.float32, True))
    with pytest.raises(RuntimeError, match="while checking arguments for _thnn_fused_gru_cell_cuda"):
        aten._thnn_fused_gru_cell(*xnf.to_xla(args))


def test_fused_cell_dtype_errors():
    ig, hg, cx, ib, hb = _cell_args(4, torch.float32, True)
    with pytest.raises(RuntimeError, match="cx is Double"):
        aten._thnn_fused_lstm_cell(*xnf.to_xla([ig, hg, cx.double(), ib, hb]))
    with pytest.raises(NotImplementedError, match="not implemented for 'Long'"):
        aten._thnn_fused_gru_cell(*xnf.to_xla([ig[:, :3].long(), hg[:, :3].long(), cx[:, :1].long()]))
    with pytest.raises(RuntimeError, match="hidden_bias is None"):
        aten._thnn_fused_lstm_cell(*xnf.to_xla([ig, hg, cx, ib]), None)


def test_fused_backward_errors():
    ig, hg, cx, ib, hb = xnf.to_xla(_cell_args(4, torch.float32, True))
    hy, cy, workspace = aten._thnn_fused_lstm_cell(ig, hg, cx, ib, hb)
    with pytest.raises(RuntimeError, match="for argument #4 'cy'"):
        aten._thnn_fused_lstm_cell_backward_impl(hy, None, cx, cy[:, :2], workspace, True)
    with pytest.raises(RuntimeError, match="for argument #5 'workspace'"):
        aten._thnn_fused_lstm_cell_backward_impl(hy, hy, cx, cy, workspace[:, :4], True)
    gru_hy, gru_workspace = aten._thnn_fused_gru_cell(ig[:, :12], hg[:, :12], cx, ib[:12], hb[:12])
    with pytest.raises(RuntimeError, match=r"Expected tensor of size \[3, 20\], but got tensor of size \[3, 15\]"):
        aten._thnn_fused_gru_cell_backward(gru_hy, gru_workspace[:, :15], True)


# --------------------------------------------------------------------------- the cells


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("cls", [torch.nn.LSTMCell, torch.nn.GRUCell])
@pytest.mark.parametrize("case", ["batched_with_state", "unbatched", "no_bias"])
def test_cell_modules_match_cpu(case, cls, dtype):
    torch.manual_seed(0)
    ref = cls(3, WIDTH, bias=case != "no_bias").to(dtype)
    ours = xnf.to_xla(copy.deepcopy(ref))
    x = torch.randn(*((ROWS,) if case != "unbatched" else ()), 3, dtype=dtype)
    state = None
    if case == "batched_with_state":
        h = torch.randn(ROWS, WIDTH, dtype=dtype)
        state = (h, torch.randn(ROWS, WIDTH, dtype=dtype)) if cls is torch.nn.LSTMCell else h

    def run(model, x, state):
        x = x.detach().requires_grad_()
        if state is not None:
            state = tuple(s.detach().requires_grad_() for s in state) if isinstance(state, tuple) else \
                state.detach().requires_grad_()
        out = model(x, state)
        outs = out if isinstance(out, tuple) else (out,)
        sum((o * (k + 1)).sin().sum() for k, o in enumerate(outs)).backward()
        leaves = [x] + ([] if state is None else list(state) if isinstance(state, tuple) else [state])
        return [o.detach() for o in outs] + [t.grad for t in leaves] + [p.grad for p in model.parameters()]

    expected = run(ref, x, state)
    got = run(ours, xla(x), None if state is None else xnf.to_xla(state))
    tol = F32 if dtype == torch.float32 else {}
    for a, b in zip(got, expected):
        torch.testing.assert_close(cpu(a), b, **tol)


def test_lstm_cell_double_backward_matches_cpu():
    # with create_graph, autograd differentiates the cell by
    # _thnn_differentiable_lstm_cell_backward, made of ordinary ops
    torch.manual_seed(0)
    ref = torch.nn.LSTMCell(3, WIDTH).double()
    ours = xnf.to_xla(copy.deepcopy(ref))
    x = torch.randn(ROWS, 3, dtype=torch.float64)

    def run(model, x):
        x = x.detach().requires_grad_()
        hy, cy = model(x)
        (gx,) = torch.autograd.grad((hy * cy).sum(), x, create_graph=True)
        gx.pow(2).sum().backward()
        return [x.grad] + [p.grad for p in model.parameters()]

    for a, b in zip(run(ours, xla(x)), run(ref, x)):
        torch.testing.assert_close(cpu(a), b)


# ------------------------------------------------------------------------- the layers

# few distinct shapes, since each new one compiles its ops: both packed batches run
# 3 then 2 sequences, as the op tests' cells have the layers' rows and width
T, B, IN, H = 3, ROWS, 4, WIDTH
LENGTHS_SORTED = [3, 3, 2]
LENGTHS_UNSORTED = [3, 2, 3]

CONFIGS = {
    # name: (module kwargs, batch_first, unbatched, initial state, packed lengths or None)
    "batch_first_bidirectional_2_layers_with_state": (
        {"num_layers": 2, "bidirectional": True, "batch_first": True}, True, False, True, None),
    "unbatched_bidirectional": ({"bidirectional": True}, False, True, False, None),
    "unbatched_2_layers_no_bias_with_state": ({"num_layers": 2, "bias": False}, False, True, True, None),
    "packed_sorted_2_layers_with_state": ({"num_layers": 2}, False, False, True, LENGTHS_SORTED),
    "packed_unsorted_bidirectional": (
        {"bidirectional": True, "batch_first": True}, True, False, False, LENGTHS_UNSORTED),
    "projection_bidirectional_2_layers_with_state": (
        {"proj_size": 2, "num_layers": 2, "bidirectional": True}, False, False, True, None),
}


def _layer_inputs(kind, config, dtype):
    kwargs, batch_first, unbatched, with_state, lengths = CONFIGS[config]
    g = torch.Generator().manual_seed(1)
    shape = (T, IN) if unbatched else (B, T, IN) if batch_first else (T, B, IN)
    x = torch.randn(*shape, generator=g, dtype=dtype)
    state = None
    if with_state:
        layers = kwargs.get("num_layers", 1) * (2 if kwargs.get("bidirectional") else 1)
        batch = () if unbatched else (B,)
        out = kwargs.get("proj_size", 0) or H
        h = torch.randn(layers, *batch, out, generator=g, dtype=dtype)
        state = (h, torch.randn(layers, *batch, H, generator=g, dtype=dtype)) if kind == "lstm" else h
    return x, state, lengths


def _make_layer(kind, config, dtype):
    torch.manual_seed(0)
    return (torch.nn.LSTM if kind == "lstm" else torch.nn.GRU)(IN, H, **CONFIGS[config][0]).to(dtype)


# float64 on every configuration; float32 on the one that exercises the most ops (the
# training loops, packed sequences and torch.compile below run in float32 too), to keep
# the file fast; proj_size is an LSTM argument
# (the LSTM's float32 layers run whole, Note [Whole LSTM layers]: these cover a
# reverse direction, a second layer's input, no biases, unbatched and batch_first)
FLOAT32_CONFIGS = ("batch_first_bidirectional_2_layers_with_state", "unbatched_2_layers_no_bias_with_state")
LAYER_CASES = [
    pytest.param(kind, config, dtype, mode, id=f"{kind}-{config}-{str(dtype)[6:]}-{mode}")
    for kind in ("lstm", "gru")
    for config in CONFIGS
    for dtype in (torch.float64, torch.float32)
    for mode in ("eager", "compiled")
    if not (kind == "gru" and "proj_size" in CONFIGS[config][0])
    and (dtype == torch.float64 or config in FLOAT32_CONFIGS)
]


def _train_step(model, opt, batch_first, lengths):
    """Forward, a loss on the output and the final states, backward and an SGD step;
    returns the output, the final states and the input's gradient."""

    def step(x, state):
        opt.zero_grad()
        inp = pack_padded_sequence(x, lengths, batch_first=batch_first, enforce_sorted=lengths == sorted(
            lengths, reverse=True)) if lengths is not None else x
        out, final = model(inp) if state is None else model(inp, state)
        if lengths is not None:
            out, _ = pad_packed_sequence(out, batch_first=batch_first)
        finals = final if isinstance(final, tuple) else (final,)
        loss = out.sin().sum() + sum(((k + 2) * f).cos().sum() for k, f in enumerate(finals))
        loss.backward()
        grads = [p.grad.clone() for p in model.parameters()]
        opt.step()
        return out.detach(), [f.detach() for f in finals], grads

    return step


def _leaves(x, state):
    x = x.detach().requires_grad_()
    if state is None:
        return x, None, [x]
    if isinstance(state, tuple):
        state = tuple(s.detach().requires_grad_() for s in state)
        return x, state, [x, *state]
    state = state.detach().requires_grad_()
    return x, state, [x, state]


@pytest.mark.parametrize("kind, config, dtype, mode", LAYER_CASES)
def test_layer_matches_cpu(kind, config, dtype, mode):
    ref = _make_layer(kind, config, dtype)
    ours = xnf.to_xla(copy.deepcopy(ref))
    batch_first, lengths = CONFIGS[config][1], CONFIGS[config][4]
    ref_step = _train_step(ref, torch.optim.SGD(ref.parameters(), lr=0.1), batch_first, lengths)
    step = _train_step(ours, torch.optim.SGD(ours.parameters(), lr=0.1), batch_first, lengths)
    if mode == "compiled":
        step = xnf.compile(step)
    x, state, lengths = _layer_inputs(kind, config, dtype)
    x, state, ref_leaves = _leaves(x, state)
    expected = ref_step(x, state)
    our_x, our_state, our_leaves = _leaves(xla(x), None if state is None else xnf.to_xla(state))
    got = step(our_x, our_state)
    tol = F32 if dtype == torch.float32 else {}
    torch.testing.assert_close(cpu(got[0]), expected[0], **tol)
    for a, b in zip(got[1] + got[2], expected[1] + expected[2]):
        torch.testing.assert_close(cpu(a), b, **tol)
    for a, b in zip(our_leaves, ref_leaves):
        torch.testing.assert_close(cpu(a.grad), b.grad, **tol)
    for a, b in zip(ours.parameters(), ref.parameters()):
        torch.testing.assert_close(cpu(a), b.detach(), **tol)


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("kind, dtype", [("lstm", torch.float64), ("lstm", torch.float32), ("gru", torch.float64)])
def test_dropout_between_layers_matches_cpu_with_the_same_mask(kind, dtype, mode):
    # Our random numbers are not PyTorch's: the mask is drawn again from the same seed
    # (the layer's only random op), and the CPU reference runs the layers one by one
    # with it. A float32 LSTM runs its layers whole (Note [Whole LSTM layers]).
    torch.manual_seed(0)
    cls = torch.nn.LSTM if kind == "lstm" else torch.nn.GRU
    ref = cls(IN, H, num_layers=2, dropout=0.5).to(dtype)
    ours = xnf.to_xla(copy.deepcopy(ref))
    first, second = cls(IN, H).to(dtype), cls(H, H).to(dtype)
    weights = ref.state_dict()
    first.load_state_dict({k: v for k, v in weights.items() if "_l0" in k})
    second.load_state_dict({k.replace("_l1", "_l0"): v for k, v in weights.items() if "_l1" in k})
    x = torch.randn(T, B, IN, dtype=dtype)
    run = (lambda f: f()) if mode == "eager" else (lambda f: xnf.compile(f)())
    tol = F32 if dtype == torch.float32 else {}

    torch.manual_seed(7)
    mask = cpu(run(lambda: F.dropout(xla(torch.ones(T, B, H, dtype=dtype)), 0.5, True)))
    assert 0 < (mask == 0).sum() < mask.numel() and set(mask.unique().tolist()) == {0.0, 2.0}
    torch.manual_seed(7)
    our_x = xla(x).requires_grad_()

    def forward_backward():
        out, _ = ours(our_x)
        out.sin().sum().backward()
        return out.detach()

    got = run(forward_backward)
    ref_x = x.clone().requires_grad_()
    expected, _ = second(first(ref_x)[0] * mask)
    expected.sin().sum().backward()
    torch.testing.assert_close(cpu(got), expected.detach(), **tol)
    torch.testing.assert_close(cpu(our_x.grad), ref_x.grad, **tol)
    ref.eval(), ours.eval()  # no dropout in eval mode
    torch.testing.assert_close(cpu(ours(xla(x))[0]), ref(x)[0].detach(), **tol)


def test_lstm_double_backward_matches_cpu():
    # the gradient of a gradient through whole layers: PyTorch's autograd formula then
    # differentiates the layer's backward as ops (mkldnn_rnn_layer_differentiable_backward)
    torch.manual_seed(0)
    ref = torch.nn.LSTM(IN, H, num_layers=2)
    ours = xnf.to_xla(copy.deepcopy(ref))
    x = torch.randn(T, B, IN)
    for model, inp in ((ref, x.clone().requires_grad_()), (ours, xla(x).requires_grad_())):
        first, = torch.autograd.grad(model(inp)[0].sin().sum(), inp, create_graph=True)
        first.pow(2).sum().backward()
        if model is ref:
            expected = [inp.grad] + [p.grad for p in ref.parameters()]
        else:
            got = [inp.grad] + [p.grad for p in ours.parameters()]
    for a, b in zip(got, expected):
        torch.testing.assert_close(cpu(a), b, **F32)


@pytest.mark.parametrize("grad_mode", ["grad", "no_grad", "inference_mode"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_lstm_runs_whole_layers_where_the_layer_op_applies(dtype, grad_mode):
    # Note [Whole LSTM layers]: one mkldnn_rnn_layer per layer and direction (float32
    # and bfloat16) and its backward op, not a cell per step, in every grad mode; other
    # dtypes run the cells.
    torch.manual_seed(0)
    ref = torch.nn.LSTM(IN, H, num_layers=2, bidirectional=True).to(dtype)
    ours = xnf.to_xla(copy.deepcopy(ref))
    x = torch.randn(T, B, IN, dtype=dtype)
    our_x = xla(x).requires_grad_(grad_mode == "grad")
    xnf.metrics.reset()
    context = {"grad": torch.enable_grad, "no_grad": torch.no_grad, "inference_mode": torch.inference_mode}[grad_mode]
    with context():
        out, (h, c) = ours(our_x)
    if grad_mode == "grad":
        (out.sin().sum() + h.sum() + c.sum()).backward()
    whole = dtype in (torch.float32, torch.bfloat16)
    assert xnf.metrics.counter_value("aten::mkldnn_rnn_layer") == (4 if whole else 0)
    assert xnf.metrics.counter_value("aten::mkldnn_rnn_layer_backward") == (4 if whole and grad_mode == "grad" else 0)
    assert xnf.metrics.counter_value("aten::_thnn_fused_lstm_cell") == (0 if whole else 4 * T)
    ref_x = x.clone().requires_grad_(grad_mode == "grad")
    with context():
        expected, (ref_h, ref_c) = ref(ref_x)
    if grad_mode == "grad":
        (expected.sin().sum() + ref_h.sum() + ref_c.sum()).backward()
    # half precision: PyTorch CPU rounds every op of its cells, the layer op only its
    # outputs (as oneDNN's kernel does)
    tol = {torch.float32: F32, torch.float64: {}}.get(dtype, {"rtol": 2e-2, "atol": 2e-2})
    for a, b in [(out, expected), (h, ref_h), (c, ref_c)]:
        torch.testing.assert_close(cpu(a), b.detach(), **tol)
    if grad_mode == "grad":
        torch.testing.assert_close(cpu(our_x.grad), ref_x.grad, **tol)
        for a, b in zip(ours.parameters(), ref.parameters()):
            torch.testing.assert_close(cpu(a.grad), b.grad, **tol)


GRU_LAYER_CASES = [
    # (num_layers, bidirectional, batch_first, bias, dtype)
    (1, False, False, True, torch.float32),
    (2, True, True, True, torch.float32),
    (2, True, False, False, torch.float64),
]


@pytest.mark.parametrize("kind, packed", [("gru", False), ("gru", True), ("lstm", True)])
@pytest.mark.parametrize("grad_mode", ["grad", "no_grad", "inference_mode"])
@pytest.mark.parametrize("case", GRU_LAYER_CASES, ids=["one-layer", "bidirectional-batch-first", "no-bias-float64"])
def test_whole_layers_in_eager_mode(kind, case, grad_mode, packed):
    # Note [Whole recurrent layers in eager mode]: one gru_layer (or, over a packed sequence, lstm_layer) node
    # per layer and direction, and its backward node in training, instead of a cell per
    # step; packed sequences of several lengths (enforce_sorted=False reorders them) end
    # at their own steps.
    layers, bidirectional, batch_first, bias, dtype = case
    torch.manual_seed(0)
    cls = torch.nn.GRU if kind == "gru" else torch.nn.LSTM
    ref = cls(IN, H, num_layers=layers, bidirectional=bidirectional, batch_first=batch_first, bias=bias).to(dtype)
    ours = xnf.to_xla(copy.deepcopy(ref))
    x = torch.randn(B, T, IN, dtype=dtype) if batch_first else torch.randn(T, B, IN, dtype=dtype)
    h0 = torch.randn(layers * (2 if bidirectional else 1), B, H, dtype=dtype)
    c0 = torch.randn(h0.shape, dtype=dtype)
    lengths = [T - 2, T, 1] + [T - 1] * (B - 3)

    def run(model, x, h0, c0):
        x, h0, c0 = (t.requires_grad_(grad_mode == "grad") for t in (x, h0, c0))
        inp = pack_padded_sequence(x, lengths, batch_first=batch_first, enforce_sorted=False) if packed else x
        context = {"grad": torch.enable_grad, "no_grad": torch.no_grad, "inference_mode": torch.inference_mode}
        with context[grad_mode]():
            out, state = model(inp, h0 if kind == "gru" else (h0, c0))
        out = out.data if packed else out
        states = (state,) if kind == "gru" else state
        if grad_mode == "grad":
            (out.sin().sum() + sum(((k + 2) * s).cos().sum() for k, s in enumerate(states))).backward()
        return out, *states, x.grad, h0.grad, c0.grad

    xnf.metrics.reset()
    got = run(ours, xla(x), xnf.to_xla(h0), xnf.to_xla(c0))
    for op in (f"_thnn_fused_{kind}_cell", f"_thnn_fused_{kind}_cell_backward", "mkldnn_rnn_layer"):
        assert xnf.metrics.counter_value(f"aten::{op}") == 0, op
    expected = run(ref, x.clone(), h0.clone(), c0.clone())
    tol = F32 if dtype == torch.float32 else {}
    for a, b in zip(got, expected):
        torch.testing.assert_close(cpu(a), None if b is None else b.detach(), **tol)
    for a, b in zip(ours.parameters(), ref.parameters()):
        torch.testing.assert_close(cpu(a.grad), b.grad, **tol)


@pytest.mark.parametrize("kind, packed", [("gru", False), ("gru", True), ("lstm", True)])
def test_whole_layer_double_backward_recomputes_with_the_cells(kind, packed):
    # Note [Whole recurrent layers in eager mode]: a recorded backward (create_graph) differentiates the
    # cells again, so a gradient penalty's second derivative matches PyTorch CPU.
    torch.manual_seed(0)
    ref = (torch.nn.GRU if kind == "gru" else torch.nn.LSTM)(IN, H, num_layers=2, bidirectional=True).double()
    ours = xnf.to_xla(copy.deepcopy(ref))
    x = torch.randn(T, B, IN, dtype=torch.double)

    def penalty(model, x):
        x = x.requires_grad_()
        inp = pack_padded_sequence(x, [T, T - 1, 1], enforce_sorted=False) if packed else x
        out, state = model(inp)
        h = state if kind == "gru" else state[0]
        first, = torch.autograd.grad((out.data if packed else out).sin().sum() + h.sum(), x, create_graph=True)
        (first ** 2).sum().backward()
        return first.detach(), x.grad

    xnf.metrics.reset()
    got = penalty(ours, xla(x))
    assert xnf.metrics.counter_value(f"aten::_thnn_fused_{kind}_cell") > 0  # the recorded backward's recomputation
    expected = penalty(ref, x.clone())
    for a, b in zip(got, expected):
        torch.testing.assert_close(cpu(a), b)
    for a, b in zip(ours.parameters(), ref.parameters()):
        torch.testing.assert_close(cpu(a.grad), b.grad)


def test_gru_keeps_its_cells_in_a_trace_and_for_half_precision():
    # Note [Whole recurrent layers in eager mode]: compile() traces the cells, which XLA runs faster there;
    # float16 cells round every product, which one layer op would not.
    torch.manual_seed(0)
    ref = torch.nn.GRU(IN, H).eval()
    ours = xnf.to_xla(copy.deepcopy(ref))
    x = torch.randn(T, B, IN)

    @xnf.compile
    def infer(x):
        with torch.no_grad():
            return ours(x)[0]

    xnf.metrics.reset()
    torch.testing.assert_close(cpu(infer(xla(x))), ref(x)[0].detach(), **F32)
    assert xnf.metrics.counter_value("aten::_thnn_fused_gru_cell") == T
    half = xnf.to_xla(copy.deepcopy(ref).half())
    xnf.metrics.reset()
    with torch.no_grad():
        half(xla(x.half()))
    assert xnf.metrics.counter_value("aten::_thnn_fused_gru_cell") == T


@pytest.fixture
def fresh_graph_cache(monkeypatch):
    monkeypatch.setattr(graph, "_GRAPH_CACHE", {})
    monkeypatch.setattr(graph, "_LAST_KEYS", {})
    xnf.reset_metrics()


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_compiled_training_loop_compiles_once_then_replays(optimizer, fresh_graph_cache):
    torch.manual_seed(0)
    ref = torch.nn.LSTM(IN, H, bidirectional=True, batch_first=True)
    ours = xnf.to_xla(copy.deepcopy(ref))
    if optimizer == "sgd":
        ref_opt, opt = torch.optim.SGD(ref.parameters(), lr=0.1), torch.optim.SGD(ours.parameters(), lr=0.1)
    else:
        ref_opt = torch.optim.Adam(ref.parameters(), lr=0.01)
        opt = torch.optim.Adam(ours.parameters(), lr=0.01, capturable=True)  # its step count on our device

    def make(model, opt):
        def step(x, y):
            opt.zero_grad()
            out, (h, c) = model(x)
            loss = F.mse_loss(out, y) + h.pow(2).mean()
            loss.backward()
            opt.step()
            return loss.detach()

        return step

    ref_step, step = make(ref, ref_opt), xnf.compile(make(ours, opt))
    for i in range(5):
        x, y = torch.randn(B, T, IN), torch.randn(B, T, 2 * H)
        torch.testing.assert_close(cpu(step(xla(x), xla(y))), ref_step(x, y), **F32)
    for a, b in zip(ours.parameters(), ref.parameters()):
        torch.testing.assert_close(cpu(a), b.detach(), **F32)
    # One XLA program for the whole step, all time steps unrolled in it: traced on the
    # first three calls (the plan must repeat), replayed on the last two. Adam makes its
    # state on its first step, so its first call is a program of its own.
    assert metrics.compile_count == (1 if optimizer == "sgd" else 2), xnf.metrics_report()
    assert metrics.replays == 2, xnf.metrics_report()
    assert not metrics.fallback_calls and not metrics.replay_notes


def test_compiled_packed_training_loop_replays(fresh_graph_cache):
    # pack_padded_sequence makes its lengths a CPU tensor; with enforce_sorted=False
    # pad_packed_sequence reads the unsorting permutation on the host, which splits the
    # program in two (both compiled on the first call) and is guarded in replays.
    torch.manual_seed(0)
    ref = torch.nn.GRU(IN, H, bidirectional=True)
    ours = xnf.to_xla(copy.deepcopy(ref))
    ref_opt, opt = torch.optim.SGD(ref.parameters(), lr=0.1), torch.optim.SGD(ours.parameters(), lr=0.1)

    def make(model, opt):
        def step(x, lengths):
            opt.zero_grad()
            out, h = model(pack_padded_sequence(x, lengths, enforce_sorted=False))
            padded, _ = pad_packed_sequence(out)
            loss = padded.sin().sum() + h.cos().sum()
            loss.backward()
            opt.step()
            return loss.detach()

        return step

    ref_step, step = make(ref, ref_opt), xnf.compile(make(ours, opt))
    for i in range(5):
        x = torch.randn(T, B, IN)
        torch.testing.assert_close(cpu(step(xla(x), LENGTHS_UNSORTED)), ref_step(x, LENGTHS_UNSORTED), **F32)
    for a, b in zip(ours.parameters(), ref.parameters()):
        torch.testing.assert_close(cpu(a), b.detach(), **F32)
    assert metrics.compile_count == 2 and metrics.replays == 2, xnf.metrics_report()
    assert not metrics.replay_notes


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_torch_compile_matches_cpu(kind):
    # Dynamo traces into RNN modules only with allow_rnn; our backend then gets the
    # layer as PyTorch decomposes it: a GRU as unfused cells, an LSTM as one
    # mkldnn_rnn_layer per layer whether or not its input needs a gradient (whose
    # backward PyTorch's own aot_eager and inductor backends fail to run in torch 2.13).
    torch._dynamo.reset()
    torch.manual_seed(0)
    cls = torch.nn.LSTM if kind == "lstm" else torch.nn.GRU
    ref = cls(IN, H, batch_first=True)
    model = copy.deepcopy(ref)
    graphs, partitioned = dynamo_stats.graphs, dynamo_stats.partitioned_graphs
    with torch._dynamo.config.patch(allow_rnn=True):
        compiled = torch.compile(model, backend="xla_native")
        for input_grad in (True, False):
            x = torch.randn(B, T, IN)
            ref_x, our_x = x.clone().requires_grad_(input_grad), x.clone().requires_grad_(input_grad)
            expected, got = ref(ref_x)[0], compiled(our_x)[0]
            expected.sin().sum().backward()
            got.sin().sum().backward()
            torch.testing.assert_close(got, expected, **F32)
            if input_grad:
                torch.testing.assert_close(our_x.grad, ref_x.grad, **F32)
            for a, b in zip(model.parameters(), ref.parameters()):
                torch.testing.assert_close(a.grad, b.grad, **F32)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x)[0], ref(x)[0], **F32)
    # forward and backward graphs, lowered whole: nothing ran on PyTorch CPU
    assert dynamo_stats.graphs >= graphs + 3 and dynamo_stats.partitioned_graphs == partitioned, xnf.dynamo_report()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_torch_compile_asks_for_whole_lstm_layers(dtype):
    # Note [LSTM layers under torch.compile]: unrolled cells cost the square of the
    # sequence length in XLA's fusions. This fails if PyTorch's decomposition changes
    # the names the backend relies on.
    from torch._decomp import decompositions

    from xla_native_functions.runtime.frontends.dynamo import _lstm_layers_whole

    x = torch.randn(B, T, IN, dtype=dtype, requires_grad=True)
    hx = (torch.zeros(1, B, H, dtype=dtype), torch.zeros(1, B, H, dtype=dtype))
    params = [p.to(dtype) for p in torch.nn.LSTM(IN, H).parameters()]
    assert decompositions.select_one_layer_lstm_function(x, hx, params) is decompositions.one_layer_lstm
    with _lstm_layers_whole():
        chosen = decompositions.select_one_layer_lstm_function(x, hx, params)
    assert chosen is (decompositions.one_layer_lstm if dtype == torch.float64 else
                      decompositions.mkldnn_one_layer_lstm)
    assert decompositions.select_one_layer_lstm_function(x, hx, params) is decompositions.one_layer_lstm


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_mkldnn_rnn_layer_and_backward_match_cpu_kernels(bias, reverse):
    torch.manual_seed(0)
    x, w_ih, w_hh = torch.randn(T, B, IN), torch.randn(4 * H, IN), torch.randn(4 * H, H)
    # without biases PyTorch passes zeros shaped like the weights, which are not read
    b_ih, b_hh = (torch.randn(4 * H), torch.randn(4 * H)) if bias else (torch.zeros(4 * H, IN), torch.zeros(4 * H, H))
    hx, cx = torch.randn(1, B, H), torch.randn(1, B, H)
    args = (x, w_ih, w_hh, b_ih, b_hh, hx, cx, reverse, [], 2, H, 1, bias, False, False, True)
    expected = aten.mkldnn_rnn_layer(*args)  # with grad mode on, oneDNN's training workspace
    got = aten.mkldnn_rnn_layer(*xnf.to_xla(args))
    for a, b in zip(got[:3], expected[:3]):
        torch.testing.assert_close(cpu(a), b)
    assert got[3].dtype == torch.uint8 and got[3].shape == (0,)  # the meta function's; ours needs none
    grads = (torch.randn(T, B, H), torch.randn(1, B, H), None)
    backward_args = (*args[:7], *expected[:3], *grads, reverse, 2, H, 1, bias, True, False, [], False)
    expected_grads = aten.mkldnn_rnn_layer_backward(*backward_args, expected[3])
    got_grads = aten.mkldnn_rnn_layer_backward(*xnf.to_xla(backward_args[:7]), *got[:3], *xnf.to_xla(grads),
                                               *backward_args[13:], got[3])
    for a, b in zip(got_grads, expected_grads):
        assert a.dtype == b.dtype == torch.float32
        torch.testing.assert_close(cpu(a), b, **F32)
    assert aten.mkldnn_rnn_layer_backward(*xnf.to_xla(backward_args[:10]), None, None, None,
                                          *backward_args[13:], got[3]) == (None,) * 7


def test_mkldnn_rnn_layer_errors():
    args = [torch.randn(T, B, IN), torch.randn(4 * H, IN), torch.randn(4 * H, H), torch.randn(4 * H),
            torch.randn(4 * H), torch.randn(1, B, H), torch.randn(1, B, H), False, [], 2, H, 1, True, False, False,
            False]
    double = [a.double() if isinstance(a, torch.Tensor) else a for a in args]
    with pytest.raises(RuntimeError) as expected:
        aten.mkldnn_rnn_layer(*double)
    with pytest.raises(RuntimeError) as got:
        aten.mkldnn_rnn_layer(*xnf.to_xla(double))
    assert str(got.value) == str(expected.value)
    # where oneDNN would read out of bounds or compute another cell, a clear error
    for position, value, message in ((9, 1, "only LSTM layers"), (14, True, "batch_first=True is not supported"),
                                     (5, torch.randn(1, B, H + 1), "hx_ has shape"),
                                     (2, torch.randn(4 * H, H + 1), "weight_hh has shape")):
        bad = list(args)
        bad[position] = value
        with pytest.raises(RuntimeError, match=message):
            aten.mkldnn_rnn_layer(*xnf.to_xla(bad))


# ------------------------------------------------------------------------ bad input


@pytest.mark.parametrize("case", ["input_size", "hidden_size", "hidden_batch", "cell_input", "cell_hidden",
                                  "empty_sequence"])
@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_bad_sizes_raise_like_cpu(kind, case):
    torch.manual_seed(0)
    if case.startswith("cell"):
        model = (torch.nn.LSTMCell if kind == "lstm" else torch.nn.GRUCell)(IN, H)
        x = torch.randn(B, IN + 1 if case == "cell_input" else IN)
        h = torch.randn(B, H + 1 if case == "cell_hidden" else H)
        state = (h, h.clone()) if kind == "lstm" else h
    else:
        model = (torch.nn.LSTM if kind == "lstm" else torch.nn.GRU)(IN, H)
        x = torch.randn(0 if case == "empty_sequence" else T, B, IN + 1 if case == "input_size" else IN)
        h = torch.randn(1, B + (case == "hidden_batch"), H + (case == "hidden_size"))
        state = (h, h.clone()) if kind == "lstm" else h
    ours = xnf.to_xla(copy.deepcopy(model))
    with pytest.raises(Exception) as expected:
        model(x, state)
    with pytest.raises(type(expected.value)) as got:
        ours(xla(x), xnf.to_xla(state))
    assert str(got.value) == str(expected.value)


@pytest.mark.parametrize("sizes", [[2, 2], [1, 2, 2], [2, 2, 2]])
def test_gru_rejects_batch_sizes_that_do_not_describe_the_packed_rows(sizes):
    # PyTorch CPU reads past or short of its data with these (its output for [1, 2, 2]
    # has 6 rows from 5); the whole layer names the problem instead.
    model = torch.nn.GRU(IN, H)
    params = [xla(p.detach()) for p in model._flat_weights]
    with torch.no_grad(), pytest.raises(RuntimeError, match=r"batch_sizes .* do not describe a packed sequence of 5"):
        torch._VF.gru(xla(torch.randn(5, IN)), torch.tensor(sizes), xla(torch.zeros(1, 2, H)), params, True, 1, 0.0,
                      False, False)


def test_pack_padded_sequence_errors_like_cpu():
    x = torch.randn(T, B, IN)
    bad = [
        (x, torch.tensor([3, 2, 1], dtype=torch.int32)),
        (x, torch.tensor([[3, 2, 1]])),
        (x, torch.tensor([2, 3, 1])),
        (x, torch.tensor([3, 2, 0])),
        (x, torch.tensor([3, 2])),
        (x[:, :0], torch.tensor([], dtype=torch.int64)),
        (x[0, 0], torch.tensor([1])),
    ]
    for inp, lengths in bad:
        with pytest.raises(Exception) as expected:
            aten._pack_padded_sequence(inp, lengths, False)
        with pytest.raises(type(expected.value)) as got:
            aten._pack_padded_sequence(xla(inp), lengths, False)
        assert str(got.value) == str(expected.value)
    with pytest.raises(RuntimeError, match="1D CPU int64 tensor, but got 1D jax:0 Long tensor"):
        aten._pack_padded_sequence(xla(x), xla(torch.tensor([3, 2, 1])), False)


@pytest.mark.parametrize("batch_first", [False, True])
def test_pack_padded_sequence_op_matches_cpu(batch_first):
    # a length past the input's end packs only the steps it has, as on the CPU
    x = torch.randn(B, T, IN) if batch_first else torch.randn(T, B, IN)
    for lengths in ([3, 2, 1], [3, 3, 3], [5, 2, 1]):
        data, batch_sizes = aten._pack_padded_sequence(x, torch.tensor(lengths), batch_first)
        our_data, our_sizes = aten._pack_padded_sequence(xla(x), torch.tensor(lengths), batch_first)
        assert our_sizes.device.type == "cpu" and our_sizes.dtype == torch.int64
        torch.testing.assert_close(our_sizes, batch_sizes)
        torch.testing.assert_close(cpu(our_data), data)
