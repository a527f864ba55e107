"""Masks with torch.tril on a bool matrix, and a masked softmax that repairs fully masked lines with nan_to_num.

The repair is exact in the backward pass too: every score of a fully masked line went through masked_fill,
whose backward gives masked positions a zero gradient.
"""

import torch


def causal_mask(T, device=None):
    return torch.tril(torch.ones((T, T), device=device)).bool()


def padding_mask(ids, pad_id):
    return (ids != pad_id).reshape(ids.shape[0], 1, 1, ids.shape[1])


def combine_masks(causal, padding):
    return causal.unsqueeze(0).unsqueeze(0) & padding


def masked_softmax(scores, mask, dim=-1):
    return torch.nan_to_num(torch.softmax(scores.masked_fill(mask.logical_not(), float("-inf")), dim=dim), nan=0.0)
