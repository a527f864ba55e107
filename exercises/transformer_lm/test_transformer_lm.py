"""Public sanity tests for exercise `transformer_lm`. Run: pytest exercises/transformer_lm

They check one behaviour each on small inputs. The hidden grader checks more (other sizes, other
inputs, stricter cases), so passing these is necessary, not sufficient.
"""
import math

import pytest
import torch
import torch.nn.functional as F

import model

torch.set_num_threads(1)


def small_config(**overrides):
    fields = dict(vocab_size=11, block_size=8, d_model=16, n_heads=4, n_layers=2, d_ff=32, dropout=0.0)
    fields.update(overrides)
    return model.Config(**fields)


def build(seed=0, **overrides):
    torch.manual_seed(seed)
    return model.TransformerLM(small_config(**overrides))


def test_config_rejects_invalid_values():
    small_config()  # a valid configuration must construct without error
    bad = [
        dict(d_model=0),  # sizes must be positive
        dict(n_layers=-1),
        dict(vocab_size=2),  # UNK/BOS/EOS are reserved: at least 3 ids
        dict(n_heads=3),  # 3 does not divide d_model=16
        dict(dropout=1.0),  # dropout must be in [0, 1)
        dict(dropout=-0.1),
    ]
    for overrides in bad:
        with pytest.raises(ValueError):
            small_config(**overrides)
            pytest.fail(f"Config({overrides}) should raise ValueError")


def test_forward_returns_logits_for_every_position():
    lm = build()
    tokens = torch.randint(0, 11, (3, 5))
    out = lm(tokens)
    assert isinstance(out, dict), f"forward must return a dict, got {type(out).__name__}"
    assert out["logits"].shape == (3, 5, 11), f"logits must be [B, T, V] = (3, 5, 11), got {tuple(out['logits'].shape)}"
    assert out["loss"] is None, "without targets the loss must be None"
    assert out["past_key_values"] is None, "past_key_values must be None"


def test_loss_is_mean_cross_entropy_over_scored_positions():
    lm = build(seed=1)
    tokens = torch.randint(0, 11, (2, 6))
    targets = torch.randint(0, 11, (2, 6))
    targets[0, :2] = -100  # not scored
    out = lm(tokens, targets=targets)
    expected = F.cross_entropy(out["logits"].reshape(-1, 11), targets.reshape(-1), ignore_index=-100)
    assert out["loss"].dim() == 0, f"loss must be a 0-dim tensor, got shape {tuple(out['loss'].shape)}"
    # tolerance: 1e-5 absolute, float32 (the grader's: correct reductions agree to ~1e-6)
    assert torch.allclose(out["loss"], expected, rtol=0, atol=1e-5), \
        f"loss {out['loss'].item()} != expected {expected.item()}"


def test_loss_is_still_in_the_graph():
    lm = build(seed=2)
    tokens = torch.randint(0, 11, (2, 4))
    loss = lm(tokens, targets=torch.randint(0, 11, (2, 4)))["loss"]
    assert loss.requires_grad and loss.grad_fn is not None, (
        "loss must carry the autograd graph (do not rebuild it from loss.item())")


def test_gradients_reach_every_parameter():
    lm = build(seed=3)
    tokens = torch.randint(0, 11, (2, 8))
    lm(tokens, targets=torch.randint(0, 11, (2, 8)))["loss"].backward()
    for name, param in lm.named_parameters():
        assert param.grad is not None, f"{name} received no gradient: is it on the path from tokens to the loss?"
        assert torch.isfinite(param.grad).all(), f"{name} has a non-finite gradient"


def test_prefix_logits_do_not_depend_on_future_tokens():
    lm = build(seed=4).eval()  # eval: no dropout noise
    a = torch.tensor([[1, 2, 3, 4, 5, 6]])
    b = a.clone()
    b[0, 3:] = torch.tensor([9, 8, 7])  # same prefix of length 3, different future
    with torch.no_grad():
        la, lb = lm(a)["logits"], lm(b)["logits"]
    # tolerance: 1e-6 absolute, float32
    assert torch.allclose(la[:, :3], lb[:, :3], rtol=0, atol=1e-6), (
        "positions 0..2 changed when only positions 3..5 changed: the model reads the future")


def test_bad_inputs_raise():
    lm = build(seed=5)
    good = torch.randint(0, 11, (2, 4))
    with pytest.raises(ValueError):
        lm(good.float())  # not int64
    with pytest.raises(ValueError):
        lm(good[0])  # 1-D
    with pytest.raises(ValueError):
        lm(torch.randint(0, 11, (1, 9)))  # T = 9 > block_size = 8
    with pytest.raises(ValueError):
        lm(good, targets=torch.full((2, 4), -100))  # nothing to score
    with pytest.raises(ValueError):
        lm(good, targets=good[:, :3])  # wrong shape
    with pytest.raises(NotImplementedError):
        lm(good, use_cache=True)  # no KV cache in this exercise


def test_hand_computed_two_block_limit():
    # The chapter's worked example, with V = 3 (Config needs vocab_size >= 3): attention and
    # feed-forward outputs are zero, so the final LayerNorm sees the embeddings (1, 0) and (0, 1),
    # which it maps to (a, -a) and (-a, a) with a = 0.5 / sqrt(0.25 + 1e-5).
    torch.manual_seed(0)
    lm = model.TransformerLM(
        model.Config(vocab_size=3, block_size=2, d_model=2, n_heads=1, n_layers=2, d_ff=2, dropout=0.0)
    ).double()
    # only the modules the contract names are used, not what their parameters are called: the final norm's
    # weight is its first parameter, the embedding table and the head weight its only one
    (table,), (head,) = lm.token_embedding.parameters(), lm.head.parameters()
    with torch.no_grad():
        for p in lm.parameters():
            p.zero_()
        next(lm.final_norm.parameters()).fill_(1.0)
        table[:2] = torch.eye(2, dtype=torch.float64)
        tokens, targets = torch.tensor([[0, 1]]), torch.tensor([[1, 0]])
        head[:2] = torch.eye(2, dtype=torch.float64)  # targets pick the lower logit
        high = lm(tokens, targets=targets)["loss"].item()
        head[:2] = torch.eye(2, dtype=torch.float64).flip(0)  # swapped: the higher logit
        low = lm(tokens, targets=targets)["loss"].item()
    a = 0.5 / math.sqrt(0.25 + 1e-5)
    # tolerance: 1e-5 absolute, the grader's: a model may compute in float32 inside (allowed), ~1e-7 here
    assert abs((high - low) - 2 * a) < 1e-5, f"loss difference {high - low} != 2a = {2 * a}"
