"""LayerNorm with eps kept as a float32 buffer and the statistics through torch.std_mean(correction=0)."""

import torch
import torch.nn as nn


class LayerNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.register_buffer("eps", torch.tensor(eps), persistent=False)
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        std, mean = torch.std_mean(x, dim=-1, keepdim=True, correction=0)
        return self.weight * (x - mean) / torch.sqrt(std * std + self.eps) + self.bias


class PreNormResidual(nn.Module):
    def __init__(self, dim: int, sublayer: nn.Module):
        super().__init__()
        self.norm = LayerNorm(dim)
        self.sublayer = sublayer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.sublayer(self.norm(x))
        return x + out
