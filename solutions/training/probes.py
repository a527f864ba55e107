"""Probes of exercise `training` (train.py): make_optimizer, train_step and fit_fixed_batch.

The model handed to the student's functions is always the trusted copy of the course model
(`grader.probes.lm`), never the copy shipped in the student's file: a student who edits that copy cannot
change what is measured. The worker seeds `torch.manual_seed` before each probe, so every model built here
starts from the same weights for every submission. Models are float64 so that "equal" can mean equal.
"""

import contextlib
import copy

import torch
import torch._dynamo  # noqa: F401 - the first optimizer imports it: paid once in the worker, not per child
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from grader.probes.lm import Config, TransformerLM
from grader.worker.probe import describe_exception, probe, tensor_facts

# A small course model for the optimizer and train_step probes (V=7 so that every token id of a random
# batch is a real row, C=8 so that T=6 fits).
SMALL = dict(vocab_size=7, block_size=8, d_model=16, n_heads=2, n_layers=2, d_ff=32, dropout=0.0)
BATCH, LENGTH = 2, 6

# Hyper-parameters make_optimizer must pass through: none of them is a default, so a hard-coded value shows.
OPT_LR, OPT_WEIGHT_DECAY, OPT_BETAS = 1.5e-3, 0.0625, (0.85, 0.975)
DEFAULT_LR, DEFAULT_WEIGHT_DECAY, DEFAULT_BETAS = 3e-4, 0.1, (0.9, 0.95)  # the contract's defaults

TIGHT_CLIP, LOOSE_CLIP = 1e-3, 1e6  # far below / far above the gradient norm of a fresh model (about 1.7 here)
NO_CLIP = 1e9                       # gradient_reset compares raw gradients: clipping must not act
STALE_GRAD = 1e3                    # what a forgotten zero_grad would add to the first step's gradient

# The chapter's fixed batch (seed 000): V=4, C=8, d=16, h=2, N=2, f=32, dropout 0, float64, 120 AdamW steps
# at lr 0.02. The contradictory batch repeats one input row with targets that differ at positions 1 and 3.
FIXED = dict(vocab_size=4, block_size=8, d_model=16, n_heads=2, n_layers=2, d_ff=32, dropout=0.0)
FIXED_X, FIXED_Y = [[0, 1, 0, 1]], [[1, 0, 1, 0]]
CONTRADICTORY_X, CONTRADICTORY_Y = [[0, 1, 0, 1], [0, 1, 0, 1]], [[1, 0, 1, 0], [1, 2, 1, 3]]
FIT_STEPS, FIT_LR = 120, 0.02
PROTOCOL_STEPS, PROTOCOL_LR = 7, 0.005  # a short fit with a non-default lr, watched step by step
DEFAULTS_LOSS_FACTOR = 8.0  # the fit with defaults: a fresh gradient norm ~1.7 becomes ~14, far above the clip at 1.0
DEFAULT_CLIP = 1.0          # train_step's max_grad_norm default, and the clipping fit_fixed_batch asks for
MAX_LOGGED_STEPS = 200


# --- models and batches -----------------------------------------------------------------------------

def small_model() -> TransformerLM:
    return TransformerLM(Config(**SMALL)).double()


def fixed_batch_model() -> TransformerLM:
    """The model of the chapter's fixed batch, built exactly as the overfit probes build it (bench uses it)."""
    return TransformerLM(Config(**FIXED)).double()


def random_batch(ctx):
    return ctx.randint(0, SMALL["vocab_size"], (BATCH, LENGTH)), ctx.randint(0, SMALL["vocab_size"], (BATCH, LENGTH))


