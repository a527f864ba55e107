"""Public sanity tests for `masks`. Run: pytest exercises/masks

They check a few behaviours on small inputs; the grader checks more, on other inputs.
"""

import torch

import masks

PAD = 0
IDS = torch.tensor([[5, 6, 7, PAD],
                    [8, 9, PAD, PAD]])


def test_causal_mask_is_lower_triangular_bool():
    m = masks.causal_mask(4)
    expected = torch.tensor([[1, 0, 0, 0],
                             [1, 1, 0, 0],
                             [1, 1, 1, 0],
                             [1, 1, 1, 1]], dtype=torch.bool)
    assert m.dtype == torch.bool, f"expected a bool mask, got {m.dtype}"
    assert torch.equal(m, expected), f"row = query, column = key, True on and below the diagonal; got\n{m}"


def test_padding_mask_shape_and_values():
    m = masks.padding_mask(IDS, PAD)
    assert m.dtype == torch.bool, f"expected a bool mask, got {m.dtype}"
    assert tuple(m.shape) == (2, 1, 1, 4), f"expected [B, 1, 1, T] = (2, 1, 1, 4), got {tuple(m.shape)}"
    assert m[:, 0, 0].tolist() == [[True, True, True, False],
                                   [True, True, False, False]], "True must mark real (non-pad) tokens"


def test_combine_masks_is_B_1_T_T():
    m = masks.combine_masks(masks.causal_mask(4), masks.padding_mask(IDS, PAD))
    assert tuple(m.shape) == (2, 1, 4, 4), f"expected [B, 1, T, T] = (2, 1, 4, 4), got {tuple(m.shape)}"
    assert m.dtype == torch.bool, f"expected a bool mask, got {m.dtype}"


def test_combine_masks_hides_future_and_padding():
    m = masks.combine_masks(masks.causal_mask(4), masks.padding_mask(IDS, PAD))
    for b in range(2):
        for i in range(4):
            for j in range(4):
                allowed = j <= i and IDS[b, j].item() != PAD
                assert m[b, 0, i, j].item() == allowed, f"m[{b}, 0, {i}, {j}] should be {allowed}"


def test_masked_softmax_zeroes_masked_and_normalises_the_rest():
    torch.manual_seed(0)
    scores = torch.randn(2, 3, 4, 4)
    mask = masks.causal_mask(4)
    p = masks.masked_softmax(scores, mask)
    assert torch.all(p[..., ~mask] == 0), "masked entries must be exactly 0"
    sums = p.sum(dim=-1)
    assert torch.allclose(sums, torch.ones_like(sums), atol=1e-5), "each row should sum to 1 (atol 1e-5)"


def test_masked_softmax_equals_softmax_when_nothing_is_masked():
    torch.manual_seed(1)
    scores = torch.randn(2, 5, 6)
    p = masks.masked_softmax(scores, torch.ones(6, dtype=torch.bool))
    assert torch.allclose(p, scores.softmax(dim=-1), atol=1e-6), "with nothing masked it is a plain softmax (atol 1e-6)"


def test_masked_softmax_fully_masked_row_is_zero_without_nan():
    torch.manual_seed(2)
    scores = torch.randn(2, 3, 4, 4, requires_grad=True)
    # Batch 1 starts with two pad tokens, so query 0 of batch 1 may attend to nothing.
    ids = torch.tensor([[5, 6, 7, 8], [PAD, PAD, 3, 4]])
    mask = masks.combine_masks(masks.causal_mask(4), masks.padding_mask(ids, PAD))
    p = masks.masked_softmax(scores, mask)
    assert not torch.isnan(p).any(), "NaN in the forward pass"
    assert torch.all(p[1, :, 0] == 0), f"a fully masked row must be all zeros, got {p[1, 0, 0].tolist()}"
    (p * torch.randn_like(p)).sum().backward()
    assert torch.isfinite(scores.grad).all(), "non-finite gradient"
