"""Audits written from the contract (COURSE.md section 12) alone, vectorised: one batch holds a base sequence and,
for every position t, a copy whose suffix from t on is replaced; the comparisons are tensor-wide."""
import pathlib
import tempfile

import torch

PAD = 0
CHARS = {c: i for i, c in enumerate("_^pqabc$")}


def audit_causality(model):
    model.eval()
    cfg = model.config
    T, V = cfg.block_size, cfg.vocab_size
    if T < 2:
        return  # one position has no future to change
    g = torch.Generator().manual_seed(7)
    base = torch.randint(0, V, (T,), generator=g)
    # row t (t = 1..T-1) keeps base[:t] and has every token from t on shifted to another id
    t_of_row = torch.arange(1, T).unsqueeze(1)                        # [T-1, 1]
    later = torch.arange(T).unsqueeze(0) >= t_of_row                  # [T-1, T]
    shifted = (base + 1 + torch.randint(0, V - 1, (T,), generator=g)) % V
    rows = torch.where(later, shifted.expand(T - 1, T), base.expand(T - 1, T))
    # the base is row 0 of the same call, so every row goes through the same kernels
    logits = model(torch.cat([base.unsqueeze(0), rows]))              # [T, T, V]
    logits_base, logits_rows = logits[:1], logits[1:]
    gap = (logits_rows - logits_base).abs().amax(dim=-1)              # [T-1, T]
    before = ~later
    worst = torch.where(before, gap, torch.zeros_like(gap))
    assert not torch.isnan(gap[before]).any(), "NaN logits before the changed position"
    leaks = (worst > 1e-6).nonzero().tolist()
    assert not leaks, (f"{len(leaks)} (t, position) pairs leak, e.g. changing from t={leaks[0][0] + 1} on moved "
                       f"position {leaks[0][1]} by {worst.max().item():.3g}")


def audit_targets(make_batch):
    texts = ["^ab$", "^pqabc$", "^c$", "^qa$", "^pcab$"]
    inputs, targets = make_batch(texts)
    width = max(map(len, texts)) - 1
    assert tuple(inputs.shape) == tuple(targets.shape) and inputs.shape[0] == len(texts) and inputs.shape[1] >= width, (
        f"shapes {tuple(inputs.shape)} and {tuple(targets.shape)} for {len(texts)} texts of up to {width + 1} chars")
    n = inputs.shape[1]
    ids = torch.full((len(texts), n + 1), PAD, dtype=torch.long)
    for i, text in enumerate(texts):
        ids[i, :len(text)] = torch.tensor([CHARS[c] for c in text])
    lengths = torch.tensor([len(text) - 1 for text in texts]).unsqueeze(1)
    scored = torch.arange(n).unsqueeze(0) < lengths
    want_inputs = torch.where(scored, ids[:, :-1], PAD)
    want_targets = torch.where(scored, ids[:, 1:], PAD)
    assert torch.equal(inputs.long(), want_inputs), f"inputs\n{inputs}\nshould be\n{want_inputs}"
    assert torch.equal(targets.long(), want_targets), f"targets\n{targets}\nshould be\n{want_targets}"


def _layout(cfg):
    d, f = cfg.d_model, cfg.d_ff
    block = {"ln_attention.weight": [d], "ln_attention.bias": [d],
             **{f"attention.{p}_proj.weight": [d, d] for p in ("q", "k", "v", "out")},
             "ln_feedforward.weight": [d], "ln_feedforward.bias": [d],
             "feedforward.fc_in.weight": [f, d], "feedforward.fc_in.bias": [f],
             "feedforward.fc_out.weight": [d, f], "feedforward.fc_out.bias": [d]}
    return {"token_embedding.weight": [cfg.vocab_size, d], "position_embedding.weight": [cfg.block_size, d],
            **{f"blocks.{i}.{k}": v for i in range(cfg.n_layers) for k, v in block.items()},
            "final_norm.weight": [d], "final_norm.bias": [d], "head.weight": [cfg.vocab_size, d]}


def audit_registration(model):
    want = _layout(model.config)
    pairs = model.named_parameters()
    got = {name: list(value.shape) for name, value in pairs}
    assert len(pairs) == len(want), f"{len(pairs)} registered parameters where exercise 9 has {len(want)}"
    assert got.keys() == want.keys(), (f"names differ: missing {sorted(want.keys() - got.keys())}, "
                                       f"unexpected {sorted(got.keys() - want.keys())}")
    wrong = {name: (got[name], want[name]) for name in want if got[name] != want[name]}
    assert not wrong, f"shapes (got, want): {wrong}"


def audit_gradients(model, tokens, targets):
    grads = model.gradients(tokens, targets)
    missing = [n for n, g in grads.items() if g is None]
    assert not missing, f"no gradient reaches {missing}"
    bad = [n for n, g in grads.items() if not torch.isfinite(g).all()]
    assert not bad, f"non-finite gradients in {bad}"
    zero = [n for n, g in grads.items() if g.abs().sum() == 0]
    assert not zero, f"all-zero gradients in {zero}"


def audit_resume(trainer):
    steps = 2
    a = trainer.new()
    for _ in range(steps):
        a.step()
    with tempfile.TemporaryDirectory() as tmp:
        file = pathlib.Path(tmp) / "resume.pt"
        a.save(file)
        b = trainer.load(file)
    for _ in range(steps):
        b.step()
    c = trainer.new()
    for _ in range(2 * steps):
        c.step()
    resumed, straight = b.parameters(), c.parameters()
    assert resumed.keys() == straight.keys(), "the runs hold different parameters"
    for name, value in straight.items():
        torch.testing.assert_close(resumed[name], value, rtol=0, atol=0,
                                   msg=f"{name}: resumed differs from straight training")
