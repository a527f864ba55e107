"""Attention with the masked scores filled with the dtype's most negative finite number (the Hugging Face way)
rather than -inf; the rows with no allowed key, which that fill turns uniform, are multiplied by 0 afterwards."""

import math

import torch


def scaled_dot_product_attention(q, k, v, mask=None):
    scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)))
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights * mask.any(dim=-1, keepdim=True).to(weights.dtype)
    return torch.matmul(weights, v), weights
