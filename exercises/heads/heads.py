"""Split the channel axis into attention heads, and merge the heads back.

Exercise `heads`. Multi-head attention does not copy the full hidden vector H times: it cuts the
C channels of each position into H slices of D = C / H channels and lets each slice attend on its
own. Heads go on axis 1 so that attention can treat `(B, H)` as batch axes.

Contract:
- `split_heads(x, n_heads)`: `[B, T, C] -> [B, H, T, C/H]`; head `h` at position `t` is
  `x[:, t, h*D:(h+1)*D]`.
- `merge_heads(x)`: `[B, H, T, D] -> [B, T, H*D]`, the exact inverse of `split_heads`.
- `split_heads` raises `ValueError` when `n_heads <= 0` or `C % n_heads != 0`.

Imports: torch, math, the standard library.
"""

import torch


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """`[B, T, C] -> [B, H, T, C/H]` with `H = n_heads`.

    - `out[b, h, t]` must equal `x[b, t, h*D:(h+1)*D]` where `D = C // n_heads`.
    - Raise `ValueError` (naming the values you got) when `n_heads <= 0` or `C % n_heads != 0`.
    - Getting the shape right is not enough: when H == T a wrong layout has the right shape too.
    """
    raise NotImplementedError("heads: implement split_heads")


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """`[B, H, T, D] -> [B, T, H*D]`, so that `merge_heads(split_heads(x, H))` gives back `x` exactly.

    - `out[b, t, h*D:(h+1)*D]` must equal `x[b, h, t]`.
    - The input may be a non-contiguous tensor (for instance the output of an attention step).
    """
    raise NotImplementedError("heads: implement merge_heads")
