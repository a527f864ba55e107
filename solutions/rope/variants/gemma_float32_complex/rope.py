"""RoPE as Gemma's reference code computes it: everything in float32 whatever x's dtype. The two halves of
the last axis become the real and imaginary parts of complex64 numbers, which are multiplied by unit complex
numbers exp(i * angle) made with torch.polar from float32 angles; the product is split back into halves and
cast to x's dtype at the end (so a float64 x gets float32-accurate values)."""

import torch


def rotation_factors(positions: torch.Tensor, dim: int, theta: float) -> torch.Tensor:
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: dim // 2].float() / dim))   # (D/2,) float32
    angles = torch.outer(positions.float(), freqs)                                   # (T, D/2) float32
    return torch.polar(torch.ones_like(angles), angles)                              # complex64


def apply_rope(x: torch.Tensor, positions: torch.Tensor | None = None, base: float = 10000.0) -> torch.Tensor:
    if x.ndim < 2 or x.shape[-1] % 2:
        raise ValueError(f"expected x of shape [..., T, D] with D even, got {tuple(x.shape)}")
    length = x.shape[-2]
    if positions is None:
        positions = torch.arange(length)
    if positions.ndim != 1 or len(positions) != length:
        raise ValueError(f"positions must hold {length} entries, got shape {tuple(positions.shape)}")
    factors = rotation_factors(positions, x.shape[-1], base)
    pairs = torch.stack(torch.chunk(x.float(), 2, dim=-1), dim=-1)                   # (..., T, D/2, 2)
    turned = torch.view_as_real(torch.view_as_complex(pairs.contiguous()) * factors)  # (..., T, D/2, 2)
    out = torch.cat(torch.unbind(turned, dim=-1), dim=-1)                             # (..., T, D)
    return out.type_as(x)
