"""My RoPE."""
import torch


def apply_rope(x: torch.Tensor, positions: torch.Tensor | None = None, base: float = 10000.0) -> torch.Tensor:
    # check the input first
    if x.ndim < 2:
        raise ValueError(
            f"apply_rope expects x of shape [..., T, D], got shape {tuple(x.shape)}"
        )
    seq_len, dim = x.shape[-2], x.shape[-1]
    if dim % 2 != 0:
        raise ValueError(
            f"apply_rope needs an even last dimension D to form channel pairs, got D={dim}"
        )
    if positions is None:
        positions = torch.arange(seq_len, device=x.device)
    else:
        positions = torch.as_tensor(positions, device=x.device)
        if positions.ndim != 1 or positions.shape[0] != seq_len:
            raise ValueError(f"positions must have shape [T] = [{seq_len}] to match x, got shape {tuple(positions.shape)}")
    h = dim // 2
    idx = torch.arange(h, device=x.device, dtype=torch.float64)
    freqs = base ** (-2.0 * idx / dim)
    theta = positions.to(torch.float64)[:, None] * freqs[None, :]
    c = theta.cos().to(x.dtype)
    s = theta.sin().to(x.dtype)
    first, second = x[..., :h], x[..., h:]
    return torch.cat(
        (first * c - second * s,
         second * c + first * s),
        dim=-1,
    )
