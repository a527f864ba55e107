"""heads variant: reshape then permute, and permute then reshape."""

import math

import torch


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    batch, time, hidden = x.shape
    if n_heads <= 0 or math.gcd(hidden, n_heads) != n_heads:
        raise ValueError(f"cannot split hidden size {hidden} into n_heads={n_heads} heads")
    return x.reshape(batch, time, n_heads, -1).permute(0, 2, 1, 3)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    batch, heads, time, head_dim = x.shape
    return x.permute(0, 2, 1, 3).reshape(batch, time, heads * head_dim)
