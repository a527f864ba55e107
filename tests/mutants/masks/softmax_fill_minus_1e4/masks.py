"""Attention masks: causal, padding, their combination, and a NaN-free masked softmax.

Exercise `masks`. All masks are bool tensors with `True` = "may attend". They broadcast against
scores of shape `[B, H, T, T]` (query axis -2, key axis -1), so none of them is ever copied per head.

Contract:
- `causal_mask(T, device=None)`: `[T, T]`, True on and below the diagonal (query t sees keys <= t).
- `padding_mask(ids, pad_id)`: `[B, T] -> [B, 1, 1, T]`, True where `ids != pad_id` (a real key).
- `combine_masks(causal, padding)`: `[T, T]` and `[B, 1, 1, T]` -> `[B, 1, T, T]`, the logical and.
- `masked_softmax(scores, mask, dim=-1)`: masked entries exactly 0, rows sum to 1, a fully masked
  row is all zeros; no NaN in values or gradients.
"""

import torch


def causal_mask(T: int, device: torch.device | str | None = None) -> torch.Tensor:
    """Bool `[T, T]`, True where key index <= query index (row = query, column = key)."""
    if T <= 0:
        raise ValueError(f"T must be positive, got {T}")
    # tril keeps the diagonal: a position may always read itself, never the future.
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()  # (T, T)


def padding_mask(ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Bool `[B, 1, 1, T]`, True where `ids != pad_id`. Raises `ValueError` unless ids is `[B, T]`."""
    if ids.dim() != 2:
        raise ValueError(f"ids must have shape [B, T], got {tuple(ids.shape)}")
    # Padding hides *keys*: the two singleton axes stand for heads and queries, so the mask
    # broadcasts over both without being copied.
    return (ids != pad_id)[:, None, None, :]  # (B, 1, 1, T)


def combine_masks(causal: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
    """Logical and of a causal `[T, T]` and a padding `[B, 1, 1, T]` mask -> `[B, 1, T, T]`.

    The head axis stays 1: every head shares one mask, and broadcasting does the rest when the mask
    meets `[B, H, T, T]` scores. Raises `TypeError` for non-bool masks and `ValueError` when the two
    disagree on T.
    """
    if causal.dtype != torch.bool or padding.dtype != torch.bool:
        raise TypeError(f"masks must be bool tensors, got {causal.dtype} and {padding.dtype}")
    if causal.shape[-1] != padding.shape[-1]:
        raise ValueError(
            f"causal mask has T={causal.shape[-1]} keys but padding mask has T={padding.shape[-1]}"
        )
    return causal & padding  # (T, T) & (B, 1, 1, T) -> (B, 1, T, T)


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax of `scores` along `dim`, restricted to entries where `mask` (bool) is True.

    `mask` broadcasts against `scores`. Masked entries are exactly 0, every row with at least one
    allowed entry sums to 1, and a row with none is all zeros; neither values nor gradients are NaN.
    Raises `TypeError` for a non-bool mask.
    """
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor (True = keep), got {mask.dtype}")
    if not -scores.dim() <= dim < scores.dim():
        raise IndexError(f"dim {dim} out of range for scores with {scores.dim()} axes")
    # Count `dim` from the end and broadcast the two (views, no copy), so `dim` names the same axis
    # of both even when the mask has fewer leading axes (a [T, T] mask against [B, H, T, T] scores).
    dim = dim - scores.dim() if dim >= 0 else dim
    scores, mask = torch.broadcast_tensors(scores, mask)
    # -inf before the softmax: masked entries become exactly 0 and the rest still sum to 1.
    scores = scores.masked_fill(~mask, -1e4)  # a large negative number: exp(-1e4) is 0 in float32
    # A row with no allowed entry would be 0/0 = NaN forward and backward. Give it finite scores,
    # then zero it after the softmax; the zeroing also stops its gradient.
    has_any = mask.any(dim=dim, keepdim=True)
    scores = scores.masked_fill(~has_any, 0.0)
    return scores.softmax(dim=dim).masked_fill(~has_any, 0.0)
