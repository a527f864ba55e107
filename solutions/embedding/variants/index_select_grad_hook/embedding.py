"""embedding variant: index_select on flattened ids; the padding row's gradient is zeroed by a tensor hook."""

import torch
from torch import nn


class TokenEmbedding(nn.Module):
    def __init__(self, vocab_size, dim, padding_idx=None):
        super().__init__()
        self.vocab_size, self.dim, self.padding_idx = vocab_size, dim, padding_idx
        self.weight = nn.Parameter(torch.empty(vocab_size, dim).normal_())
        if padding_idx is not None:
            with torch.no_grad():
                self.weight[padding_idx].fill_(0.0)
            self.weight.register_hook(self._drop_padding_grad)

    def _drop_padding_grad(self, grad):
        grad = grad.clone()
        grad[self.padding_idx] = 0
        return grad

    def forward(self, ids):
        if not isinstance(ids, torch.Tensor) or ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
            raise TypeError(f"token ids must be an integer tensor, got {getattr(ids, 'dtype', type(ids))}")
        flat = ids.reshape(-1).long()
        if flat.numel() and (flat.min() < 0 or flat.max() >= self.vocab_size):
            bad = flat[(flat < 0) | (flat >= self.vocab_size)][0].item()
            raise IndexError(f"token id {bad} is outside [0, {self.vocab_size})")
        return self.weight.index_select(0, flat).reshape(*ids.shape, self.dim)
