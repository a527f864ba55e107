"""Hidden criteria of exercise `training`: make_optimizer, train_step and fit_fixed_batch.

Every probe hands the student's functions the trusted course model (grader/probes/lm.py) in float64, so the
numbers below compare like with like. Thresholds measured by `bench/calibrate_training.py` on the reference
solution (41 model seeds, including the probes' own seeds for the course seed, × 3 choices of betas).
"""

import math
import re
from collections import Counter, defaultdict

import torch
import torch.nn.functional as F

from grader.i18n import Text, join, t, verbatim
from grader.judge.compare import describe_outcome, raised
from grader.judge.criterion import criterion

EXERCISE = "training"

HYPER_TOLERANCE = 1e-9      # relative; lr, betas and weight decay are copied, not computed: only rounding may differ
LOSS_TOLERANCE = 1e-9       # float64, the same trusted model, weights and batch: the returned loss equals the probe's
                            # up to rounding (~1e-15)
CLIP_ABOVE = 1e-6           # relative slack above max_grad_norm: clip_grad_norm_ lands at max·n/(n + 1e-6), just below
                            # the limit
CLIP_BELOW = 1e-2           # relative slack below it: an eps in the clip coefficient costs ~1e-6; 1 % lower is scaling
                            # too hard
UNTOUCHED_TOLERANCE = 1e-9  # relative; with max_grad_norm=1e6 the gradient must not be rescaled at all (float64
                            # rounding only)
RESET_TOLERANCE = 1e-9      # relative, float64: the step's gradient is one fresh backward; a stale 1e3 or a doubled
                            # gradient is ≥ 100 %
OVERFIT_THRESHOLD = 0.1     # fixed by the course (seed 000). Reference, measured: final eval loss 5e-6 .. 3.3e-4 (41
                            # seeds × 3 betas)
OPTIMUM_SLACK = 1e-9        # no loss can be below the analytic optimum (identical rows share logits): float64 rounding
                            # only
CONTRADICTORY_MARGIN = 0.05  # above the optimum (0.3466 here). Reference, measured: final - optimum +1.2e-4 .. +5.8e-3
                             # (41 seeds × 3 betas)
DEFAULT_CLIP = 1.0          # train_step's default max_grad_norm, and the clipping of every fit_fixed_batch step
DEFAULT_FIT_STEPS, DEFAULT_FIT_LR = 120, 0.02  # fit_fixed_batch's defaults (the contract's signature)
LISTED = 5                  # names shown in a message before "and N more"
# What the optimizer probe records for a group entry that is not a parameter of the model (solutions/training/probes.py)
FOREIGN_TENSOR = re.compile(r"<a tensor of shape (\[[-0-9, ]*\]) that is not a parameter of the model>")
FOREIGN_OBJECT = re.compile(r"<a (\w+), not a tensor>")


@criterion("optimizer_is_adamw", kind="optimizer",
           title=t("make_optimizer returns AdamW with the requested lr and betas"),
           hint=t("Return torch.optim.AdamW(groups, lr=lr, betas=betas): pass the arguments through instead of "
                  "hard-coding values, and keep the defaults lr=3e-4, betas=(0.9, 0.95). torch.optim.Adam is not AdamW "
                  "(its weight decay is an L2 term)."))
def test_optimizer_is_adamw(obs, verdict):
    asked_by = {}
    for name in ("optimizer_groups", "optimizer_defaults"):
        p = obs.probe(name)
        opt, asked = p.value("optimizer"), p.value("asked")
        asked_by[name] = f"lr={asked['lr']:g}, betas={tuple(asked['betas'])}"
        call = _call(name, asked)
        groups = [{k: g.get(k) for k in ("lr", "betas")} for g in opt["groups"]]
        verdict.note(**{name: {"type": opt["type"], "groups": groups}})
        verdict.check(opt["is_adamw"], t("{call} returned {what}; expected a torch.optim.AdamW", call=call,
                                         what=_of_type(opt["type"])))
        verdict.check(len(opt["groups"]) > 0, t("{call} returned an AdamW with no parameter group", call=call))
        for i, g in enumerate(opt["groups"]):
            if not _same(g["lr"], asked["lr"]):
                verdict.fail(t("{call}: parameter group {index} has lr {got}; expected {want:g}, the lr argument",
                               call=call, index=i, got=repr(g["lr"]), want=asked["lr"]))
            if not (isinstance(g["betas"], list) and len(g["betas"]) == 2
                    and all(_same(b, a) for b, a in zip(g["betas"], asked["betas"], strict=False))):
                verdict.fail(t("{call}: parameter group {index} has betas {got}; expected {want}, the betas argument",
                               call=call, index=i, got=repr(g["betas"]), want=tuple(asked["betas"])))
    verdict.ok(t("an AdamW whose groups carry the lr and betas passed in ({given}) and the defaults ({defaults})",
                 given=asked_by["optimizer_groups"], defaults=asked_by["optimizer_defaults"]))


@criterion("optimizer_coverage", kind="optimizer",
           title=t("Every trainable parameter exactly once, frozen ones never"),
           hint=t("Loop over model.parameters() (or named_parameters()), skip p.requires_grad == False, and keep a set "
                  "of id(p) so that a tensor shared by two modules is added once. Do not filter by name (a name test "
                  "such as 'weight' in name misses biases, or LayerNorm parameters); put every kept parameter in "
                  "exactly one of the two groups."))
