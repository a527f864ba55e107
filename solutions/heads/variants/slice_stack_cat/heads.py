"""heads variant: cut the channels into slices and stack them on a new head axis; concatenate them back."""

import torch


def split_heads(x, n_heads):
    if n_heads < 1:
        raise ValueError("n_heads must be at least 1, got %d" % n_heads)
    if x.size(-1) % n_heads != 0:
        raise ValueError("C=%d is not a multiple of n_heads=%d" % (x.size(-1), n_heads))
    head_dim = x.size(-1) // n_heads
    slices = torch.split(x, head_dim, dim=-1)   # H tensors of shape (B, T, D)
    return torch.stack(slices, dim=1)           # (B, H, T, D)


def merge_heads(x):
    return torch.cat(torch.unbind(x, dim=1), dim=-1)  # H tensors (B, T, D) side by side -> (B, T, H*D)
