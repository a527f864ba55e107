"""RoPE in litgpt's style: a float32 cache of cos and sin from torch.outer(positions, theta).repeat(1, 2),
the rotated copy cat(-x2, x1), and the result cast back to x's dtype."""

import torch


def build_rope_cache(positions: torch.Tensor, n_elem: int, base: float) -> tuple[torch.Tensor, torch.Tensor]:
    theta = 1.0 / (base ** (torch.arange(0, n_elem, 2).float() / n_elem))   # (D/2,) float32
    idx_theta = torch.outer(positions.float(), theta).repeat(1, 2)            # (T, D)
    return torch.cos(idx_theta), torch.sin(idx_theta)


def apply_rope(x: torch.Tensor, positions: torch.Tensor | None = None, base: float = 10000.0) -> torch.Tensor:
    head_size = x.size(-1)
    if head_size % 2 != 0:
        raise ValueError(f"head_size must be even for rotate-half RoPE, got {head_size}")
    T = x.size(-2)
    if positions is None:
        positions = torch.arange(T, device=x.device)
    elif positions.ndim != 1 or positions.numel() != T:
        raise ValueError(f"need one position per row: T={T}, got positions of shape {tuple(positions.shape)}")
    cos, sin = build_rope_cache(positions, head_size, base)
    x1 = x[..., : head_size // 2]
    x2 = x[..., head_size // 2:]
    rotated = torch.cat((-x2, x1), dim=-1)
    roped = (x * cos) + (rotated * sin)
    return roped.to(dtype=x.dtype)
