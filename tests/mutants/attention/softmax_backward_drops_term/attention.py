"""Single-head scaled dot-product attention, written out by hand.

Exercise `attention`. Each query scores every key with a dot product, the scores are divided by
`sqrt(D)`, masked, turned into probabilities with a softmax over the key axis, and the output is the
probability-weighted sum of the values:

    weights = softmax(q @ k^T / sqrt(D)),   out = weights @ v

Contract:
- `scaled_dot_product_attention(q, k, v, mask=None) -> (out, weights)` with `q [..., Tq, D]`,
  `k [..., Tk, D]`, `v [..., Tk, Dv]`, `out [..., Tq, Dv]`, `weights [..., Tq, Tk]`.
- `mask` is a bool tensor broadcastable to `[..., Tq, Tk]`; `True` means "this query may attend to
  this key". It is applied to the scores, before the softmax.
- Weights sum to 1 over the key axis and masked weights are exactly 0. A query whose keys are all
  masked gets all-zero weights and an all-zero output, with no NaN in the forward or backward pass.
"""

import math

import torch


class _Softmax(torch.autograd.Function):
    """softmax over the last axis with a hand-written backward."""

    @staticmethod
    def forward(ctx, scores):
        weights = scores.softmax(dim=-1)
        ctx.save_for_backward(weights)
        return weights

    @staticmethod
    def backward(ctx, grad):
        (weights,) = ctx.saved_tensors
        return weights * grad  # the Jacobian's diagonal only: the -w * sum(w * grad) term is missing


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attend from `q [..., Tq, D]` over `k [..., Tk, D]` / `v [..., Tk, Dv]`.

    Returns `(out [..., Tq, Dv], weights [..., Tq, Tk])`. `mask` (bool, broadcastable to
    `[..., Tq, Tk]`, True = may attend) is optional. Raises `TypeError` for a non-bool mask.
    """
    D = q.size(-1)
    # Divide by sqrt(D): for unit-variance q and k the dot product has variance D, and without the
    # scale the softmax saturates as D grows (near one-hot weights, vanishing gradients).
    scores = q @ k.transpose(-2, -1) / math.sqrt(D)  # (..., Tq, Tk)

    if mask is None:
        weights = _Softmax.apply(scores)  # (..., Tq, Tk), normalised over the keys
    else:
        if mask.dtype != torch.bool:
            # A float mask is usually additive (0 / -inf) while a bool mask says "may attend";
            # guessing which one was meant is how masks end up reversed.
            raise TypeError(f"mask must be a bool tensor (True = may attend), got {mask.dtype}")
        # -inf before the softmax: exp(-inf) = 0, so masked keys get exactly zero weight and the
        # remaining weights still sum to 1 (zeroing after the softmax would break the sum).
        scores = scores.masked_fill(~mask, float("-inf"))  # (..., Tq, Tk)
        # A query with every key masked would be softmax(all -inf) = 0/0 = NaN, and NaN in its
        # backward too. Give such rows finite scores, then zero their weights after the softmax:
        # the zeroing also blocks their gradient, so nothing NaN flows back.
        has_key = mask.any(dim=-1, keepdim=True)  # (..., Tq or 1, 1)
        scores = scores.masked_fill(~has_key, 0.0)  # (..., Tq, Tk)
        weights = _Softmax.apply(scores).masked_fill(~has_key, 0.0)  # (..., Tq, Tk)

    out = weights @ v  # (..., Tq, Tk) @ (..., Tk, Dv) -> (..., Tq, Dv)
    return out, weights
