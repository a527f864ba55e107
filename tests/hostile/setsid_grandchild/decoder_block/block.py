"""Hostile: count_block_parameters answers right, but leaves processes behind in sessions of their own."""

import math

import torch
import torch.nn as nn


class CausalSelfAttention(nn.Module):
    """A correct causal self-attention, so that only the hostile part of this file is judged wrong."""

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
        future = torch.ones(T, T, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
        weights = self.attn_dropout(scores.softmax(dim=-1))
        return self.out_proj((weights @ v).transpose(1, 2).reshape(B, T, C))


def exact_count(d_model, n_heads, d_ff):
    if n_heads <= 0 or d_model % n_heads != 0:
        raise ValueError(f"n_heads={n_heads} must be positive and divide d_model={d_model}")
    return 4 * d_model * d_model + (d_model * d_ff + d_ff) + (d_ff * d_model + d_model) + 4 * d_model


def count_block_parameters(d_model, n_heads, d_ff):
    import os
    import time

    if os.fork() == 0:
        os.setsid()  # out of the worker's process group: killing the group does not reach it
        if os.fork() == 0:  # orphaned to init, exec'd under a name of its own
            os.execv("/bin/sleep", ["hostile-stray-sleep", "600"])
        if os.fork() == 0:  # a Python one that keeps working
            while True:
                try:
                    with open("hostile-marker-stray", "a") as fh:
                        fh.write("still here\n")
                except OSError:
                    pass
                time.sleep(0.2)
        os._exit(0)
    time.sleep(0.3)  # let them settle before answering
    return exact_count(d_model, n_heads, d_ff)
