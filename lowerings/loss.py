"""Lowerings of loss functions and their backward ops. `reduction` is ATen's enum:
0 none, 1 mean, 2 sum. Reduced-precision inputs compute in float32 (opmath).

Class targets are data: a target outside [0, C) (other than ignore_index) makes PyTorch
raise; here it reads a NaN weight/score instead (Note [Out-of-bounds indices] in
lowerings/indexing.py), so the loss is NaN rather than plausibly wrong."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .common import opmath
from .indexing import bounded

NONE, MEAN, SUM = 0, 1, 2


def _reduce(loss, reduction):
    if reduction == MEAN:
        return jnp.mean(loss)
    if reduction == SUM:
        return jnp.sum(loss)
    return loss


def _grad_scale(grad_output, shape, reduction):
    """grad_output as it multiplies each element's derivative."""
    g = opmath(grad_output)
    if reduction == MEAN:
        n = 1
        for s in shape:
            n *= s
        g = g / n
    return g


# ---------------------------------------------------------------- nll_loss


def _nll_parts(self, target, weight, ignore_index, class_dim):
    """(per-element picked log-prob, per-element weight, class-last input)."""
    x = opmath(self)
    x = jnp.moveaxis(x, class_dim, -1) if x.ndim > 1 else x
    c = x.shape[-1]
    valid = target != ignore_index
    t = bounded(jnp.where(valid, target, 0), c, wrap=False)
    picked = jnp.take_along_axis(x, t[..., None], axis=-1, mode="fill", fill_value=jnp.nan)[..., 0]
    if weight is None:
        w = jnp.where(t < c, jnp.ones((), x.dtype), jnp.nan)
    else:
        w = jnp.take(opmath(weight), t, mode="fill", fill_value=jnp.nan)
    w = jnp.where(valid, w, jnp.zeros((), x.dtype))
    return jnp.where(valid, picked, jnp.zeros((), x.dtype)), w, t, valid


def _nll_forward(self, target, weight, reduction, ignore_index, class_dim):
    picked, w, _, _ = _nll_parts(self, target, weight, ignore_index, class_dim)
    losses = -picked * w
    total = jnp.sum(w)
    if reduction == NONE:
        out = losses
        if self.ndim > 1:
            total = jnp.zeros((), total.dtype)
    elif reduction == SUM:
        out = jnp.sum(losses)
    else:
        out = jnp.sum(losses) / total
    return out.astype(self.dtype), total.astype(self.dtype)


def _nll_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight, class_dim):
    _, w, t, valid = _nll_parts(self, target, weight, ignore_index, class_dim)
    g = opmath(grad_output)
    if reduction == MEAN:
        g = g / opmath(total_weight)
    # an ignored element's gradient is 0 even when every element is ignored (mean
    # reduction: g is then inf or NaN, and 0 * inf would be NaN); PyTorch never writes it
    dpicked = jnp.where(valid, -w * g, jnp.zeros((), w.dtype))
    dt = jnp.result_type(dpicked.dtype, opmath(self).dtype)
    if self.ndim == 1:
        grad = jnp.zeros(self.shape, dt).at[t].set(dpicked, mode="drop")
        return grad.astype(self.dtype)
    moved = jnp.zeros(jnp.moveaxis(self, class_dim, -1).shape, dt)
    coords = list(jnp.indices(t.shape, sparse=True)) + [t]
    moved = moved.at[tuple(coords)].set(jnp.broadcast_to(dpicked, t.shape), mode="drop")
    return jnp.moveaxis(moved, -1, class_dim).astype(self.dtype)


def lower_nll_loss_forward(self, target, weight, reduction, ignore_index):
    return _nll_forward(self, target, weight, reduction, ignore_index, 1)


def lower_nll_loss_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight):
    return _nll_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight, 1)


def lower_nll_loss2d_forward(self, target, weight, reduction, ignore_index):
    return _nll_forward(self, target, weight, reduction, ignore_index, 1)


