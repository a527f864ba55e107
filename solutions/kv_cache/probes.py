"""Probes of exercise `kv_cache` (cache.py): TransformerLM.forward with a KV cache, and generate_cached.

Every probe builds two models with the same seeded weights: the student's TransformerLM and the grader's trusted
copy of exercise 9's model (`grader.probes.lm`), which computes what a full recompute gives. What the student's
calls must equal (the full forward's logits, the ids and stop reason `generate` gives, a cache in the contract's
layout to hand to the student's forward) is computed with the trusted model before the probe's first student call;
the judge reads it from the reference run. The models are float64, so a correct cache agrees with the full forward
to ~1e-15, far inside the contract's float32 tolerance, and any wiring bug shows far above it.

What reaches the student's model and its attention modules in each call (the shapes, the cache length) is recorded
by forward hooks of the grader's: that is how the work per new token is observed, never by timing.
"""

import math

import torch

from grader.probes.lm import Config, TransformerLM
from grader.worker.probe import ContractBreach, grader_callback, part, probe, student_value, tensor_facts

MODEL = dict(vocab_size=13, block_size=10, d_model=16, n_heads=4, n_layers=3, d_ff=32, dropout=0.0)
V, C = MODEL["vocab_size"], MODEL["block_size"]
HEADS, HEAD_DIM = MODEL["n_heads"], MODEL["d_model"] // MODEL["n_heads"]
BATCH = 2
# Teacher-forced runs over one sequence of block_size tokens: how many new positions each forward call gets. The
# first starts from a one-token prompt, the second from a longer one and also feeds several positions at once.
SCHEDULES = {"one_token_prompt": (1,) * C, "long_prompt": (4, 1, 2, 3)}
# Caches built by the grader in the contract's layout, of these lengths, followed by this many new positions: the
# new positions' embeddings must continue at the cache's length, whatever made the cache.
GIVEN_CACHES = ((1, 1), (4, 1), (C - 1, 1), (3, 3))
# generate_cached runs: (name, prompt row and length, max_new_tokens, eos). An eos of "third" is the third token
# that `generate` produces for that prompt without one, so the run stops at EOS.
GENERATE_RUNS = (("one_token", 0, 1, 6, None), ("long_prompt", 1, 4, 5, None), ("long_prompt_eos", 0, 3, 6, "third"),
                 ("no_budget", 1, 3, 0, None), ("fills_block", 1, 3, 20, None), ("prompt_at_block", 0, C, 3, None))
# Two generate_cached calls in a row on one model, with other prompts: the second must not see the first's cache.
REPEATED_RUNS = (("first", 0, 5, 4), ("second", 1, 2, 5))
# The contract names the modules these are; what each holds inside is the student's to name and arrange.
BLOCK_PARTS = ("ln_attention", "attention", "ln_feedforward", "feedforward")
NORMS = ("ln_attention", "ln_feedforward", "final_norm")


def contract_modules(model) -> list:
    """(path, module) for every module exercise 9's contract names, in a fixed order."""
    modules = [("token_embedding", part(model, "token_embedding")),
               ("position_embedding", part(model, "position_embedding"))]
    for i, block in enumerate(part(model, "blocks")):
        modules += [(f"blocks.{i}.{name}", part(block, name)) for name in BLOCK_PARTS]
    modules += [("final_norm", part(model, "final_norm")), ("head", part(model, "head"))]
    for path, module in modules:
        if not isinstance(module, torch.nn.Module):
            raise ContractBreach("model.{path} is a {kind}, not the nn.Module the contract makes it", path=path,
                                 kind=type(module).__name__)
    return modules


