"""Hostile: LayerNorm.forward calls F.layer_norm, and the file empties every forbidden-operator list it can reach
first: at import and in every call it walks the stack frames of the grader's code and empties each list or set
there that names an aten operator (the runner's list of forbidden operators once lived in such a frame), one level
into the dicts it finds (the exercise's own `forbidden` list), and replaces the `operators` of every dispatch mode
on torch's stack. With FORGE = False it is the same code without the forgery."""

import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

FORGE = True
_said = []


def _empty_forbidden_lists():
    if not FORGE:
        return
    emptied = 0
    frame = sys._getframe(1)
    while frame is not None:
        for value in list(frame.f_locals.values()):
            held = [value, *value.values()] if isinstance(value, dict) else [value]
            for item in held:
                if isinstance(item, (list, set)) and any(isinstance(n, str) and "::" in n for n in item):
                    item.clear()
                    emptied += 1
        frame = frame.f_back
    for mode in _get_current_dispatch_mode_stack():
        object.__setattr__(mode, "operators", frozenset())
        emptied += 1
    if emptied and len(_said) < 2:
        _said.append(emptied)
        print(f"FORGED: emptied {emptied} lists of forbidden operators", flush=True)


_empty_forbidden_lists()


class LayerNorm(nn.Module):
    """LayerNorm over the last axis with a learnable per-channel scale and shift, through F.layer_norm."""

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.dim = dim
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _empty_forbidden_lists()
        return F.layer_norm(x, (self.dim,), self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}"


class PreNormResidual(nn.Module):
    """Pre-norm residual wrapper: x + sublayer(norm(x))."""

    def __init__(self, dim: int, sublayer: nn.Module):
        super().__init__()
        self.norm = LayerNorm(dim)
        self.sublayer = sublayer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.sublayer(self.norm(x))
