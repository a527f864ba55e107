"""MUTANT eps_default_1e6: LayerNorm's default eps is 1e-6 (another library's), not the contract's 1e-5: told the eps it used, not float32 rounding

Layer normalisation and the pre-norm residual wrapper, written by hand.

LayerNorm normalises every token vector on its own: the statistics are taken over
the last (hidden) axis only, never over the batch or the sequence axis. The
variance is the population variance (divide by N, not N - 1) and eps sits inside
the square root, which is exactly what torch.nn.LayerNorm computes.
"""

import torch
import torch.nn as nn


class LayerNorm(nn.Module):
    """LayerNorm over the last axis with a learnable per-channel scale and shift.

    Contract:
        LayerNorm(dim, eps=1e-5)
        weight: nn.Parameter [dim], initialised to ones
        bias:   nn.Parameter [dim], initialised to zeros
        forward(x [..., dim]) -> [..., dim], same shape and dtype as x,
            y = (x - mean) / sqrt(var + eps) * weight + bias
        where mean and var (population, unbiased=False) are taken over the last axis.
    """

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.dim = dim
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # statistics per token: reduce over the hidden axis only (never the sequence axis),
        # keepdim so they broadcast back over the channels.
        # Population variance (divide by N): the unbiased N-1 estimate is a different function.
        var, mean = torch.var_mean(x, dim=-1, keepdim=True, unbiased=False)  # (..., 1) each
        # eps inside the root: a constant row gives 0 / sqrt(eps) = 0, never 0 / 0
        x_hat = (x - mean) / torch.sqrt(var + self.eps)  # (..., dim)
        return x_hat * self.weight + self.bias

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}"


class PreNormResidual(nn.Module):
    """Pre-norm residual wrapper: x + sublayer(norm(x)).

    Contract:
        PreNormResidual(dim, sublayer)
        norm:     a LayerNorm(dim)
        sublayer: the module passed in; it must map [..., dim] to [..., dim]
        forward(x) -> x + sublayer(norm(x)), same shape as x; x itself is not modified.
    A sublayer that returns zeros makes the whole wrapper the identity.
    """

    def __init__(self, dim: int, sublayer: nn.Module):
        super().__init__()
        self.norm = LayerNorm(dim)
        self.sublayer = sublayer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # out-of-place add: `x += ...` would overwrite the residual stream that
        # autograd (and the caller) still needs
        return x + self.sublayer(self.norm(x))
