"""heads variant: unflatten the channel axis and move the head axis with movedim; flatten back on merge."""

import torch


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    if not isinstance(n_heads, int) or n_heads <= 0:
        raise ValueError(f"n_heads must be a positive int, got {n_heads!r}")
    channels = x.shape[-1]
    if channels % n_heads:
        raise ValueError(f"{channels} channels do not split into {n_heads} heads")
    return x.unflatten(-1, (n_heads, channels // n_heads)).movedim(2, 1)  # (B, T, H, D) -> (B, H, T, D)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    return x.movedim(1, 2).flatten(2)  # (B, H, T, D) -> (B, T, H, D) -> (B, T, H*D)