def fill(model, ctx) -> None:
    """The same seeded weights in the student's model and in the trusted one, whatever the layers inside the contract's
    modules are called: a module's parameters, in registration order, take consecutive values of a stream of that
    module's own (a fused QKV weight takes what separate Q, K and V weights take). Unit embeddings and 1/sqrt(fan_in)
    matrices give logits of order one, whose greedy choices are far apart."""
    with torch.no_grad():
        for index, (path, module) in enumerate(contract_modules(model)):
            stream = torch.Generator().manual_seed(ctx.seed + index)
            first_vector = True
            for p in module.parameters():
                noise = torch.randn(p.numel(), generator=stream, dtype=torch.float64).reshape(p.shape).to(p.dtype)
                if p.dim() == 1:  # a norm's weight (its first vector), else a bias
                    p.copy_((1.0 if first_vector and path.endswith(NORMS) else 0.0) + 0.1 * noise)
                    first_vector = False
                elif path.endswith("embedding"):
                    p.copy_(noise)
                else:
                    p.copy_(noise / math.sqrt(p.shape[-1]))


def trusted_model(ctx) -> TransformerLM:
    model = TransformerLM(Config(**MODEL)).to(torch.float64)
    fill(model, ctx)
    return model.eval()


def student_model(student, ctx):
    model = student.TransformerLM(student.Config(**MODEL))
    with student_value("your TransformerLM cannot be moved to float64 with .to(torch.float64)"):
        model = model.to(torch.float64)
    fill(model, ctx)
    return model.eval()


@torch.no_grad()
def trusted_cache(trusted: TransformerLM, tokens: torch.Tensor) -> tuple:
    """The keys and values of `tokens` in every block of the trusted model, in the contract's layout:
    one (k, v) per block, each [B, n_heads, T, d_head]."""
    B, T = tokens.shape
    seen: dict = {}
    handles = []
    for i, block in enumerate(trusted.blocks):
        for name in ("k_proj", "v_proj"):
            layer = getattr(block.attention, name)
            handles.append(layer.register_forward_hook(lambda m, a, out, key=(i, name): seen.__setitem__(key, out)))
    try:
        trusted(tokens)
    finally:
        for handle in handles:
            handle.remove()

    def heads(x):
        return x.reshape(B, T, HEADS, HEAD_DIM).transpose(1, 2).contiguous()

    return tuple((heads(seen[i, "k_proj"]), heads(seen[i, "v_proj"])) for i in range(len(trusted.blocks)))


def fresh(cache: tuple) -> tuple:
    """A copy of a grader-built cache to hand to the student: nothing the call does to it reaches the grader's."""
    return tuple((k.clone(), v.clone()) for k, v in cache)


@torch.no_grad()
def trusted_generate(trusted: TransformerLM, prompt: list[int], max_new_tokens: int, eos_id) -> tuple[list[int], str]:
    """exercise 11's generate (COURSE.md §11), full recompute on the trusted model."""
    ids = list(prompt)
    for _ in range(max_new_tokens):
        if len(ids) >= C:
            return ids, "context_limit"
        next_id = int(trusted(torch.tensor([ids]))["logits"][0, -1].argmax())
        ids.append(next_id)
        if eos_id is not None and next_id == eos_id:
            return ids, "eos"
    return ids, "max_new_tokens"


def field(out, key):
    """out[key] of forward's dict, or a breach of the contract naming what forward returned instead."""
    if not isinstance(out, dict):
        raise ContractBreach("forward returned a {kind}; the contract asks for a dict with keys "
                             "'logits', 'loss' and 'past_key_values'", kind=type(out).__name__)
    if key not in out:
        raise ContractBreach("forward's dict has keys {keys}; it lacks '{key}'", keys=sorted(map(str, out)), key=key)
    return out[key]


def item_facts(value) -> dict:
    if isinstance(value, torch.Tensor):
        facts = tensor_facts(value)
        return {"type": "Tensor", "shape": facts["shape"], "dtype": facts["dtype"]}
    return {"type": type(value).__name__}


