"""MUTANT syntax_error: a missing colon: the file does not import, which is reported once (under the first criterion, with a hint about importing) and blocks every other criterion

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


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor
    """`[B, T, C] -> [B, H, T, C/H]` with `H = n_heads`. Raises `ValueError` on a bad `n_heads`."""
    if x.dim() != 3:
        raise ValueError(f"split_heads expects x of shape [B, T, C], got {tuple(x.shape)}")
    if n_heads <= 0:
        raise ValueError(f"n_heads must be positive, got {n_heads}")
    B, T, C = x.shape
    if C % n_heads != 0:
        raise ValueError(f"hidden size {C} is not divisible by n_heads={n_heads}")
    # First cut the channels of each position into heads, *then* move the head axis forward.
    # Reshaping straight to (B, H, T, D) would interleave positions and channels; when H == T the
    # shape even looks right, so only the values give the mistake away.
    # reshape, not view: x may be a non-contiguous slice, e.g. one chunk of a fused qkv projection.
    x = x.reshape(B, T, n_heads, C // n_heads)  # (B, T, H, D)
    return x.transpose(1, 2)  # (B, H, T, D)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """`[B, H, T, D] -> [B, T, H*D]`, undoing `split_heads` exactly."""
    if x.dim() != 4:
        raise ValueError(f"merge_heads expects x of shape [B, H, T, D], got {tuple(x.shape)}")
    B, H, T, D = x.shape
    # Put time back next to batch before flattening the heads. After the transpose the memory is
    # no longer laid out as (B, T, H, D), so it must be made contiguous before `view`.
    x = x.transpose(1, 2).contiguous()  # (B, T, H, D)
    return x.view(B, T, H * D)  # (B, T, C)