def test_optimizer_coverage(obs, verdict):
    p = obs.probe("optimizer_groups")
    params, frozen, opt = p.value("parameters"), p.value("frozen"), p.value("optimizer")
    counts = Counter(n for g in opt["groups"] for n in g["params"])
    verdict.note(frozen=frozen, held_per_group=[len(g["params"]) for g in opt["groups"]])
    trainable = [n for n, info in params.items() if info["trainable"]]
    problems = []
    missing = [n for n in trainable if counts[n] == 0]
    if missing:
        problems.append(t("{missing} of {total} trainable parameters are in no group: {names}", missing=len(missing),
                          total=len(trainable), names=_names(missing)))
    repeated = [t("{name} ({count} times)", name=n, count=counts[n]) for n in params if counts[n] > 1]
    if repeated:
        problems.append(t("held more than once: {names}", names=_names(repeated)))
    handed = [n for n in frozen if counts[n] > 0]
    if handed:
        problems.append(t("frozen (requires_grad=False) but handed to the optimizer: {names}", names=_names(handed)))
    foreign = sorted({n for n in counts if n.startswith("<")})
    if foreign:
        problems.append(t("the groups also hold {names}", names=_names([_foreign(n) for n in foreign])))
    if problems:
        listed = join(problems, t("; "))  # built apart: Babel misses a t(...) nested in another call's arguments
        problems = [t("with {frozen} of {total} parameters frozen ({names}): {problems}", frozen=len(frozen),
                      total=len(params), names=", ".join(frozen), problems=listed)]

    # every problem is listed: the tied model is judged whatever the first model showed
    shared = obs.probe("optimizer_shared")
    counts = Counter(n for g in shared.value("optimizer")["groups"] for n in g["params"])
    tied = [n for n in shared.value("parameters") if " = " in n]
    for n in shared.value("parameters"):
        if counts[n] != 1:
            what = t("one tensor registered under both names") if n in tied else t("a parameter")
            if counts[n] > 1:
                problems.append(t("with the head tied to the token embedding, {name} ({what}) is held {count} times; "
                                  "expected exactly once (deduplicate by id(p))", name=n, what=what, count=counts[n]))
            else:
                problems.append(t("with the head tied to the token embedding, {name} ({what}) is held {count} times; "
                                  "expected exactly once", name=n, what=what, count=counts[n]))
    if problems:
        verdict.fail(join(problems, t(". ")))
    verdict.ok(t("all {trainable} trainable parameters held once, none of the {frozen} frozen ones; a tensor shared by "
                 "head and token embedding held once", trainable=len(trainable), frozen=len(frozen)))


@criterion("weight_decay_split", kind="optimizer",
           title=t("Weight decay on matrices only (dim >= 2), none on biases and LayerNorm"),
           hint=t("Split by p.dim(): parameters with dim() >= 2 (Linear weights, embedding tables) go in a group with "
                  "weight_decay=weight_decay (the argument, default 0.1); the rest (biases, LayerNorm weight and bias) "
                  "in a group with weight_decay=0.0. A name test ('bias' in name) misses the LayerNorm weights, which "
                  "are 1-D."))
def test_weight_decay_split(obs, verdict):
    for name in ("optimizer_groups", "optimizer_defaults"):
        p = obs.probe(name)
        params, opt, asked = p.value("parameters"), p.value("optimizer"), p.value("asked")
        call = _call(name, asked)
        verdict.note(**{name: [{"weight_decay": g["weight_decay"], "params": len(g["params"])} for g in opt["groups"]]})
        verdict.check(len(opt["groups"]) > 0, t("{call} returned {what} without parameter groups", call=call,
                                                what=_of_type(opt["type"])))
        wrong, seen_dims = [], set()
        for g in opt["groups"]:
            for n in g["params"]:
                info = params.get(n)
                if info is None or not info["trainable"]:
                    continue  # foreign or frozen entries are optimizer_coverage's business
                seen_dims.add(info["dim"] >= 2)
                want = asked["weight_decay"] if info["dim"] >= 2 else 0.0
                if not _same(g["weight_decay"], want):
                    wrong.append((n, info["dim"], g["weight_decay"], want))
        if wrong:
            vectors = [w for w in wrong if w[1] < 2]
            matrices = [w for w in wrong if w[1] >= 2]
            parts = []
            if vectors:
                parts.append(t("{count} parameters with dim < 2 sit in a group with weight_decay {got} (expected 0: "
                               "biases and LayerNorm are not decayed): {names}", count=len(vectors),
                               got=repr(vectors[0][2]), names=_names([w[0] for w in vectors])))
            if matrices:
                parts.append(t("{count} parameters with dim >= 2 sit in a group with weight_decay {got} (expected "
                               "{want:g}, the weight_decay argument): {names}", count=len(matrices),
                               got=repr(matrices[0][2]), want=asked["weight_decay"],
                               names=_names([w[0] for w in matrices])))
            problems = join(parts, t("; "))  # built apart: Babel misses a t(...) nested in another call's arguments
            verdict.fail(t("{call}: {problems}", call=call, problems=problems))
        if seen_dims != {True, False}:
            kind = t("a matrix (dim >= 2)") if True not in seen_dims else t("a bias or LayerNorm parameter (dim < 2)")
            verdict.fail(t("{call}: no group holds {kind}, so the split cannot be checked; the model has both kinds",
                           call=call, kind=kind))
    verdict.ok(t("dim >= 2 parameters carry the weight_decay passed in (0.0625, default 0.1); biases and LayerNorm "
                 "carry 0"))


# How the messages name the optimizer probe's model (solutions/training/probes.py, `unfamiliar_model`)
UNFAMILIAR_MODEL = t("a course model with norms of its own classes (1-D scale and shift, a 0-d gain) and feed-forwards "
                     "of raw parameters (w_up, b_up, w_down, b_down)")