class Watched(nn.Module):
    """The course model seen from outside: it counts forward and backward passes, notes how many parameters
    still hold a `.grad` tensor when each begins, and can multiply the loss by a factor (inf: a non-finite
    loss that is still in the graph). Student code sees an ordinary model obeying exercise 9's contract."""

    def __init__(self, inner: TransformerLM, loss_factor: float | None = None):
        super().__init__()
        self.inner = inner
        self.config = inner.config
        self.loss_factor = loss_factor
        self.grads_at_forward: list[int] = []
        self.grads_at_backward: list[int] = []

    def forward(self, tokens, targets=None, past_key_values=None, use_cache=False):
        self.grads_at_forward.append(held_grads(self.inner))
        out = self.inner(tokens, targets=targets, past_key_values=past_key_values, use_cache=use_cache)
        loss = out["loss"]
        if loss is not None and self.loss_factor is not None:
            loss = loss * self.loss_factor
        if loss is not None and loss.requires_grad:
            # A hook on the loss runs first in backward(), before any parameter's .grad is written.
            loss.register_hook(self._backward_started)
        return {**out, "loss": loss}

    def _backward_started(self, grad):
        self.grads_at_backward.append(held_grads(self.inner))
        return grad


def held_grads(model: nn.Module) -> int:
    return sum(p.grad is not None for p in model.parameters())


# --- what the probes record --------------------------------------------------------------------------

def parameter_names(model: nn.Module) -> dict[int, str]:
    """id(parameter) -> its name; a tensor registered under several names is named by all of them."""
    names: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), []).append(name)
    return {key: " = ".join(value) for key, value in names.items()}


def parameter_table(model: nn.Module) -> dict[str, dict]:
    names = parameter_names(model)
    shapes = {id(p): tensor_facts(p)["shape"] for p in model.parameters()}
    return {names[id(p)]: {"dim": len(shapes[id(p)]), "shape": shapes[id(p)], "trainable": bool(p.requires_grad)}
            for p in model.parameters()}


def _number(value):
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return repr(value)[:80]


def describe_optimizer(opt, names: dict[int, str]) -> dict:
    """Type and parameter groups of an optimizer, each parameter named by identity (never by value)."""
    groups = []
    for group in list(getattr(opt, "param_groups", None) or []):
        if not isinstance(group, dict):
            groups.append({"params": [], "lr": None, "weight_decay": None, "betas": None,
                           "not_a_dict": type(group).__name__})
            continue
        params = []
        try:
            held = list(group.get("params", []))
        except TypeError:   # not a sequence at all: what it is, is recorded as the one entry
            held = [group.get("params")]
        for p in held:
            if id(p) in names:
                params.append(names[id(p)])
            elif isinstance(p, torch.Tensor):
                params.append(f"<a tensor of shape {list(p.shape)} that is not a parameter of the model>")
            else:
                params.append(f"<a {type(p).__name__}, not a tensor>")
        betas = group.get("betas")
        groups.append({"params": params, "lr": _number(group.get("lr")),
                       "weight_decay": _number(group.get("weight_decay")),
                       "betas": [_number(b) for b in betas] if isinstance(betas, (tuple, list)) else repr(betas)[:80]})
    return {"type": type(opt).__name__, "is_adamw": isinstance(opt, torch.optim.AdamW), "groups": groups}


def describe_losses(losses) -> dict:
    """What fit_fixed_batch returned: container type, length, element types and values (as floats)."""
    info = {"type": type(losses).__name__}
    try:
        items = list(losses)
    except Exception:  # noqa: BLE001 - not iterable is an observation
        return info
    info["length"] = len(items)
    info["element_types"] = sorted({type(v).__name__ for v in items})
    # isinstance: a fact about the objects, not their values
    info["all_float"] = all(isinstance(v, float) for v in items)
    values = []
    for v in items:
        try:
            values.append(float(v))
        except Exception:  # noqa: BLE001
            values.append(None)
    info["values"] = values
    return info


