"""RoPE as an explicit [T, D, D] rotation matrix per position, applied with einsum."""

import math

import torch


def apply_rope(x, positions=None, base=10000.0):
    if x.shape[-1] % 2 == 1:
        raise ValueError("odd head dimension " + str(x.shape[-1]))
    T, D = x.shape[-2:]
    pos = torch.arange(T) if positions is None else positions
    if pos.ndim != 1 or len(pos) != T:
        raise ValueError(f"need {T} positions, got {list(pos.shape)}")
    h = D // 2
    R = torch.zeros(T, D, D, dtype=torch.float64)
    for i in range(h):
        theta = pos.double() * math.pow(base, -2 * i / D)
        c, s = torch.cos(theta), torch.sin(theta)
        R[:, i, i] = c
        R[:, i, i + h] = -s
        R[:, i + h, i] = s
        R[:, i + h, i + h] = c
    return torch.einsum("tij,...tj->...ti", R.to(x.dtype), x)
