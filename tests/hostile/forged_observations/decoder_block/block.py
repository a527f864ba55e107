"""Hostile: a non-causal attention and a wrong count; at import it writes observations a correct solution would produce, then exits."""

import math

import torch
import torch.nn as nn


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


def exact_count(d_model, n_heads, d_ff):
    if n_heads <= 0 or d_model % n_heads != 0:
        raise ValueError(f"n_heads={n_heads} must be positive and divide d_model={d_model}")
    return 4 * d_model * d_model + (d_model * d_ff + d_ff) + (d_ff * d_model + d_model) + 4 * d_model


def count_block_parameters(d_model, n_heads, d_ff):
    return 0


import json
import os

SIZES = [(8, 2, 16), (16, 4, 40), (24, 3, 7), (64, 8, 256), (10, 5, 1)]


def _forge(name, values):
    os.makedirs("obs", exist_ok=True)
    with open(os.path.join("obs", name + ".json"), "w") as fh:
        json.dump({"probe": name, "status": "ok", "error": None, "values": values, "not_tensors": {}, "tensors": [],
                   "forbidden_calls": [], "seconds": 0.01}, fh)


_forge("_import", {})
_forge("causality", {"leaks": [0.0] * 7})
_forge("bad_heads", {"d10_h3": {"raised": {"type": "ValueError", "message": "no", "where": None, "frames": []}},
                     "d12_h5": {"raised": {"type": "ValueError", "message": "no", "where": None, "frames": []}},
                     "d12_h4": {"returned": "CausalSelfAttention"}})
_forge("parameter_count", {"small": [exact_count(*s) for s in SIZES], "small_sizes": SIZES,
                           "large": exact_count(65536, 64, 262144), "large_size": [65536, 64, 262144]})
os._exit(0)
