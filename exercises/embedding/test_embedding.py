"""Public sanity tests for `embedding`. Run: pytest exercises/embedding

They check a few behaviours on small inputs; the grader checks more, on other inputs.
"""

import pytest
import torch
from torch import nn

import embedding


def make(vocab_size=11, dim=7, padding_idx=None, seed=0):
    torch.manual_seed(seed)
    return embedding.TokenEmbedding(vocab_size, dim, padding_idx=padding_idx)


def test_weight_is_a_parameter_of_shape_vocab_by_dim():
    emb = make(vocab_size=11, dim=7)
    assert isinstance(emb.weight, nn.Parameter), f"weight must be an nn.Parameter, got {type(emb.weight)}"
    assert tuple(emb.weight.shape) == (11, 7), f"weight shape: expected (11, 7), got {tuple(emb.weight.shape)}"


def test_output_shape_appends_dim():
    emb = make(vocab_size=11, dim=7)
    ids = torch.tensor([[1, 4, 9], [7, 0, 0]])
    out = emb(ids)
    assert tuple(out.shape) == (2, 3, 7), f"expected ids.shape + (dim,) = (2, 3, 7), got {tuple(out.shape)}"


def test_forward_returns_rows_of_weight():
    emb = make(vocab_size=11, dim=7)
    ids = torch.tensor([[3, 3, 10], [0, 5, 2]])
    out = emb(ids)
    # A lookup copies rows: the match must be exact (tolerance 0).
    for b in range(2):
        for t in range(3):
            assert torch.equal(out[b, t], emb.weight[ids[b, t]]), (
                f"out[{b}, {t}] should be weight[{ids[b, t].item()}] exactly"
            )


def test_padding_row_is_zero_at_init():
    emb = make(vocab_size=11, dim=7, padding_idx=0)
    assert torch.all(emb.weight[0] == 0), f"padding row should start at zero, got {emb.weight[0].tolist()}"


def test_padding_row_gets_zero_gradient():
    emb = make(vocab_size=11, dim=7, padding_idx=0)
    ids = torch.tensor([[1, 4, 0, 0], [0, 4, 9, 0]])
    torch.manual_seed(1)
    upstream = torch.randn(2, 4, 7)
    (emb(ids) * upstream).sum().backward()
    grad = emb.weight.grad
    assert grad is not None, "weight.grad is None: the output is not connected to weight"
    # Exactly zero (tolerance 0): the padding row must never move.
    assert torch.all(grad[0] == 0), f"padding row gradient should be all zero, got {grad[0].tolist()}"
    assert grad[4].abs().sum() > 0, "a used, non-padding row (id 4) should receive a non-zero gradient"


def test_float_ids_raise_type_error():
    emb = make()
    with pytest.raises(TypeError):
        emb(torch.tensor([1.0, 2.0]))


@pytest.mark.parametrize("bad_id", [11, -1])
def test_out_of_range_ids_raise_index_error(bad_id):
    emb = make(vocab_size=11)
    with pytest.raises(IndexError):
        emb(torch.tensor([[0, bad_id, 3]]))


def test_does_not_call_the_builtin_embedding(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("torch.nn.functional.embedding / nn.Embedding is forbidden in this exercise")

    # nn.Embedding.forward goes through F.embedding, so this catches both.
    monkeypatch.setattr(torch.nn.functional, "embedding", forbidden)
    emb = make(vocab_size=5, dim=3)
    emb(torch.tensor([0, 1, 4]))
