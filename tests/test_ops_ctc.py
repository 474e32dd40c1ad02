"""The CTC loss (aten._ctc_loss and its backward, both length overloads) against
PyTorch CPU: losses, the reachable part of log_alpha, gradients (PyTorch's, taken
with respect to log_softmax logits), impossible alignments, errors, and
F.ctc_loss end to end, eagerly, compiled and through torch.compile."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import xla_native_functions as xnf

aten = torch.ops.aten
T, N, C = 7, 3, 5

CASES = {
    "padded": (lambda: torch.randint(1, C, (N, 5)), [7, 5, 6], [4, 2, 0], 0),
    "repeats": (lambda: torch.tensor([[1, 1, 2, 2], [3, 3, 3, 0], [1, 2, 3, 4]]), [7, 7, 6], [4, 3, 4], 0),
    "concatenated_last_blank": (lambda: torch.randint(0, C - 1, (6,)), [7, 5, 4], [3, 2, 1], C - 1),
    "impossible": (lambda: torch.tensor([[1, 1, 1, 1], [2, 2, 2, 2], [1, 2, 1, 2]]), [7, 3, 0], [4, 3, 0], 0),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("zero_infinity", [False, True])
@pytest.mark.parametrize("case", list(CASES))
def test_ctc_loss_and_backward_match_cpu(case, zero_infinity, dtype):
    torch.manual_seed(0)
    make_targets, il, tl, blank = CASES[case]
    lp, targets = torch.randn(T, N, C, dtype=dtype).log_softmax(2), make_targets()
    nll, log_alpha = aten._ctc_loss(lp, targets, il, tl, blank, zero_infinity)
    x_nll, x_log_alpha = aten._ctc_loss(xnf.to_xla(lp), xnf.to_xla(targets), il, tl, blank, zero_infinity)
    torch.testing.assert_close(xnf.to_torch(x_nll), nll)
    assert x_log_alpha.shape == log_alpha.shape and x_log_alpha.dtype == log_alpha.dtype
    ours_alpha = xnf.to_torch(x_log_alpha)
    for n in range(N):  # PyTorch leaves the rest of log_alpha uninitialised
        torch.testing.assert_close(ours_alpha[n, : il[n], : 2 * tl[n] + 1], log_alpha[n, : il[n], : 2 * tl[n] + 1])
    grad = torch.rand(N, dtype=dtype)
    expected = aten._ctc_loss_backward(grad, lp, targets, il, tl, nll, log_alpha, blank, zero_infinity)
    ours = aten._ctc_loss_backward(
        *xnf.to_xla([grad, lp, targets]), il, tl, x_nll, x_log_alpha, blank, zero_infinity
    )
    torch.testing.assert_close(xnf.to_torch(ours), expected, equal_nan=True)


def test_ctc_loss_errors_match_cpu():
    lp = torch.randn(5, 2, 4).log_softmax(2)
    t = torch.randint(1, 4, (2, 3))
    bad = [
        (lp, t, [5, 6], [3, 3], 0),
        (lp, t, [5, 5], [3, 4], 0),
        (lp, t, [5], [3, 3], 0),
        (lp[:, 0], t[0], [5], [3], 0),
        (lp, torch.randint(1, 4, (5,)), [5, 5], [3, 3], 0),
        (lp, t, [5, 5], [-1, 3], 0),
        (lp, t, [5, 5], [3, 3], 4),
    ]
    for lp_, t_, il, tl, blank in bad:
        with pytest.raises(RuntimeError) as expected:
            aten._ctc_loss(lp_, t_, il, tl, blank)
        with pytest.raises(RuntimeError) as ours:
            aten._ctc_loss(xnf.to_xla(lp_), xnf.to_xla(t_), il, tl, blank)
        assert str(ours.value) == str(expected.value)


@pytest.mark.parametrize("lengths_on", ["device", "cpu"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_f_ctc_loss_with_tensor_lengths_eager_and_compiled(reduction, lengths_on):
    """Lengths as device tensors, or as CPU tensors next to device log-probs (PyTorch's
    docs' way, which its decomposition for a tensor subclass would divide by)."""
    torch.manual_seed(0)
    logits = torch.randn(T, N, C, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(1, C, (N, 4))
    il, tl = torch.tensor([7, 6, 5]), torch.tensor([4, 3, 2])

    def loss_fn(x, t, a, b):
        return F.ctc_loss(x.log_softmax(2), t, a, b, reduction=reduction, zero_infinity=True)

    expected = loss_fn(logits, targets, il, tl)
    (expected_grad,) = torch.autograd.grad(expected.sum(), logits)
    ours_logits = xnf.to_xla(logits.detach()).requires_grad_()
    args = [xnf.to_xla(targets), *(xnf.to_xla([il, tl]) if lengths_on == "device" else (il, tl))]
    for run in (loss_fn, xnf.compile(loss_fn), torch.compile(loss_fn, backend="xla_native")):
        ours = run(ours_logits, *args)
        (ours_grad,) = torch.autograd.grad(ours.sum(), ours_logits)
        torch.testing.assert_close(xnf.to_torch(ours), expected)
        torch.testing.assert_close(xnf.to_torch(ours_grad), expected_grad)
    with torch.inference_mode():
        torch.testing.assert_close(xnf.to_torch(loss_fn(ours_logits, *args)), expected.detach())
    with pytest.raises(RuntimeError, match="input_lengths must be integral"):
        loss_fn(ours_logits, args[0], args[1].double(), args[2])
