"""Audits written from the contract (COURSE.md section 12) alone: plain loops, torch.testing.assert_close for the
causality comparison, a suffix changed from each position t, one fixed random sequence."""
import os
import tempfile

import torch

VOCAB = "_^pqabc$"
PAD_ID = 0
TOLERANCE = 1e-6


def audit_causality(model) -> None:
    model.eval()  # dropout off: two calls on the same tokens must agree, so any change is a leak
    config = model.config
    T, V = config.block_size, config.vocab_size
    generator = torch.Generator().manual_seed(1234)
    base = torch.randint(0, V, (2, T), generator=generator)
    base_logits = model(base)
    assert tuple(base_logits.shape) == (2, T, V), f"logits of shape {tuple(base_logits.shape)}, not {(2, T, V)}"
    for t in range(1, T):
        changed = base.clone()
        changed[:, t:] = (changed[:, t:] + 1 + torch.randint(0, V - 1, (2, T - t), generator=generator)) % V
        logits = model(changed)
        torch.testing.assert_close(logits[:, :t], base_logits[:, :t], rtol=0.0, atol=TOLERANCE,
                                   msg=lambda m, t=t: f"changing the tokens from position {t} on changed the "
                                                      f"logits before {t}: {m}")


def _ids(text):
    return [VOCAB.index(c) for c in text]


def audit_targets(make_batch) -> None:
    texts = ["^pa$", "^qabc$", "^b$", "^pqacb$", "^cab$"]
    inputs, targets = make_batch(texts)
    assert inputs.dim() == 2 and targets.dim() == 2, "inputs and targets must be 2-D"
    assert inputs.shape == targets.shape, f"inputs {tuple(inputs.shape)} and targets {tuple(targets.shape)} differ"
    longest = max(len(text) for text in texts) - 1
    assert inputs.shape[0] == len(texts), f"{inputs.shape[0]} rows for {len(texts)} texts"
    assert inputs.shape[1] >= longest, f"{inputs.shape[1]} columns: the longest text needs {longest}"
    for row, text in enumerate(texts):
        ids = _ids(text)
        for t in range(inputs.shape[1]):
            want_input = ids[t] if t < len(ids) - 1 else PAD_ID
            want_target = ids[t + 1] if t < len(ids) - 1 else PAD_ID
            got_input, got_target = int(inputs[row, t]), int(targets[row, t])
            assert got_input == want_input, f"text {text!r}: inputs[{row}, {t}] is {got_input}, not {want_input}"
            assert got_target == want_target, (
                f"text {text!r}: targets[{row}, {t}] is {got_target}, not {want_target} (the next id, or PAD)")


def _expected_shapes(config):
    V, C, d, f = config.vocab_size, config.block_size, config.d_model, config.d_ff
    shapes = {"token_embedding.weight": (V, d), "position_embedding.weight": (C, d)}
    for i in range(config.n_layers):
        block = f"blocks.{i}."
        for norm in ("ln_attention", "ln_feedforward"):
            shapes[block + norm + ".weight"] = (d,)
            shapes[block + norm + ".bias"] = (d,)
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            shapes[block + "attention." + proj + ".weight"] = (d, d)
        shapes[block + "feedforward.fc_in.weight"] = (f, d)
        shapes[block + "feedforward.fc_in.bias"] = (f,)
        shapes[block + "feedforward.fc_out.weight"] = (d, f)
        shapes[block + "feedforward.fc_out.bias"] = (d,)
    shapes["final_norm.weight"] = (d,)
    shapes["final_norm.bias"] = (d,)
    shapes["head.weight"] = (V, d)
    return shapes


def audit_registration(model) -> None:
    expected = _expected_shapes(model.config)
    listed = model.named_parameters()
    names = [name for name, _ in listed]
    assert len(names) == len(set(names)), "a parameter name is listed twice"
    missing = [name for name in expected if name not in names]
    extra = [name for name in names if name not in expected]
    assert not missing, f"parameters missing (unregistered or shared blocks?): {missing}"
    assert not extra, f"parameters exercise 9 does not have: {extra}"
    for name, value in listed:
        assert tuple(value.shape) == expected[name], f"{name} is {tuple(value.shape)}, not {expected[name]}"
    assert len(listed) == len(expected), f"{len(listed)} parameters, not {len(expected)}"


def audit_gradients(model, tokens, targets) -> None:
    grads = model.gradients(tokens, targets)
    names = [name for name, _ in model.named_parameters()]
    assert names, "the model registers no parameter"
    for name in names:
        assert name in grads, f"no gradient reported for {name}"
        grad = grads[name]
        assert grad is not None, f"{name} got no gradient (None): the loss does not reach it"
        assert bool(torch.isfinite(grad).all()), f"{name} has a non-finite gradient"
        assert bool((grad != 0).any()), f"{name}'s gradient is identically zero"


def audit_resume(trainer) -> None:
    k = 3
    first = trainer.new()
    for _ in range(k):
        first.step()
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "checkpoint.pt")
        first.save(path)
        resumed = trainer.load(path)
    for _ in range(k):
        resumed.step()
    straight = trainer.new()
    for _ in range(2 * k):
        straight.step()
    got, want = resumed.parameters(), straight.parameters()
    assert sorted(got) == sorted(want), f"the resumed run has parameters {sorted(got)}, not {sorted(want)}"
    for name in want:
        assert torch.equal(got[name], want[name]), (
            f"{name} after {k} steps, save, load and {k} steps differs from {2 * k} straight steps")
