"""RoPE the Hugging Face way: float32 inv_freq, cos/sin tables repeated over both halves, rotate_half via chunk."""

import torch


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


def apply_rope(x: torch.Tensor, positions: torch.Tensor | None = None, base: float = 10000.0) -> torch.Tensor:
    T, D = x.shape[-2], x.shape[-1]
    if D % 2 != 0:
        raise ValueError(f"head dimension must be even, got {D}")
    if positions is None:
        positions = torch.arange(T, device=x.device)
    elif positions.dim() != 1 or positions.numel() != T:
        raise ValueError(f"expected {T} positions, got shape {tuple(positions.shape)}")
    inv_freq = 1.0 / (base ** (torch.arange(0, D, 2, device=x.device).float() / D))
    freqs = positions.float()[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return x * emb.cos().to(x.dtype) + rotate_half(x) * emb.sin().to(x.dtype)
