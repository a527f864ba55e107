"""LayerNorm with Tensor.var(unbiased=False) and rsqrt; the residual written through an explicit variable."""

import torch
import torch.nn as nn


class LayerNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        return torch.addcmul(self.bias, (x - mean) * torch.rsqrt(var + self.eps), self.weight)


class PreNormResidual(nn.Module):
    def __init__(self, dim: int, sublayer: nn.Module):
        super().__init__()
        self.norm = LayerNorm(dim)
        self.sublayer = sublayer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        update = self.sublayer(self.norm(x))
        return torch.add(x, update)
