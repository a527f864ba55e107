"""Public sanity tests for exercise `audits`. Run: pytest exercises/audits

Each audit is run on a few public models through in-process stand-ins for the grader's handles (the first half
of this file): correct ones it must accept (return None) and broken ones it must reject with an AssertionError.
Another exception is a crash, and fails the test, as it costs you a catch in the grading. The grader hands your
audits many more models than these (the course's implementations and known bugs), so passing these is necessary,
not sufficient.

The grader runs every model it hands you in a process of its own: each call crosses to that process and every
tensor comes back as a copy. The handles below make the same calls on a model in this process, with the same
copies, so an audit that passes here talks to the grader's handles the same way. An exception inside the model
reaches your audit as a RuntimeError, as it does from the grader's handles: never as an AssertionError, so a model
that crashes is not a model your audit caught.

The public models are toys of their own, not the course's Transformer: a causal "prefix mean" language model, and
a module laid out with exercise 9's parameter names that has no forward at all. Each broken one has one defect,
named by its function. Your audits must not import this file: the grader's handles are not these.
"""
import dataclasses
import types

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import audits

torch.set_num_threads(1)

VOCAB = "_^pqabc$"   # seed 004's characters: "_" is PAD (id 0)
PAD_ID = 0
IGNORE_INDEX = -100


@dataclasses.dataclass
class Config:
    """Exercise 9's Config fields (without its validation: the public models need none)."""

    vocab_size: int = 11
    block_size: int = 8
    d_model: int = 16
    n_heads: int = 2
    n_layers: int = 2
    d_ff: int = 32
    dropout: float = 0.0


class ModelError(RuntimeError):
    """The model behind a handle raised: your audit did not catch anything, it made the model fail. (The grader's
    handles raise a RuntimeError of their own too, naming only the exception's type.)"""


def _guarded(call):
    try:
        return call()
    except Exception as error:   # any failure inside the model, AssertionError included
        raise ModelError(f"the model raised {type(error).__name__}: {error}") from None


class ModelHandle:
    """model(tokens), eval(), train(), config, named_parameters(), gradients(tokens, targets)."""

    def __init__(self, module: nn.Module):
        self._module = module

    @property
    def config(self) -> types.SimpleNamespace:
        return types.SimpleNamespace(**dataclasses.asdict(self._module.config))

    def __call__(self, tokens):
        def forward():
            with torch.no_grad():
                return self._module(tokens.clone())["logits"].detach().clone()
        return _guarded(forward)

    def eval(self) -> "ModelHandle":
        self._module.eval()
        return self

    def train(self) -> "ModelHandle":
        self._module.train()
        return self

    def named_parameters(self) -> list[tuple[str, torch.Tensor]]:
        return [(name, p.detach().clone()) for name, p in self._module.named_parameters()]

    def gradients(self, tokens, targets) -> dict[str, torch.Tensor | None]:
        module = self._module

        def backward():
            module.zero_grad(set_to_none=True)
            loss = module(tokens.clone(), targets=targets.clone())["loss"]
            try:
                loss.backward()
            except Exception:   # a loss cut from the graph: no parameter got a gradient
                return {name: None for name, _ in module.named_parameters()}
            grads = {name: None if p.grad is None else p.grad.detach().clone()
                     for name, p in module.named_parameters()}
            module.zero_grad(set_to_none=True)
            return grads
        return _guarded(backward)


# ------------------------------------------------------------------------------------------------------------
# A causal "prefix mean" language model: position t's logits read the mean of positions 0..t. Not a Transformer.
# ------------------------------------------------------------------------------------------------------------

