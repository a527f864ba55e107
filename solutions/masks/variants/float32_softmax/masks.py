"""Masks with triu/unsqueeze, and a masked softmax that always normalises in float32 (scores.float(), as mixed-precision
code does) and casts the result back to the scores' dtype; empty lines zeroed with torch.where."""

import torch


def causal_mask(T, device=None):
    return ~torch.ones(T, T, dtype=torch.bool, device=device).triu(diagonal=1)


def padding_mask(ids, pad_id):
    if ids.dim() != 2:
        raise ValueError(f"ids must be [B, T], got {tuple(ids.shape)}")
    return (ids != pad_id).unsqueeze(1).unsqueeze(2)


def combine_masks(causal, padding):
    return causal.unsqueeze(0).unsqueeze(0) & padding if causal.dim() == 2 else causal & padding


def masked_softmax(scores, mask, dim=-1):
    wide = scores.float().masked_fill(~mask, float("-inf"))
    keeps = mask.expand_as(wide).any(dim=dim, keepdim=True)
    wide = torch.where(keeps, wide, torch.zeros_like(wide))
    p = torch.softmax(wide, dim=dim)
    return torch.where(keeps, p, torch.zeros_like(p)).to(scores.dtype)