def lower_nll_loss2d_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight):
    return _nll_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight, 1)


# ---------------------------------------------------------------- pointwise losses


def _diff(self, target):
    return opmath(self) - opmath(target)


def lower_mse_loss(self, target, reduction=1):
    return _reduce(jnp.square(_diff(self, target)), reduction).astype(self.dtype)


def lower_mse_loss_backward(grad_output, self, target, reduction):
    d = _diff(self, target)
    return (2 * d * _grad_scale(grad_output, d.shape, reduction)).astype(self.dtype)


def _smooth_l1(d, beta):
    z = jnp.abs(d)
    if beta == 0:
        return z
    return jnp.where(z < beta, 0.5 * z * z / beta, z - 0.5 * beta)


def lower_smooth_l1_loss(self, target, reduction=1, beta=1.0):
    return _reduce(_smooth_l1(_diff(self, target), beta), reduction).astype(self.dtype)


def lower_smooth_l1_loss_backward(grad_output, self, target, reduction, beta):
    d = _diff(self, target)
    g = _grad_scale(grad_output, jnp.broadcast_shapes(d.shape, grad_output.shape), reduction)
    deriv = jnp.sign(d) if beta == 0 else jnp.where(jnp.abs(d) < beta, d / beta, jnp.sign(d))
    return (deriv * g).astype(self.dtype)


def lower_huber_loss(self, target, reduction=1, delta=1.0):
    z = jnp.abs(_diff(self, target))
    loss = jnp.where(z < delta, 0.5 * z * z, delta * (z - 0.5 * delta))
    return _reduce(loss, reduction).astype(self.dtype)


def lower_huber_loss_backward(grad_output, self, target, reduction, delta):
    d = _diff(self, target)
    g = _grad_scale(grad_output, jnp.broadcast_shapes(d.shape, grad_output.shape), reduction)
    deriv = jnp.clip(d, -delta, delta)
    return (deriv * g).astype(self.dtype)


def _bce(x, t):
    # log is clamped at -100, as PyTorch does, so x in {0, 1} gives a finite loss.
    return -(t * jnp.maximum(jnp.log(x), -100.0) + (1 - t) * jnp.maximum(jnp.log1p(-x), -100.0))


def lower_binary_cross_entropy(self, target, weight=None, reduction=1):
    loss = _bce(opmath(self), opmath(target))
    if weight is not None:
        loss = loss * opmath(weight)
    return _reduce(loss, reduction).astype(self.dtype)


def lower_binary_cross_entropy_backward(grad_output, self, target, weight=None, reduction=1):
    x, t = opmath(self), opmath(target)
    grad = (x - t) / jnp.maximum((1 - x) * x, 1e-12)
    if weight is not None:
        grad = grad * opmath(weight)
    g = _grad_scale(grad_output, jnp.broadcast_shapes(x.shape, t.shape), reduction)
    return (grad * g).astype(self.dtype)


def lower_binary_cross_entropy_with_logits(self, target, weight=None, pos_weight=None, reduction=1):
    x, t = opmath(self), opmath(target)
    # log(1 + exp(-x)) without overflow: log1p(exp(-|x|)) + max(-x, 0).
    softplus_neg = jnp.log1p(jnp.exp(-jnp.abs(x))) + jnp.maximum(-x, 0)
    if pos_weight is not None:
        log_weight = (opmath(pos_weight) - 1) * t + 1
        loss = (1 - t) * x + log_weight * softplus_neg
    else:
        loss = (1 - t) * x + softplus_neg
    if weight is not None:
        loss = loss * opmath(weight)
    return _reduce(loss, reduction).astype(self.dtype)


def lower_soft_margin_loss(self, target, reduction=1):
    z = -opmath(target) * opmath(self)
    loss = jnp.log1p(jnp.exp(-jnp.abs(z))) + jnp.maximum(z, 0)
    return _reduce(loss, reduction).astype(self.dtype)


