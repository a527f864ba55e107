"""Exercise decoder_block: the missing causal self-attention of a pre-LN decoder block,
then the block's exact parameter count.

Your part: CausalSelfAttention (__init__ and forward) and count_block_parameters.
Given and working: FeedForward and DecoderBlock at the bottom of this file; read them,
do not change them (the parameter count is judged against this exact block).
Use only torch, math and the standard library.
Run the public tests with:  pytest exercises/decoder_block

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
        an nn.Dropout(dropout) applied to the attention weights (after the softmax);
            it acts in train() mode only, eval() makes the module deterministic
        forward(x [B, T, C]) -> [B, T, C]
    Raises:
        ValueError when n_heads <= 0 or d_model % n_heads != 0 (checked in __init__).

    What forward does: project x to queries, keys and values; split the C channels
    into H heads of D channels; per head, scaled dot-product scores over the T positions;
    forbid every key later than its query before the softmax; weight the values;
    merge the heads back to [B, T, C]; apply out_proj.
    Changing the input at positions > t must not change the output at position t.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0):
        super().__init__()
        raise NotImplementedError("decoder_block: implement CausalSelfAttention.__init__")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("decoder_block: implement CausalSelfAttention.forward")


def count_block_parameters(d_model: int, n_heads: int, d_ff: int) -> int:
    """Exact number of parameters of DecoderBlock(d_model, n_heads, d_ff), without building it.

    Count every parameter of the DecoderBlock defined below: both LayerNorms, the four
    attention projections and the feed-forward network. Return a Python int computed with
    integer arithmetic only: this is judged on sizes far too large to instantiate, so
    building a module (or using floats) is not an option.
    Like the block itself, raise ValueError when n_heads <= 0 or d_model % n_heads != 0.
    """
    raise NotImplementedError("decoder_block: implement count_block_parameters")


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
