"""torch.optim's fused kernels (`Adam(..., fused=True)`, AdamW, SGD, Adagrad; Hugging
Face's `adamw_torch_fused`): each parameter's update is one node computing what
PyTorch's CPU kernel computes (lowerings/optimizers.py), so a step takes one executable
per parameter eagerly and fuses into the graph of a compiled step."""

from __future__ import annotations

import torch

from ..exec.eager import run_node
from ..exec.registry import node


def _learning_rate(lr):
    """(the learning rate as a tensor or None, as a float): the tensor_lr overloads take a
    0-dim tensor, which stays on the device instead of being read on the host."""
    return (lr, 0.0) if isinstance(lr, torch.Tensor) else (None, float(lr))


def _check_lengths(**lists) -> None:
    for name, (values, expected) in lists.items():
        if len(values) != expected:
            raise RuntimeError(f"Expected {name} to have {expected} tensors (one per parameter), got {len(values)}")


def _adam(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr, beta1, beta2, weight_decay, eps,
          amsgrad, maximize, grad_scale, found_inf, decoupled_weight_decay):
    n = len(params)
    _check_lengths(grads=(grads, n), exp_avgs=(exp_avgs, n), exp_avg_sqs=(exp_avg_sqs, n),
                   max_exp_avg_sqs=(max_exp_avg_sqs, n if amsgrad else 0), state_steps=(state_steps, n))
    lr_tensor, lr = _learning_rate(lr)
    update = node("fused_adam_update")
    outs = [run_node(update, (params[i], grads[i], exp_avgs[i], exp_avg_sqs[i], max_exp_avg_sqs[i] if amsgrad else None,
                              state_steps[i], lr_tensor, lr, float(beta1), float(beta2), float(weight_decay),
                              float(eps), bool(amsgrad), bool(maximize), decoupled_weight_decay, grad_scale,
                              found_inf))
            for i in range(n)]
    return tuple([o[k] for o in outs] for k in range(4)) + ([o[4] for o in outs] if amsgrad else [],)


def impl__fused_adam(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, lr, beta1, beta2,
                     weight_decay, eps, amsgrad, maximize, grad_scale=None, found_inf=None):
    return _adam(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr, beta1, beta2, weight_decay,
                 eps, amsgrad, maximize, grad_scale, found_inf, False)


def impl__fused_adam_tensor_lr(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, lr, beta1, beta2,
                               weight_decay, eps, amsgrad, maximize, grad_scale=None, found_inf=None):
    return _adam(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr, beta1, beta2, weight_decay,
                 eps, amsgrad, maximize, grad_scale, found_inf, False)


def impl__fused_adamw(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, lr, beta1, beta2,
                      weight_decay, eps, amsgrad, maximize, grad_scale=None, found_inf=None):
    return _adam(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr, beta1, beta2, weight_decay,
                 eps, amsgrad, maximize, grad_scale, found_inf, True)


def impl__fused_adamw_tensor_lr(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, lr, beta1,
                                beta2, weight_decay, eps, amsgrad, maximize, grad_scale=None, found_inf=None):
    return _adam(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr, beta1, beta2, weight_decay,
                 eps, amsgrad, maximize, grad_scale, found_inf, True)


def impl__fused_sgd(self, grads, momentum_buffer_list, *, weight_decay, momentum, lr, dampening, nesterov, maximize,
                    is_first_step, grad_scale=None, found_inf=None):
    n = len(self)
    _check_lengths(grads=(grads, n), momentum_buffer_list=(momentum_buffer_list, n if momentum != 0 else 0))
    lr_tensor, lr = _learning_rate(lr)
    update = node("fused_sgd_update")
    outs = [run_node(update, (self[i], grads[i], momentum_buffer_list[i] if momentum != 0 else None, lr_tensor, lr,
                              float(weight_decay), float(momentum), float(dampening), bool(nesterov), bool(maximize),
                              bool(is_first_step), grad_scale, found_inf))
            for i in range(n)]
    return [o[0] for o in outs], [o[1] for o in outs], [o[2] for o in outs] if momentum != 0 else []


def impl__fused_sgd_tensor_lr(self, grads, momentum_buffer_list, *, weight_decay, momentum, lr, dampening, nesterov,
                              maximize, is_first_step, grad_scale=None, found_inf=None):
    return impl__fused_sgd(self, grads, momentum_buffer_list, weight_decay=weight_decay, momentum=momentum, lr=lr,
                           dampening=dampening, nesterov=nesterov, maximize=maximize, is_first_step=is_first_step,
                           grad_scale=grad_scale, found_inf=found_inf)


def _adagrad(self, grads, state_sums, state_steps, lr, lr_decay, weight_decay, eps, maximize, grad_scale, found_inf):
    n = len(self)
    _check_lengths(grads=(grads, n), state_sums=(state_sums, n), state_steps=(state_steps, n))
    lr_tensor, lr = _learning_rate(lr)
    update = node("fused_adagrad_update")
    outs = [run_node(update, (self[i], grads[i], state_sums[i], state_steps[i], lr_tensor, lr, float(lr_decay),
                              float(weight_decay), float(eps), bool(maximize), grad_scale, found_inf))
            for i in range(n)]
    return [o[0] for o in outs], [o[1] for o in outs], [o[2] for o in outs]


def impl__fused_adagrad(self, grads, state_sums, state_steps, *, lr, lr_decay, weight_decay, eps, maximize,
                        grad_scale=None, found_inf=None):
    # This overload's schema also returns the step counts, which the update leaves as they are.
    return _adagrad(self, grads, state_sums, state_steps, lr, lr_decay, weight_decay, eps, maximize, grad_scale,
                    found_inf) + (list(state_steps),)


def impl__fused_adagrad_tensor_lr(self, grads, state_sums, state_steps, *, lr, lr_decay, weight_decay, eps, maximize,
                                  grad_scale=None, found_inf=None):
    return _adagrad(self, grads, state_sums, state_steps, lr, lr_decay, weight_decay, eps, maximize, grad_scale,
                    found_inf)
