"""Attention that lets fully masked rows become NaN and repairs them with nan_to_num.

This is correct, gradient included: every score of such a row went through masked_fill, whose backward
gives masked positions a zero gradient, so the NaN of the softmax's backward never reaches q or k.
"""

import math

import torch


def scaled_dot_product_attention(q, k, v, mask=None):
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(k.size(-1))
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), -math.inf)
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
    return torch.matmul(weights, v), weights
