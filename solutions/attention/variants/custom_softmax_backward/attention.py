"""Attention whose softmax is a torch.autograd.Function with its backward written by hand, correctly:
the Jacobian-vector product of softmax is w * (g - sum(g * w)) along the key axis."""

import math

import torch


class MaskedSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, scores, allowed):
        shifted = scores.masked_fill(~allowed, float("-inf"))
        top = shifted.amax(dim=-1, keepdim=True)
        top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
        e = torch.exp(shifted - top)
        total = e.sum(dim=-1, keepdim=True)
        w = e / torch.where(total > 0, total, torch.ones_like(total))
        ctx.save_for_backward(w)
        return w

    @staticmethod
    def backward(ctx, g):
        (w,) = ctx.saved_tensors
        return w * (g - (g * w).sum(dim=-1, keepdim=True)), None


def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    allowed = torch.ones_like(scores, dtype=torch.bool) if mask is None else mask.expand(scores.shape)
    weights = MaskedSoftmax.apply(scores, allowed)
    return weights @ v, weights
