"""Public sanity tests for exercise `checkpoint`. Run: pytest exercises/checkpoint

They check one behaviour each on small inputs. The hidden grader checks more (longer runs, a resume
in a fresh process, other stop cases), so passing these is necessary, not sufficient.
"""
import os

import pytest
import torch

import checkpoint

torch.set_num_threads(1)

V, C = 7, 8


def build(seed=0, dropout=0.0):
    torch.manual_seed(seed)
    config = checkpoint.Config(vocab_size=V, block_size=C, d_model=16, n_heads=2, n_layers=2, d_ff=32, dropout=dropout)
    return checkpoint.TransformerLM(config)


def optimizer_for(model):
    return torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)


def step(model, optimizer, x, y):
    # A plain training step, written here so this test does not depend on the `training` exercise.
    model.train()
    optimizer.zero_grad(set_to_none=True)
    model(x, targets=y)["loss"].backward()
    optimizer.step()


def data(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, V, (2, 6), generator=g), torch.randint(0, V, (2, 6), generator=g)


def forcing(token, seed=0):
    """A model whose greedy choice is always `token`: the head reads a constant from final_norm."""
    model = build(seed)
    with torch.no_grad():
        model.final_norm.weight.zero_()
        model.final_norm.bias.fill_(1.0)
        model.head.weight.zero_()
        model.head.weight[token] = 1.0
    return model


def test_reload_gives_identical_logits_step_and_meta(tmp_path):
    model, x = build(1), data(1)[0]
    path = tmp_path / "run.pt"
    checkpoint.save_checkpoint(path, model, optimizer_for(model), 5, run="demo", vocab_size=V)
    fresh = build(2)
    info = checkpoint.load_checkpoint(path, fresh)
    assert info["step"] == 5, f"step should be 5, got {info['step']!r}"
    assert info["meta"] == {"run": "demo", "vocab_size": V}, f"meta not returned as saved: {info['meta']!r}"
    with torch.no_grad():
        # tolerance: exact (bitwise), same weights and same code
        assert torch.equal(model.eval()(x)["logits"], fresh.eval()(x)["logits"]), "reloaded model gives other logits"


def test_load_restores_the_optimizer_state(tmp_path):
    model = build(1)
    opt = optimizer_for(model)
    step(model, opt, *data(1))
    path = tmp_path / "run.pt"
    checkpoint.save_checkpoint(path, model, opt, 1)
    torch.load(path, map_location="cpu", weights_only=True)  # must load without unpickling code
    fresh = build(2)
    fresh_opt = optimizer_for(fresh)
    checkpoint.load_checkpoint(path, fresh, fresh_opt)
    assert fresh_opt.state_dict()["state"], (
        "optimizer state (AdamW moments) is empty after loading: weights alone do not resume training")


def test_load_restores_the_rng_state(tmp_path):
    model = build(1)
    path = tmp_path / "run.pt"
    checkpoint.save_checkpoint(path, model, optimizer_for(model), 0)
    expected = torch.rand(4)  # what the generator gives right after the save
    torch.manual_seed(1234)  # disturb it
    checkpoint.load_checkpoint(path, build(1))
    # tolerance: exact (the same generator state gives the same numbers)
    assert torch.equal(torch.rand(4), expected), "torch RNG state was not restored"


def test_expect_mismatch_raises(tmp_path):
    model = build(1)
    path = tmp_path / "run.pt"
    checkpoint.save_checkpoint(path, model, optimizer_for(model), 3, vocab="abc")
    checkpoint.load_checkpoint(path, build(1), expect={"vocab": "abc"})  # matching: fine
    with pytest.raises(ValueError, match="vocab"):
        checkpoint.load_checkpoint(path, build(1), expect={"vocab": "xyz"})


def test_failed_save_keeps_the_previous_file(tmp_path, monkeypatch):
    model = build(1)
    path = tmp_path / "run.pt"
    checkpoint.save_checkpoint(path, model, optimizer_for(model), 1)
    good = path.read_bytes()

    def broken_save(obj, f, *args, **kwargs):
        if isinstance(f, (str, os.PathLike)):
            with open(f, "wb") as handle:
                handle.write(b"half a checkpoint")
        else:
            f.write(b"half a checkpoint")
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError):
        checkpoint.save_checkpoint(path, model, optimizer_for(model), 2)
    assert path.read_bytes() == good, (
        "a failed save damaged the previous checkpoint: write to a temp file, then os.replace")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.pt"], "a temporary file was left behind"


def test_resume_matches_straight_training_with_dropout(tmp_path):
    x, y = data(3)
    straight = build(3, dropout=0.1)
    opt = optimizer_for(straight)
    for _ in range(4):
        step(straight, opt, x, y)

    first = build(3, dropout=0.1)
    opt = optimizer_for(first)
    for _ in range(2):
        step(first, opt, x, y)
    path = tmp_path / "half.pt"
    checkpoint.save_checkpoint(path, first, opt, 2)
    resumed = build(99, dropout=0.1)  # other weights, other RNG state
    opt = optimizer_for(resumed)
    assert checkpoint.load_checkpoint(path, resumed, opt)["step"] == 2
    for _ in range(2):
        step(resumed, opt, x, y)
    for (name, a), b in zip(straight.named_parameters(), resumed.parameters(), strict=False):
        # tolerance: exact (bitwise); the same computation in the same order
        assert torch.equal(a, b), f"{name} differs after resume: restore the optimizer and the RNG state too"


def test_generate_stops_at_eos():
    ids, reason = checkpoint.generate(forcing(token=2), [0, 1], max_new_tokens=5, eos_id=2)
    assert (ids, reason) == ([0, 1, 2], "eos"), f"expected ([0, 1, 2], 'eos'), got {(ids, reason)}"


def test_generate_stops_after_max_new_tokens():
    ids, reason = checkpoint.generate(forcing(token=4), [0], max_new_tokens=3, eos_id=2)
    assert (ids, reason) == ([0, 4, 4, 4], "max_new_tokens"), f"got {(ids, reason)}"


def test_generate_stops_at_the_context_limit():
    ids, reason = checkpoint.generate(forcing(token=4), [0, 1, 3], max_new_tokens=20, eos_id=2)
    assert reason == "context_limit", f"expected 'context_limit', got {reason!r}"
    assert ids == [0, 1, 3] + [4] * (C - 3), f"expected the sequence to fill block_size={C}, got {ids}"
