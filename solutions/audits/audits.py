"""Reference solution of exercise `audits`: five acceptance audits that raise AssertionError on a broken property.

Each audit works only through the handle calls the contract lists (COURSE.md section 12): a model handle
(`model(tokens)`, `eval()`, `train()`, `config`, `named_parameters()`, `gradients(tokens, targets)`), a
`make_batch(texts)` function, or a trainer (`new()`, `load(path)`; a run's `step()`, `save(path)`, `parameters()`).
The audits are independent evidence: each one looks at one property and says what it saw when it fails.
"""
import math
import os
import tempfile

import torch

VOCAB = "_^pqabc$"  # seed 004's vocabulary: "_" is PAD (id 0), "^" starts a text, "$" ends it
PAD = 0
TOLERANCE = 1e-6  # the contract's tolerance for "the logits did not change"
RESUME_STEPS = 3  # k: k steps, save, load, k steps against 2k straight steps


def _tokens(config, batch: int, length: int, seed: int) -> torch.Tensor:
    """Token ids drawn from a generator of our own, so the audit never moves the caller's random state."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, config.vocab_size, (batch, length), generator=generator, dtype=torch.long)


def audit_causality(model) -> None:
    """A token changed at position t must not change the logits at positions before t."""
    # eval() first: with dropout on, two forwards differ everywhere and dropout would be mistaken for a leak.
    model.eval()
    config = model.config
    length = min(int(config.block_size), 8)
    assert length >= 2, f"block_size={config.block_size} leaves no earlier position to compare"
    tokens = _tokens(config, 2, length, seed=0)
    with torch.no_grad():
        before = model(tokens)
        for t in range(1, length):  # every position: a leak may come from any future position, not only the last
            changed = tokens.clone()
            changed[:, t] = (changed[:, t] + 1) % config.vocab_size
            after = model(changed)
            # The positive control: the changed token reaches its own position, so the experiment is not vacuous.
            assert not torch.equal(after[:, t], before[:, t]), (
                f"changing the token at position {t} left the logits at position {t} unchanged: "
                f"the model does not read its input, so causality cannot be judged")
            leak = (after[:, :t] - before[:, :t]).abs()
            broken = ~(leak <= TOLERANCE)  # NaN counts as broken
            assert not bool(broken.any()), (
                f"changing the token at position {t} changed the logits at earlier positions by up to "
                f"{float(leak.nan_to_num(nan=math.inf).max()):.3g} (tolerance {TOLERANCE}): position "
                f"{int(broken.nonzero()[0, 1])} reads the future")


def audit_targets(make_batch) -> None:
    """The targets are the inputs shifted left by one, both right-padded with PAD."""
    # Texts of different lengths, the longest in the middle: padding defects show only in the shorter rows,
    # and a reordering of the rows shows only when the texts are not given sorted.
    for texts in (["^pab$"], ["^pab$", "^qaacb$", "^c$", "^qa$"]):
        inputs, targets = make_batch(texts)
        ids = [[VOCAB.index(char) for char in text] for text in texts]
        length = max(len(row) for row in ids) - 1
        want_inputs = [row[:-1] + [PAD] * (length - len(row) + 1) for row in ids]
        want_targets = [row[1:] + [PAD] * (length - len(row) + 1) for row in ids]
        for name, got, want in (("inputs", inputs, want_inputs), ("targets", targets, want_targets)):
            shape = tuple(getattr(got, "shape", ()))
            assert shape == (len(texts), length), (
                f"make_batch({texts}) gave {name} of shape {shape}, expected {(len(texts), length)}")
            rows = got.tolist()
            for i, (row, wanted) in enumerate(zip(rows, want, strict=True)):
                assert row == wanted, (
                    f"make_batch({texts}): {name} row {i} (text {texts[i]!r}) is {row}, expected {wanted}"
                    + (" (targets[:, t] must be the id of character t + 1)" if name == "targets" else ""))


def _expected_parameters(config) -> dict[str, tuple[int, ...]]:
    """Exercise 9's parameter ledger for `config`: every registered name and its shape."""
    V, C, d, f = int(config.vocab_size), int(config.block_size), int(config.d_model), int(config.d_ff)
    shapes: dict[str, tuple[int, ...]] = {"token_embedding.weight": (V, d), "position_embedding.weight": (C, d)}
    for i in range(int(config.n_layers)):
        block = f"blocks.{i}."
        for norm in ("ln_attention", "ln_feedforward"):
            shapes[block + norm + ".weight"] = (d,)
            shapes[block + norm + ".bias"] = (d,)
        for projection in ("q_proj", "k_proj", "v_proj", "out_proj"):  # no biases on Q/K/V/O
            shapes[block + f"attention.{projection}.weight"] = (d, d)
        shapes[block + "feedforward.fc_in.weight"] = (f, d)
        shapes[block + "feedforward.fc_in.bias"] = (f,)
        shapes[block + "feedforward.fc_out.weight"] = (d, f)
        shapes[block + "feedforward.fc_out.bias"] = (d,)
    shapes["final_norm.weight"] = (d,)
    shapes["final_norm.bias"] = (d,)
    shapes["head.weight"] = (V, d)  # untied, no bias
    return shapes