def snapshot(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def record_tensors(ctx, prefix: str, tensors: dict[str, torch.Tensor]) -> None:
    """Record named tensors under `prefix.name` (parameters, gradients): the judge compares them."""
    for name, value in tensors.items():
        ctx.tensor(f"{prefix}.{name}", value)


def fresh_gradients(model: nn.Module, x, y) -> dict[str, torch.Tensor]:
    """The gradient one backward from zero gives at the model's current weights (on a copy)."""
    twin = copy.deepcopy(model)
    twin.zero_grad(set_to_none=True)
    twin.train()
    twin(x, targets=y)["loss"].backward()
    return {name: p.grad.detach().clone() for name, p in twin.named_parameters() if p.grad is not None}


def watch_updates(read, optimizer=None) -> tuple[list, list]:
    """At each update an optimizer.step() applies, what `read(optimizer)` gave when that update's gradients were
    final: when step() is entered for a step without a closure, after the closure returned for one with a closure
    (torch's closure protocol: the reset, forward, backward and clipping run inside step(), before the update).
    A step counts once it has returned, so a closure that raised (a guard refusing a non-finite loss) is no
    update. `optimizer` None watches every optimizer. Returns the list the reads are appended to and the hooks'
    handles (remove them when done)."""
    updates: list = []
    pending: dict[int, object] = {}   # id(optimizer) -> the latest read of the step under way

    def take(opt) -> None:
        pending[id(opt)] = read(opt)

    def before_step(opt, args, kwargs):
        take(opt)
        # args are step()'s own, the optimizer first: optimizer.step(closure) or optimizer.step(closure=closure)
        closure = args[1] if len(args) > 1 else kwargs.get("closure")
        if not callable(closure):
            return None

        def closure_then_read(*inner_args, **inner_kwargs):
            result = closure(*inner_args, **inner_kwargs)
            take(opt)   # the gradients the closure left are those the update applies
            return result

        if len(args) > 1:
            return (args[0], closure_then_read, *args[2:]), kwargs
        return args, {**kwargs, "closure": closure_then_read}

    def after_step(opt, args, kwargs):
        if id(opt) in pending:
            updates.append(pending.pop(id(opt)))

    if optimizer is None:
        handles = [register_optimizer_step_pre_hook(before_step), register_optimizer_step_post_hook(after_step)]
    else:
        handles = [optimizer.register_step_pre_hook(before_step), optimizer.register_step_post_hook(after_step)]
    return updates, handles


@contextlib.contextmanager
def every_update(read):
    """watch_updates over every optimizer, while the block runs: yields the list of reads, one per update."""
    updates, handles = watch_updates(read)
    try:
        yield updates
    finally:
        for handle in handles:
            handle.remove()


def watch_steps(opt, model: nn.Module) -> list[dict]:
    """Record, at each update of `opt`, the gradients it applied (see watch_updates)."""

    def gradients(optimizer):
        grads = {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}
        return {"grads": grads, "with_grad": len(grads)}

    return watch_updates(gradients, opt)[0]


def call_expecting_raise(ctx, call) -> dict:
    """Like ctx.outcome, but NotImplementedError propagates so that an untouched stub stays `not attempted`."""
    try:
        result = call()
    except NotImplementedError:
        raise
    except Exception as exc:  # noqa: BLE001 - the exception is the observation
        return {"raised": describe_exception(exc, ctx.student_file)}
    return {"returned": type(result).__name__, "value": _number(result)}


def initial_loss(model: TransformerLM, x, y) -> float:
    """The loss before any student call: what the criteria show next to the student's results."""
    with torch.no_grad():
        return float(model(x, targets=y)["loss"])


# --- make_optimizer -----------------------------------------------------------------------------------

@probe
def optimizer_groups(student, ctx):
    lm = small_model()
    named = dict(lm.named_parameters())
    matrices = [n for n, p in named.items() if p.dim() >= 2]
    vectors = [n for n, p in named.items() if p.dim() < 2]
    frozen = [matrices[int(i)] for i in torch.randperm(len(matrices), generator=ctx.generator)[:2]]
    frozen += [vectors[int(i)] for i in torch.randperm(len(vectors), generator=ctx.generator)[:2]]
    for name in frozen:
        named[name].requires_grad_(False)
    table, names = parameter_table(lm), parameter_names(lm)  # taken before student code can touch requires_grad
    opt = student.make_optimizer(lm, lr=OPT_LR, weight_decay=OPT_WEIGHT_DECAY, betas=OPT_BETAS)
    ctx.record(asked={"lr": OPT_LR, "weight_decay": OPT_WEIGHT_DECAY, "betas": list(OPT_BETAS)},
               frozen=frozen, parameters=table, optimizer=describe_optimizer(opt, names))


@probe
def optimizer_defaults(student, ctx):
    lm = small_model()
    table, names = parameter_table(lm), parameter_names(lm)
    opt = student.make_optimizer(lm)
    ctx.record(asked={"lr": DEFAULT_LR, "weight_decay": DEFAULT_WEIGHT_DECAY, "betas": list(DEFAULT_BETAS)},
               parameters=table, optimizer=describe_optimizer(opt, names))


@probe
def optimizer_shared(student, ctx):
    # One tensor registered by two modules (weight tying): it is one parameter and must be held once.
    lm = small_model()
    lm.head.weight = lm.token_embedding.weight
    table, names = parameter_table(lm), parameter_names(lm)
    opt = student.make_optimizer(lm, lr=OPT_LR, weight_decay=OPT_WEIGHT_DECAY, betas=OPT_BETAS)
    ctx.record(parameters=table, optimizer=describe_optimizer(opt, names))


class OwnRMSNorm(nn.Module):
    """A norm class of the model's own, not nn.LayerNorm: 1-D `scale` and `shift`, neither named weight or bias."""

    def __init__(self, d: int):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(d))
        self.shift = nn.Parameter(torch.zeros(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.scale + self.shift


class OwnScaleNorm(nn.Module):
    """ScaleNorm: one 0-d gain for the whole vector, another parameter with dim < 2."""

    def __init__(self):
        super().__init__()
        self.g = nn.Parameter(torch.tensor(1.0))

    def forward(self, x):
        return self.g * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)


class RawFeedForward(nn.Module):
    """A feed-forward of raw parameters that no nn.Linear holds: matrices w_up, w_down and vectors b_up, b_down."""

    def __init__(self, d: int, f: int):
        super().__init__()
        self.w_up, self.b_up = nn.Parameter(0.02 * torch.randn(f, d)), nn.Parameter(torch.zeros(f))
        self.w_down, self.b_down = nn.Parameter(0.02 * torch.randn(d, f)), nn.Parameter(torch.zeros(d))

    def forward(self, x):
        return F.linear(F.gelu(F.linear(x, self.w_up, self.b_up)), self.w_down, self.b_down)


# frozen in the unfamiliar model: a matrix and a vector that only a name or module test would single out
UNFAMILIAR_FROZEN = ("position_embedding.weight", "blocks.1.ln_feedforward.shift")


def unfamiliar_model() -> TransformerLM:
    """The course model (exercise 9's forward contract) built from other parts: norms of its own classes and
    feed-forwards of raw parameters, so that 1-D parameters are not all named `bias` or held by nn.LayerNorm, and
    matrices are not all held by nn.Linear or nn.Embedding."""
    lm = TransformerLM(Config(**SMALL))
    d, f = SMALL["d_model"], SMALL["d_ff"]
    for block in lm.blocks:
        block.ln_attention, block.ln_feedforward = OwnRMSNorm(d), OwnRMSNorm(d)
        block.feedforward = RawFeedForward(d, f)
    lm.final_norm = OwnScaleNorm()
    lm = lm.double()
    named = dict(lm.named_parameters())
    for name in UNFAMILIAR_FROZEN:
        named[name].requires_grad_(False)
    return lm


@probe
def optimizer_any_model(student, ctx):
    lm = unfamiliar_model()
    table, names = parameter_table(lm), parameter_names(lm)  # taken before student code can touch requires_grad
    opt = student.make_optimizer(lm, lr=OPT_LR, weight_decay=OPT_WEIGHT_DECAY, betas=OPT_BETAS)
    ctx.record(asked={"lr": OPT_LR, "weight_decay": OPT_WEIGHT_DECAY, "betas": list(OPT_BETAS)},
               frozen=list(UNFAMILIAR_FROZEN), parameters=table, optimizer=describe_optimizer(opt, names))


# --- train_step ---------------------------------------------------------------------------------------

@probe
def train_step_update(student, ctx):
    lm = small_model()
    x, y = random_batch(ctx)
    expected = initial_loss(lm, x, y)
    reached = [n for n, g in fresh_gradients(lm, x, y).items() if bool(g.abs().sum() > 0)]
    record_tensors(ctx, "before", snapshot(lm))
    watched = Watched(lm).eval()  # train_step must switch it to train()
    opt = torch.optim.AdamW(lm.parameters(), lr=1e-3, weight_decay=0.0)
    steps = watch_steps(opt, lm)
    returned = student.train_step(watched, opt, x, y)  # max_grad_norm left at its default
    record_tensors(ctx, "after", snapshot(lm))
    # The module's mode and the counts of steps and forwards are events and state in this process: no tensor holds them.
    ctx.record(returned_type=type(returned).__name__, returned_is_float=isinstance(returned, float),
               returned_value=_number(returned), expected_loss=expected, reached_by_gradient=reached,
               training=bool(watched.training and lm.training),
               with_grad_at_step=[s["with_grad"] for s in steps], forwards=len(watched.grads_at_forward))


@probe
def clipping(student, ctx):
    for label, max_norm in (("tight", TIGHT_CLIP), ("loose", LOOSE_CLIP), ("default", DEFAULT_CLIP)):
        lm = small_model()
        # the default case: max_grad_norm left out, and a loss scaled so that the gradient is far above 1.0
        model = Watched(lm, loss_factor=DEFAULTS_LOSS_FACTOR) if label == "default" else lm
        x, y = random_batch(ctx)
        record_tensors(ctx, f"{label}.fresh", fresh_gradients(model, x, y))
        opt = torch.optim.SGD(lm.parameters(), lr=0.1)
        steps = watch_steps(opt, model)
        if label == "default":
            student.train_step(model, opt, x, y)
        else:
            student.train_step(lm, opt, x, y, max_grad_norm=max_norm)
        if steps:  # the gradients the last optimizer.step() applied: the judge takes their norm
            record_tensors(ctx, f"{label}.at_step", steps[-1]["grads"])
        ctx.record(**{label: {"max_grad_norm": max_norm, "with_grad_at_step": [s["with_grad"] for s in steps]}})


@probe
def gradient_reset(student, ctx):
    lm = small_model()
    x, y = random_batch(ctx)
    for p in lm.parameters():
        p.grad = torch.full_like(p, STALE_GRAD)  # left over from some earlier backward()
    watched = Watched(lm)
    opt = torch.optim.SGD(lm.parameters(), lr=0.05)
    steps = watch_steps(opt, lm)
    calls = []
    for i in range(2):
        fresh = fresh_gradients(lm, x, y)
        record_tensors(ctx, f"call{i}.fresh", fresh)
        n_before = len(steps)
        student.train_step(watched, opt, x, y, max_grad_norm=NO_CLIP)
        if len(steps) > n_before:  # the gradients this call's last optimizer.step() applied
            record_tensors(ctx, f"call{i}.at_step", steps[-1]["grads"])
        calls.append({"steps": len(steps) - n_before})
    ctx.record(calls=calls, stale_value=STALE_GRAD, n_parameters=len(list(lm.parameters())),
               grads_at_forward=watched.grads_at_forward, grads_at_backward=watched.grads_at_backward)


@probe
def nonfinite_loss(student, ctx):
    for label in ("nan_weight", "inf_loss"):
        lm = small_model()
        x, y = random_batch(ctx)
        if label == "nan_weight":
            with torch.no_grad():
                lm.head.weight[0, 0] = float("nan")  # every logit of token 0 is NaN, so is the loss
        watched = Watched(lm, loss_factor=float("inf") if label == "inf_loss" else None)
        record_tensors(ctx, f"{label}.before", snapshot(lm))
        opt = torch.optim.AdamW(lm.parameters(), lr=1e-3, weight_decay=0.0)
        steps = watch_steps(opt, lm)
        outcome = call_expecting_raise(ctx, lambda: student.train_step(watched, opt, x, y))
        record_tensors(ctx, f"{label}.after", snapshot(lm))
        ctx.record(**{label: {"outcome": outcome, "steps": len(steps),
                              "backwards": len(watched.grads_at_backward), "forwards": len(watched.grads_at_forward),
                              "adam_state": len(opt.state)}})
    # the positive control: the same call on a finite loss must train (step the optimizer), not raise
    lm = small_model()
    x, y = random_batch(ctx)
    opt = torch.optim.AdamW(lm.parameters(), lr=1e-3, weight_decay=0.0)
    steps = watch_steps(opt, lm)
    ctx.record(finite=call_expecting_raise(ctx, lambda: student.train_step(lm, opt, x, y)), finite_steps=len(steps))


# --- fit_fixed_batch ----------------------------------------------------------------------------------

@probe
def fit_protocol(student, ctx):
    lm = small_model()
    x, y = random_batch(ctx)
    names = parameter_names(lm)
    start = initial_loss(lm, x, y)

    def described(optimizer):
        if len(log) >= MAX_LOGGED_STEPS:
            return None   # counted, not described
        d = describe_optimizer(optimizer, names)
        return {"type": d["type"], "is_adamw": d["is_adamw"],
                "groups": [{k: g[k] for k in ("lr", "weight_decay", "betas")} for g in d["groups"]],
                "held": sorted({n for g in d["groups"] for n in g["params"]}) if not log else None}

    with every_update(described) as log:
        losses = student.fit_fixed_batch(lm, x, y, steps=PROTOCOL_STEPS, lr=PROTOCOL_LR)
    ctx.record(asked={"steps": PROTOCOL_STEPS, "lr": PROTOCOL_LR}, initial_loss=start, losses=describe_losses(losses),
               optimizer_steps=log[:MAX_LOGGED_STEPS], parameters=sorted(names.values()))


@probe
def fit_defaults(student, ctx):
    """fit_fixed_batch with its defaults left alone (120 steps, lr 0.02, clipping at 1.0), on a loss scaled so that
    the first step's gradient is far above the clipping limit; then steps=0, which must make no step."""
    lm = small_model()
    watched = Watched(lm, loss_factor=DEFAULTS_LOSS_FACTOR)
    x, y = random_batch(ctx)
    raw = torch.cat([g.reshape(-1) for g in fresh_gradients(watched, x, y).values()]).norm()

    def clipped(optimizer):
        grads = [q.grad.detach().double().reshape(-1) for q in lm.parameters() if q.grad is not None]
        return {"lrs": [_number(g["lr"]) for g in optimizer.param_groups],
                "grad_norm": float(torch.cat(grads).norm()) if grads else None}

    with every_update(clipped) as log:
        losses = describe_losses(student.fit_fixed_batch(watched, x, y))
        steps_taken = len(log)
        none = ctx.outcome("zero_steps", lambda: student.fit_fixed_batch(small_model(), x, y, steps=0))
    ctx.record(losses=losses, optimizer_steps=log[:steps_taken], raw_first_norm=float(raw),
               zero_steps_losses=describe_losses(none) if none is not None else None,
               zero_steps_optimizer_steps=len(log) - steps_taken)


def _fit(student, ctx, xs, ys):
    lm = fixed_batch_model()
    x, y = torch.tensor(xs, dtype=torch.long), torch.tensor(ys, dtype=torch.long)
    start = initial_loss(lm, x, y)
    # The parameter tensors of the model handed in, held before the call. What they hold after it is all that is
    # recorded: the judge loads them into a model of its own and measures the loss and the predictions there, so
    # nothing the student's code does to this model's forward, its modules or this process reaches the verdict.
    held = list(lm.named_parameters())
    losses = describe_losses(student.fit_fixed_batch(lm, x, y, steps=FIT_STEPS, lr=FIT_LR))  # drains a generator too
    for name, param in held:
        ctx.tensor(f"trained.{name}", param)
    ctx.record(x=xs, y=ys, steps=FIT_STEPS, lr=FIT_LR, initial_loss=start, losses=losses, config=FIXED,
               parameters=[name for name, _ in held])


@probe
def overfit_fixed_batch(student, ctx):
    _fit(student, ctx, FIXED_X, FIXED_Y)


@probe
def contradictory_labels(student, ctx):
    _fit(student, ctx, CONTRADICTORY_X, CONTRADICTORY_Y)
