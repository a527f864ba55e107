"""Hostile: TokenEmbedding.forward calls F.embedding, after emptying every forbidden-operator list it can reach in
the grader's frames and the dispatch modes (as forbidden_list_emptied does for layer_norm). With FORGE = False it is
the same code without the forgery."""

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


_INTEGER_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


class TokenEmbedding(nn.Module):
    """Map integer token ids `[...]` to vectors `[..., dim]` through F.embedding."""

    def __init__(self, vocab_size: int, dim: int, padding_idx: int | None = None) -> None:
        super().__init__()
        if vocab_size <= 0 or dim <= 0:
            raise ValueError(f"vocab_size and dim must be positive, got vocab_size={vocab_size}, dim={dim}")
        if padding_idx is not None:
            if not -vocab_size <= padding_idx < vocab_size:
                raise ValueError(f"padding_idx must lie in [-{vocab_size}, {vocab_size}), got {padding_idx}")
            padding_idx %= vocab_size
        self.vocab_size, self.dim, self.padding_idx = vocab_size, dim, padding_idx
        self.weight = nn.Parameter(torch.randn(vocab_size, dim))
        if padding_idx is not None:
            with torch.no_grad():
                self.weight[padding_idx].zero_()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        _empty_forbidden_lists()
        if not isinstance(ids, torch.Tensor) or ids.dtype not in _INTEGER_DTYPES:
            raise TypeError("ids must be an integer tensor")
        if ids.numel() > 0 and (int(ids.min()) < 0 or int(ids.max()) >= self.vocab_size):
            raise IndexError(f"ids must lie in [0, {self.vocab_size})")
        return F.embedding(ids.long(), self.weight, padding_idx=self.padding_idx)
