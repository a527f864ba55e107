"""MUTANT placeholder_identity: a placeholder that validates its input and returns it unchanged: it earns the shapes and the errors it raises, nothing that needs a rotation

Rotary position embedding (RoPE), rotate-half convention.

RoPE encodes position by rotating pairs of channels of a query or key vector by an
angle that grows with the position. Because a rotation by angle a followed by the
inverse rotation by angle b is a rotation by a - b, the dot product of a rotated
query at position m and a rotated key at position n depends only on m - n.

Pairing convention (rotate-half, as in GPT-NeoX / LLaMA in Hugging Face): channel i
is paired with channel i + D/2, for i in [0, D/2). The pair (x_i, x_{i+D/2}) is
rotated by the angle  theta_i(p) = p * base ** (-2i / D)  at position p.
The other popular convention (interleaved, pairing 2i with 2i + 1) gives a
different tensor; the two must not be mixed between q and k.
"""

import torch


def apply_rope(x: torch.Tensor, positions: torch.Tensor | None = None, base: float = 10000.0) -> torch.Tensor:
    """Rotate the last axis of x by position-dependent angles.

    Args:
        x: [..., T, D] queries or keys, D even; any number of leading axes (e.g. [B, H, T, D]).
        positions: integer tensor [T] with the absolute position of each of the T rows
            (default arange(T)). Pass explicit positions when x is a slice of a longer
            sequence, e.g. the new tokens when decoding with a cache.
        base: the frequency base; channel pair i turns at base ** (-2i / D) radians per position.

    Returns:
        Tensor of the same shape and dtype as x. Norms over the last axis are preserved.

    Raises:
        ValueError: if D is odd, if x has fewer than 2 axes, or if positions is not a
            1-D tensor of length T.
    """
    if x.ndim < 2:
        raise ValueError(f"apply_rope expects x of shape [..., T, D], got shape {tuple(x.shape)}")
    T, D = x.shape[-2], x.shape[-1]
    if D % 2 != 0:
        raise ValueError(f"apply_rope needs an even last dimension D to form channel pairs, got D={D}")
    if positions is None:
        positions = torch.arange(T, device=x.device)
    else:
        positions = torch.as_tensor(positions, device=x.device)
        if positions.ndim != 1 or positions.shape[0] != T:
            raise ValueError(
                f"positions must have shape [T] = [{T}] to match x, got shape {tuple(positions.shape)}"
            )
    return x  # a placeholder: validated, then the input returned unchanged
