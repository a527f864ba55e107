"""VARIANT fused_qkv: One fused QKV product from the concatenated weights of the three contract Linears; torch.where masking."""

import math

import torch
import torch.nn as nn


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0):
        super().__init__()
        if n_heads < 1:
            raise ValueError(f"n_heads must be at least 1, got {n_heads}")
        if d_model % n_heads != 0:
            raise ValueError(f"n_heads={n_heads} does not divide d_model={d_model}")
        self.d_model, self.n_heads = d_model, n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=False)
        self.k_proj = nn.Linear(d_model, d_model, bias=False)
        self.v_proj = nn.Linear(d_model, d_model, bias=False)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)
        self.p = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        H, D = self.n_heads, C // self.n_heads
        w = torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight], dim=0)  # (3C, C)
        qkv = (x @ w.t()).view(B, T, 3, H, D).permute(2, 0, 3, 1, 4)  # (3, B, H, T, D)
        q, k, v = qkv.unbind(0)
        scores = q @ k.transpose(-1, -2) / math.sqrt(D)
        allowed = torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device))
        scores = torch.where(allowed, scores, torch.full_like(scores, float("-inf")))
        weights = torch.nn.functional.dropout(scores.softmax(-1), p=self.p, training=self.training)
        y = (weights @ v).permute(0, 2, 1, 3).reshape(B, T, C)
        return self.out_proj(y)


def count_block_parameters(d_model: int, n_heads: int, d_ff: int) -> int:
    if n_heads <= 0 or d_model % n_heads:
        raise ValueError(f"n_heads={n_heads} must be positive and divide d_model={d_model}")
    linear = lambda n_in, n_out, bias: n_in * n_out + (n_out if bias else 0)
    return (sum(linear(d_model, d_model, False) for _ in range(4))
            + linear(d_model, d_ff, True) + linear(d_ff, d_model, True)
            + 2 * (d_model + d_model))


# ---------------------------------------------------------------------------------------------
# Given: the feed-forward network and the block that wires everything together.


class FeedForward(nn.Module):
    """Position-wise MLP: Linear(d_model, d_ff) -> GELU -> Linear(d_ff, d_model), with biases."""

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.fc_in = nn.Linear(d_model, d_ff)
        self.act = nn.GELU()
        self.fc_out = nn.Linear(d_ff, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc_out(self.act(self.fc_in(x)))  # (B, T, C)


class DecoderBlock(nn.Module):
    """Pre-LN decoder block.

    x = x + attention(ln_attention(x))
    x = x + feedforward(ln_feedforward(x))
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.0):
        super().__init__()
        self.ln_attention = nn.LayerNorm(d_model)
        self.attention = CausalSelfAttention(d_model, n_heads, dropout)
        self.ln_feedforward = nn.LayerNorm(d_model)
        self.feedforward = FeedForward(d_model, d_ff)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.ln_attention(x))  # (B, T, C)
        x = x + self.feedforward(self.ln_feedforward(x))  # (B, T, C)
        return x
