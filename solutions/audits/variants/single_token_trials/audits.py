"""Audits written from the contract (COURSE.md section 12) alone: causality by changing one token at a time in
several random sequences of two lengths, targets decoded back to text, the parameter ledger grouped by module,
resume compared step by step (losses) and at the end (parameters)."""
import math
import os
import re
import tempfile

import torch

VOCAB = "_^pqabc$"


def _max_gap(a, b):
    worst = 0.0
    for x, y in zip(a.reshape(-1).tolist(), b.reshape(-1).tolist()):
        gap = abs(x - y)
        if not math.isfinite(gap):
            return math.inf
        worst = max(worst, gap)
    return worst


def audit_causality(model):
    model.eval()
    vocab, context = model.config.vocab_size, model.config.block_size
    rng = torch.Generator().manual_seed(2024)
    for length in sorted({context, max(2, (context + 1) // 2)}):
        if length < 2:
            continue
        for _trial in range(2):
            seq = torch.randint(0, vocab, (1, length), generator=rng)
            reference = model(seq)
            for t in range(1, length):
                other = seq.clone()
                other[0, t] = (int(seq[0, t]) + 1 + int(torch.randint(0, vocab - 1, (1,), generator=rng))) % vocab
                gap = _max_gap(model(other)[:, :t], reference[:, :t])
                assert gap <= 1e-6, (f"length {length}: the token at {t} changed, and the logits before it moved "
                                     f"by {gap:.3g} (tolerance 1e-6)")


def _decode(row):
    return "".join(VOCAB[i] if 0 <= i < len(VOCAB) else "?" for i in row)


def audit_targets(make_batch):
    texts = ["^qab$", "^p$", "^abcab$", "^cq$"]
    inputs, targets = make_batch(texts)
    assert len(inputs) == len(texts) == len(targets), "one row of inputs and of targets per text"
    width = len(inputs[0])
    for i, text in enumerate(texts):
        got_in, got_out = _decode(inputs[i].tolist()), _decode(targets[i].tolist())
        assert len(got_in) == len(got_out) == width, f"row {i}: rows of unequal width"
        assert width >= len(text) - 1, f"row {i}: {width} positions cannot hold {text!r}"
        want_in = text[:-1].ljust(width, "_")
        want_out = text[1:].ljust(width, "_")
        assert got_in == want_in, f"inputs for {text!r} read {got_in!r}, not {want_in!r}"
        assert got_out == want_out, f"targets for {text!r} read {got_out!r}, not {want_out!r} (shifted by one)"


PER_BLOCK = {
    r"ln_attention\.(weight|bias)": "d", r"ln_feedforward\.(weight|bias)": "d",
    r"attention\.(q|k|v|out)_proj\.weight": "dd",
    r"feedforward\.fc_in\.weight": "fd", r"feedforward\.fc_in\.bias": "f",
    r"feedforward\.fc_out\.weight": "df", r"feedforward\.fc_out\.bias": "d",
}
TOP = {"token_embedding.weight": "Vd", "position_embedding.weight": "Cd", "final_norm.weight": "d",
       "final_norm.bias": "d", "head.weight": "Vd"}


def audit_registration(model):
    cfg = model.config
    size = {"V": cfg.vocab_size, "C": cfg.block_size, "d": cfg.d_model, "f": cfg.d_ff}
    seen_top, per_block = set(), {}
    for name, value in model.named_parameters():
        shape = list(value.shape)
        if name in TOP:
            want = [size[c] for c in TOP[name]]
            assert shape == want, f"{name}: shape {shape}, expected {want}"
            assert name not in seen_top, f"{name} listed twice"
            seen_top.add(name)
            continue
        match = re.fullmatch(r"blocks\.(\d+)\.(.+)", name)
        assert match, f"unexpected parameter {name}"
        index, rest = int(match.group(1)), match.group(2)
        assert 0 <= index < cfg.n_layers, f"{name}: block {index} of {cfg.n_layers}"
        pattern = next((p for p in PER_BLOCK if re.fullmatch(p, rest)), None)
        assert pattern, f"unexpected parameter {name}"
        want = [size[c] for c in PER_BLOCK[pattern]]
        assert shape == want, f"{name}: shape {shape}, expected {want}"
        per_block.setdefault(index, set()).add(rest)
    assert seen_top == set(TOP), f"missing {sorted(set(TOP) - seen_top)}"
    per_block_count = 2 + 2 + 4 + 2 + 2
    for index in range(cfg.n_layers):
        got = len(per_block.get(index, ()))
        assert got == per_block_count, (f"block {index} registers {got} of its {per_block_count} parameters "
                                        "(blocks in a Python list, or one block repeated?)")


def audit_gradients(model, tokens, targets):
    for name, grad in model.gradients(tokens, targets).items():
        if grad is None:
            raise AssertionError(f"parameter {name} receives no gradient")
        values = grad.double().reshape(-1).tolist()
        if any(not math.isfinite(v) for v in values):
            raise AssertionError(f"parameter {name} has inf or NaN in its gradient")
        if all(v == 0.0 for v in values):
            raise AssertionError(f"parameter {name} has a gradient of zeros only")


def audit_resume(trainer):
    k = 3
    straight = trainer.new()
    straight_losses = [straight.step() for _ in range(2 * k)]
    broken_off = trainer.new()
    for _ in range(k):
        broken_off.step()
    folder = tempfile.mkdtemp()
    try:
        path = os.path.join(folder, "run.ckpt")
        broken_off.save(path)
        resumed = trainer.load(path)
        resumed_losses = [resumed.step() for _ in range(k)]
    finally:
        for name in os.listdir(folder):
            os.remove(os.path.join(folder, name))
        os.rmdir(folder)
    assert resumed_losses == straight_losses[k:], (
        f"losses after resuming {resumed_losses} differ from straight training {straight_losses[k:]}")
    a, b = resumed.parameters(), straight.parameters()
    assert set(a) == set(b), "different parameter names after resuming"
    for name in b:
        same = a[name].shape == b[name].shape and bool((a[name] == b[name]).all())
        assert same, f"{name} is not bitwise equal after resuming"