@criterion("optimizer_coverage_any_model", kind="optimizer",
           title=t("Every trainable parameter exactly once on a model built from other classes"),
           hint=t("Collect the parameters from model.parameters() (or named_parameters()), whatever modules hold them: "
                  "a loop over nn.Linear, nn.Embedding and nn.LayerNorm modules misses a norm class of the model's own "
                  "and parameters registered directly on a module."))
def test_optimizer_coverage_any_model(obs, verdict):
    p = obs.probe("optimizer_any_model")
    params, frozen, opt = p.value("parameters"), p.value("frozen"), p.value("optimizer")
    counts = Counter(n for g in opt["groups"] for n in g["params"])
    trainable = [n for n, info in params.items() if info["trainable"]]
    verdict.note(held_per_group=[len(g["params"]) for g in opt["groups"]], frozen=frozen)
    model = UNFAMILIAR_MODEL
    missing = [n for n in trainable if counts[n] == 0]
    verdict.check(not missing, t("on {model}, {missing} of {total} trainable parameters are in no group: {names}",
                                 model=model, missing=len(missing), total=len(trainable), names=_names(missing)))
    repeated = [t("{name} ({count} times)", name=n, count=counts[n]) for n in params if counts[n] > 1]
    verdict.check(not repeated, t("on {model}, held more than once: {names}", model=model, names=_names(repeated)))
    handed = [n for n in frozen if counts[n] > 0]
    verdict.check(not handed, t("on {model}, frozen (requires_grad=False) but handed to the optimizer: {names}",
                                model=model, names=_names(handed)))
    foreign = sorted({n for n in counts if n.startswith("<")})
    verdict.check(not foreign, t("on {model}, the groups also hold {names}", model=model,
                                 names=_names([_foreign(n) for n in foreign])))
    verdict.ok(t("on {model}: all {trainable} trainable parameters held once, none of the {frozen} frozen ones",
                 model=model, trainable=len(trainable), frozen=len(frozen)))


@criterion("weight_decay_split_any_model", kind="optimizer",
           title=t("Weight decay by dimension (dim >= 2) on a model built from other classes"),
           hint=t("Decide by p.dim() alone: dim() >= 2 decays, anything else (biases, norm gains and shifts of any "
                  "class, 0-d scalars) does not. A test of the module's type (isinstance(m, nn.Linear)) or of the name "
                  "('bias' in name) misses matrices and vectors that other classes hold."))
def test_weight_decay_split_any_model(obs, verdict):
    p = obs.probe("optimizer_any_model")
    params, opt, asked = p.value("parameters"), p.value("optimizer"), p.value("asked")
    model = UNFAMILIAR_MODEL
    verdict.note(groups=[{"weight_decay": g["weight_decay"], "params": len(g["params"])} for g in opt["groups"]])
    matrices, vectors = [], []
    for g in opt["groups"]:
        for n in g["params"]:
            info = params.get(n)
            if info is None or not info["trainable"]:
                continue  # foreign or frozen entries are optimizer_coverage_any_model's business
            want = asked["weight_decay"] if info["dim"] >= 2 else 0.0
            if not _same(g["weight_decay"], want):
                (matrices if info["dim"] >= 2 else vectors).append((n, g["weight_decay"]))
    if vectors:
        verdict.fail(t("on {model}, {count} parameters with dim < 2 sit in a group with weight_decay {got} (expected "
                       "0): {names}", model=model, count=len(vectors), got=repr(vectors[0][1]),
                       names=_names([n for n, _ in vectors])))
    if matrices:
        verdict.fail(t("on {model}, {count} parameters with dim >= 2 sit in a group with weight_decay {got} (expected "
                       "{want:g}, the weight_decay argument): {names}", model=model, count=len(matrices),
                       got=repr(matrices[0][1]), want=asked["weight_decay"], names=_names([n for n, _ in matrices])))
    held = {n for g in opt["groups"] for n in g["params"]}
    kinds = {params[n]["dim"] >= 2 for n in held if n in params and params[n]["trainable"]}
    verdict.check(kinds == {True, False}, t("on {model}, the groups do not hold both matrices and vectors, so the "
                                            "split cannot be checked", model=model))
    verdict.ok(t("on {model}: matrices carry weight_decay {want:g}, every vector and scalar carries 0", model=model,
                 want=asked["weight_decay"]))


@criterion("train_step_returns_loss", kind="values",
           title=t("train_step returns the loss before the update, as a Python float"),
           hint=t("Keep the loss tensor of this step's forward for backward(), and return float(loss.detach()) (or "
                  "loss.item()) at the end: not the tensor itself, and not a loss recomputed after optimizer.step()."))
def test_train_step_returns_loss(obs, verdict):
    p = obs.probe("train_step_update")
    got, want = _float(p.value("returned_value")), p.value("expected_loss")
    verdict.note(returned_type=p.value("returned_type"), returned=got, loss_before_update=want)
    if not p.value("returned_is_float"):
        what = _of_type(p.value("returned_type"))
        if got == "None":
            verdict.fail(t("train_step returned {what}; expected a Python float (the loss before the update is "
                           "{want:.6f})", what=what, want=want))
        verdict.fail(t("train_step returned {what} ({value}); expected a Python float (the loss before the update is "
                       "{want:.6f})", what=what, value=got, want=want))
    verdict.check(abs(got - want) <= LOSS_TOLERANCE,  # NaN fails this too
                  t("train_step returned {got:.10g}; the loss of that batch before the update is {want:.10g} "
                    "(difference {difference:.3g}, tolerance {tolerance:g}){float32_note}", got=got, want=want,
                    difference=abs(got - want), tolerance=LOSS_TOLERANCE, float32_note=_float32_note(got, want)))
    verdict.ok(t("returned the float {got:.6f}, the loss before the update", got=got))


