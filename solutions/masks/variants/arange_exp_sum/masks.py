"""Masks from arange comparisons, logical_and, and a masked softmax written as exp / sum with torch.where."""

import torch


def causal_mask(T, device=None):
    positions = torch.arange(T, device=device)
    return positions[:, None] >= positions[None, :]          # query index >= key index


def padding_mask(ids, pad_id):
    B, T = ids.shape
    return ids.ne(pad_id).view(B, 1, 1, T)


def combine_masks(causal, padding):
    return torch.logical_and(causal, padding)


def masked_softmax(scores, mask, dim=-1):
    mask = mask.expand_as(scores)
    x = torch.where(mask, scores, torch.tensor(float("-inf"), dtype=scores.dtype))
    top = x.amax(dim=dim, keepdim=True).detach()
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))   # empty lines: max is -inf
    e = torch.exp(x - top)
    total = e.sum(dim=dim, keepdim=True)
    return e / torch.where(total > 0, total, torch.ones_like(total))      # empty lines: 0 / 1
