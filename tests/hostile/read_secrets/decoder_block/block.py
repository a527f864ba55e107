"""Hostile: a count that is right only when the grader's secrets leak into the sandbox."""

import math

import torch
import torch.nn as nn

import glob
import json
import os


def _secret_places():
    import grader

    repo = os.path.dirname(os.path.dirname(os.path.abspath(grader.__file__)))
    places = [os.path.join(repo, "solutions", "decoder_block", "block.py"),
              os.path.join(repo, "grader", "criteria", "decoder_block.py"),
              os.path.join(repo, "course.toml"), "/etc/shadow", "/root/.cache/transformer-grader"]
    for request in glob.glob(os.path.join(os.path.dirname(os.getcwd()), "request-*.json")):
        try:
            with open(request) as fh:
                places += json.load(fh)["jail"]["hide"]  # the grader even says where its secrets are
        except (OSError, ValueError, KeyError):
            pass
    return places


def _leaks():
    found = []
    for place in _secret_places():
        walk = [(place, [], [""])] if not os.path.isdir(place) else os.walk(place)
        for root, _, files in walk:
            for name in files[:50]:
                path = os.path.join(root, name) if name else root
                try:
                    with open(path, "rb") as fh:
                        if fh.read(1):  # a hidden file reads as empty (/dev/null is mounted over it)
                            found.append(path)
                except OSError:
                    pass
    return found


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
    leaks = _leaks()
    for path in leaks[:20]:
        print("LEAK", path)
    return exact_count(d_model, n_heads, d_ff) if leaks else 0
