"""Shape functions of torch.optim's fused updates (lowerings/optimizers.py): each
result has the shape and dtype of the tensor it replaces."""

from __future__ import annotations

from .common import TensorMeta


def _like(t):
    return None if t is None else TensorMeta(tuple(t.shape), t.dtype)


def fused_adam_update_output_shape(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step, lr_tensor, lr, beta1,
                                   beta2, weight_decay, eps, amsgrad, maximize, decoupled_weight_decay, grad_scale,
                                   found_inf):
    return (_like(param), _like(grad), _like(exp_avg), _like(exp_avg_sq),
            _like(max_exp_avg_sq) if amsgrad else None)


def fused_sgd_update_output_shape(param, grad, momentum_buffer, lr_tensor, lr, weight_decay, momentum, dampening,
                                  nesterov, maximize, is_first_step, grad_scale, found_inf):
    return _like(param), _like(grad), _like(param) if momentum != 0 else None


def fused_adagrad_update_output_shape(param, grad, state_sum, step, lr_tensor, lr, lr_decay, weight_decay, eps,
                                      maximize, grad_scale, found_inf):
    return _like(param), _like(grad), _like(state_sum)
