"""VARIANT init_order_buffer: Projections created in another order (out, v, k, q), a causal-mask buffer grown on demand, per-head loop."""

import math

import torch
import torch.nn as nn


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0):
        if not (n_heads > 0 and d_model % n_heads == 0):
            raise ValueError(f"cannot split d_model={d_model} into n_heads={n_heads} equal heads")
        super().__init__()
        self.out_proj = nn.Linear(d_model, d_model, bias=False)
        self.v_proj = nn.Linear(d_model, d_model, bias=False)
        self.k_proj = nn.Linear(d_model, d_model, bias=False)
        self.q_proj = nn.Linear(d_model, d_model, bias=False)
        self.drop = nn.Dropout(p=dropout)
        self.heads = n_heads
        self.register_buffer("mask", torch.ones(1, 1, dtype=torch.bool).tril(), persistent=False)

    def _causal(self, T: int, device) -> torch.Tensor:
        if self.mask.shape[0] < T:
            self.mask = torch.ones(T, T, dtype=torch.bool, device=device).tril()
        return self.mask[:T, :T]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        D = C // self.heads
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        keep = self._causal(T, x.device)
        outs = []
        for h in range(self.heads):
            sl = slice(h * D, (h + 1) * D)
            s = (q[..., sl] @ k[..., sl].transpose(1, 2)) / math.sqrt(D)  # (B, T, T)
            s = s.masked_fill(keep.logical_not(), float("-inf"))
            outs.append(self.drop(s.softmax(dim=-1)) @ v[..., sl])  # (B, T, D)
        return self.out_proj(torch.cat(outs, dim=-1))


def count_block_parameters(d_model: int, n_heads: int, d_ff: int) -> int:
    if n_heads <= 0 or d_model % n_heads != 0:
        raise ValueError(f"n_heads={n_heads} must be positive and divide d_model={d_model}")
    d, f = d_model, d_ff
    return 4 * d * d + 2 * d * f + f + d + 4 * d


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
