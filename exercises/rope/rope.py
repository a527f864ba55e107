"""Exercise rope: rotary position embedding (RoPE) with the rotate-half pairing.

Fill in apply_rope. Use only torch (and math / the standard library).
Run the public tests with:  pytest exercises/rope
"""

import torch


def apply_rope(x: torch.Tensor, positions: torch.Tensor | None = None, base: float = 10000.0) -> torch.Tensor:
    """Rotate pairs of channels of x by angles that grow with the position.

    Pairing (rotate-half): for i in [0, D/2), channel i is paired with channel i + D/2,
    and the pair (x_i, x_{i+D/2}) at position p is rotated, as a 2-D vector, by the angle
        theta_i(p) = p * base ** (-2 * i / D).
    This is NOT the interleaved convention (pairs 2i, 2i+1): the two give different results.

    Args:
        x: [..., T, D] queries or keys; D must be even; any number of leading axes,
            e.g. [T, D], [B, T, D] or [B, H, T, D]. The second-to-last axis is the sequence.
        positions: integer tensor of shape [T], the absolute position of each row;
            default arange(T). A slice x[..., s:e, :] with positions arange(s, e) must give
            the same rows as the full call.
        base: frequency base.

    Returns:
        A tensor with the same shape and dtype as x. Each vector keeps its L2 norm, and
        <apply_rope(q at m), apply_rope(k at n)> depends only on m - n.

    Raises:
        ValueError: D is odd, or positions does not have shape [T].
    """
    raise NotImplementedError("rope: implement apply_rope")
