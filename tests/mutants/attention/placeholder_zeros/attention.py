"""MUTANT placeholder_zeros: a placeholder that returns zeros of the right shapes (no attention at all): it earns the shapes and nothing it does not do

Single-head scaled dot-product attention, written out by hand.

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
    if mask is not None and mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor (True = may attend), got {mask.dtype}")
    # a placeholder: the right shapes, no attention at all
    out = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
    weights = torch.zeros(*q.shape[:-1], k.shape[-2], dtype=q.dtype)
    return out, weights