class PrefixMeanLM(nn.Module):
    """logits[:, t] = head(tanh(mean of (token + position embeddings) over positions 0..t)). `leak` mixes in
    what a causal model must never read: "all" averages over every position (the mask removed), "next_at_start"
    lets position 0 read position 1, a float adds that share of the mean over every position."""

    def __init__(self, config: Config, leak: str | float | None = None, unused_parameter: bool = False,
                 zeroed_parameter: bool = False):
        super().__init__()
        self.config = config
        self.leak = leak
        self.token_embedding = nn.Embedding(config.vocab_size, config.d_model)
        self.position_embedding = nn.Embedding(config.block_size, config.d_model)
        self.dropout = nn.Dropout(config.dropout)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        # a parameter no loss reaches (gradient None), or one the loss reaches times zero (gradient all zero)
        self.unused = nn.Parameter(torch.ones(config.d_model)) if unused_parameter else None
        self.scale = nn.Parameter(torch.ones(config.d_model)) if zeroed_parameter else None

    def forward(self, tokens, targets=None):
        if not (isinstance(tokens, torch.Tensor) and tokens.dtype == torch.long and tokens.dim() == 2):
            raise ValueError("tokens must be a 2-D int64 tensor")
        T = tokens.shape[1]
        if not 1 <= T <= self.config.block_size:
            raise ValueError(f"T={T} is not in 1..block_size={self.config.block_size}")
        h = self.dropout(self.token_embedding(tokens) + self.position_embedding(torch.arange(T)))
        if self.scale is not None:
            h = h + 0.0 * self.scale
        seen = torch.arange(1, T + 1, dtype=h.dtype).view(1, T, 1)
        mixed = h.cumsum(dim=1) / seen
        if self.leak == "all":
            mixed = h.mean(dim=1, keepdim=True).expand_as(h)
        elif self.leak == "next_at_start" and T > 1:
            mixed = torch.cat([(h[:, :1] + h[:, 1:2]) / 2, mixed[:, 1:]], dim=1)
        elif isinstance(self.leak, float):
            mixed = mixed + self.leak * h.mean(dim=1, keepdim=True)
        logits = self.head(torch.tanh(mixed))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE_INDEX)
        return {"logits": logits, "loss": loss, "past_key_values": None}


def prefix_mean(config=None, seed=0, **defect) -> ModelHandle:
    torch.manual_seed(seed)
    return ModelHandle(PrefixMeanLM(config or Config(), **defect))


# causality
def causal_model(seed=0, dropout=0.0):
    """Correct. Handed over in train() mode: with dropout > 0 two calls differ until eval()."""
    handle = prefix_mean(Config(dropout=dropout), seed)
    handle.train()
    return handle


def mask_removed(seed=0):
    """Seed 004's first fault experiment: every position reads every other, the future included."""
    return prefix_mean(seed=seed, leak="all")


def first_position_reads_the_next(seed=0):
    """Only position 0 reads the future (position 1): a leak a change of the last token alone never shows."""
    return prefix_mean(seed=seed, leak="next_at_start")


# gradients
def connected_model(seed=0):
    """Correct: every parameter reaches the loss."""
    return prefix_mean(seed=seed)


def parameter_never_used(seed=0):
    """A registered parameter the forward never reads: its gradient is None."""
    return prefix_mean(seed=seed, unused_parameter=True)


def parameter_times_zero(seed=0):
    """A registered parameter the forward multiplies by zero: its gradient is all zero."""
    return prefix_mean(seed=seed, zeroed_parameter=True)


# ------------------------------------------------------------------------------------------------------------
# Exercise 9's parameters, laid out as its __init__ lays them out (exercise 9's stub gives it): no forward.
# ------------------------------------------------------------------------------------------------------------

class _Attention(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.q_proj, self.k_proj = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
        self.v_proj, self.out_proj = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)


class _FeedForward(nn.Module):
    def __init__(self, d, f):
        super().__init__()
        self.fc_in, self.fc_out = nn.Linear(d, f), nn.Linear(f, d)


class _Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_attention = nn.LayerNorm(config.d_model)
        self.attention = _Attention(config.d_model)
        self.ln_feedforward = nn.LayerNorm(config.d_model)
        self.feedforward = _FeedForward(config.d_model, config.d_ff)


