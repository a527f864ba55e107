"""Public sanity tests for exercise rope. Run: pytest exercises/rope

These check one behaviour each on small inputs. The hidden grader checks more,
on other inputs; passing here is necessary, not sufficient.
"""

import math

import pytest
import torch

import rope


def test_shape_and_dtype_are_kept():
    for dtype in (torch.float32, torch.float64):
        x = torch.randn(2, 3, 5, 8, dtype=dtype)
        y = rope.apply_rope(x)
        assert y.shape == x.shape, f"expected shape {tuple(x.shape)}, got {tuple(y.shape)}"
        assert y.dtype == dtype, f"expected dtype {dtype}, got {y.dtype}"


def test_position_zero_is_unchanged():
    x = torch.randn(4, 3, 6, dtype=torch.float64)
    y = rope.apply_rope(x)
    # tolerance: 1e-5 absolute; the angle at position 0 is 0, a rotation by 0 is the identity, and a function
    # that computes in float32 inside (allowed) rounds x to float32 on the way: about 2e-7 here
    torch.testing.assert_close(y[:, 0], x[:, 0], rtol=0, atol=1e-5,
                               msg=lambda m: f"position 0 must be left as it is:\n{m}")


def test_rotate_half_pairing_by_hand():
    # D = 4: channel 0 pairs with channel 2 (angle p * 1), channel 1 with channel 3 (angle p * 0.01)
    x = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]], dtype=torch.float64)
    y = rope.apply_rope(x, positions=torch.tensor([1, 1]))
    c0, s0 = math.cos(1.0), math.sin(1.0)
    c1, s1 = math.cos(0.01), math.sin(0.01)
    expected = torch.tensor([[c0, 0.0, s0, 0.0], [0.0, c1, 0.0, s1]], dtype=torch.float64)
    # tolerance: 1e-5 absolute; float32 cos and sin (allowed) are off by about 1e-7
    torch.testing.assert_close(y, expected, rtol=0, atol=1e-5,
                               msg=lambda m: f"channel i must rotate with channel i + D/2 by p * base**(-2i/D):\n{m}")


def test_norm_is_preserved():
    torch.manual_seed(0)
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    y = rope.apply_rope(x, positions=torch.arange(100, 107))
    # tolerance: 1e-6 relative on every vector's L2 norm; with cos and sin of float32 angles (allowed),
    # cos^2 + sin^2 = 1 to about 1e-7
    torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1), rtol=1e-6, atol=0,
                               msg=lambda m: f"a rotation must keep every vector's length:\n{m}")


def test_dot_product_depends_only_on_relative_position():
    torch.manual_seed(1)
    q = torch.randn(1, 8, dtype=torch.float64)
    k = torch.randn(1, 8, dtype=torch.float64)

    def score(m, n):
        qm = rope.apply_rope(q, positions=torch.tensor([m]))
        kn = rope.apply_rope(k, positions=torch.tensor([n]))
        return (qm * kn).sum().item()

    reference = score(5, 2)
    scale = (q.norm() * k.norm()).item()
    for m, n in [(3, 0), (8, 5), (11, 8)]:
        # tolerance: 1e-5 * |q||k|; float32 angles (allowed) are off by about position * 1e-7 rad
        assert abs(score(m, n) - reference) < 1e-5 * scale, \
            f"<rope(q, {m}), rope(k, {n})> = {score(m, n):.12f} but <rope(q, 5), rope(k, 2)> = {reference:.12f}"


def test_slice_with_matching_positions_gives_matching_rows():
    torch.manual_seed(2)
    x = torch.randn(2, 10, 6)
    full = rope.apply_rope(x)
    part = rope.apply_rope(x[:, 4:7], positions=torch.arange(4, 7))
    # tolerance: 1e-6 absolute, float32
    torch.testing.assert_close(part, full[:, 4:7], rtol=0, atol=1e-6,
                               msg=lambda m: "rows 4..6 must not depend on whether the rest of the sequence "
                                             f"is present:\n{m}")


def test_leading_axes_are_independent():
    torch.manual_seed(3)
    x = torch.randn(2, 3, 5, 4, dtype=torch.float64)  # [B, H, T, D]
    y = rope.apply_rope(x)
    # tolerance: 1e-6 absolute; each [T, D] slice is rotated the same way on its own (a float32 computation
    # inside may round differently for another batch shape)
    torch.testing.assert_close(y[1, 2], rope.apply_rope(x[1, 2]), rtol=0, atol=1e-6,
                               msg=lambda m: f"the rotation must act on the last two axes only:\n{m}")


def test_odd_head_dim_raises():
    with pytest.raises(ValueError):
        rope.apply_rope(torch.randn(3, 5))


def test_positions_of_wrong_length_raise():
    with pytest.raises(ValueError):
        rope.apply_rope(torch.randn(4, 6), positions=torch.arange(3))