@criterion("train_step_updates", kind="values",
           title=t("One train_step updates every parameter that gets a gradient, in train mode"),
           hint=t("Call model.train(), then backward() on the loss tensor of the forward (never on a tensor rebuilt "
                  "from loss.item(), which is cut off from the weights), then optimizer.step(); do not zero the "
                  "gradients between backward() and step()."))
def test_train_step_updates(obs, verdict):
    p = obs.probe("train_step_update")
    reached, changed = p.value("reached_by_gradient"), set(_changed(p, "before", "after"))
    with_grad = p.value("with_grad_at_step")
    verdict.note(optimizer_steps=len(with_grad), parameters_with_grad_at_step=with_grad, changed=len(changed),
                 reached_by_gradient=len(reached))
    verdict.check(len(with_grad) > 0, t("train_step never called optimizer.step(): no parameter can change"))
    missing = [n for n in reached if n not in changed]
    if missing:
        unchanged = {"missing": len(missing), "reached": len(reached), "names": _names(missing)}
        if with_grad[-1] < len(reached):
            verdict.fail(t("{missing} of the {reached} parameters that one backward reaches were not changed by "
                           "train_step: {names}; at optimizer.step() only {held} parameters held a gradient",
                           held=with_grad[-1], **unchanged))
        verdict.fail(t("{missing} of the {reached} parameters that one backward reaches were not changed by "
                       "train_step: {names}", **unchanged))
    verdict.check(p.value("training"), t("the model handed in was in eval() mode and train_step left it there; "
                                         "train_step must call model.train()"))
    verdict.ok(t("all {reached} parameters that receive a gradient changed; the model is in train() mode",
                 reached=len(reached)))


@criterion("gradient_clipping", kind="gradient",
           title=t("The gradient is clipped to max_grad_norm before the step"),
           hint=t("Between backward() and optimizer.step() call torch.nn.utils.clip_grad_norm_(model.parameters(), "
                  "max_grad_norm): the total norm over all parameters, using the max_grad_norm argument (not a "
                  "hard-coded 1.0), and no rescaling when the norm is already below it. clip_grad_value_ is a "
                  "different operation."))
def test_gradient_clipping(obs, verdict):
    p = obs.probe("clipping")
    tight, loose = p.value("tight"), p.value("loose")
    for label, case in (("tight", tight), ("loose", loose)):
        verdict.check(len(case["with_grad_at_step"]) > 0 and case["with_grad_at_step"][-1] > 0,
                      t("with max_grad_norm={limit:g}, optimizer.step() ran with no "
                        "gradient", limit=case["max_grad_norm"]))
        case["unclipped_norm"] = _total_norm(_tensors(p, f"{label}.fresh").values())
        case["norm_at_last_step"] = _total_norm(_tensors(p, f"{label}.at_step").values())
    verdict.note(tight=tight, loose=loose)
    limit, norm, raw = tight["max_grad_norm"], tight["norm_at_last_step"], tight["unclipped_norm"]
    diagnosis = t("it was not clipped") if abs(norm - raw) <= 1e-9 * raw else t("it was clipped to another limit")
    verdict.check(norm <= limit * (1 + CLIP_ABOVE),
                  t("with max_grad_norm={limit:g} the gradient reaching optimizer.step() had total norm {norm:.4g} "
                    "(the unclipped gradient has {raw:.4g}); expected at most {limit:g}: "
                    "{diagnosis}", limit=limit, norm=norm,
                    raw=raw, diagnosis=diagnosis))
    verdict.check(norm >= limit * (1 - CLIP_BELOW),
                  t("with max_grad_norm={limit:g} the gradient reaching optimizer.step() had total norm {norm:.4g}, "
                    "far below the limit (the unclipped norm is {raw:.4g}); clipping rescales to the limit, not below "
                    "it",
                    limit=limit, norm=norm, raw=raw))
    norm, raw = loose["norm_at_last_step"], loose["unclipped_norm"]
    verdict.check(abs(norm - raw) <= UNTOUCHED_TOLERANCE * raw,  # NaN fails too
                  t("with max_grad_norm={limit:g} the gradient norm was changed from {raw:.6g} to {norm:.6g}; a "
                    "gradient already below the limit must be left as it "
                    "is", limit=loose["max_grad_norm"], raw=raw, norm=norm))
    default = p.value("default")
    verdict.check(len(default["with_grad_at_step"]) > 0 and default["with_grad_at_step"][-1] > 0,
                  t("with max_grad_norm left at its default, optimizer.step() ran with no gradient"))
    norm, raw = (_total_norm(_tensors(p, f"default.{k}").values()) for k in ("at_step", "fresh"))
    verdict.check(raw > DEFAULT_CLIP and DEFAULT_CLIP * (1 - CLIP_BELOW) <= norm <= DEFAULT_CLIP * (1 + CLIP_ABOVE),
                  t("with max_grad_norm left at its default the gradient reaching optimizer.step() had total norm "
                    "{norm:.4g} (the unclipped gradient has {raw:.4g}); expected {limit:g}, the contract's default",
                    norm=norm, raw=raw, limit=DEFAULT_CLIP))
    verdict.ok(t("norm {raw:.3g} clipped to {clipped:.6g} with max_grad_norm={limit:g}; left at {loose_raw:.3g} with "
                 "max_grad_norm={loose_limit:g}; clipped to 1 by default", raw=tight["unclipped_norm"],
                 clipped=tight["norm_at_last_step"], limit=limit, loose_raw=loose["unclipped_norm"],
                 loose_limit=loose["max_grad_norm"]))


