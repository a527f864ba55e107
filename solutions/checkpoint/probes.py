"""Probes of exercise `checkpoint` (checkpoint.py): save_checkpoint, load_checkpoint and generate.

Student code is never handed the model shipped in the student's own file: save/load run on the grader's trusted
copy of the course model (`grader.probes.lm`) with a plain AdamW and a training step written here, and generate runs
on small scripted models whose greedy continuation is known in advance. Files go to folders under `ctx.workdir`,
which persist between probes, so the isolated probe (a fresh process) can load what an earlier probe saved.
"""

import hashlib
import json
import os
import re
import types

import torch
import torch.nn as nn

from grader.probes.lm import Config, TransformerLM
from grader.worker.probe import probe, student_value

# The first torch.optim optimizer imports torch._dynamo: imported here, the worker pays it once, before any
# exercise's clock starts, not once per forked child.
import torch._dynamo  # noqa: E402,F401

# --- save / load ----------------------------------------------------------------------------------
MODEL = dict(vocab_size=11, block_size=8, d_model=16, n_heads=2, n_layers=2, d_ff=32)
DROPOUT = 0.1            # resume is judged with dropout on, so the restored RNG state matters
LR, WEIGHT_DECAY, CLIP = 1e-2, 0.1, 1.0
BATCH, SEQ = 3, 8
RESUME_STEPS = 6         # N straight steps; the checkpoint is written after N/2 and resumed for N/2 more
SAVED_STEP = 7           # the step handed to save_checkpoint in `reload` (not the number of updates done)
SAVED_META = {"run": "reload-check", "vocab": "_^pqabc$", "data_hash": "9f2c1d0b7e",
              "config": {"vocab_size": 11, "block_size": 8, "dropout": 0.1}, "lr": 0.01,
              "tags": ["tiny", "cpu"], "shape": (2, 8), "resumable": True, "parent": None}
EXPECT_META = {"vocab": "_^pqabc$", "block_size": 8, "data_hash": "9f2c1d0b7e"}
RESUME_FOLDER = "ckpt_resume"

# --- generate -------------------------------------------------------------------------------------
SEED_VOCAB = "_^pqabc$"  # seed 004: _ is PAD, ^ begins, $ ends (EOS)
SEED_EOS = SEED_VOCAB.index("$")
SEED_BLOCK = 8
SEED_PROMPTS = ["^pa", "^qa", "^p"]
SEED_MAX_NEW = 6
V_SCRIPTED = 10          # the other scripted models: ids 0..9
PREFERRED_MARGIN = 4.0   # the chosen token's logit; every other logit is 0


def build(dropout: float = 0.0) -> TransformerLM:
    return TransformerLM(Config(**MODEL, dropout=dropout))


