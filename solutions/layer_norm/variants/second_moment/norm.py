"""LayerNorm from the first two moments, var = E[x^2] - E[x]^2 (the population variance by construction)."""

import torch
import torch.nn as nn


class LayerNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.full((dim,), 1.0))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(-1, keepdim=True)
        var = (x * x).mean(-1, keepdim=True) - mean * mean
        inv = 1.0 / torch.sqrt(var.clamp_min(0.0) + self.eps)
        return (x - mean) * inv * self.weight + self.bias


class PreNormResidual(nn.Module):
    def __init__(self, dim, sublayer):
        super().__init__()
        self.norm = LayerNorm(dim)
        self.sublayer = sublayer

    def forward(self, x):
        return self.sublayer(self.norm(x)) + x
