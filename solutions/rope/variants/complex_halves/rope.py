"""RoPE through complex numbers: the halves (x_i, x_{i+D/2}) become x_i + i*x_{i+D/2}, multiplied by e^{i*angle}."""

import torch


def apply_rope(x: torch.Tensor, positions: torch.Tensor | None = None, base: float = 10000.0) -> torch.Tensor:
    *_, T, D = x.shape
    if D % 2:
        raise ValueError(f"D must be even, got {D}")
    if positions is None:
        positions = torch.arange(T)
    if tuple(positions.shape) != (T,):
        raise ValueError(f"positions must have shape ({T},), got {tuple(positions.shape)}")
    half = D // 2
    angles = positions.double()[:, None] * torch.pow(base, -2.0 * torch.arange(half, dtype=torch.float64) / D)
    z = torch.view_as_complex(torch.stack((x[..., :half], x[..., half:]), dim=-1).contiguous())
    turn = torch.polar(torch.ones_like(angles), angles).to(z.dtype)
    r = torch.view_as_real(z * turn)
    return torch.cat((r[..., 0], r[..., 1]), dim=-1).to(x.dtype)