def adamw(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> None:
    """The trusted training step: the student's code only saves and loads around it."""
    model.train()
    optimizer.zero_grad(set_to_none=True)
    model(x, targets=y)["loss"].backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
    optimizer.step()


def data(ctx) -> tuple[torch.Tensor, torch.Tensor]:
    return ctx.randint(0, MODEL["vocab_size"], (BATCH, SEQ)), ctx.randint(0, MODEL["vocab_size"], (BATCH, SEQ))


def folder(ctx, name: str) -> str:
    path = os.path.join(ctx.workdir, name)
    os.makedirs(path, exist_ok=True)
    return path


def listing(path: str) -> list[str]:
    return sorted(os.listdir(path))


def optimizer_moments(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """AdamW's per-parameter state, flattened in parameter order (empty when the optimizer holds no state)."""
    entries = [optimizer.state.get(p, {}) for p in model.parameters()]
    if not all("exp_avg" in e and "exp_avg_sq" in e for e in entries):
        return {}
    return {"exp_avg": torch.cat([e["exp_avg"].reshape(-1) for e in entries]),
            "exp_avg_sq": torch.cat([e["exp_avg_sq"].reshape(-1) for e in entries]),
            "adam_step": torch.tensor([float(e["step"]) for e in entries], dtype=torch.float64)}


def describe_info(info) -> dict:
    """What load_checkpoint returned, as plain data."""
    if not isinstance(info, dict):
        return {"type": type(info).__name__}
    step = info.get("step", "<missing>")
    return {"type": "dict", "keys": sorted(str(k) for k in info), "step": step,
            "step_type": type(step).__name__, "meta": info.get("meta", "<missing>"),
            "meta_type": type(info.get("meta")).__name__, "meta_types": type_tree(info.get("meta"))}


def type_tree(value, depth: int = 0):
    """The container types inside `value` (a JSON record turns a tuple into a list: this keeps which it was)."""
    if depth > 8:
        return "..."
    if isinstance(value, dict):
        return {str(k): type_tree(v, depth + 1) for k, v in list(value.items())[:50]}
    if isinstance(value, (list, tuple)):
        return [type(value).__name__, [type_tree(v, depth + 1) for v in value[:50]]]
    return type(value).__name__


@probe
def saved_file(student, ctx):
    """save_checkpoint's file, read back the safe way: torch.load(weights_only=True)."""
    model = build()
    opt = adamw(model)
    train_step(model, opt, *data(ctx))
    path = os.path.join(folder(ctx, "ckpt_file"), "model.pt")
    student.save_checkpoint(path, model, opt, SAVED_STEP, **SAVED_META)
    state = ctx.outcome("weights_only_load", lambda: torch.load(path, map_location="cpu", weights_only=True))
    ctx.record(keys=sorted(str(k) for k in state) if isinstance(state, dict) else None)
    if state is None and "raised" in ctx.values["weights_only_load"]:
        # torch names the first object it refused: "Unsupported global: GLOBAL some.module.Class"
        found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", ctx.values["weights_only_load"]["raised"]["message"])
        ctx.record(refused_global=found.group(1) if found else None)


@probe
def reload(student, ctx):
    """Save a trained model, load it into a freshly built one (other initial weights), compare logits."""
    model = build()
    opt = adamw(model)
    x, y = data(ctx)
    for _ in range(2):
        train_step(model, opt, x, y)
    path = os.path.join(folder(ctx, "ckpt_reload"), "model.pt")
    student.save_checkpoint(path, model, opt, SAVED_STEP, **SAVED_META)
    fresh = build()  # the generator has moved on: other initial weights
    tokens = ctx.randint(0, MODEL["vocab_size"], (2, MODEL["block_size"]))
    with torch.no_grad():
        ctx.tensor("logits_saved", model.eval()(tokens)["logits"])
        ctx.tensor("logits_before_load", fresh.eval()(tokens)["logits"])
    info = student.load_checkpoint(path, fresh)
    with torch.no_grad(), student_value("the model load_checkpoint restored cannot run"):
        ctx.tensor("logits_loaded", fresh.eval()(tokens)["logits"])
    # step 0, the checkpoint of an untrained run, saved and loaded like any other
    path0 = os.path.join(folder(ctx, "ckpt_step0"), "model.pt")
    ctx.outcome("save_step0", lambda: student.save_checkpoint(path0, model, opt, 0))
    info0 = ctx.outcome("load_step0", lambda: student.load_checkpoint(path0, build()))
    ctx.record(info=describe_info(info), expected_step=SAVED_STEP, expected_meta=SAVED_META,
               expected_meta_types=type_tree(SAVED_META), info_step0=describe_info(info0))


CANARY_RUNS: list[str] = []


def _canary_ran() -> str:
    """Called only by an unpickler that runs code from the file: weights_only=True refuses to."""
    CANARY_RUNS.append("ran")
    return "the grader's canary"


class Canary:
    def __reduce__(self):
        return (_canary_ran, ())


@probe
def pickled_code(student, ctx):
    """A copy of the student's own checkpoint with one extra object that runs code when unpickled: load_checkpoint
    must refuse it (torch.load(weights_only=True)), never execute it."""
    model = build()
    opt = adamw(model)
    base = folder(ctx, "ckpt_canary")
    path = os.path.join(base, "model.pt")
    student.save_checkpoint(path, model, opt, 3, run="canary")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # noqa: BLE001 - a file that is not weights-only: read it in this sandbox to plant the canary
        with student_value("the file save_checkpoint wrote at `path` cannot be read back with torch.load"):
            state = torch.load(path, map_location="cpu", weights_only=False)
    if isinstance(state, dict):
        state["zz_canary"] = Canary()
    elif isinstance(state, list):
        state.append(Canary())
    else:
        ctx.record(planted=False, checkpoint_type=type(state).__name__)
        return
    evil = os.path.join(base, "planted.pt")
    torch.save(state, evil)
    CANARY_RUNS.clear()
    target = build()
    ctx.outcome("load_planted", lambda: student.load_checkpoint(evil, target, adamw(target)))
    # the positive control: the same loader on the checkpoint as saved, with nothing planted, must load
    clean = build()
    ctx.outcome("load_clean", lambda: student.load_checkpoint(path, clean, adamw(clean)))
    # Whether the canary ran is an event in this process: only the probe can see it. Whether the clean load put the
    # saved weights into `clean` is a fact about two models of the grader's (a loader that loads nothing refuses
    # nothing either).
    saved, restored = model.state_dict(), clean.state_dict()
    same = saved.keys() == restored.keys() and all(torch.equal(saved[k], restored[k]) for k in saved)
    ctx.record(planted=True, canary_ran=bool(CANARY_RUNS), clean_restored=same)


@probe
def expect(student, ctx):
    model = build()
    path = os.path.join(folder(ctx, "ckpt_expect"), "model.pt")
    student.save_checkpoint(path, model, adamw(model), 3, **EXPECT_META)
    cases = {
        "matching": dict(EXPECT_META),
        "wrong_vocab": {"vocab": "_^pqabcd$"},
        # the first key matches, the second does not: every key of `expect` is checked, not only the first
        "wrong_second_key": {"vocab": EXPECT_META["vocab"], "block_size": 16},
        # recorded only: the contract does not say what a key absent from meta does
        "absent_key": {"tokenizer": "bpe"},
    }
    for name, wanted in cases.items():
        ctx.outcome(name, lambda: student.load_checkpoint(path, build(), expect=dict(wanted)))
    ctx.record(stored_meta=EXPECT_META, expects=cases)


class UnpicklableState:
    """Stands for whatever makes a real save fail halfway (a full disk, a killed process)."""

    def __reduce_ex__(self, protocol):
        raise OSError("No space left on device (simulated by the grader halfway through torch.save)")


class FailsMidSave(TransformerLM):
    """The course model whose state cannot be written completely: its tensors pickle, then the last entry fails."""

    def state_dict(self, *args, **kwargs):
        state = super().state_dict(*args, **kwargs)
        state["zz_unwritable"] = UnpicklableState()
        return state

    def __reduce_ex__(self, protocol):  # pickling the whole module fails the same way
        raise OSError("No space left on device (simulated by the grader halfway through torch.save)")


class FailsMidSaveAdamW(torch.optim.AdamW):
    """The same for the optimizer, so that a save fails halfway whichever of the two states it writes first."""

    def state_dict(self):
        state = super().state_dict()
        state["zz_unwritable"] = UnpicklableState()
        return state

    def __reduce_ex__(self, protocol):
        raise OSError("No space left on device (simulated by the grader halfway through torch.save)")


@probe
def atomic_save(student, ctx):
    base = folder(ctx, "ckpt_atomic")
    path = os.path.join(base, "run.pt")
    model = build()
    opt = adamw(model)
    x, y = data(ctx)
    train_step(model, opt, x, y)
    student.save_checkpoint(path, model, opt, 1, run="first")
    ctx.record(after_first=listing(base))
    train_step(model, opt, x, y)
    student.save_checkpoint(path, model, opt, 2, run="second")  # replaces an existing checkpoint
    ctx.record(after_second=listing(base))
    # Digests stand for the file's bytes (a checkpoint is too large to record): the judge compares them.
    with student_value("save_checkpoint wrote no file at `path`"), open(path, "rb") as fh:
        ctx.record(digest_before_failed_save=hashlib.sha256(fh.read()).hexdigest())

    broken = FailsMidSave(Config(**MODEL))
    broken.load_state_dict(model.state_dict())
    broken_opt = FailsMidSaveAdamW(broken.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    ctx.outcome("failed_save", lambda: student.save_checkpoint(path, broken, broken_opt, 3, run="third"))
    with student_value("after a save that failed halfway there is no file at `path` any more"), open(path, "rb") as fh:
        ctx.record(digest_after_failed_save=hashlib.sha256(fh.read()).hexdigest())
    ctx.record(after_failed=listing(base))
    info = ctx.outcome("load_after_failure", lambda: student.load_checkpoint(path, build()))
    ctx.record(info_after_failure=describe_info(info) if info is not None else None)


@probe
def resume_first_half(student, ctx):
    """N straight steps (recorded), then the same run for N/2 steps and save_checkpoint."""
    base = folder(ctx, RESUME_FOLDER)
    x, y = data(ctx)
    with open(os.path.join(base, "batch.json"), "w", encoding="utf-8") as fh:
        json.dump({"x": x.tolist(), "y": y.tolist()}, fh)

    torch.manual_seed(ctx.seed)
    straight = build(DROPOUT)
    opt = adamw(straight)
    for _ in range(RESUME_STEPS):
        train_step(straight, opt, x, y)
    for name, p in straight.named_parameters():
        ctx.tensor("straight." + name, p)

    torch.manual_seed(ctx.seed)  # the same run again: same initial weights, same dropout masks
    first = build(DROPOUT)
    opt = adamw(first)
    for _ in range(RESUME_STEPS // 2):
        train_step(first, opt, x, y)
    ctx.tensor("rng_at_save", torch.get_rng_state())
    for key, value in optimizer_moments(first, opt).items():
        ctx.tensor(key + "_at_save", value)
    for name, p in first.named_parameters():
        ctx.tensor("saved." + name, p)
    student.save_checkpoint(os.path.join(base, "half.pt"), first, opt, RESUME_STEPS // 2, run="resume")
    ctx.record(steps=RESUME_STEPS, saved_step=RESUME_STEPS // 2)


@probe(isolated=True)
def resume_fresh_process(student, ctx):
    """A new process: new model and optimizer with other weights and another RNG state, load, N/2 more steps."""
    base = os.path.join(ctx.workdir, RESUME_FOLDER)
    with open(os.path.join(base, "batch.json"), encoding="utf-8") as fh:
        batch = json.load(fh)
    x, y = torch.tensor(batch["x"], dtype=torch.long), torch.tensor(batch["y"], dtype=torch.long)

    torch.manual_seed(ctx.seed)  # this probe's own seed: not the first half's
    model = build(DROPOUT)
    opt = adamw(model)
    torch.rand(1000)  # and move the generator somewhere else again
    ctx.tensor("rng_before_load", torch.get_rng_state())
    info = student.load_checkpoint(os.path.join(base, "half.pt"), model, opt)
    ctx.tensor("rng_after_load", torch.get_rng_state())
    with student_value("the optimizer state load_checkpoint restored cannot be read"):
        moments = optimizer_moments(model, opt)
        entries = len(opt.state_dict()["state"])
    for key, value in moments.items():
        ctx.tensor(key + "_after_load", value)
    # How many entries the loaded optimizer holds is a fact about the object; its moments are recorded above.
    ctx.record(optimizer_state_entries=entries, info=describe_info(info))
    for name, p in model.named_parameters():
        ctx.tensor("loaded." + name, p)
    with student_value("training on after load_checkpoint failed (the restored model or optimizer state is broken)"):
        for _ in range(RESUME_STEPS // 2):
            train_step(model, opt, x, y)
    for name, p in model.named_parameters():
        ctx.tensor("resumed." + name, p)


RNG_LOAD_PATHS = ("model_only", "with_optimizer", "with_expect")


@probe
def rng_every_load(student, ctx):
    """load_checkpoint restores the torch RNG state whichever arguments it is given: the model alone, the model and
    an optimizer, the model and a matching `expect`. Before each load the generator is moved elsewhere."""
    model = build()
    opt = adamw(model)
    path = os.path.join(folder(ctx, "ckpt_rng"), "model.pt")
    ctx.tensor("rng_at_save", torch.get_rng_state())
    student.save_checkpoint(path, model, opt, 5, **EXPECT_META)
    target = build()          # one model and optimizer for the three loads: each load replaces what they hold
    optimizer = adamw(target)
    for index, case in enumerate(RNG_LOAD_PATHS):
        torch.manual_seed(ctx.seed + 1 + index)   # another state for every load, and not the saved one
        torch.rand(100)
        ctx.tensor(f"{case}.rng_before", torch.get_rng_state())
        if case == "model_only":
            ctx.outcome(case, lambda: student.load_checkpoint(path, target))
        elif case == "with_optimizer":
            ctx.outcome(case, lambda: student.load_checkpoint(path, target, optimizer))
        else:
            ctx.outcome(case, lambda: student.load_checkpoint(path, target, expect=dict(EXPECT_META)))
        ctx.tensor(f"{case}.rng_after", torch.get_rng_state())


# --- generate -------------------------------------------------------------------------------------
class ScriptedLM(nn.Module):
    """A stand-in for the course model: at every position t it puts PREFERRED_MARGIN on the token `rule` picks for
    the prefix tokens[:t+1] (0 elsewhere); in train() mode it picks `train_rule`'s token instead, as if dropout
    changed the choice. It follows the model contract: config.block_size, model(ids)["logits"], ValueError past
    block_size, and it logs the length and mode of every call."""

    def __init__(self, rule, vocab_size: int, block_size: int, train_rule=None, margin=None):
        super().__init__()
        self.config = types.SimpleNamespace(vocab_size=vocab_size, block_size=block_size)
        self.anchor = nn.Parameter(torch.zeros(()))  # a parameter, so next(model.parameters()) works
        self.rule, self.train_rule, self.margin = rule, train_rule or rule, margin
        self.calls: list[dict] = []

    def forward(self, tokens, targets=None, past_key_values=None, use_cache=False):
        if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.dtype != torch.long:
            raise ValueError(f"tokens must be a 2-D int64 tensor [B, T], got {tokens!r:.80}")
        B, T = tokens.shape
        if B == 0 or T == 0:
            raise ValueError(f"tokens must be non-empty, got shape {tuple(tokens.shape)}")
        if T > self.config.block_size:
            raise ValueError(f"sequence length T={T} exceeds block_size={self.config.block_size}")
        self.calls.append({"length": T, "training": self.training})
        rule = self.train_rule if self.training else self.rule
        logits = torch.zeros(B, T, self.config.vocab_size)
        for b in range(B):
            row = tokens[b].tolist()
            for t in range(T):
                margin = self.margin(t, T) if self.margin else PREFERRED_MARGIN
                logits[b, t, rule(row[: t + 1])] = margin
        return {"logits": logits + 0.0 * self.anchor, "loss": None, "past_key_values": None}


def seed_rule(prefix: list[int]) -> int:
    """Seed 004's trained model: ^ -> p, p/q -> a, a -> b after p or c after q, b/c -> $, anything else -> _."""
    chars = "".join(SEED_VOCAB[i] for i in prefix)
    last = chars[-1]
    if last == "^":
        nxt = "p"
    elif last in "pq":
        nxt = "a"
    elif last == "a":
        nxt = "b" if "p" in chars else "c"
    elif last in "bc":
        nxt = "$"
    else:
        nxt = "_"
    return SEED_VOCAB.index(nxt)


def constant(token: int):
    return lambda prefix: token


def successor(prefix: list[int]) -> int:
    """Each position prefers its own token + 1 (mod V): every position of a prompt prefers something else."""
    return (prefix[-1] + 1) % V_SCRIPTED


def eos_when_full(block_size: int, eos: int, filler: int):
    """EOS exactly when it would be the block_size-th token, `filler` before that."""
    return lambda prefix: eos if len(prefix) == block_size - 1 else filler


def decode(student, ctx, key: str, model: ScriptedLM, prompt: list[int], max_new_tokens: int, eos_id) -> None:
    """Run generate on a copy of the prompt and record what came back, how the model was called, and the request."""
    request = {"prompt": list(prompt), "max_new_tokens": max_new_tokens, "eos_id": eos_id,
               "block_size": model.config.block_size}
    result = ctx.outcome(key + ".outcome", lambda: student.generate(model, list(prompt), max_new_tokens, eos_id))
    entry = {"request": request, "calls": model.calls}
    if key + ".outcome" in ctx.values and "raised" in ctx.values[key + ".outcome"]:
        entry["raised"] = ctx.values[key + ".outcome"]["raised"]
    elif not (isinstance(result, tuple) and len(result) == 2):
        entry["returned"] = type(result).__name__  # the judge says it is not a tuple (ids, reason)
    else:
        ids, reason = result
        entry["ids_type"] = type(ids).__name__
        entry["element_types"] = sorted({type(i).__name__ for i in ids}) if isinstance(ids, (list, tuple)) else None
        try:
            entry["ids"] = [int(i) for i in (ids.tolist() if isinstance(ids, torch.Tensor) else ids)]
        except Exception:  # noqa: BLE001 - not a sequence of numbers
            entry["ids"] = repr(ids)[:200]
        entry["reason"] = reason if isinstance(reason, str) else repr(reason)[:100]
    ctx.values[key] = entry
    del ctx.values[key + ".outcome"]


def seed_model() -> ScriptedLM:
    return ScriptedLM(seed_rule, len(SEED_VOCAB), SEED_BLOCK).eval()


@probe
def generate(student, ctx):
    # seed 004: ^pa -> ^pab$ and ^qa -> ^qac$, both stopping at EOS ($ appended)
    for text in SEED_PROMPTS:
        decode(student, ctx, "seed:" + text, seed_model(), [SEED_VOCAB.index(c) for c in text], SEED_MAX_NEW, SEED_EOS)
    # EOS as the block_size-th token: appended, and the reason is still "eos"
    decode(student, ctx, "eos_fills_block", ScriptedLM(eos_when_full(6, 9, 1), V_SCRIPTED, 6).eval(), [2, 2], 10, 9)
    # no EOS within the budget
    decode(student, ctx, "budget", ScriptedLM(constant(4), V_SCRIPTED, 16).eval(), [0, 1], 3, 2)
    decode(student, ctx, "budget_no_eos_id", ScriptedLM(constant(4), V_SCRIPTED, 16).eval(), [0, 1, 3], 4, None)
    decode(student, ctx, "budget_zero", ScriptedLM(constant(4), V_SCRIPTED, 16).eval(), [0, 1], 0, 2)
    # context limit: fill to exactly block_size; a prompt already at block_size gets nothing appended
    decode(student, ctx, "fills_block", ScriptedLM(constant(4), V_SCRIPTED, 6).eval(), [0, 1, 3], 20, 2)
    decode(student, ctx, "prompt_at_block", ScriptedLM(constant(4), V_SCRIPTED, 6).eval(), [0, 1, 3, 0, 1, 3], 5, 2)
    # only the last position predicts the next token: earlier positions prefer other tokens, and more strongly
    decode(student, ctx, "last_position",
           ScriptedLM(successor, V_SCRIPTED, 16, margin=lambda t, T: 4.0 + (T - t)).eval(),
           [4, 7, 2], 3, 9)
    # handed over in train() mode: generate must switch to eval() (in train mode the model would choose 5)
    decode(student, ctx, "train_mode", ScriptedLM(constant(4), V_SCRIPTED, 16, train_rule=constant(5)), [0, 1], 3, 2)
