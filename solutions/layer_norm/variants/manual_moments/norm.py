"""LayerNorm from sums: the mean as sum / D, the variance as the mean of squared deviations."""

import math

import torch
import torch.nn as nn


class LayerNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.dim = dim
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[-1]
        centred = x - x.sum(dim=-1, keepdim=True) / n
        var = (centred * centred).sum(dim=-1, keepdim=True) / n
        return centred / (var + self.eps).sqrt() * self.weight + self.bias


class PreNormResidual(nn.Module):
    def __init__(self, dim: int, sublayer: nn.Module):
        super().__init__()
        self.sublayer = sublayer
        self.norm = LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        residual = x
        h = self.norm(x)
        h = self.sublayer(h)
        return residual + h