@criterion("gradients_reset", kind="gradient",
           title=t("Gradients are reset (set to None) before each backward"),
           hint=t("Call optimizer.zero_grad(set_to_none=True) at the start of train_step, before the forward: .grad "
                  "accumulates across backward() calls, so without it the step applies this gradient plus every "
                  "earlier one."))
def test_gradients_reset(obs, verdict):
    p = obs.probe("gradient_reset")
    calls, n_params = p.value("calls"), p.value("n_parameters")
    verdict.note(parameters_holding_grad_when_forward_began=p.value("grads_at_forward"),
                 parameters_holding_grad_when_backward_began=p.value("grads_at_backward"))
    situations = (t("the first call (the model arrived with a stale .grad of {stale:g} in every parameter)",
                    stale=p.value("stale_value")),
                  t("the second call (right after the first)"))
    for i, (situation, call) in enumerate(zip(situations, calls, strict=False)):
        verdict.check(call["steps"] > 0, t("at {situation} optimizer.step() was not called", situation=situation))
        fresh, at_step = _tensors(p, f"call{i}.fresh"), _tensors(p, f"call{i}.at_step")
        for name, want in fresh.items():
            got = at_step.get(name)
            if got is None:
                verdict.fail(t("at {situation}, `{name}` had no gradient at optimizer.step() although backward reaches "
                               "it",
                               situation=situation, name=name))
            fresh_norm, step_norm = float(want.double().norm()), float(got.double().norm())
            difference = float((got.double() - want.double()).norm()) if got.shape == want.shape else math.inf
            if not difference <= RESET_TOLERANCE * max(fresh_norm, 1e-12):  # NaN fails too
                verdict.fail(t("at {situation}, the gradient optimizer.step() applied to `{name}` has norm {step:.6g}, "
                               "but one backward from zero gives {fresh:.6g} (difference {difference:.3g}): gradients "
                               "from before this call were added in", situation=situation, name=name, step=step_norm,
                               fresh=fresh_norm, difference=difference))
    held = [c for c in p.value("grads_at_backward") if c > 0]
    if held:
        verdict.fail(t("when backward() began, {held} of {total} parameters still held a .grad tensor (values were "
                       "reset, but not to None); the contract asks for zero_grad(set_to_none=True)", held=held[0],
                       total=n_params))
    verdict.ok(t("at both calls every parameter's step gradient equals one fresh backward, and no .grad survived into "
                 "backward()"))


@criterion("nonfinite_loss_guard", kind="errors",
           title=t("A non-finite loss raises FloatingPointError before any update"),
           hint=t("Right after the forward, check `if not torch.isfinite(loss): raise FloatingPointError(...)`, before "
                  "backward(), clipping and optimizer.step(). torch.isnan alone misses +inf; one NaN update poisons "
                  "every weight and the Adam moments."))
def test_nonfinite_loss_guard(obs, verdict):
    p = obs.probe("nonfinite_loss")
    cases = (("nan_weight", t("with a NaN weight in the head (loss NaN)")), ("inf_loss", t("with a loss of +inf")))
    for key, situation in cases:
        case = p.value(key)
        changed = _changed(p, f"{key}.before", f"{key}.after")
        verdict.note(**{key: {k: case[k] for k in ("outcome", "steps", "backwards")} | {"changed": len(changed)}})
        problems = []
        if raised(case["outcome"]) != "FloatingPointError":
            outcome = case["outcome"]
            got = (t("returned {value} without raising", value=outcome["value"]) if "value" in outcome
                   else describe_outcome(outcome))
            problems.append(t("train_step {outcome}; expected FloatingPointError", outcome=got))
        if case["steps"]:
            problems.append(t("optimizer.step() was called {steps} time(s)", steps=case["steps"]))
        if changed:
            problems.append(t("{count} parameters changed ({names})", count=len(changed), names=_names(changed)))
        if case["backwards"] and not problems:
            problems.append(t("backward() ran on the non-finite loss before the error; check the loss right after the "
                              "forward"))
        if problems:
            listed = join(problems, t("; "))  # built apart: Babel misses a t(...) nested in another call's arguments
            verdict.fail(t("{situation}: {problems}", situation=situation, problems=listed))
    finite = p.value("finite")
    if raised(finite):
        verdict.fail(t("train_step on a batch with a finite loss {outcome}: a guard that raises whatever the loss is "
                       "proves nothing; raise FloatingPointError only when torch.isfinite(loss) is False",
                       outcome=describe_outcome(finite)))
    if not p.value("finite_steps"):
        verdict.fail(t("train_step on a batch with a finite loss returned without calling optimizer.step(): a step "
                       "that never updates has no update to guard, so refusing the non-finite losses proves nothing"))
    verdict.ok(t("FloatingPointError for a NaN and for a +inf loss, before backward(), with no step and no parameter "
                 "changed; a finite loss trains"))


@criterion("fit_protocol", kind="api",
           title=t("fit_fixed_batch: one AdamW step per step, lr passed, no weight decay, one float per step"),
           hint=t("Build torch.optim.AdamW over the trainable parameters with lr=lr and weight_decay=0.0 once, then "
                  "call train_step(model, optimizer, tokens, targets, max_grad_norm=1.0) `steps` times and return the "
                  "list of the floats it returns."))
