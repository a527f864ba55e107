"""RoPE the way GPT-NeoX's rotary module does it: float32 inverse frequencies, a float32 cos/sin table for
positions 0..n-1 built once with an outer product and the two halves repeated, then gathered at the positions
asked for; x * cos + rotate_half(x) * sin in x's own dtype (float32 tables promote to float64 for float64 x)."""

import torch


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def _tables(length: int, dim: int, base: float) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))  # (D/2,)
    steps = torch.arange(length, dtype=torch.float32)                                  # (n,)
    freqs = torch.einsum("i,j->ij", steps, inv_freq)                                   # (n, D/2)
    emb = torch.cat((freqs, freqs), dim=-1)                                            # (n, D)
    return emb.cos(), emb.sin()


def apply_rope(x: torch.Tensor, positions: torch.Tensor | None = None, base: float = 10000.0) -> torch.Tensor:
    if x.dim() < 2:
        raise ValueError(f"x must be [..., T, D], got {tuple(x.shape)}")
    seq, dim = x.shape[-2], x.shape[-1]
    if dim % 2 == 1:
        raise ValueError(f"the rotary dimension must be even, got {dim}")
    if positions is None:
        positions = torch.arange(seq)
    if positions.dim() != 1 or positions.shape[0] != seq:
        raise ValueError(f"positions must be a [{seq}] tensor, got {tuple(positions.shape)}")
    cos, sin = _tables(int(positions.max()) + 1 if positions.numel() else 1, dim, base)
    cos, sin = cos[positions], sin[positions]                                          # (T, D)
    out = x * cos + _rotate_half(x) * sin
    return out.to(x.dtype)
