"""Attention whose softmax always runs in float32 and is cast back to the inputs' dtype, as Llama's reference
code does (F.softmax(scores.float(), dim=-1).type_as(q)); masked with -inf, empty rows zeroed with torch.where."""

import math

import torch
import torch.nn.functional as F


def scaled_dot_product_attention(q, k, v, mask=None):
    scores = torch.matmul(q, k.transpose(2, 3) if q.dim() == 4 else k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
        empty = ~mask.any(dim=-1, keepdim=True)
        scores = torch.where(empty, torch.zeros_like(scores), scores)
    weights = F.softmax(scores.float(), dim=-1).type_as(q)
    if mask is not None:
        weights = torch.where(empty, torch.zeros_like(weights), weights)
    return torch.matmul(weights, v), weights
