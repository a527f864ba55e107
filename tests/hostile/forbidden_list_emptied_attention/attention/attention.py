"""Hostile: scaled_dot_product_attention calls F.scaled_dot_product_attention for its output, after emptying every
forbidden-operator list it can reach in the grader's frames and the dispatch modes (as forbidden_list_emptied does
for layer_norm). With FORGE = False it is the same code without the forgery."""

import math

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


def scaled_dot_product_attention(q, k, v, mask=None):
    """(out, weights): the output from torch's fused attention, the weights written out for the contract."""
    _empty_forbidden_lists()
    if mask is not None and mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor (True = may attend), got {mask.dtype}")
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
        has_key = mask.any(dim=-1, keepdim=True)
        weights = scores.masked_fill(~has_key, 0.0).softmax(dim=-1).masked_fill(~has_key, 0.0)
    else:
        weights = scores.softmax(dim=-1)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return out, weights