class LaidOut(nn.Module):
    """Exercise 9's registered parameters for `config`; `blocks` says how the blocks are held."""

    def __init__(self, config: Config, blocks: str = "distinct"):
        super().__init__()
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.d_model)
        self.position_embedding = nn.Embedding(config.block_size, config.d_model)
        if blocks == "python_list":
            self.blocks = [_Block(config) for _ in range(config.n_layers)]
        elif blocks == "repeated":
            one = _Block(config)
            self.blocks = nn.ModuleList([one] * config.n_layers)
        else:
            self.blocks = nn.ModuleList([_Block(config) for _ in range(config.n_layers)])
        self.final_norm = nn.LayerNorm(config.d_model)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)

    def forward(self, tokens, targets=None):
        raise NotImplementedError("this public model has parameters only: audit_registration needs no forward")


def registered(config=None, blocks="distinct") -> ModelHandle:
    return ModelHandle(LaidOut(config or Config(), blocks))


# ------------------------------------------------------------------------------------------------------------
# make_batch functions over VOCAB (seed 004's batch, and two broken ones)
# ------------------------------------------------------------------------------------------------------------

def _ids(text):
    return [VOCAB.index(char) for char in text]


def make_batch(texts):
    """Correct: inputs ids[:-1], targets ids[1:], both right-padded with PAD to the longest."""
    rows = [_ids(text) for text in texts]
    length = max(len(row) - 1 for row in rows)
    inputs = [row[:-1] + [PAD_ID] * (length - len(row) + 1) for row in rows]
    targets = [row[1:] + [PAD_ID] * (length - len(row) + 1) for row in rows]
    return torch.tensor(inputs), torch.tensor(targets)


def labels_not_shifted(texts):
    """Seed 004's second fault experiment: the targets are the inputs themselves."""
    inputs, _ = make_batch(texts)
    return inputs, inputs.clone()


def left_padded(texts):
    """Shorter rows padded on the left, so their ids move to other positions."""
    inputs, targets = make_batch(texts)
    for row, text in enumerate(texts):
        short = inputs.shape[1] - (len(text) - 1)
        if short:
            inputs[row] = torch.roll(inputs[row], short)
            targets[row] = torch.roll(targets[row], short)
    return inputs, targets


# ------------------------------------------------------------------------------------------------------------
# A trainer: runs of AdamW steps on one fixed batch, dropout on, each run with a random state of its own
# (as each of the grader's runs lives in a process of its own)
# ------------------------------------------------------------------------------------------------------------

class Run:
    def __init__(self, trainer: "Trainer", state: dict | None = None):
        self._trainer = trainer
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(trainer.seed)
            self._model = PrefixMeanLM(trainer.config)
            self._rng = torch.get_rng_state()
        self._optimizer = torch.optim.AdamW(self._model.parameters(), lr=0.01)
        if state is not None:
            self._model.load_state_dict(state["model"])
            if "optimizer" in state:
                self._optimizer.load_state_dict(state["optimizer"])
            if "rng" in state:
                self._rng = state["rng"]

    def step(self) -> float:
        def one_step():
            tokens, targets = self._trainer.batch
            with torch.random.fork_rng(devices=[]):
                torch.set_rng_state(self._rng)
                self._model.train()
                self._optimizer.zero_grad(set_to_none=True)
                loss = self._model(tokens, targets=targets)["loss"]
                loss.backward()
                self._optimizer.step()
                self._rng = torch.get_rng_state()
            return loss.item()
        return _guarded(one_step)

    def save(self, path) -> None:
        state = {"model": self._model.state_dict()}
        if self._trainer.keeps_optimizer:
            state["optimizer"] = self._optimizer.state_dict()
        if self._trainer.keeps_rng:
            state["rng"] = self._rng
        _guarded(lambda: torch.save(state, path))

    def parameters(self) -> dict[str, torch.Tensor]:
        return {name: p.detach().clone() for name, p in self._model.named_parameters()}


