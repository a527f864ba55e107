"""Exercise layer_norm: write LayerNorm by hand, then wrap a sublayer in a pre-norm residual.

Fill in the four methods below. Use only torch (and math / the standard library).
Forbidden here: nn.LayerNorm and F.layer_norm (the grader detects them).
Run the public tests with:  pytest exercises/layer_norm
"""

import torch
import torch.nn as nn


class LayerNorm(nn.Module):
    """LayerNorm over the last axis with a learnable per-channel scale and shift.

    Contract:
        LayerNorm(dim, eps=1e-5)
        weight: nn.Parameter of shape [dim], initialised to ones
        bias:   nn.Parameter of shape [dim], initialised to zeros
        forward(x [..., dim]) -> tensor of the same shape and dtype as x:
            y = (x - mean) / sqrt(var + eps) * weight + bias
        mean and var are taken over the LAST axis only, one pair per token vector;
        var is the population variance (divide by dim, not dim - 1);
        eps is added inside the square root.
    The result must agree with torch.nn.LayerNorm(dim, eps) for the same weight and bias.
    """

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        raise NotImplementedError("layer_norm: implement LayerNorm.__init__")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("layer_norm: implement LayerNorm.forward")


class PreNormResidual(nn.Module):
    """Pre-norm residual wrapper around any sublayer that maps [..., dim] to [..., dim].

    Contract:
        PreNormResidual(dim, sublayer)
        self.norm:     a LayerNorm(dim) (the class above)
        self.sublayer: the module passed in, stored as given
        forward(x) -> x + sublayer(norm(x)), the same shape as x.
    The input x must not be modified in place. A sublayer that returns zeros makes
    the wrapper the identity.
    """

    def __init__(self, dim: int, sublayer: nn.Module):
        super().__init__()
        raise NotImplementedError("layer_norm: implement PreNormResidual.__init__")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("layer_norm: implement PreNormResidual.forward")
