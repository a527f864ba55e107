"""Attention on flattened batch axes with torch.baddbmm / torch.bmm, the mask expanded before flattening."""

import math

import torch


def scaled_dot_product_attention(q, k, v, mask=None):
    *batch, tq, d = q.shape
    tk, dv = k.shape[-2], v.shape[-1]
    n = math.prod(batch)
    q3, k3, v3 = q.reshape(n, tq, d), k.reshape(n, tk, d), v.reshape(n, tk, dv)
    scores = torch.baddbmm(q3.new_zeros(n, tq, tk), q3, k3.transpose(1, 2), beta=0.0, alpha=1.0 / math.sqrt(d))
    if mask is None:
        weights = torch.softmax(scores, dim=2)
    else:
        allowed = mask.expand(*batch, tq, tk).reshape(n, tq, tk)
        scores = scores.masked_fill(allowed.logical_not(), float("-inf"))
        empty = allowed.any(dim=2, keepdim=True).logical_not()          # queries that may read nothing
        scores = torch.where(empty, torch.zeros_like(scores), scores)
        weights = torch.where(empty, torch.zeros_like(scores), torch.softmax(scores, dim=2))
    out = torch.bmm(weights, v3)
    return out.reshape(*batch, tq, dv), weights.reshape(*batch, tq, tk)