def cache_facts(past) -> dict:
    """The structure of a returned past_key_values: its type, and per block the type and shapes of what it holds."""
    facts = {"type": type(past).__name__}
    if isinstance(past, (tuple, list)):
        layers = []
        for pair in list(past)[:16]:
            entry = {"type": type(pair).__name__}
            if isinstance(pair, (tuple, list)):
                entry.update(length=len(pair), items=[item_facts(x) for x in list(pair)[:4]])
            layers.append(entry)
        facts.update(length=len(past), layers=layers)
    return facts


def cache_length(past):
    """T_past of a cache in the contract's layout (the third axis of the first block's keys), else None."""
    if past is None:
        return 0
    try:
        keys = past[0][0]
    except Exception:  # noqa: BLE001 - not indexable as the contract's tuple of pairs: said as None
        return None
    return tensor_facts(keys)["shape"][2] if isinstance(keys, torch.Tensor) and keys.dim() == 4 else None


def first_tensor(args: tuple, kwargs: dict):
    for value in list(args) + list(kwargs.values()):
        if isinstance(value, torch.Tensor):
            return value
    return None


class CallLog:
    """What reached the student's model in each forward call (the tokens' shape and the cache's length) and what it
    returned (the logits), and the shape of what reached each block's `attention` in that call: grader hooks that
    only read. How many calls there were and what they were handed are events only these hooks see."""

    def __init__(self, model):
        self.calls: list[dict] = []
        self.logits: list = []
        self.handles = [model.register_forward_pre_hook(self.before, with_kwargs=True),
                        model.register_forward_hook(self.after)]
        for i, block in enumerate(part(model, "blocks")):
            attention = part(block, "attention")
            if not isinstance(attention, torch.nn.Module):
                raise ContractBreach("model.blocks[{i}].attention is a {kind}, not the nn.Module the contract makes it",
                                     i=i, kind=type(attention).__name__)
            self.handles.append(attention.register_forward_pre_hook(self.attention(i), with_kwargs=True))

    @grader_callback
    def before(self, module, args, kwargs):
        tokens = args[0] if args else kwargs.get("tokens")
        past = args[2] if len(args) > 2 else kwargs.get("past_key_values")
        self.calls.append({"tokens": item_facts(tokens), "past_length": cache_length(past),
                           "use_cache": bool(args[3] if len(args) > 3 else kwargs.get("use_cache", False)),
                           "attention": []})

    @grader_callback
    def after(self, module, args, output):
        logits = output.get("logits") if isinstance(output, dict) else None
        self.logits.append(logits.detach().clone() if isinstance(logits, torch.Tensor) else logits)

    def attention(self, index: int):
        @grader_callback
        def hook(module, args, kwargs):
            if self.calls:
                x = first_tensor(args, kwargs)
                self.calls[-1]["attention"].append({"block": index, "input": item_facts(x)})
        return hook

    def close(self) -> None:
        for handle in self.handles:
            handle.remove()

    def save(self, ctx, key: str) -> None:
        """Record the calls since the last save under `key`, and each call's logits as `key.call<i>.logits`."""
        ctx.record(**{key + ".calls": self.calls})
        for i, logits in enumerate(self.logits):
            ctx.tensor(f"{key}.call{i}.logits", logits)
        self.calls, self.logits = [], []


def run_generate(student, ctx, log: CallLog, key: str, model, prompt: list[int], max_new_tokens: int, eos_id) -> None:
    """generate_cached on a copy of the prompt: what it returned, and every model call it made."""
    result = ctx.outcome(key + ".outcome",
                         lambda: student.generate_cached(model, list(prompt), max_new_tokens, eos_id))
    entry: dict = {"request": {"prompt": list(prompt), "max_new_tokens": max_new_tokens, "eos_id": eos_id}}
    outcome = ctx.values.pop(key + ".outcome")
    if "raised" in outcome:
        entry["raised"] = outcome["raised"]
    elif not (isinstance(result, tuple) and len(result) == 2):
        entry["returned"] = type(result).__name__  # the judge says it is not a tuple (ids, reason)
    else:
        ids, reason = result
        try:
            entry["ids"] = [int(i) for i in (ids.tolist() if isinstance(ids, torch.Tensor) else ids)]
        except Exception:  # noqa: BLE001 - not a sequence of numbers
            entry["ids"] = repr(ids)[:200]
        entry["reason"] = reason if isinstance(reason, str) else repr(reason)[:100]
    ctx.record(**{key: entry})
    log.save(ctx, key)


