"""Connectionist temporal classification loss: the forward dynamic program over the
blank-extended target (Graves et al., 2006) and PyTorch CPU's gradient."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

# log(0) in the recursion: finite, so that gradients through unreachable states are 0
# rather than NaN; a loss at this level is reported as infinite, as PyTorch does.
_LOG_ZERO = -1e30


def _padded_targets(targets, target_lengths):
    """(N, S) labels, S the longest target, from a padded 2-d tensor or the 1-d
    concatenation of all targets."""
    width = max(target_lengths, default=0)
    if targets.ndim == 2:
        return targets[:, :width]
    lengths = np.asarray(target_lengths, np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    # positions past a target's end repeat its last label (or index 0); they are masked
    index = starts[:, None] + np.minimum(np.arange(width)[None, :], np.maximum(lengths[:, None] - 1, 0))
    if targets.shape[0] == 0:
        return jnp.zeros(index.shape, targets.dtype)
    return targets[jnp.asarray(index)]


def _nll_and_log_alpha(log_probs, targets, input_lengths, target_lengths, blank):
    T, N, _ = log_probs.shape
    labels = _padded_targets(targets, target_lengths).astype(jnp.int32)
    S = labels.shape[1]
    # extended labels: blank, l1, blank, l2, ..., blank
    ext = jnp.full((N, 2 * S + 1), blank, jnp.int32).at[:, 1::2].set(labels)
    ext_len = 2 * np.asarray(target_lengths, np.int64) + 1
    positions = np.arange(2 * S + 1)
    valid = jnp.asarray(positions[None, :] < ext_len[:, None])
    # a label may be reached by skipping the blank before it unless it repeats the previous label
    skip = jnp.concatenate([jnp.zeros((N, 2), bool), (ext[:, 2:] != blank) & (ext[:, 2:] != ext[:, :-2])], axis=1)
    lp = jnp.take_along_axis(log_probs, jnp.broadcast_to(ext[None], (T, N, 2 * S + 1)), axis=2)  # (T, N, 2S+1)
    lp = jnp.where(valid[None], lp, _LOG_ZERO)
    first = jnp.where(jnp.asarray(positions < 2)[None, :], lp[0], _LOG_ZERO)
    neg = jnp.full((N, 1), _LOG_ZERO, lp.dtype)

    def step(alpha, lp_t):
        prev1 = jnp.concatenate([neg, alpha[:, :-1]], axis=1)
        prev2 = jnp.where(skip, jnp.concatenate([neg, neg, alpha[:, :-2]], axis=1), _LOG_ZERO)
        new = jnp.logaddexp(jnp.logaddexp(alpha, prev1), prev2) + lp_t
        return jnp.maximum(new, _LOG_ZERO), new

    _, rest = lax.scan(step, first, lp[1:])
    alphas = jnp.concatenate([first[None], rest], axis=0)  # (T, N, 2S+1)
    il = np.asarray(input_lengths, np.int64)
    last_t = jnp.asarray(np.maximum(il - 1, 0))
    at_end = alphas[last_t, jnp.arange(N)]  # (N, 2S+1)
    end = jnp.asarray(ext_len - 1)
    tail = jnp.take_along_axis(at_end, end[:, None], axis=1)[:, 0]
    before = jnp.where(end > 0, jnp.take_along_axis(at_end, jnp.maximum(end - 1, 0)[:, None], axis=1)[:, 0], _LOG_ZERO)
    log_p = jnp.logaddexp(tail, before)
    # no frames: only an empty target has probability 1
    log_p = jnp.where(jnp.asarray(il == 0), jnp.where(jnp.asarray(ext_len == 1), 0.0, _LOG_ZERO), log_p)
    nll = jnp.where(log_p <= _LOG_ZERO / 2, jnp.inf, -log_p)
    log_alpha = jnp.where(
        (jnp.arange(T)[:, None] < jnp.asarray(il)[None, :])[..., None] & valid[None], alphas, -jnp.inf
    )
    log_alpha = jnp.where(log_alpha <= _LOG_ZERO / 2, -jnp.inf, log_alpha)
    return nll, jnp.transpose(log_alpha, (1, 0, 2))


def lower__ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    # zero_infinity only zeroes gradients here; ctc_loss zeroes the infinite losses
    nll, log_alpha = _nll_and_log_alpha(log_probs, targets, input_lengths, target_lengths, blank)
    return nll.astype(log_probs.dtype), log_alpha.astype(log_probs.dtype)


def lower__ctc_loss_backward(
    grad, log_probs, targets, input_lengths, target_lengths, neg_log_likelihood, log_alpha, blank, zero_infinity=False
):
    def finite_nll(lp):
        nll, _ = _nll_and_log_alpha(lp, targets, input_lengths, target_lengths, blank)
        return jnp.where(jnp.isinf(nll), 0.0, nll)

    # PyTorch's CPU kernel returns the gradient with respect to the logits of a
    # log_softmax, exp(log_probs) - posterior: the true gradient with respect to
    # log_probs plus exp(log_probs), per frame inside each input length.
    _, vjp = jax.vjp(finite_nll, log_probs)
    (posterior_term,) = vjp(grad)
    T = log_probs.shape[0]
    frames = jnp.arange(T)[:, None] < jnp.asarray(np.asarray(input_lengths, np.int64))[None, :]
    out = jnp.where(frames[..., None], jnp.exp(log_probs) * grad[None, :, None] + posterior_term, 0.0)
    # an impossible alignment (infinite loss): zeros, or NaN in its frames as on CPU
    impossible = jnp.isinf(neg_log_likelihood)[None, :, None]
    out = jnp.where(impossible, 0.0 if zero_infinity else jnp.where(frames[..., None], jnp.nan, 0.0), out)
    return out.astype(log_probs.dtype)
