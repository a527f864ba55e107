"""Public sanity tests for `heads`. Run: pytest exercises/heads

They check a few behaviours on small inputs; the grader checks more, on other inputs.
"""

import pytest
import torch

import heads


def test_split_shape():
    x = torch.randn(2, 5, 12)
    out = heads.split_heads(x, 3)
    assert tuple(out.shape) == (2, 3, 5, 4), f"expected (B, H, T, D) = (2, 3, 5, 4), got {tuple(out.shape)}"


# x = arange(B*T*C).view(B, T, C), split by hand: head h at position t holds channels h*D .. (h+1)*D - 1.
SPLIT_BY_HAND = {
    (1, 2, 6, 3): [[[[0, 1], [6, 7]], [[2, 3], [8, 9]], [[4, 5], [10, 11]]]],
    (1, 2, 4, 2): [[[[0, 1], [4, 5]], [[2, 3], [6, 7]]]],
}


@pytest.mark.parametrize("B,T,C,H", list(SPLIT_BY_HAND), ids=["H!=T", "H==T"])
def test_split_puts_each_channel_slice_in_its_head(B, T, C, H):
    x = torch.arange(B * T * C, dtype=torch.float32).view(B, T, C)
    out = heads.split_heads(x, H)
    expected = torch.tensor(SPLIT_BY_HAND[(B, T, C, H)], dtype=torch.float32)
    # Pure data movement: exact equality (tolerance 0). With H == T a layout mistake keeps the shape.
    assert torch.equal(out, expected), f"split_heads(x)[b, h, t] should be x[b, t, h*D:(h+1)*D]: expected " \
                                       f"{expected.tolist()}, got {out.tolist()}"


def test_merge_shape():
    y = torch.randn(2, 3, 5, 4)
    out = heads.merge_heads(y)
    assert tuple(out.shape) == (2, 5, 12), f"expected (B, T, H*D) = (2, 5, 12), got {tuple(out.shape)}"


@pytest.mark.parametrize("B,T,C,H", [(2, 5, 12, 3), (2, 4, 8, 4)], ids=["H!=T", "H==T"])
def test_merge_undoes_split(B, T, C, H):
    torch.manual_seed(1)
    x = torch.randn(B, T, C)
    back = heads.merge_heads(heads.split_heads(x, H))
    assert torch.equal(back, x), "merge_heads(split_heads(x, H)) should give x back exactly"


@pytest.mark.parametrize("B,H,T,D", [(2, 3, 5, 4), (2, 4, 4, 2)], ids=["H!=T", "H==T"])
def test_split_undoes_merge(B, H, T, D):
    torch.manual_seed(2)
    y = torch.randn(B, H, T, D)
    back = heads.split_heads(heads.merge_heads(y), H)
    assert torch.equal(back, y), "split_heads(merge_heads(y), H) should give y back exactly"


def test_indivisible_hidden_size_raises_value_error():
    with pytest.raises(ValueError):
        heads.split_heads(torch.randn(2, 5, 10), 3)


@pytest.mark.parametrize("n_heads", [0, -2])
def test_non_positive_heads_raise_value_error(n_heads):
    with pytest.raises(ValueError):
        heads.split_heads(torch.randn(2, 5, 12), n_heads)
