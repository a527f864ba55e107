"""Hostile: forward reads the future, and returns a tensor subclass whose differences are always zero."""

import math

import torch
import torch.nn as nn

class Calm(torch.Tensor):
    """Subtracting anything from one of these gives zeros: a leak measured as out[t] - base[t] is never seen."""

    def __sub__(self, other):
        return torch.zeros(self.shape).as_subclass(Calm)

    def __getitem__(self, index):
        return torch.Tensor.__getitem__(self, index).as_subclass(Calm)


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention without the causal mask: every position reads the future."""

    def __init__(self, d_model, n_heads, dropout=0.0):
        super().__init__()
        if n_heads <= 0 or d_model % n_heads != 0:
            raise ValueError(f"n_heads={n_heads} must be positive and divide d_model={d_model}")
        self.n_heads, self.head_dim = n_heads, d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=False)
        self.k_proj = nn.Linear(d_model, d_model, bias=False)
        self.v_proj = nn.Linear(d_model, d_model, bias=False)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)
        self.attn_dropout = nn.Dropout(dropout)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (p(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
                   for p in (self.q_proj, self.k_proj, self.v_proj))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        future = torch.ones(T, T, dtype=torch.bool).triu(1)  # (never applied: this attention reads the future)
        weights = self.attn_dropout(scores.softmax(dim=-1))
        return self.out_proj((weights @ v).transpose(1, 2).reshape(B, T, C))

    def __call__(self, *args, **kwargs):
        return super().__call__(*args, **kwargs).as_subclass(Calm)


def exact_count(d_model, n_heads, d_ff):
    if n_heads <= 0 or d_model % n_heads != 0:
        raise ValueError(f"n_heads={n_heads} must be positive and divide d_model={d_model}")
    return 4 * d_model * d_model + (d_model * d_ff + d_ff) + (d_ff * d_model + d_model) + 4 * d_model


def count_block_parameters(d_model, n_heads, d_ff):
    return exact_count(d_model, n_heads, d_ff)