def audit_registration(model) -> None:
    """The registered parameters are exactly exercise 9's: names, shapes and count, every block its own."""
    expected = _expected_parameters(model.config)
    listed = [(name, tuple(tensor.shape)) for name, tensor in model.named_parameters()]
    names = [name for name, _ in listed]
    repeated = sorted({name for name in names if names.count(name) > 1})
    assert not repeated, f"parameters listed more than once: {repeated}"
    got = dict(listed)
    # A block repeated from one object is listed once (blocks.1.* go missing); blocks in a Python list are not
    # registered at all (every blocks.* goes missing): both show here as missing names.
    missing = sorted(set(expected) - set(got))
    unexpected = sorted(set(got) - set(expected))
    assert not missing and not unexpected, (
        f"registered parameters differ from the architecture's: missing {missing[:6]}"
        f"{' ...' if len(missing) > 6 else ''}, unexpected {unexpected[:6]}{' ...' if len(unexpected) > 6 else ''}")
    wrong = [f"{name} {got[name]} (expected {shape})" for name, shape in expected.items() if got[name] != shape]
    assert not wrong, f"parameters of the wrong shape: {', '.join(wrong)}"
    total = sum(torch.Size(shape).numel() for _, shape in listed)
    want = sum(torch.Size(shape).numel() for shape in expected.values())
    assert total == want, f"{total} parameters registered, the architecture has {want}"


def audit_gradients(model, tokens, targets) -> None:
    """Every registered parameter gets a finite gradient that is not identically zero."""
    gradients = model.gradients(tokens, targets)
    problems = []
    for name, _ in model.named_parameters():
        grad = gradients.get(name)
        if grad is None:
            problems.append(f"{name}: no gradient (not reached by loss.backward)")
        elif not bool(torch.isfinite(grad).all()):
            problems.append(f"{name}: non-finite gradient")
        elif not bool((grad != 0).any()):
            problems.append(f"{name}: gradient identically zero")
    assert not problems, f"{len(problems)} parameter(s) without a usable gradient: " + "; ".join(problems[:8])


def _run_steps(run, steps: int) -> list[float]:
    return [float(run.step()) for _ in range(steps)]


def audit_resume(trainer) -> None:
    """k steps, save, load, k more steps equal 2k straight steps, bit for bit."""
    k = RESUME_STEPS
    straight = trainer.new()
    straight_losses = _run_steps(straight, 2 * k)
    reference = straight.parameters()
    # Positive control: training moves the weights, so "equal after resuming" is not true of an idle run.
    start = trainer.new().parameters()
    assert any(not torch.equal(reference[name], start[name]) for name in reference), (
        f"{2 * k} steps left every parameter where a new run starts: nothing is trained")
    first = trainer.new()
    first_losses = _run_steps(first, k)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "resume.pt")
        first.save(path)
        resumed = trainer.load(path)  # a different run object than the one saved: the file must carry the state
        resumed_losses = _run_steps(resumed, k)
    got = resumed.parameters()
    assert set(got) == set(reference), (
        f"the resumed run has parameters {sorted(set(got) ^ set(reference))[:6]} that the straight run has not")
    differ = [name for name in reference if not torch.equal(got[name], reference[name])]
    assert not differ, (
        f"after {k} steps, save, load and {k} more steps, {len(differ)} parameter(s) differ from {2 * k} straight "
        f"steps (first: {differ[0]}); losses {first_losses + resumed_losses} against {straight_losses}")
    assert first_losses + resumed_losses == straight_losses, (
        f"the resumed run's losses {first_losses + resumed_losses} differ from the straight run's {straight_losses}")
