"""Masks via triu(1).logical_not(), unsqueeze, and a softmax over finfo.min-filled scores, then zeroed by the mask."""

import torch


def causal_mask(T, device=None):
    return torch.ones(T, T, dtype=torch.bool, device=device).triu(1).logical_not()


def padding_mask(ids, pad_id):
    return (ids != pad_id).unsqueeze(1).unsqueeze(2)


def combine_masks(causal, padding):
    return padding & causal


def masked_softmax(scores, mask, dim=-1):
    # finfo.min instead of -inf: a fully masked line becomes uniform instead of NaN, and the product with
    # the mask then zeroes it. In lines with an allowed entry, exp(min - max) underflows to exactly 0.
    filled = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return torch.softmax(filled, dim=dim) * mask
