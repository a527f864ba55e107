"""embedding variant: the textbook definition, one_hot(ids) @ weight, with the padding row of the table detached."""

import torch
import torch.nn.functional as F
from torch import nn


class TokenEmbedding(nn.Module):
    def __init__(self, vocab_size: int, dim: int, padding_idx: int | None = None) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.padding_idx = padding_idx
        table = torch.randn(vocab_size, dim)
        if padding_idx is not None:
            table[padding_idx] = 0.0
        self.weight = nn.Parameter(table)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if ids.dtype.is_floating_point:
            raise TypeError(f"ids must be integers, not {ids.dtype}")
        if bool((ids < 0).any()) or bool((ids >= self.vocab_size).any()):
            raise IndexError(f"ids must lie in [0, {self.vocab_size})")
        one_hot = F.one_hot(ids.long(), self.vocab_size).to(self.weight.dtype)  # (*ids.shape, V)
        table = self.weight
        if self.padding_idx is not None:
            # the padding row enters the product detached: its values come out, its gradient is never formed
            is_pad = torch.arange(self.vocab_size, device=ids.device) == self.padding_idx
            table = torch.where(is_pad.unsqueeze(1), table.detach(), table)
        return one_hot @ table  # (*ids.shape, V) @ (V, C)
