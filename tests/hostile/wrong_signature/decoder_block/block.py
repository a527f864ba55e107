"""Hostile: the constructor does not follow the contract's signature."""

import math

import torch
import torch.nn as nn

class CausalSelfAttention(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.q_proj = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x):
        return self.q_proj(x)


def exact_count(d_model, n_heads, d_ff):
    if n_heads <= 0 or d_model % n_heads != 0:
        raise ValueError(f"n_heads={n_heads} must be positive and divide d_model={d_model}")
    return 4 * d_model * d_model + (d_model * d_ff + d_ff) + (d_ff * d_model + d_model) + 4 * d_model


def count_block_parameters(d_model, n_heads, d_ff):
    return exact_count(d_model, n_heads, d_ff)