def expect_generate(ctx, trusted, key: str, prompt: list[int], max_new_tokens: int, eos_id) -> None:
    """What `generate` gives for this request, and the full forward's logits over every position it produced."""
    ids, reason = trusted_generate(trusted, prompt, max_new_tokens, eos_id)
    ctx.record(**{key + ".expected": {"ids": ids, "reason": reason}})
    with torch.no_grad():
        ctx.tensor(key + ".expected_logits", trusted(torch.tensor([ids]))["logits"])


@probe
def schedules(student, ctx):
    """One sequence of block_size tokens fed in pieces, each call handed the cache the previous call returned."""
    trusted = trusted_model(ctx)
    tokens = ctx.randint(0, V, (BATCH, C))
    with torch.no_grad():
        ctx.tensor("full_logits", trusted(tokens)["logits"])
    model = student_model(student, ctx)
    ctx.record(schedules={name: list(sizes) for name, sizes in SCHEDULES.items()})
    with torch.no_grad():
        for name, sizes in SCHEDULES.items():
            past, start = None, 0
            for i, size in enumerate(sizes):
                out = model(tokens[:, start:start + size].clone(), past_key_values=past, use_cache=True)
                ctx.tensor(f"{name}.{i}.logits", field(out, "logits"))
                past = field(out, "past_key_values")
                ctx.record(**{f"{name}.{i}.cache": cache_facts(past)})
                start += size


@probe
def given_cache(student, ctx):
    """Caches the grader built in the contract's layout, then the next positions: they must be placed after the cache
    (their position embeddings at T_past...) and read it."""
    trusted = trusted_model(ctx)
    tokens = ctx.randint(0, V, (BATCH, C))
    caches = [trusted_cache(trusted, tokens[:, :length]) for length, _ in GIVEN_CACHES]
    with torch.no_grad():
        ctx.tensor("full_logits", trusted(tokens)["logits"])
    model = student_model(student, ctx)
    looked_up: list = []

    @grader_callback
    def positions(module, args):
        # Which rows of the position table the student's forward asked for: evidence for the report only (a forward
        # may read the table without calling it).
        ids = args[0] if args else None
        looked_up.append(ids.tolist()[:C + 1] if isinstance(ids, torch.Tensor) and ids.numel() <= 4 * C else None)

    handle = part(model, "position_embedding").register_forward_pre_hook(positions)
    ctx.record(cases=[list(case) for case in GIVEN_CACHES])
    with torch.no_grad():
        for (length, new), cache in zip(GIVEN_CACHES, caches, strict=True):
            looked_up.clear()
            out = model(tokens[:, length:length + new].clone(), past_key_values=fresh(cache), use_cache=True)
            key = f"cache{length}+{new}"
            ctx.tensor(key + ".logits", field(out, "logits"))
            ctx.record(**{key + ".cache": cache_facts(field(out, "past_key_values")),
                          key + ".positions": list(looked_up)})
    handle.remove()


@probe
def context_limit(student, ctx):
    """T_past + T == block_size works (the positive control); one position more raises ValueError, whether the cache
    is the grader's or the student's own."""
    trusted = trusted_model(ctx)
    tokens = ctx.randint(0, V, (BATCH, C))
    almost, full = trusted_cache(trusted, tokens[:, :C - 1]), trusted_cache(trusted, tokens)
    with torch.no_grad():
        ctx.tensor("full_logits", trusted(tokens)["logits"])
    model = student_model(student, ctx)
    with torch.no_grad():
        out = model(tokens[:, C - 1:].clone(), past_key_values=fresh(almost), use_cache=True)
        ctx.tensor("at_limit.logits", field(out, "logits"))
        ctx.outcome("two_past_almost_full", lambda: model(tokens[:, :2].clone(), past_key_values=fresh(almost),
                                                          use_cache=True))
        ctx.outcome("one_past_full", lambda: model(tokens[:, :1].clone(), past_key_values=fresh(full),
                                                   use_cache=True))
        own = field(model(tokens.clone(), use_cache=True), "past_key_values")
        ctx.outcome("one_past_own_full", lambda: model(tokens[:, :1].clone(), past_key_values=own, use_cache=True))