def lower_soft_margin_loss_backward(grad_output, self, target, reduction):
    x, y = opmath(self), opmath(target)
    z = jnp.exp(-y * x)
    g = _grad_scale(grad_output, jnp.broadcast_shapes(x.shape, y.shape), reduction)
    return (-y * z / (1 + z) * g).astype(self.dtype)


# ---------------------------------------------------------------- margin losses


def _multi_margin(self, target, p, margin, weight, reduction):
    x = opmath(self)
    x2 = x.reshape(-1, x.shape[-1]) if x.ndim else x.reshape(1, 1)
    t = target.reshape(-1)
    c = x2.shape[1]
    tb = bounded(t, c, wrap=False)
    xy = jnp.take_along_axis(x2, tb[:, None], axis=1, mode="fill", fill_value=jnp.nan)
    z = jnp.maximum(margin - xy + x2, 0)
    z = jnp.where(jnp.asarray(p) == 2, z * z, z)  # p is a runtime Scalar: 1 or 2
    if weight is not None:
        z = z * jnp.take(opmath(weight), tb, mode="fill", fill_value=jnp.nan)[:, None]
    z = jnp.where(jnp.arange(c)[None, :] == tb[:, None], jnp.zeros((), z.dtype), z)
    per_sample = jnp.sum(z, axis=1) / c
    if reduction == NONE:
        return per_sample.reshape(target.shape) if target.ndim else per_sample.reshape(())
    return _reduce(per_sample, reduction)


def lower_multi_margin_loss(self, target, p=1, margin=1, weight=None, reduction=1):
    return _multi_margin(self, target, p, margin, weight, reduction).astype(self.dtype)


def lower_multi_margin_loss_backward(grad_output, self, target, p, margin, weight=None, reduction=1):
    x = opmath(self)
    _, vjp = jax.vjp(lambda v: _multi_margin(v, target, p, margin, weight, reduction), x)
    (grad,) = vjp(
        opmath(grad_output).astype(x.dtype).reshape(jnp.shape(_multi_margin(x, target, p, margin, weight, reduction)))
    )
    return grad.astype(self.dtype)


def _multilabel_margin(self, target, reduction):
    x = opmath(self)
    x2 = x.reshape(-1, x.shape[-1]) if x.ndim else x.reshape(1, 1)
    t2 = target.reshape(x2.shape)
    n, c = x2.shape
    # Each row's targets are the entries before its first -1.
    valid = jnp.cumprod((t2 >= 0).astype(jnp.int32), axis=1).astype(jnp.bool_)
    tb = bounded(jnp.where(valid, t2, c), c, wrap=False)
    rows = jnp.arange(n)[:, None]
    is_target = jnp.zeros((n, c), x.dtype).at[rows, tb].set(1, mode="drop")
    xt = jnp.take_along_axis(x2, jnp.where(valid, tb, 0), axis=1, mode="fill", fill_value=jnp.nan)
    hinge = jnp.maximum(1 - xt[:, :, None] + x2[:, None, :], 0)
    hinge = hinge * valid[:, :, None] * (1 - is_target)[:, None, :]
    per_sample = jnp.sum(hinge, axis=(1, 2)) / c
    if reduction == NONE:
        out = per_sample if x.ndim > 1 else per_sample.reshape(())
    else:
        out = _reduce(per_sample, reduction)
    return out, is_target.reshape(self.shape)


def lower_multilabel_margin_loss_forward(self, target, reduction):
    out, is_target = _multilabel_margin(self, target, reduction)
    return out.astype(self.dtype), is_target.astype(self.dtype)


def lower_multilabel_margin_loss_backward(grad_output, self, target, reduction, is_target):
    x = opmath(self)
    out, vjp = jax.vjp(lambda v: _multilabel_margin(v, target, reduction)[0], x)
    (grad,) = vjp(jnp.broadcast_to(opmath(grad_output), out.shape).astype(out.dtype))
    return grad.astype(self.dtype)
