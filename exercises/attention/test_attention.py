"""Public sanity tests for `attention`. Run: pytest exercises/attention

They check a few behaviours on small inputs; the grader checks more, on other inputs.
"""

import math

import torch

import attention


def qkv(Tq=4, Tk=6, D=8, Dv=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(2, 3, Tq, D, generator=g), torch.randn(2, 3, Tk, D, generator=g),
            torch.randn(2, 3, Tk, Dv, generator=g))


def test_shapes_with_batch_and_head_axes():
    q, k, v = qkv(Tq=4, Tk=6, D=8, Dv=5)
    out, weights = attention.scaled_dot_product_attention(q, k, v)
    assert tuple(out.shape) == (2, 3, 4, 5), f"out: expected (2, 3, 4, 5), got {tuple(out.shape)}"
    assert tuple(weights.shape) == (2, 3, 4, 6), f"weights: expected (2, 3, 4, 6), got {tuple(weights.shape)}"


# A small case whose answer was computed once, in float64, and written down: 2 queries, 3 keys, D = 4, Dv = 2.
Q = torch.tensor([[0.5, -1.0, 0.25, 2.0], [1.5, 0.0, -0.5, 1.0]])
K = torch.tensor([[1.0, 0.5, -1.5, 0.0], [-0.5, 1.0, 0.5, 1.5], [0.0, -2.0, 1.0, 0.5]])
V = torch.tensor([[1.0, -1.0], [0.5, 2.0], [-2.0, 0.0]])
EXPECTED_WEIGHTS = torch.tensor([[0.097982, 0.301806, 0.600212], [0.574213, 0.239368, 0.186420]])
EXPECTED_OUT = torch.tensor([[-0.951540, 0.505629], [0.321057, -0.095478]])


def test_matches_a_worked_example():
    out, weights = attention.scaled_dot_product_attention(Q, K, V)
    # the expected values are rounded to 6 decimals: atol 1e-5.
    assert torch.allclose(weights, EXPECTED_WEIGHTS, atol=1e-5), \
        f"weights differ from softmax(q k^T / sqrt(D)): expected {EXPECTED_WEIGHTS.tolist()}, got {weights.tolist()}"
    assert torch.allclose(out, EXPECTED_OUT, atol=1e-5), \
        f"out differs from weights @ v: expected {EXPECTED_OUT.tolist()}, got {out.tolist()}"


def test_weights_sum_to_one_over_keys():
    q, k, v = qkv()
    _, weights = attention.scaled_dot_product_attention(q, k, v)
    sums = weights.sum(dim=-1)
    # atol 1e-5: a float32 sum of 6 probabilities, as the grader allows
    assert torch.allclose(sums, torch.ones_like(sums), atol=1e-5), f"rows should sum to 1 (atol 1e-5), got {sums[0, 0]}"


def test_scores_are_scaled_by_sqrt_d():
    # D = 4: the query equals key 0 and is orthogonal to key 1, so the scores are (4/2, 0) and
    # the weight on key 0 is sigmoid(2) = 0.8808 (it would be sigmoid(4) = 0.9820 unscaled).
    q = torch.tensor([[1.0, 1.0, 1.0, 1.0]])
    k = torch.tensor([[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    v = torch.eye(2)
    _, weights = attention.scaled_dot_product_attention(q, k, v)
    expected = 1.0 / (1.0 + math.exp(-2.0))
    got = weights[0, 0].item()
    assert abs(got - expected) < 1e-5, f"expected {expected:.6f} (atol 1e-5), got {got:.6f}"


def test_masked_weights_are_exactly_zero():
    q, k, v = qkv(Tq=5, Tk=5)
    mask = torch.ones(5, 5, dtype=torch.bool).tril()
    out, weights = attention.scaled_dot_product_attention(q, k, v, mask)
    assert torch.all(weights[..., ~mask] == 0), "weights at masked positions must be exactly 0"
    sums = weights.sum(dim=-1)
    assert torch.allclose(sums, torch.ones_like(sums), atol=1e-5), "the allowed weights of each query must sum to 1"
    # query 0 may only see key 0: all its weight is there, so its output is v's row 0 (atol 1e-5)
    assert torch.allclose(out[..., 0, :], v[..., 0, :], atol=1e-5), "with a causal mask, query 0's output must be v[0]"


def test_future_keys_do_not_change_past_outputs():
    q, k, v = qkv(Tq=5, Tk=5)
    mask = torch.ones(5, 5, dtype=torch.bool).tril()
    out1, _ = attention.scaled_dot_product_attention(q, k, v, mask)
    k2, v2 = k.clone(), v.clone()
    k2[..., -1, :] += 3.0
    v2[..., -1, :] -= 7.0
    out2, _ = attention.scaled_dot_product_attention(q, k2, v2, mask)
    assert torch.allclose(out1[..., :-1, :],
                          out2[..., :-1, :], atol=1e-6), "changing the last key/value leaked into earlier queries"


def test_fully_masked_row_is_zero_without_nan():
    q, k, v = (t.requires_grad_() for t in qkv(Tq=3, Tk=4))
    mask = torch.tensor([[True, True, False, False],
                         [False, False, False, False],   # query 1 may attend to nothing
                         [True, True, True, True]])
    out, weights = attention.scaled_dot_product_attention(q, k, v, mask)
    assert not torch.isnan(out).any() and not torch.isnan(weights).any(), "NaN in the forward pass"
    assert torch.all(weights[..., 1, :] == 0), "a fully masked query must get all-zero weights"
    assert torch.all(out[..., 1, :] == 0), "a fully masked query must get an all-zero output"
    (out.sum() + weights.sum()).backward()
    for name, t in (("q", q), ("k", k), ("v", v)):
        assert torch.isfinite(t.grad).all(), f"non-finite gradient for {name}"


def test_does_not_call_builtin_attention(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("built-in attention is forbidden in this exercise")

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", forbidden)
    monkeypatch.setattr(torch.nn.functional, "multi_head_attention_forward", forbidden)
    q, k, v = qkv()
    attention.scaled_dot_product_attention(q, k, v)
