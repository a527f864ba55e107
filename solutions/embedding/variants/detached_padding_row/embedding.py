"""TokenEmbedding whose lookup table is rebuilt for each call with the padding row detached: the rows above and
below it stay in the graph, the padding row keeps its values but can receive no gradient. Ids are checked first,
then gathered with index_select."""

import torch
import torch.nn as nn


class TokenEmbedding(nn.Module):
    def __init__(self, vocab_size: int, dim: int, padding_idx: int | None = None):
        super().__init__()
        if padding_idx is not None and padding_idx < 0:
            padding_idx += vocab_size
        self.vocab_size, self.padding_idx = vocab_size, padding_idx
        table = torch.empty(vocab_size, dim).normal_()
        if padding_idx is not None:
            table[padding_idx] = 0.0
        self.weight = nn.Parameter(table)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
            raise TypeError(f"token ids must be integers, got {ids.dtype}")
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.vocab_size):
            raise IndexError(f"token ids must be in [0, {self.vocab_size}), got {int(ids.min())}..{int(ids.max())}")
        table = self.weight
        if self.padding_idx is not None:
            p = self.padding_idx
            table = torch.cat((table[:p], table[p:p + 1].detach(), table[p + 1:]), dim=0)
        flat = torch.index_select(table, 0, ids.reshape(-1).long())
        return flat.reshape(*ids.shape, table.shape[1])
