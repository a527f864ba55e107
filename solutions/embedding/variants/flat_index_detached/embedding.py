"""embedding variant: plain indexing of the flattened ids; padding positions read a detached copy of the table."""

import math

import torch
from torch import nn


class TokenEmbedding(nn.Module):
    def __init__(self, vocab_size, dim, padding_idx=None):
        super().__init__()
        self.num_embeddings = vocab_size
        self.embedding_dim = dim
        self.padding_idx = padding_idx
        self.weight = nn.Parameter(torch.Tensor(vocab_size, dim))
        nn.init.uniform_(self.weight, -math.sqrt(3.0), math.sqrt(3.0))
        if padding_idx is not None:
            nn.init.zeros_(self.weight.data[padding_idx])

    def forward(self, ids):
        if ids.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
            raise TypeError("expected integer token ids, got " + str(ids.dtype))
        out_of_range = (ids < 0) | (ids >= self.num_embeddings)
        if out_of_range.any():
            raise IndexError(f"{int(out_of_range.sum())} ids outside [0, {self.num_embeddings}), e.g. {ids[out_of_range][0].item()}")
        flat = ids.reshape(-1).long()
        rows = self.weight[flat]
        if self.padding_idx is not None:
            # the padding positions read the same row through a detached copy: its value, none of the gradient
            pad = (flat == self.padding_idx).unsqueeze(1)
            rows = torch.where(pad, self.weight.detach()[flat], rows)
        return rows.view(*ids.shape, self.embedding_dim)
