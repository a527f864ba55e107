"""VARIANT einsum: Attention written with torch.einsum and rearranged heads; causal mask by index comparison."""

import math

import torch
import torch.nn as nn


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0):
        super().__init__()
        if n_heads <= 0 or d_model % n_heads:
            raise ValueError(f"n_heads={n_heads} must be positive and divide d_model={d_model}")
        self.n_heads = n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=False)
        self.k_proj = nn.Linear(d_model, d_model, bias=False)
        self.v_proj = nn.Linear(d_model, d_model, bias=False)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        H = self.n_heads
        D = C // H
        q = self.q_proj(x).reshape(B, T, H, D)
        k = self.k_proj(x).reshape(B, T, H, D)
        v = self.v_proj(x).reshape(B, T, H, D)
        scores = torch.einsum("bihd,bjhd->bhij", q, k) * D ** -0.5
        i = torch.arange(T, device=x.device)
        future = i[None, :] > i[:, None]  # key j after query i
        scores = scores.masked_fill(future, float("-inf"))
        weights = self.dropout(torch.softmax(scores, dim=-1))
        y = torch.einsum("bhij,bjhd->bihd", weights, v).reshape(B, T, C)
        return self.out_proj(y)


def count_block_parameters(d_model: int, n_heads: int, d_ff: int) -> int:
    """Exact number of parameters of DecoderBlock(d_model, n_heads, d_ff), without building it.

    Pure integer arithmetic, so it is exact for sizes far too large to instantiate.
    n_heads does not change the count (heads split d_model, they do not add weights),
    but it must divide d_model, as for the module itself: ValueError otherwise.
    """
    if n_heads <= 0 or d_model % n_heads != 0:
        raise ValueError(f"n_heads={n_heads} must be positive and divide d_model={d_model}")
    attention = 4 * d_model * d_model  # Q, K, V, O: d x d each, no bias
    feedforward = (d_model * d_ff + d_ff) + (d_ff * d_model + d_model)  # two Linears with bias
    layer_norms = 2 * (2 * d_model)  # ln_attention and ln_feedforward: weight + bias each
    return attention + feedforward + layer_norms


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
