"""Exercise `audits`: the acceptance checks themselves.

You write five audits. Each one receives a handle to a model (or a batch function, or a trainer) that the
grader hands it, raises AssertionError, with a message that says what it saw, when the property is broken,
and returns None when it holds. It is judged against correct models, which it must accept, and broken ones
(one described defect each), which it must reject. Any exception other than AssertionError is a crash, not a
rejection: check what you need with `assert` (or raise AssertionError yourself).

A handle is not one of the course's classes: use only the calls listed below.

Model handle `model`:
- model(tokens) -> Tensor [B, T, V], the logits; `tokens` a 2-D int64 tensor [B, T] with ids in
  [0, vocab_size) and 1 <= T <= block_size.
- model.eval(), model.train(): the mode of the model behind the handle (dropout off or on).
- model.config: exercise 9's Config fields (vocab_size, block_size, d_model, n_heads, n_layers, d_ff,
  dropout), values only.
- model.named_parameters() -> list[tuple[str, Tensor]]: the registered parameters, a shared one once, as
  torch lists them (values: changing them changes nothing).
- model.gradients(tokens, targets) -> dict[str, Tensor | None]: one forward with targets and one
  loss.backward() from zero gradients; each registered parameter's .grad (None when it got none).
Batch handle `make_batch(texts: list[str]) -> (inputs, targets)`.
Trainer handle `trainer`: trainer.new() -> run; trainer.load(path) -> run; run.step() -> float;
run.save(path); run.parameters() -> dict[str, Tensor].
Every tensor a handle returns is a copy, on the CPU.

Run the public tests with `pytest exercises/audits`.
"""
import math

import torch

VOCAB = "_^pqabc$"  # seed 004's characters: "_" is PAD (id 0), "^" starts a text, "$" ends it
PAD_ID = 0
TOLERANCE = 1e-6  # seed 004: prefix logits compared with rtol=0, atol=1e-6


def audit_causality(model) -> None:
    """A token changed at position t must not change the logits at any position before t.

    Dropout may be on in the model handed in: put it in eval() first, so that dropout is not mistaken for a
    leak (seed 000). Compare with a tolerance of 1e-6. Uses model(tokens), model.eval(), model.config.
    """
    raise NotImplementedError("audits: implement audit_causality")


def audit_targets(make_batch) -> None:
    """The targets are the inputs shifted left by one, right-padded with PAD on both.

    make_batch(texts) -> (inputs, targets) over seed 004's vocabulary VOCAB; every text starts with "^" and ends
    with "$". For each text's ids: inputs[row, t] == ids[t] and targets[row, t] == ids[t + 1] for t < len(ids) - 1,
    and PAD in both after that, up to the longest text's length minus one.
    """
    raise NotImplementedError("audits: implement audit_targets")


def audit_registration(model) -> None:
    """The registered parameters are exactly those exercise 9's architecture has for model.config.

    Names, shapes and count; the blocks distinct (a block repeated from one object, or blocks held in a Python
    list, must fail). Uses model.named_parameters() and model.config.
    """
    raise NotImplementedError("audits: implement audit_registration")


def audit_gradients(model, tokens, targets) -> None:
    """Every registered parameter gets a finite gradient that is not identically zero.

    `tokens` and `targets` are int64 [B, T] tensors the model accepts. Uses model.gradients(tokens, targets).
    """
    raise NotImplementedError("audits: implement audit_gradients")


def audit_resume(trainer) -> None:
    """k steps, save, load and k more steps equal 2k straight steps, bit for bit.

    trainer.new() starts a run from the same initial state every time; run.step() is one training step on a
    fixed batch with dropout on and returns the loss; run.save(path) writes a checkpoint; trainer.load(path)
    resumes a run from it; run.parameters() gives its parameters by name. Weights alone do not restore AdamW,
    and the RNG state matters with dropout (seed 004).
    """
    raise NotImplementedError("audits: implement audit_resume")
