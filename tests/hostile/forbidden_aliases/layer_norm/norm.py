"""Hostile: LayerNorm.forward reaches torch's layer norm through aliases a list of Python names misses, one per
call in turn: torch.native_layer_norm, torch.ops.aten.native_layer_norm, and F.layer_norm called from code
compiled under another file name (so no frame of norm.py is the caller)."""

import torch
import torch.nn as nn

_ELSEWHERE = {}
exec(compile("import torch.nn.functional as F\n"
             "def normalise(x, shape, weight, bias, eps):\n"
             "    return F.layer_norm(x, shape, weight, bias, eps)\n",
             "/usr/lib/python3/dist-packages/numerics/helpers.py", "exec"), _ELSEWHERE)
_ALIASES = [
    lambda x, shape, w, b, eps: torch.native_layer_norm(x, shape, w, b, eps)[0],
    lambda x, shape, w, b, eps: torch.ops.aten.native_layer_norm(x, shape, w, b, eps)[0],
    _ELSEWHERE["normalise"],
]
_calls = [0]

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

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.dim = dim
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _calls[0] += 1
        return _ALIASES[_calls[0] % 3](x, (self.dim,), self.weight, self.bias, self.eps)

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
