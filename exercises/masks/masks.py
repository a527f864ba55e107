"""Attention masks: causal, padding, their combination, and a NaN-free masked softmax.

Exercise `masks`. All masks are bool tensors with `True` = "may attend". They broadcast against
scores of shape `[B, H, T, T]` (query axis -2, key axis -1), so none of them is ever copied per head.

Contract:
- `causal_mask(T, device=None)`: `[T, T]`, True on and below the diagonal (query t sees keys <= t).
- `padding_mask(ids, pad_id)`: `[B, T] -> [B, 1, 1, T]`, True where `ids != pad_id` (a real key).
- `combine_masks(causal, padding)`: `[T, T]` and `[B, 1, 1, T]` -> `[B, 1, T, T]`, the logical and.
- `masked_softmax(scores, mask, dim=-1)`: masked entries exactly 0, rows sum to 1, a fully masked
  row is all zeros; no NaN in values or gradients.

Imports: torch, math, the standard library.
"""

import torch


def causal_mask(T: int, device: torch.device | str | None = None) -> torch.Tensor:
    """Bool `[T, T]` on `device`: row = query, column = key, True where the query may read the key.

    A position may read itself and the past, never the future.
    """
    raise NotImplementedError("masks: implement causal_mask")


def padding_mask(ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Bool `[B, 1, 1, T]` from token ids `[B, T]`: True where `ids != pad_id`.

    Padding hides keys; think about which axes the two singleton dimensions stand for.
    """
    raise NotImplementedError("masks: implement padding_mask")


def combine_masks(causal: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
    """Logical and of a causal `[T, T]` and a padding `[B, 1, 1, T]` mask, returned as `[B, 1, T, T]`.

    Do not build one copy per head (`[B, H, T, T]`): the head axis stays 1 and broadcasting does
    the rest when the mask meets the scores.
    """
    raise NotImplementedError("masks: implement combine_masks")


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax of `scores` along `dim`, restricted to entries where the bool `mask` is True.

    - `mask` broadcasts against `scores` (e.g. a `[B, 1, T, T]` mask with `[B, H, T, T]` scores).
    - Masked entries are exactly 0; every row with at least one allowed entry sums to 1.
    - A row with no allowed entry is all zeros, and neither the values nor the gradients of
      `.backward()` through the result contain NaN.
    """
    raise NotImplementedError("masks: implement masked_softmax")