def test_fit_protocol(obs, verdict):
    p = obs.probe("fit_protocol")
    asked, losses, log = p.value("asked"), p.value("losses"), p.value("optimizer_steps")
    call = f"fit_fixed_batch(model, tokens, targets, steps={asked['steps']}, lr={asked['lr']:g})"
    verdict.note(returned={k: losses.get(k) for k in ("type", "length", "element_types")}, optimizer_steps=len(log))
    _check_loss_list(verdict, call, losses, asked["steps"])
    first, start = _float(losses["values"][0]), p.value("initial_loss")
    verdict.check(isinstance(first, float) and abs(first - start) <= LOSS_TOLERANCE,
                  t("{call}: the first loss returned is {first}, but the loss before any update is {start:.10g}"
                    "{float32_note}; each entry is the loss train_step returns, before its update", call=call,
                    first=repr(first), start=start, float32_note=_float32_note(first, start)))
    verdict.check(len(log) == asked["steps"],
                  t("{call} made {made} optimizer steps; expected {steps}, one per step", call=call, made=len(log),
                    steps=asked["steps"]))
    step = log[0]
    verdict.check(step["is_adamw"], t("{call} stepped an optimizer of type {kind}; expected "
                                      "torch.optim.AdamW", call=call,
                                      kind=step["type"]))
    for g in step["groups"]:
        verdict.check(_same(g["lr"], asked["lr"]), t("{call} stepped AdamW with lr {got}; expected {want:g}, the lr "
                                                     "argument", call=call, got=repr(g["lr"]), want=asked["lr"]))
        verdict.check(_same(g["weight_decay"], 0.0),
                      t("{call} stepped AdamW with weight_decay {got}; the fixed-batch fit uses none (0.0)", call=call,
                        got=repr(g["weight_decay"])))
    missing = sorted(set(p.value("parameters")) - set(step["held"]))
    verdict.check(not missing, t("{call}: the optimizer does not hold {count} trainable parameters: {names}", call=call,
                                 count=len(missing), names=_names(missing)))
    big = obs.probe("overfit_fixed_batch")
    _check_loss_list(verdict, f"fit_fixed_batch(..., steps={big.value('steps')})", big.value("losses"),
                     big.value("steps"))
    _check_fit_defaults(verdict, obs.probe("fit_defaults"))
    verdict.ok(t("{steps} AdamW steps at lr {lr:g} without weight decay over every parameter; a list of one float per "
                 "step (also {big} for {big} steps), the first the loss before training", steps=asked["steps"],
                 lr=asked["lr"], big=big.value("steps")))


@criterion("overfit_fixed_batch", kind="overfit",
           title=t("The chapter's fixed batch is overfitted: loss < 0.1 and every prediction right"),
           hint=t("If the loss does not fall, check the pipeline before adding steps: gradients reset each step, "
                  "backward on the loss tensor (not one rebuilt from .item()), optimizer.step() called, AdamW at the "
                  "lr passed in with no weight decay, and the optimizer built over the model's own parameters."))
def test_overfit_fixed_batch(obs, ref, verdict):
    p = obs.probe("overfit_fixed_batch")
    y = ref.probe("overfit_fixed_batch").value("y")
    final, _, prediction = evaluation(trained_logits(verdict, p, ref.probe("overfit_fixed_batch")), y)
    setting = t("x={x}, y={y}, {steps} steps at lr "
                "{lr:g}", x=p.value("x"), y=y, steps=p.value("steps"), lr=p.value("lr"))
    verdict.note(initial_loss=p.value("initial_loss"), final_loss=final, prediction=prediction, expected=y,
                 returned_losses=_every_tenth(p.value("losses")))
    verdict.note(curve_steps=_every_tenth_step(p.value("losses")), threshold=OVERFIT_THRESHOLD)
    verdict.check(final < OVERFIT_THRESHOLD,  # NaN fails too
                  t("after fit_fixed_batch ({setting}) the loss in eval mode is {final:.4g} (it started at "
                    "{initial:.4f}); expected below {threshold:g}", setting=setting, final=final,
                    initial=p.value("initial_loss"), threshold=OVERFIT_THRESHOLD))
    wrong = [i for i, (a, b) in enumerate(zip(prediction[0], y[0], strict=False)) if a != b]
    verdict.check(not wrong, t("after fit_fixed_batch ({setting}) the model predicts {prediction} (argmax); expected "
                               "{expected}, wrong at positions {wrong}", setting=setting, prediction=prediction[0],
                               expected=y[0], wrong=wrong))
    verdict.ok(t("loss {initial:.4f} -> {final:.2e} (below {threshold:g}) and argmax == y at every position",
                 initial=p.value("initial_loss"), final=final, threshold=OVERFIT_THRESHOLD))


@criterion("contradictory_labels", kind="overfit",
           title=t("Contradictory labels converge to their optimum (log 2 per contested position), not below"),
           hint=t("Two identical inputs with different targets cannot both be fitted: the best is probability 1/2 "
                  "each, a loss of log 2 at those positions. A loss stuck well above that is the same pipeline problem "
                  "as a fixed batch that does not overfit: check zero_grad, backward on the real loss tensor, the lr "
                  "and the optimizer step."))