@probe
def generate(student, ctx):
    """generate_cached on prompts of one token and of several, to EOS, to max_new_tokens and to the context limit."""
    trusted = trusted_model(ctx)
    tokens = ctx.randint(0, V, (BATCH, C))
    requests = []
    for name, row, length, max_new, eos in GENERATE_RUNS:
        prompt = tokens[row, :length].tolist()
        if eos == "third":
            eos = trusted_generate(trusted, prompt, 3, None)[0][length + 2]
        requests.append((name, prompt, max_new, eos))
        expect_generate(ctx, trusted, name, prompt, max_new, eos)
    model = student_model(student, ctx)
    log = CallLog(model)
    for name, prompt, max_new, eos in requests:
        run_generate(student, ctx, log, name, model, prompt, max_new, eos)
    log.close()
    ctx.record(runs=[name for name, *_ in requests], n_layers=MODEL["n_layers"])


@probe
def not_shared(student, ctx):
    """Two fresh caches of one model, made one after the other: the first still continues its own sequence after the
    second is made. Then two generate_cached calls in a row, with other prompts: each starts from no cache."""
    trusted = trusted_model(ctx)
    tokens = ctx.randint(0, V, (BATCH, C))
    with torch.no_grad():
        ctx.tensor("full_logits", trusted(tokens)["logits"])
        other = ctx.randint(0, V, (BATCH, 3))
    runs = []
    for name, row, length, max_new in REPEATED_RUNS:
        prompt = tokens[row, :length].tolist()[::-1] if name == "second" else tokens[row, :length].tolist()
        runs.append((name, prompt, max_new))
        expect_generate(ctx, trusted, name, prompt, max_new, None)
    model = student_model(student, ctx)
    with torch.no_grad():
        first = field(model(tokens[:, :5].clone(), use_cache=True), "past_key_values")
        second = field(model(other.clone(), use_cache=True), "past_key_values")
        ctx.record(first_cache=cache_facts(first), second_cache=cache_facts(second))
        out = model(tokens[:, 5:6].clone(), past_key_values=first, use_cache=True)
        ctx.tensor("first_continued.logits", field(out, "logits"))
    log = CallLog(model)
    for name, prompt, max_new in runs:
        run_generate(student, ctx, log, name, model, prompt, max_new, None)
    log.close()


@probe
def no_cache(student, ctx):
    """use_cache=False and no past_key_values: exercise 9's forward, logits and loss, and no cache returned."""
    trusted = trusted_model(ctx)
    tokens = ctx.randint(0, V, (BATCH, 7))
    targets = ctx.randint(0, V, (BATCH, 7))
    with torch.no_grad():
        expected = trusted(tokens, targets=targets)
        ctx.tensor("expected_logits", expected["logits"])
        ctx.tensor("expected_loss", expected["loss"])
    model = student_model(student, ctx)
    with torch.no_grad():
        for key, out in (("default", model(tokens.clone())),
                         ("explicit", model(tokens.clone(), targets=targets.clone(), past_key_values=None,
                                            use_cache=False))):
            ctx.tensor(key + ".logits", field(out, "logits"))
            ctx.record(**{key + ".past_key_values": item_facts(field(out, "past_key_values")) | {
                "is_none": out["past_key_values"] is None}})
            if key == "explicit":
                loss = field(out, "loss")
                ctx.tensor("explicit.loss", loss)
