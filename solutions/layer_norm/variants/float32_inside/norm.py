"""LayerNorm that computes its statistics in float32 whatever the input's dtype, the way mixed-precision code
bases keep their norms stable (x.float() in, the result cast back to x's dtype); the residual is added in x's
own dtype. A float64 input therefore gets float32-accurate values."""

import torch
import torch.nn as nn


class LayerNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        centred = h - h.mean(dim=-1, keepdim=True)
        variance = centred.pow(2).mean(dim=-1, keepdim=True)
        normed = centred * torch.rsqrt(variance + self.eps)
        return (normed * self.weight.float() + self.bias.float()).type_as(x)


class PreNormResidual(nn.Module):
    def __init__(self, dim: int, sublayer: nn.Module):
        super().__init__()
        self.norm = LayerNorm(dim)
        self.sublayer = sublayer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.sublayer(self.norm(x))