def test_contradictory_labels(obs, ref, verdict):
    p, trusted = obs.probe("contradictory_labels"), ref.probe("contradictory_labels")
    x, y = trusted.value("x"), trusted.value("y")
    final, per_position_loss, _ = evaluation(trained_logits(verdict, p, trusted), y)
    verdict.note(curve_steps=_every_tenth_step(p.value("losses")), threshold=_optimum(x, y)[0] + CONTRADICTORY_MARGIN)
    best, contested = _optimum(x, y)
    setting = t("two identical rows {row} with targets {first} and {second} (contested at positions {contested}), "
                "{steps} steps at lr {lr:g}", row=x[0], first=y[0], second=y[1], contested=contested,
                steps=p.value("steps"), lr=p.value("lr"))
    verdict.note(optimum=best, final_loss=final, initial_loss=p.value("initial_loss"),
                 per_position_loss=per_position_loss, returned_losses=_every_tenth(p.value("losses")))
    verdict.check(math.isfinite(final), t("after fit_fixed_batch ({setting}) the loss in eval mode is {final}; "
                                          "expected a finite loss near the optimum "
                                          "{best:.4f}", setting=setting, final=final,
                                          best=best))
    verdict.check(final >= best - OPTIMUM_SLACK,
                  t("after fit_fixed_batch ({setting}) the loss is {final:.6f}, below the optimum {best:.6f} that "
                    "identical inputs allow: the model was changed so that it no longer gives identical rows identical "
                    "predictions", setting=setting, final=final, best=best))
    verdict.check(final <= best + CONTRADICTORY_MARGIN,
                  t("after fit_fixed_batch ({setting}) the loss in eval mode is {final:.4f} (it started at "
                    "{initial:.4f}); the optimum is {best:.4f} (log 2 at each contested position, 0 elsewhere); "
                    "expected at most "
                    "{limit:.4f}", setting=setting, final=final, initial=p.value("initial_loss"), best=best,
                    limit=best + CONTRADICTORY_MARGIN))
    verdict.ok(t("loss {final:.4f}, within {gap:.1e} of the optimum {best:.4f} = log 2 × {contested}·2/{positions} "
                 "(never demanded lower, not judged against 0.1)", final=final, gap=final - best, best=best,
                 contested=len(contested), positions=len(y) * len(y[0])))


# --- helpers ------------------------------------------------------------------------------------------

def trained_logits(verdict, p, trusted) -> torch.Tensor:
    """The eval-mode logits for the fixed batch of a fresh course model of the grader's own (grader/probes/lm.py),
    loaded with the parameters the model handed to fit_fixed_batch holds after the call: computed here, where no code
    of the student's runs. The configuration, the batch and the parameter names come from the reference run."""
    from grader.probes.lm import Config, TransformerLM   # the trusted course model, as the probes build it

    with torch.random.fork_rng(devices=[]):   # building it draws initial weights: leave the judge's generator alone
        model = TransformerLM(Config(**trusted.value("config"))).double().eval()
    own = dict(model.named_parameters())
    with torch.no_grad():
        for name in trusted.value("parameters"):
            value = p.tensor(f"trained.{name}")
            if list(value.shape) != list(own[name].shape):
                verdict.fail(t("after fit_fixed_batch the model's parameter {name} has shape {got}; expected {want}: "
                               "train the model's own parameters in place", name=name, got=list(value.shape),
                               want=list(own[name].shape)))
            own[name].copy_(value.double())
        return model(torch.tensor(trusted.value("x"), dtype=torch.long))["logits"]


def evaluation(logits: torch.Tensor, y: list[list[int]]) -> tuple[float, list[list[float]], list[list[int]]]:
    """The eval-mode mean cross-entropy (float64), the loss at each position and the argmax predictions, from the
    logits of the trained parameters (`trained_logits`); a loss of NaN when the logits do not fit the targets."""
    targets = torch.tensor(y, dtype=torch.long)
    if list(logits.shape[:-1]) != list(targets.shape) or logits.dim() != 3:
        return math.nan, [], []
    per_position = F.cross_entropy(logits.double().reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none")
    return float(per_position.mean()), per_position.view_as(targets).tolist(), logits.argmax(dim=-1).tolist()


def _tensors(p, prefix: str) -> dict[str, torch.Tensor]:
    """The tensors a probe recorded under `prefix.<parameter name>`, by parameter name."""
    return {name[len(prefix) + 1:]: p.tensor(name) for name in p.tensor_names if name.startswith(prefix + ".")}


def _changed(p, before: str, after: str) -> list[str]:
    """Parameters whose values differ between the two snapshots (NaN equals NaN: a NaN left alone is no change)."""
    old, new = _tensors(p, before), _tensors(p, after)
    changed = []
    for name, a in old.items():
        b = new.get(name)
        same = b is not None and a.shape == b.shape and torch.equal(a.isnan(), b.isnan()) and \
            torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0))
        if not same:
            changed.append(name)
    return changed


