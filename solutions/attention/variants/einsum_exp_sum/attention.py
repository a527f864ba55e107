"""Attention with einsum, torch.where for the mask, and a softmax written out as exp / sum."""

import math

import torch


def scaled_dot_product_attention(q, k, v, mask=None):
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = torch.einsum("...id,...jd->...ij", q, k) * scale          # (..., Tq, Tk)
    if mask is not None:
        allowed = mask.expand_as(scores)
        scores = torch.where(allowed, scores, torch.full_like(scores, float("-inf")))
    # Subtract each row's largest score (a constant per row does not change the softmax); a row with
    # nothing allowed has max -inf, so use 0 there to keep exp(-inf - 0) = 0 instead of NaN.
    top = scores.amax(dim=-1, keepdim=True).detach()
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    e = torch.exp(scores - top)
    total = e.sum(dim=-1, keepdim=True)
    weights = e / torch.where(total > 0, total, torch.ones_like(total))  # empty rows: 0 / 1 = 0
    out = torch.einsum("...ij,...jd->...id", weights, v)                 # (..., Tq, Dv)
    return out, weights
