"""MUTANT placeholder_validates_returns_input: placeholders that validate n_heads and return the input unchanged: they earn the errors they raise, and a round trip through two functions that change nothing earns nothing

Split the channel axis into attention heads, and merge the heads back.

Exercise `heads`. Multi-head attention does not copy the full hidden vector H times: it cuts the
C channels of each position into H slices of D = C / H channels and lets each slice attend on its
own. Heads go on axis 1 so that attention can treat `(B, H)` as batch axes.

Contract:
- `split_heads(x, n_heads)`: `[B, T, C] -> [B, H, T, C/H]`; head `h` at position `t` is
  `x[:, t, h*D:(h+1)*D]`.
- `merge_heads(x)`: `[B, H, T, D] -> [B, T, H*D]`, the exact inverse of `split_heads`.
- `split_heads` raises `ValueError` when `n_heads <= 0` or `C % n_heads != 0`.
"""

import torch


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """`[B, T, C] -> [B, H, T, C/H]` with `H = n_heads`. Raises `ValueError` on a bad `n_heads`."""
    if n_heads <= 0:
        raise ValueError(f"n_heads must be positive, got {n_heads}")
    B, T, C = x.shape
    if C % n_heads != 0:
        raise ValueError(f"hidden size {C} is not divisible by n_heads={n_heads}")
    return x  # a placeholder: validated, then the input returned unchanged


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """`[B, H, T, D] -> [B, T, H*D]`, undoing `split_heads` exactly."""
    return x  # a placeholder: the input returned unchanged