def _check_fit_defaults(verdict, p) -> None:
    """fit_fixed_batch with steps and lr left out: the contract's 120 steps at lr 0.02, each clipped at 1.0; and
    steps=0: no loss and no step."""
    call = "fit_fixed_batch(model, tokens, targets)"
    _check_loss_list(verdict, call, p.value("losses"), DEFAULT_FIT_STEPS)
    log = p.value("optimizer_steps")
    verdict.check(len(log) == DEFAULT_FIT_STEPS,
                  t("{call} called optimizer.step() {count} times; expected {steps}, the default number of steps",
                    call=call, count=len(log), steps=DEFAULT_FIT_STEPS))
    for lr in log[0]["lrs"]:
        verdict.check(_same(lr, DEFAULT_FIT_LR), t("{call} stepped AdamW with lr {got}; expected {want:g}, the default "
                                                   "lr", call=call, got=repr(lr), want=DEFAULT_FIT_LR))
    raw, first = p.value("raw_first_norm"), log[0]["grad_norm"]
    verdict.check(raw > DEFAULT_CLIP and first is not None
                  and DEFAULT_CLIP * (1 - CLIP_BELOW) <= first <= DEFAULT_CLIP * (1 + CLIP_ABOVE),
                  t("in {call} the first step's gradient had total norm {norm} (unclipped: {raw:.4g}); expected it "
                    "clipped to {limit:g}: each step is a train_step with max_grad_norm=1.0", call=call,
                    norm=repr(first), raw=raw, limit=DEFAULT_CLIP))
    zero = p.value("zero_steps")
    if raised(zero):
        verdict.fail(t("fit_fixed_batch(..., steps=0) {outcome}; expected an empty list: no step, no loss",
                       outcome=describe_outcome(zero)))
    losses, steps = p.value("zero_steps_losses"), p.value("zero_steps_optimizer_steps")
    verdict.check(losses is not None and losses["type"] == "list" and losses.get("length") == 0 and steps == 0,
                  t("fit_fixed_batch(..., steps=0) returned {what} after {steps} optimizer steps; expected an empty "
                    "list and no step", what=_of_type(losses["type"]) if losses else verbatim("None"), steps=steps))


def _total_norm(grads) -> float:
    """The norm of all gradients together, in float64, as clip_grad_norm_ measures it (NaN and inf propagate)."""
    grads = [g.double().reshape(-1) for g in grads]
    return float(torch.cat(grads).norm()) if grads else 0.0


def _of_type(type_name: str) -> Text:
    return verbatim("None") if type_name == "NoneType" else t("a value of type {kind}", kind=type_name)


def _float(value):
    """Probes record NaN and infinities as the strings 'nan', 'inf', '-inf' (JSON has no such numbers)."""
    if isinstance(value, str) and value in ("nan", "inf", "-inf"):
        return float(value)
    return value


def _same(got, want) -> bool:
    """Equal hyper-parameters: `got` is a number and equals `want` to HYPER_TOLERANCE relative."""
    return isinstance(got, (int, float)) and not isinstance(got, bool) \
        and math.isclose(got, want, rel_tol=HYPER_TOLERANCE, abs_tol=0.0)


def _float32_note(got, want) -> Text:
    """A hint when `got` is `want` rounded to float32 (relative error around 6e-8); nothing otherwise."""
    if isinstance(got, float) and want and abs(got - want) <= 1e-6 * abs(want):
        return t(" — that is the float32 rounding of it: was the loss copied into a float32 tensor, e.g. "
                 "torch.tensor(loss.item())?")
    return verbatim("")


def _call(probe_name: str, asked: dict) -> str:
    if probe_name == "optimizer_defaults":
        return "make_optimizer(model)"
    return (f"make_optimizer(model, lr={asked['lr']:g}, weight_decay={asked['weight_decay']:g}, "
            f"betas={tuple(asked['betas'])})")


def _names(names: list[str | Text]) -> Text:
    """The first LISTED names (parameter names, or sentences about one), and how many more there are."""
    shown = join([n if isinstance(n, Text) else verbatim(n) for n in names[:LISTED]], verbatim(", "))
    if len(names) > LISTED:
        return t("{names} and {more} more", names=shown, more=len(names) - LISTED)
    return shown


def _foreign(entry: str) -> Text:
    """A group entry the probe found that is not a parameter of the model, said in the reader's language."""
    if match := FOREIGN_TENSOR.fullmatch(entry):
        return t("<a tensor of shape {shape} that is not a parameter of the model>", shape=match[1])
    if match := FOREIGN_OBJECT.fullmatch(entry):
        return t("<a {kind}, not a tensor>", kind=match[1])
    return verbatim(entry)


def _check_loss_list(verdict, call: str, losses: dict, steps: int) -> None:
    verdict.check(losses["type"] == "list", t("{call} returned {what}; expected a list of {steps} floats", call=call,
                                              what=_of_type(losses["type"]), steps=steps))
    verdict.check(losses.get("length") == steps, t("{call} returned {count} losses; expected {steps}, one per step",
                                                   call=call, count=losses.get("length"), steps=steps))
    verdict.check(losses.get("all_float"), t("{call} returned a list of values of type {kinds}; expected Python floats "
                                             "(train_step returns float(loss))", call=call,
                                             kinds=", ".join(losses.get("element_types", []))))


def _every_tenth(losses: dict) -> list:
    values = losses.get("values") or []
    return [v for i, v in enumerate(values) if i % 10 == 0 or i == len(values) - 1]


def _every_tenth_step(losses: dict) -> list[int]:
    """The step of each loss `_every_tenth` keeps, so the report can draw them where they belong."""
    count = len(losses.get("values") or [])
    return [i for i in range(count) if i % 10 == 0 or i == count - 1]


def _optimum(x: list[list[int]], y: list[list[int]]) -> tuple[float, list[int]]:
    """The lowest reachable mean loss, and the contested positions.

    A causal model gives the same logits to every row whose prefix x[:t+1] is the same, so at such a position
    the best it can do is predict the targets' empirical distribution there: -sum(c log(c/n)) over the targets.
    """
    groups = defaultdict(list)
    for row, targets in zip(x, y, strict=False):
        for position, target in enumerate(targets):
            groups[(position, tuple(row[: position + 1]))].append(target)
    total = sum(-c * math.log(c / len(ts)) for ts in groups.values() for c in Counter(ts).values())
    contested = sorted({position for (position, _), ts in groups.items() if len(set(ts)) > 1})
    return total / sum(len(targets) for targets in y), contested