class Trainer:
    """trainer.new() -> run, trainer.load(path) -> run."""

    def __init__(self, keeps_optimizer=True, keeps_rng=True, seed=0):
        self.keeps_optimizer, self.keeps_rng, self.seed = keeps_optimizer, keeps_rng, seed
        self.config = Config(vocab_size=len(VOCAB), dropout=0.1)
        self.batch = make_batch(["^pab$", "^qac$", "^pa$"])

    def new(self) -> Run:
        return Run(self)

    def load(self, path) -> Run:
        return _guarded(lambda: Run(self, torch.load(path, map_location="cpu", weights_only=True)))


def trainer() -> Trainer:
    """Correct: a checkpoint holds the weights, AdamW's state and the random state."""
    return Trainer()


def weights_only_trainer() -> Trainer:
    """A checkpoint with the weights alone: the reloaded AdamW starts its moments again."""
    return Trainer(keeps_optimizer=False)


def rng_not_saved_trainer() -> Trainer:
    """A checkpoint without the random state: the reloaded run draws other dropout masks."""
    return Trainer(keeps_rng=False)


# ============================================================================================================
# The public tests
# ============================================================================================================

def rejects(audit, *args):
    """The audit raised AssertionError: it caught the broken model. Any other exception propagates."""
    with pytest.raises(AssertionError):
        audit(*args)


# --- causality ------------------------------------------------------------------------------------------------

def test_causality_accepts_a_causal_model():
    assert audits.audit_causality(causal_model()) is None


def test_causality_puts_the_model_in_eval_first():
    # handed over in train() mode with dropout on: without eval() two calls differ, and that is not a leak
    assert audits.audit_causality(causal_model(dropout=0.5)) is None


def test_causality_rejects_the_mask_removed():
    rejects(audits.audit_causality, mask_removed())


def test_causality_rejects_a_leak_into_the_first_position_only():
    rejects(audits.audit_causality, first_position_reads_the_next())


# --- targets --------------------------------------------------------------------------------------------------

def test_targets_accepts_seed_004s_batch():
    assert audits.audit_targets(make_batch) is None


def test_targets_rejects_labels_not_shifted():
    rejects(audits.audit_targets, labels_not_shifted)


def test_targets_rejects_left_padding():
    rejects(audits.audit_targets, left_padded)


# --- registration ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("config", [Config(), Config(vocab_size=8, block_size=5, d_model=12, n_heads=3,
                                                                   n_layers=3, d_ff=20, dropout=0.1)])
def test_registration_accepts_exercise_9s_parameters(config):
    assert audits.audit_registration(registered(config)) is None


def test_registration_rejects_blocks_in_a_python_list():
    rejects(audits.audit_registration, registered(blocks="python_list"))


def test_registration_rejects_one_block_repeated():
    rejects(audits.audit_registration, registered(blocks="repeated"))


# --- gradients ------------------------------------------------------------------------------------------------

def batch():
    generator = torch.Generator().manual_seed(0)
    config = Config()
    tokens = torch.randint(0, config.vocab_size, (2, 6), generator=generator)
    return tokens, torch.randint(0, config.vocab_size, (2, 6), generator=generator)


def test_gradients_accepts_a_connected_model():
    assert audits.audit_gradients(connected_model(), *batch()) is None


def test_gradients_rejects_a_parameter_the_loss_never_reaches():
    rejects(audits.audit_gradients, parameter_never_used(), *batch())


def test_gradients_rejects_a_parameter_multiplied_by_zero():
    rejects(audits.audit_gradients, parameter_times_zero(), *batch())


# --- resume ---------------------------------------------------------------------------------------------------

def test_resume_accepts_a_full_checkpoint():
    assert audits.audit_resume(trainer()) is None


def test_resume_rejects_weights_alone():
    rejects(audits.audit_resume, weights_only_trainer())


def test_resume_rejects_a_checkpoint_without_the_random_state():
    rejects(audits.audit_resume, rng_not_saved_trainer())
