"""A small served catalog for the audits tests (the layout of solutions/audits/served.py: `catalog`, `build`): the
course's reference model, trainer and make_batch as wheats, a few broken ones as chaffs. It is copied into a course
folder of the tests' own, where the model process and the judge find it beside the exercise's probes."""

from __future__ import annotations

import importlib.util
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn

AUDITS = ("causality", "targets", "registration", "gradients", "resume")
VOCAB = "_^pqabc$"
SLOW_S = 0.006   # what the slow chaff adds to each call: below the model process's reply quantum
SIZES = dict(vocab_size=8, block_size=8, d_model=16, n_heads=2, n_layers=2, d_ff=32)


@dataclass(frozen=True)
class Entry:
    audit: str
    key: str
    wheat: bool
    description: dict
    fault_experiment: str | None = None


def _entry(audit, key, wheat, en, experiment=None):
    return Entry(audit, key, wheat, {"en": en, "zh": en}, experiment)


def catalog(course_root: Path) -> list[Entry]:
    return [
        _entry("causality", "reference", True, "the reference model"),
        _entry("causality", "reference_dropout_train", True, "the reference model in train() mode with dropout 0.3"),
        _entry("causality", "mask_removed", False, "the causal mask removed", "mask_removed"),
        _entry("causality", "small_leak", False, "a leak of 1e-4 from the last position into every other"),
        _entry("targets", "reference", True, "the reference make_batch"),
        _entry("targets", "labels_not_shifted", False, "targets equal to the inputs", "labels_not_shifted"),
        _entry("targets", "pad_one", False, "shorter rows padded with id 1 instead of PAD"),
        _entry("registration", "reference", True, "the reference model"),
        _entry("registration", "python_list", False, "blocks held in a Python list"),
        _entry("registration", "repeated_block", False, "one block repeated N times"),
        _entry("gradients", "reference", True, "the reference model"),
        _entry("gradients", "detached_head", False, "the head's output detached: no gradient reaches it"),
        _entry("resume", "reference", True, "the reference trainer"),
        _entry("resume", "no_rng", False, "the checkpoint leaves out the RNG state"),
        _entry("resume", "no_optimizer", False, "the checkpoint leaves out the optimizer state"),
    ]


def _module(course_root: Path, exercise: str, file: str):
    name = f"standin_{exercise}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, course_root / "solutions" / exercise / file)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


class Leaky(nn.Module):
    """The reference model with the last position's embedding mixed into every position's logits, computed slowly
    (SLOW_S more per call: what a timing attack would look for)."""

    def __init__(self, inner, scale):
        super().__init__()
        self.inner, self.scale = inner, scale
        self.config = inner.config

    def forward(self, tokens, targets=None, past_key_values=None, use_cache=False):
        time.sleep(SLOW_S)
        out = self.inner(tokens, targets)
        last = self.inner.token_embedding(tokens[:, -1:]).sum(-1, keepdim=True)
        return {**out, "logits": out["logits"] + self.scale * last}


class Detached(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.config = inner.config

    def named_parameters(self, *args, **kwargs):
        return self.inner.named_parameters(*args, **kwargs)

    def forward(self, tokens, targets=None, past_key_values=None, use_cache=False):
        out = self.inner(tokens)
        rest = [p for n, p in self.inner.named_parameters() if n != "head.weight"]
        logits = out["logits"].detach() + 0 * sum(p.sum() for p in rest)
        loss = None if targets is None else nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
        return {"logits": logits, "loss": loss, "past_key_values": None}


def _make_batch(pad: int, shift: int):
    def make_batch(texts):
        width = max(len(t) for t in texts) - 1
        ids = [[VOCAB.index(c) for c in t] for t in texts]
        inputs = [row[:-1] + [pad] * (width - len(row) + 1) for row in ids]
        targets = [row[shift:shift + len(row) - 1] + [pad] * (width - len(row) + 1) for row in ids]
        return torch.tensor(inputs), torch.tensor(targets)
    return make_batch


class Trainer:
    def __init__(self, lm, train, keep_rng=True, keep_optimizer=True):
        self.lm, self.train, self.keep_rng, self.keep_optimizer = lm, train, keep_rng, keep_optimizer
        generator = torch.Generator().manual_seed(5)
        self.x = torch.randint(0, 8, (2, 8), generator=generator)
        self.y = torch.randint(0, 8, (2, 8), generator=generator)

    def _fresh(self):
        torch.manual_seed(11)
        model = self.lm.TransformerLM(self.lm.Config(**SIZES, dropout=0.2))
        return Run(self, model, self.train.make_optimizer(model, lr=1e-2))

    def new(self):
        return self._fresh()

    def load(self, path):
        run = self._fresh()
        state = torch.load(path, weights_only=True)
        run.model.load_state_dict(state["model"])
        if "optimizer" in state:
            run.optimizer.load_state_dict(state["optimizer"])
        if "rng" in state:
            torch.set_rng_state(state["rng"])
        return run


class Run:
    def __init__(self, trainer, model, optimizer):
        self.trainer, self.model, self.optimizer = trainer, model, optimizer

    def step(self):
        return self.trainer.train.train_step(self.model, self.optimizer, self.trainer.x, self.trainer.y)

    def save(self, path):
        state = {"model": self.model.state_dict()}
        if self.trainer.keep_optimizer:
            state["optimizer"] = self.optimizer.state_dict()
        if self.trainer.keep_rng:
            state["rng"] = torch.get_rng_state()
        torch.save(state, path)

    def parameters(self):
        return {n: p.detach().clone() for n, p in self.model.named_parameters()}


def build(course_root: Path, entry: Entry, seed: int):
    lm = _module(course_root, "transformer_lm", "model.py")
    torch.manual_seed(seed % (1 << 31))
    dropout = 0.3 if entry.key == "reference_dropout_train" else 0.0
    model = lm.TransformerLM(lm.Config(**SIZES, dropout=dropout))
    model.train() if dropout else model.eval()
    if entry.audit == "targets":
        return _make_batch(0, 0 if entry.key == "labels_not_shifted" else 1) if entry.key != "pad_one" \
            else _make_batch(1, 1)
    if entry.audit == "resume":
        train = _module(course_root, "training", "train.py")
        return Trainer(lm, train, keep_rng=entry.key != "no_rng", keep_optimizer=entry.key != "no_optimizer")
    if entry.key == "mask_removed":
        for block in model.blocks:
            block.attention.forward = _unmasked(block.attention)
    if entry.key == "small_leak":
        return Leaky(model, 1e-4)
    if entry.key == "python_list":
        blocks = list(model.blocks)
        del model.blocks
        model.blocks = blocks
    if entry.key == "repeated_block":
        model.blocks = nn.ModuleList([model.blocks[0]] * len(model.blocks))
    if entry.key == "detached_head":
        return Detached(model)
    return model


def _unmasked(attention):
    """The attention's forward with every position reading every other."""
    def forward(x):
        B, T, _ = x.shape
        q, k, v = (attention._split(p(x)) for p in (attention.q_proj, attention.k_proj, attention.v_proj))
        weights = torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1)
        out = (weights @ v).transpose(1, 2).reshape(B, T, -1)
        return attention.out_proj(out)
    return forward
