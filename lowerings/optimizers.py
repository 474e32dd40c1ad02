"""Lowerings of torch.optim's fused updates (`Adam(fused=True)`, AdamW, SGD, Adagrad):
one parameter's update, as PyTorch's CPU kernels compute it. Low-precision parameters
are updated in float32 and rounded once, as there; bias corrections are computed in
float64 from the step count. A gradient scale (GradScaler) divides the gradient, which
is written back unscaled; where `found_inf` is 1 nothing changes."""

from __future__ import annotations

import jax.numpy as jnp


def _compute_dtype(dtype):
    return jnp.float32 if dtype in (jnp.bfloat16, jnp.float16) else dtype


def _gradient(grad, grad_scale, maximize, compute):
    """(the gradient the update uses, the gradient written back)."""
    g = grad.astype(compute)
    written = grad
    if grad_scale is not None:
        g = g / grad_scale.reshape(()).astype(compute)
        written = g.astype(grad.dtype)
    return (-g if maximize else g), written


def _learning_rate(lr_tensor, lr):
    return lr if lr_tensor is None else lr_tensor.reshape(()).astype(jnp.float64)


def _unless_found_inf(found_inf, new, old):
    if found_inf is None:
        return new
    skip = found_inf.reshape(()) == 1.0
    return tuple(None if n is None else jnp.where(skip, o, n) for n, o in zip(new, old))


def _lerp(start, end, weight):
    # torch.lerp's formula, which the kernels use for the first moment
    if abs(weight) < 0.5:
        return start + weight * (end - start)
    return end - (end - start) * (1 - weight)


def lower_fused_adam_update(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step, lr_tensor, lr, beta1, beta2,
                            weight_decay, eps, amsgrad, maximize, decoupled_weight_decay, grad_scale, found_inf):
    compute = _compute_dtype(param.dtype)
    g, grad_out = _gradient(grad, grad_scale, maximize, compute)
    p = param.astype(compute)
    lr = _learning_rate(lr_tensor, lr)
    if weight_decay != 0:
        if decoupled_weight_decay:  # AdamW
            p = p * jnp.asarray(1 - lr * weight_decay).astype(compute)
        else:
            g = g + p * weight_decay
    m = _lerp(exp_avg.astype(compute), g, 1 - beta1)
    v = exp_avg_sq.astype(compute) * beta2 + (1 - beta2) * g * g
    n = step.reshape(()).astype(jnp.float64)
    step_size = jnp.asarray(lr / (1 - beta1 ** n)).astype(compute)
    bias_correction2_sqrt = jnp.sqrt(1 - beta2 ** n).astype(compute)
    v_max = jnp.maximum(max_exp_avg_sq.astype(compute), v) if amsgrad else None
    denom = jnp.sqrt(v if v_max is None else v_max) / bias_correction2_sqrt + eps
    p = p - step_size * m / denom
    new = (p.astype(param.dtype), grad_out, m.astype(exp_avg.dtype), v.astype(exp_avg_sq.dtype),
           None if v_max is None else v_max.astype(max_exp_avg_sq.dtype))
    return _unless_found_inf(found_inf, new, (param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq))


def lower_fused_sgd_update(param, grad, momentum_buffer, lr_tensor, lr, weight_decay, momentum, dampening, nesterov,
                           maximize, is_first_step, grad_scale, found_inf):
    compute = _compute_dtype(param.dtype)
    g, grad_out = _gradient(grad, grad_scale, maximize, compute)
    p = param.astype(compute)
    if weight_decay != 0:
        g = g + p * weight_decay
    buf = None
    if momentum != 0:
        buf = g if is_first_step else momentum_buffer.astype(compute) * momentum + g * (1 - dampening)
        g = g + buf * momentum if nesterov else buf
    p = p - g * jnp.asarray(_learning_rate(lr_tensor, lr)).astype(compute)
    new = (p.astype(param.dtype), grad_out, None if buf is None else buf.astype(param.dtype))
    return _unless_found_inf(found_inf, new, (param, grad, momentum_buffer))


def lower_fused_adagrad_update(param, grad, state_sum, step, lr_tensor, lr, lr_decay, weight_decay, eps, maximize,
                               grad_scale, found_inf):
    compute = _compute_dtype(param.dtype)
    g, grad_out = _gradient(grad, grad_scale, maximize, compute)
    p = param.astype(compute)

    def constant(x):  # the kernel's vectorized loop rounds its constants to the parameters' dtype
        return jnp.asarray(x).astype(param.dtype).astype(compute)

    if weight_decay != 0:
        g = g + p * constant(weight_decay)
    n = step.reshape(()).astype(jnp.float64)
    clr = constant(_learning_rate(lr_tensor, lr) / (1 + (n - 1) * lr_decay))
    s = state_sum.astype(compute) + g * g
    p = p - clr * g / (jnp.sqrt(s) + constant(eps))
    new = (p.astype(param.dtype), grad_out, s.astype(state_sum.dtype))
    return _unless_found_inf(found_inf, new, (param, grad, state_sum))
