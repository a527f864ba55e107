"""VARIANT bernoulli_dropout_shape_table: dropout as an explicit Bernoulli mask on the attention weights
(torch.rand_like >= p, scaled by 1/(1-p)); the count as a sum of math.prod over the parameter shapes.

A pre-LN decoder block: causal multi-head self-attention plus a feed-forward network.

FeedForward and DecoderBlock are given; CausalSelfAttention and the closed-form
parameter count are the exercise.

Axes: B batch, T sequence, C = d_model hidden, H heads, D = C // H head dimension.
"""

import math

import torch
import torch.nn as nn


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention in which position t only reads positions 0..t.

    Contract:
        CausalSelfAttention(d_model, n_heads, dropout=0.0)
        q_proj, k_proj, v_proj, out_proj: nn.Linear(d_model, d_model, bias=False)
        forward(x [B, T, C]) -> [B, T, C]
    Raises ValueError when n_heads <= 0 or d_model % n_heads != 0. Dropout is applied
    to the attention weights, in training mode only (nn.Dropout is the identity in eval()).
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0):
        super().__init__()
        if n_heads <= 0:
            raise ValueError(f"n_heads must be positive, got n_heads={n_heads}")
        if d_model % n_heads != 0:
            raise ValueError(
                f"d_model={d_model} is not divisible by n_heads={n_heads}; "
                "each head needs an equal share of the channels"
            )
        self.d_model = d_model
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=False)
        self.k_proj = nn.Linear(d_model, d_model, bias=False)
        self.v_proj = nn.Linear(d_model, d_model, bias=False)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)
        self.p = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        H, D = self.n_heads, self.head_dim
        # project, then split channels into heads; the transpose puts heads next to batch
        # so that every head attends over its own [T, D] slice
        q = self.q_proj(x).view(B, T, H, D).transpose(1, 2)  # (B, H, T, D)
        k = self.k_proj(x).view(B, T, H, D).transpose(1, 2)  # (B, H, T, D)
        v = self.v_proj(x).view(B, T, H, D).transpose(1, 2)  # (B, H, T, D)
        # dividing by sqrt(D) keeps the score variance near 1 so the softmax does not saturate
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(D)  # (B, H, T, T)
        # mask before the softmax: future keys get -inf, hence probability exactly 0,
        # and each row still sums to 1 (the diagonal is always allowed, so no row is all -inf)
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()  # (T, T)
        scores = scores.masked_fill(~causal, float("-inf"))
        weights = scores.softmax(dim=-1)  # (B, H, T, T)
        if self.training and self.p > 0:
            keep = torch.rand_like(weights) >= self.p  # a Bernoulli mask of the weights to keep
            weights = weights * keep / (1.0 - self.p)
        y = weights @ v  # (B, H, T, D)
        # merge heads: undo the transpose first, otherwise channels of different
        # positions get interleaved; contiguous() because view needs packed memory
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C)
        return self.out_proj(y)


def count_block_parameters(d_model: int, n_heads: int, d_ff: int) -> int:
    """Exact number of parameters of DecoderBlock(d_model, n_heads, d_ff), without building it.

    Pure integer arithmetic, so it is exact for sizes far too large to instantiate.
    n_heads does not change the count (heads split d_model, they do not add weights),
    but it must divide d_model, as for the module itself: ValueError otherwise.
    """
    if n_heads <= 0 or d_model % n_heads != 0:
        raise ValueError(f"n_heads={n_heads} must be positive and divide d_model={d_model}")
    shapes = [(d_model, d_model)] * 4                         # q, k, v, out projections
    shapes += [(d_ff, d_model), (d_ff,), (d_model, d_ff), (d_model,)]  # fc_in, its bias, fc_out, its bias
    shapes += [(d_model,)] * 4                                # two LayerNorms: weight and bias each
    return sum(math.prod(shape) for shape in shapes)


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
