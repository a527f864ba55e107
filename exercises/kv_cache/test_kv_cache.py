"""Public sanity tests for exercise `kv_cache`. Run: pytest exercises/kv_cache

They check one behaviour each on small inputs. The hidden grader checks more (other models, caches handed
to forward, every stop reason, what reaches the model at each step), so passing these is necessary, not
sufficient.
"""
import pytest
import torch

import cache

torch.set_num_threads(1)

V, C, D, H, N = 11, 8, 16, 4, 2
TOLERANCE = 1e-4   # float32 model: the cached and the full forward differ only by rounding (~1e-6)


def build(seed=0):
    torch.manual_seed(seed)
    config = cache.Config(vocab_size=V, block_size=C, d_model=D, n_heads=H, n_layers=N, d_ff=32)
    with torch.no_grad():
        model = cache.TransformerLM(config).eval()
        for p in model.parameters():   # larger weights than the init, so that the logits are far from equal
            p.normal_(0.0, 0.5)
    return model


def tokens(shape, seed=0):
    return torch.randint(0, V, shape, generator=torch.Generator().manual_seed(seed))


def greedy(model, prompt, max_new_tokens, eos_id):
    """Exercise 11's generate: a full forward for every new token."""
    ids = list(prompt)
    for _ in range(max_new_tokens):
        if len(ids) >= model.config.block_size:
            return ids, "context_limit"
        with torch.no_grad():
            next_id = int(model(torch.tensor([ids]))["logits"][0, -1].argmax())
        ids.append(next_id)
        if next_id == eos_id:
            return ids, "eos"
    return ids, "max_new_tokens"


def test_cache_holds_one_pair_per_block_and_grows():
    model, x = build(), tokens((2, 5))
    with torch.no_grad():
        past = model(x[:, :3], use_cache=True)["past_key_values"]
        assert len(past) == N, f"one (k, v) per block expected, got {len(past)} entries"
        for k, v in past:
            assert tuple(k.shape) == tuple(v.shape) == (2, H, 3, D // H), f"got {tuple(k.shape)}, {tuple(v.shape)}"
        past = model(x[:, 3:5], past_key_values=past, use_cache=True)["past_key_values"]
        for k, v in past:
            assert tuple(k.shape) == tuple(v.shape) == (2, H, 5, D // H), f"got {tuple(k.shape)}, {tuple(v.shape)}"


def test_cached_logits_equal_the_full_forward():
    model, x = build(1), tokens((2, C), seed=1)
    with torch.no_grad():
        full = model(x)["logits"]
        past, start = None, 0
        for size in (3, 1, 2, 1, 1):
            out = model(x[:, start:start + size], past_key_values=past, use_cache=True)
            past = out["past_key_values"]
            torch.testing.assert_close(out["logits"], full[:, start:start + size], atol=TOLERANCE, rtol=TOLERANCE,
                                       msg=lambda m, start=start: f"positions from {start}: {m}")
            start += size


def test_past_block_size_raises_value_error():
    model, x = build(2), tokens((1, C), seed=2)
    with torch.no_grad():
        past = model(x, use_cache=True)["past_key_values"]
        with pytest.raises(ValueError):
            model(x[:, :1], past_key_values=past, use_cache=True)


def test_without_a_cache_forward_returns_none_and_the_same_logits():
    model, x = build(3), tokens((2, 6), seed=3)
    with torch.no_grad():
        cached = model(x, use_cache=True)
        out = model(x)
    assert out["past_key_values"] is None, "use_cache=False must return past_key_values None"
    torch.testing.assert_close(out["logits"], cached["logits"], atol=TOLERANCE, rtol=TOLERANCE)


@pytest.mark.parametrize("prompt", [[4], [1, 7, 3]])
def test_generate_cached_gives_generate_ids(prompt):
    model = build(4)
    assert cache.generate_cached(model, prompt, 4, None) == greedy(model, prompt, 4, None)
    assert cache.generate_cached(model, prompt, 20, None) == greedy(model, prompt, 20, None)   # to block_size
