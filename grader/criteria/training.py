"""Hidden criteria of exercise `training`: make_optimizer, train_step and fit_fixed_batch.

Every probe hands the student's functions the trusted course model (grader/probes/lm.py) in float64, so the
numbers below compare like with like. Thresholds measured by `bench/calibrate_training.py` on the reference
solution (41 model seeds, including the probes' own seeds for the course seed, × 3 choices of betas).
"""

import math
from collections import Counter, defaultdict

import torch
import torch.nn.functional as F

from grader.judge.compare import describe_outcome, raised
from grader.judge.criterion import criterion

EXERCISE = "training"

HYPER_TOLERANCE = 1e-9      # relative; lr, betas and weight decay are copied, not computed: only rounding may differ
LOSS_TOLERANCE = 1e-9       # float64, the same trusted model, weights and batch: the returned loss equals the probe's up to rounding (~1e-15)
CLIP_ABOVE = 1e-6           # relative slack above max_grad_norm: clip_grad_norm_ lands at max·n/(n + 1e-6), just below the limit
CLIP_BELOW = 1e-2           # relative slack below it: an eps in the clip coefficient costs ~1e-6; 1 % lower is scaling too hard
UNTOUCHED_TOLERANCE = 1e-9  # relative; with max_grad_norm=1e6 the gradient must not be rescaled at all (float64 rounding only)
RESET_TOLERANCE = 1e-9      # relative, float64: the step's gradient is one fresh backward; a stale 1e3 or a doubled gradient is ≥ 100 %
OVERFIT_THRESHOLD = 0.1     # fixed by the course (seed 000). Reference, measured: final eval loss 5e-6 .. 3.3e-4 (41 seeds × 3 betas)
OPTIMUM_SLACK = 1e-9        # no loss can be below the analytic optimum (identical rows share logits): float64 rounding only
CONTRADICTORY_MARGIN = 0.05  # above the optimum (0.3466 here). Reference, measured: final - optimum +1.2e-4 .. +5.8e-3 (41 seeds × 3 betas)
LISTED = 5                  # names shown in a message before "and N more"


@criterion("optimizer_is_adamw", kind="optimizer",
           title={"en": "make_optimizer returns AdamW with the requested lr and betas",
                  "zh": "make_optimizer 返回 AdamW，并使用传入的 lr 与 betas"},
           hint={"en": "Return torch.optim.AdamW(groups, lr=lr, betas=betas): pass the arguments through instead of hard-coding "
                       "values, and keep the defaults lr=3e-4, betas=(0.9, 0.95). torch.optim.Adam is not AdamW (its weight decay is an L2 term).",
                 "zh": "返回 torch.optim.AdamW(groups, lr=lr, betas=betas)：把参数原样传进去，不要写死数值，并保留默认值 lr=3e-4、"
                       "betas=(0.9, 0.95)。torch.optim.Adam 不是 AdamW（它的权重衰减是 L2 项）。"})
def test_optimizer_is_adamw(obs, verdict):
    asked_by = {}
    for name in ("optimizer_groups", "optimizer_defaults"):
        p = obs.probe(name)
        opt, asked = p.value("optimizer"), p.value("asked")
        asked_by[name] = f"lr={asked['lr']:g}, betas={tuple(asked['betas'])}"
        call = _call(name, asked)
        verdict.note(**{name: {"type": opt["type"], "groups": [{k: g.get(k) for k in ("lr", "betas")} for g in opt["groups"]]}})
        verdict.check(opt["is_adamw"], f"{call} returned {_of_type(opt['type'])}; expected a torch.optim.AdamW")
        verdict.check(len(opt["groups"]) > 0, f"{call} returned an AdamW with no parameter group")
        for i, g in enumerate(opt["groups"]):
            if not _same(g["lr"], asked["lr"]):
                verdict.fail(f"{call}: parameter group {i} has lr {g['lr']!r}; expected {asked['lr']:g}, the lr argument")
            if not (isinstance(g["betas"], list) and len(g["betas"]) == 2
                    and all(_same(b, a) for b, a in zip(g["betas"], asked["betas"]))):
                verdict.fail(f"{call}: parameter group {i} has betas {g['betas']!r}; expected {tuple(asked['betas'])}, the betas argument")
    verdict.ok(f"an AdamW whose groups carry the lr and betas passed in ({asked_by['optimizer_groups']}) "
               f"and the defaults ({asked_by['optimizer_defaults']})")


@criterion("optimizer_coverage", kind="optimizer",
           title={"en": "Every trainable parameter exactly once, frozen ones never",
                  "zh": "每个可训练参数恰好出现一次，冻结参数从不出现"},
           hint={"en": "Loop over model.parameters() (or named_parameters()), skip p.requires_grad == False, and keep a set of id(p) so "
                       "that a tensor shared by two modules is added once. Do not filter by name (a name test such as 'weight' in name "
                       "misses biases, or LayerNorm parameters); put every kept parameter in exactly one of the two groups.",
                 "zh": "遍历 model.parameters()（或 named_parameters()），跳过 requires_grad 为 False 的参数，并用 id(p) 的集合去重，"
                       "这样被两个模块共享的张量只加入一次。不要按名字筛选（例如 'weight' in name 会漏掉偏置或 LayerNorm 参数）；"
                       "每个保留的参数只放进两个组中的一个。"})
def test_optimizer_coverage(obs, verdict):
    p = obs.probe("optimizer_groups")
    params, frozen, opt = p.value("parameters"), p.value("frozen"), p.value("optimizer")
    counts = Counter(n for g in opt["groups"] for n in g["params"])
    verdict.note(frozen=frozen, held_per_group=[len(g["params"]) for g in opt["groups"]])
    trainable = [n for n, info in params.items() if info["trainable"]]
    problems = []
    missing = [n for n in trainable if counts[n] == 0]
    if missing:
        problems.append(f"{len(missing)} of {len(trainable)} trainable parameters are in no group: {_names(missing)}")
    repeated = [f"{n} ({counts[n]} times)" for n in params if counts[n] > 1]
    if repeated:
        problems.append(f"held more than once: {_names(repeated)}")
    handed = [n for n in frozen if counts[n] > 0]
    if handed:
        problems.append(f"frozen (requires_grad=False) but handed to the optimizer: {_names(handed)}")
    foreign = sorted({n for n in counts if n.startswith("<")})
    if foreign:
        problems.append(f"the groups also hold {_names(foreign)}")
    if problems:
        problems = [f"with {len(frozen)} of {len(params)} parameters frozen ({', '.join(frozen)}): " + "; ".join(problems)]

    # every problem is listed: the tied model is judged whatever the first model showed
    shared = obs.probe("optimizer_shared")
    counts = Counter(n for g in shared.value("optimizer")["groups"] for n in g["params"])
    tied = [n for n in shared.value("parameters") if " = " in n]
    for n in shared.value("parameters"):
        if counts[n] != 1:
            where = "one tensor registered under both names" if n in tied else "a parameter"
            problems.append(f"with the head tied to the token embedding, {n} ({where}) is held {counts[n]} times; expected "
                            "exactly once" + (" (deduplicate by id(p))" if counts[n] > 1 else ""))
    if problems:
        verdict.fail(". ".join(problems))
    verdict.ok(f"all {len(trainable)} trainable parameters held once, none of the {len(frozen)} frozen ones; "
               f"a tensor shared by head and token embedding held once")


@criterion("weight_decay_split", kind="optimizer",
           title={"en": "Weight decay on matrices only (dim >= 2), none on biases and LayerNorm",
                  "zh": "只对矩阵（dim >= 2）做权重衰减，偏置和 LayerNorm 不衰减"},
           hint={"en": "Split by p.dim(): parameters with dim() >= 2 (Linear weights, embedding tables) go in a group with "
                       "weight_decay=weight_decay (the argument, default 0.1); the rest (biases, LayerNorm weight and bias) in a group "
                       "with weight_decay=0.0. A name test ('bias' in name) misses the LayerNorm weights, which are 1-D.",
                 "zh": "按 p.dim() 划分：dim() >= 2 的参数（Linear 权重、嵌入表）放进 weight_decay=weight_decay（传入的参数，默认 0.1）"
                       "的组；其余（偏置、LayerNorm 的 weight 和 bias）放进 weight_decay=0.0 的组。按名字判断（'bias' in name）"
                       "会漏掉同为一维的 LayerNorm weight。"})
def test_weight_decay_split(obs, verdict):
    for name in ("optimizer_groups", "optimizer_defaults"):
        p = obs.probe(name)
        params, opt, asked = p.value("parameters"), p.value("optimizer"), p.value("asked")
        call = _call(name, asked)
        verdict.note(**{name: [{"weight_decay": g["weight_decay"], "params": len(g["params"])} for g in opt["groups"]]})
        verdict.check(len(opt["groups"]) > 0, f"{call} returned {_of_type(opt['type'])} without parameter groups")
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
                parts.append(f"{len(vectors)} parameters with dim < 2 sit in a group with weight_decay {vectors[0][2]!r} "
                             f"(expected 0: biases and LayerNorm are not decayed): {_names([w[0] for w in vectors])}")
            if matrices:
                parts.append(f"{len(matrices)} parameters with dim >= 2 sit in a group with weight_decay {matrices[0][2]!r} "
                             f"(expected {asked['weight_decay']:g}, the weight_decay argument): {_names([w[0] for w in matrices])}")
            verdict.fail(f"{call}: " + "; ".join(parts))
        if seen_dims != {True, False}:
            kind = "a matrix (dim >= 2)" if True not in seen_dims else "a bias or LayerNorm parameter (dim < 2)"
            verdict.fail(f"{call}: no group holds {kind}, so the split cannot be checked; the model has both kinds")
    verdict.ok("dim >= 2 parameters carry the weight_decay passed in (0.0625, default 0.1); biases and LayerNorm carry 0")


@criterion("train_step_returns_loss", kind="values",
           title={"en": "train_step returns the loss before the update, as a Python float",
                  "zh": "train_step 以 Python float 返回更新前的损失"},
           hint={"en": "Keep the loss tensor of this step's forward for backward(), and return float(loss.detach()) (or loss.item()) "
                       "at the end: not the tensor itself, and not a loss recomputed after optimizer.step().",
                 "zh": "本步前向得到的损失张量留给 backward()，最后返回 float(loss.detach())（或 loss.item()）："
                       "不要返回张量本身，也不要在 optimizer.step() 之后重新计算损失。"})
def test_train_step_returns_loss(obs, verdict):
    p = obs.probe("train_step_update")
    got, want = _float(p.value("returned_value")), p.value("expected_loss")
    verdict.note(returned_type=p.value("returned_type"), returned=got, loss_before_update=want)
    verdict.check(p.value("returned_is_float"),
                  f"train_step returned {_of_type(p.value('returned_type'))}{'' if got == 'None' else f' ({got})'}; expected a Python float "
                  f"(the loss before the update is {want:.6f})")
    verdict.check(abs(got - want) <= LOSS_TOLERANCE,  # NaN fails this too
                  f"train_step returned {got:.10g}; the loss of that batch before the update is {want:.10g} "
                  f"(difference {abs(got - want):.3g}, tolerance {LOSS_TOLERANCE:g}){_float32_note(got, want)}")
    verdict.ok(f"returned the float {got:.6f}, the loss before the update")


@criterion("train_step_updates", kind="values",
           title={"en": "One train_step updates every parameter that gets a gradient, in train mode",
                  "zh": "一次 train_step 更新所有得到梯度的参数，并处于训练模式"},
           hint={"en": "Call model.train(), then backward() on the loss tensor of the forward (never on a tensor rebuilt from "
                       "loss.item(), which is cut off from the weights), then optimizer.step(); do not zero the gradients between "
                       "backward() and step().",
                 "zh": "先调用 model.train()，再对前向得到的损失张量调用 backward()（不要对由 loss.item() 重建的张量反向传播，"
                       "它与权重已断开），然后 optimizer.step()；不要在 backward() 和 step() 之间清零梯度。"})
def test_train_step_updates(obs, verdict):
    p = obs.probe("train_step_update")
    reached, changed = p.value("reached_by_gradient"), set(_changed(p, "before", "after"))
    with_grad = p.value("with_grad_at_step")
    verdict.note(optimizer_steps=len(with_grad), parameters_with_grad_at_step=with_grad, changed=len(changed),
                 reached_by_gradient=len(reached))
    verdict.check(len(with_grad) > 0, "train_step never called optimizer.step(): no parameter can change")
    missing = [n for n in reached if n not in changed]
    if missing:
        detail = (f"; at optimizer.step() only {with_grad[-1]} parameters held a gradient" if with_grad[-1] < len(reached) else "")
        verdict.fail(f"{len(missing)} of the {len(reached)} parameters that one backward reaches were not changed by "
                     f"train_step: {_names(missing)}{detail}")
    verdict.check(p.value("training"), "the model handed in was in eval() mode and train_step left it there; "
                                       "train_step must call model.train()")
    verdict.ok(f"all {len(reached)} parameters that receive a gradient changed; the model is in train() mode")


@criterion("gradient_clipping", kind="gradient",
           title={"en": "The gradient is clipped to max_grad_norm before the step", "zh": "step 之前把梯度范数裁剪到 max_grad_norm"},
           hint={"en": "Between backward() and optimizer.step() call torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm): "
                       "the total norm over all parameters, using the max_grad_norm argument (not a hard-coded 1.0), and no rescaling "
                       "when the norm is already below it. clip_grad_value_ is a different operation.",
                 "zh": "在 backward() 与 optimizer.step() 之间调用 torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)："
                       "对全部参数的总范数裁剪，使用传入的 max_grad_norm（不要写死 1.0），范数已低于上限时不做缩放。"
                       "clip_grad_value_ 是另一种操作。"})
def test_gradient_clipping(obs, verdict):
    p = obs.probe("clipping")
    tight, loose = p.value("tight"), p.value("loose")
    for label, case in (("tight", tight), ("loose", loose)):
        verdict.check(len(case["with_grad_at_step"]) > 0 and case["with_grad_at_step"][-1] > 0,
                      f"with max_grad_norm={case['max_grad_norm']:g}, optimizer.step() ran with no gradient")
        case["unclipped_norm"] = _total_norm(_tensors(p, f"{label}.fresh").values())
        case["norm_at_last_step"] = _total_norm(_tensors(p, f"{label}.at_step").values())
    verdict.note(tight=tight, loose=loose)
    limit, norm, raw = tight["max_grad_norm"], tight["norm_at_last_step"], tight["unclipped_norm"]
    verdict.check(norm <= limit * (1 + CLIP_ABOVE),
                  f"with max_grad_norm={limit:g} the gradient reaching optimizer.step() had total norm {norm:.4g} "
                  f"(the unclipped gradient has {raw:.4g}); expected at most {limit:g}: "
                  + ("it was not clipped" if abs(norm - raw) <= 1e-9 * raw else "it was clipped to another limit"))
    verdict.check(norm >= limit * (1 - CLIP_BELOW),
                  f"with max_grad_norm={limit:g} the gradient reaching optimizer.step() had total norm {norm:.4g}, "
                  f"far below the limit (the unclipped norm is {raw:.4g}); clipping rescales to the limit, not below it")
    norm, raw = loose["norm_at_last_step"], loose["unclipped_norm"]
    verdict.check(abs(norm - raw) <= UNTOUCHED_TOLERANCE * raw,  # NaN fails too
                  f"with max_grad_norm={loose['max_grad_norm']:g} the gradient norm was changed from {raw:.6g} to {norm:.6g}; "
                  "a gradient already below the limit must be left as it is")
    verdict.ok(f"norm {tight['unclipped_norm']:.3g} clipped to {tight['norm_at_last_step']:.6g} with max_grad_norm={limit:g}; "
               f"left at {raw:.3g} with max_grad_norm={loose['max_grad_norm']:g}")


@criterion("gradients_reset", kind="gradient",
           title={"en": "Gradients are reset (set to None) before each backward",
                  "zh": "每次反向传播之前梯度都被重置（置为 None）"},
           hint={"en": "Call optimizer.zero_grad(set_to_none=True) at the start of train_step, before the forward: .grad accumulates "
                       "across backward() calls, so without it the step applies this gradient plus every earlier one.",
                 "zh": "在 train_step 开头、前向之前调用 optimizer.zero_grad(set_to_none=True)：.grad 会在多次 backward() 之间累加，"
                       "不清零时这一步用的是本次梯度加上之前所有的梯度。"})
def test_gradients_reset(obs, verdict):
    p = obs.probe("gradient_reset")
    calls, n_params = p.value("calls"), p.value("n_parameters")
    verdict.note(parameters_holding_grad_when_forward_began=p.value("grads_at_forward"),
                 parameters_holding_grad_when_backward_began=p.value("grads_at_backward"))
    situations = (f"the first call (the model arrived with a stale .grad of {p.value('stale_value'):g} in every parameter)",
                  "the second call (right after the first)")
    for i, (situation, call) in enumerate(zip(situations, calls)):
        verdict.check(call["steps"] > 0, f"at {situation} optimizer.step() was not called")
        fresh, at_step = _tensors(p, f"call{i}.fresh"), _tensors(p, f"call{i}.at_step")
        for name, want in fresh.items():
            got = at_step.get(name)
            if got is None:
                verdict.fail(f"at {situation}, `{name}` had no gradient at optimizer.step() although backward reaches it")
            fresh_norm, step_norm = float(want.double().norm()), float(got.double().norm())
            difference = float((got.double() - want.double()).norm()) if got.shape == want.shape else math.inf
            if not difference <= RESET_TOLERANCE * max(fresh_norm, 1e-12):  # NaN fails too
                verdict.fail(f"at {situation}, the gradient optimizer.step() applied to `{name}` has norm {step_norm:.6g}, "
                             f"but one backward from zero gives {fresh_norm:.6g} (difference {difference:.3g}): "
                             "gradients from before this call were added in")
    held = [c for c in p.value("grads_at_backward") if c > 0]
    if held:
        verdict.fail(f"when backward() began, {held[0]} of {n_params} parameters still held a .grad tensor (values were reset, "
                     "but not to None); the contract asks for zero_grad(set_to_none=True)")
    verdict.ok("at both calls every parameter's step gradient equals one fresh backward, and no .grad survived into backward()")


@criterion("nonfinite_loss_guard", kind="errors",
           title={"en": "A non-finite loss raises FloatingPointError before any update",
                  "zh": "损失非有限时在任何更新之前抛出 FloatingPointError"},
           hint={"en": "Right after the forward, check `if not torch.isfinite(loss): raise FloatingPointError(...)`, before backward(), "
                       "clipping and optimizer.step(). torch.isnan alone misses +inf; one NaN update poisons every weight and the Adam moments.",
                 "zh": "前向之后立即检查 `if not torch.isfinite(loss): raise FloatingPointError(...)`，放在 backward()、裁剪和 "
                       "optimizer.step() 之前。只用 torch.isnan 会漏掉 +inf；一次 NaN 更新会污染所有权重和 Adam 的动量。"})
def test_nonfinite_loss_guard(obs, verdict):
    p = obs.probe("nonfinite_loss")
    cases = (("nan_weight", "with a NaN weight in the head (loss NaN)"), ("inf_loss", "with a loss of +inf"))
    for key, situation in cases:
        case = p.value(key)
        changed = _changed(p, f"{key}.before", f"{key}.after")
        verdict.note(**{key: {k: case[k] for k in ("outcome", "steps", "backwards")} | {"changed": len(changed)}})
        problems = []
        if raised(case["outcome"]) != "FloatingPointError":
            outcome = case["outcome"]
            got = f"returned {outcome['value']} without raising" if "value" in outcome else describe_outcome(outcome)
            problems.append(f"train_step {got}; expected FloatingPointError")
        if case["steps"]:
            problems.append(f"optimizer.step() was called {case['steps']} time(s)")
        if changed:
            problems.append(f"{len(changed)} parameters changed ({_names(changed)})")
        if case["backwards"] and not problems:
            problems.append("backward() ran on the non-finite loss before the error; check the loss right after the forward")
        if problems:
            verdict.fail(f"{situation}: " + "; ".join(problems))
    finite = p.value("finite")
    if raised(finite):
        verdict.fail(f"train_step on a batch with a finite loss {describe_outcome(finite)}: a guard that raises whatever "
                     "the loss is proves nothing; raise FloatingPointError only when torch.isfinite(loss) is False")
    verdict.ok("FloatingPointError for a NaN and for a +inf loss, before backward(), with no step and no parameter "
               "changed; a finite loss trains")


@criterion("fit_protocol", kind="api",
           title={"en": "fit_fixed_batch: one AdamW step per step, lr passed, no weight decay, one float per step",
                  "zh": "fit_fixed_batch：每步一次 AdamW 更新，使用传入的 lr，无权重衰减，每步一个 float"},
           hint={"en": "Build torch.optim.AdamW over the trainable parameters with lr=lr and weight_decay=0.0 once, then call "
                       "train_step(model, optimizer, tokens, targets, max_grad_norm=1.0) `steps` times and return the list of the floats it returns.",
                 "zh": "只建一次 torch.optim.AdamW（可训练参数，lr=lr，weight_decay=0.0），然后调用 `steps` 次 "
                       "train_step(model, optimizer, tokens, targets, max_grad_norm=1.0)，返回它各次返回的 float 组成的列表。"})
def test_fit_protocol(obs, verdict):
    p = obs.probe("fit_protocol")
    asked, losses, log = p.value("asked"), p.value("losses"), p.value("optimizer_steps")
    call = f"fit_fixed_batch(model, tokens, targets, steps={asked['steps']}, lr={asked['lr']:g})"
    verdict.note(returned={k: losses.get(k) for k in ("type", "length", "element_types")}, optimizer_steps=len(log))
    _check_loss_list(verdict, call, losses, asked["steps"])
    first, start = _float(losses["values"][0]), p.value("initial_loss")
    verdict.check(isinstance(first, float) and abs(first - start) <= LOSS_TOLERANCE,
                  f"{call}: the first loss returned is {first!r}, but the loss before any update is {start:.10g}"
                  f"{_float32_note(first, start)}; each entry is the loss train_step returns, before its update")
    verdict.check(len(log) == asked["steps"],
                  f"{call} made {len(log)} optimizer steps; expected {asked['steps']}, one per step")
    step = log[0]
    verdict.check(step["is_adamw"], f"{call} stepped an optimizer of type {step['type']}; expected torch.optim.AdamW")
    for g in step["groups"]:
        verdict.check(_same(g["lr"], asked["lr"]), f"{call} stepped AdamW with lr {g['lr']!r}; expected {asked['lr']:g}, the lr argument")
        verdict.check(_same(g["weight_decay"], 0.0),
                      f"{call} stepped AdamW with weight_decay {g['weight_decay']!r}; the fixed-batch fit uses none (0.0)")
    missing = sorted(set(p.value("parameters")) - set(step["held"]))
    verdict.check(not missing, f"{call}: the optimizer does not hold {len(missing)} trainable parameters: {_names(missing)}")
    big = obs.probe("overfit_fixed_batch")
    _check_loss_list(verdict, f"fit_fixed_batch(..., steps={big.value('steps')})", big.value("losses"), big.value("steps"))
    verdict.ok(f"{asked['steps']} AdamW steps at lr {asked['lr']:g} without weight decay over every parameter; "
               f"a list of one float per step (also {big.value('steps')} for {big.value('steps')} steps), the first the loss before training")


@criterion("overfit_fixed_batch", kind="overfit",
           title={"en": "The chapter's fixed batch is overfitted: loss < 0.1 and every prediction right",
                  "zh": "本章的固定批次被过拟合：损失 < 0.1 且每个位置预测正确"},
           hint={"en": "If the loss does not fall, check the pipeline before adding steps: gradients reset each step, backward on the "
                       "loss tensor (not one rebuilt from .item()), optimizer.step() called, AdamW at the lr passed in with no weight decay, "
                       "and the optimizer built over the model's own parameters.",
                 "zh": "损失降不下去时先检查管线，而不是加步数：每步清零梯度、对损失张量反向传播（不要用 .item() 重建的张量）、"
                       "调用 optimizer.step()、AdamW 使用传入的 lr 且无权重衰减、优化器建立在模型自己的参数上。"})
def test_overfit_fixed_batch(obs, verdict):
    p = obs.probe("overfit_fixed_batch")
    y = p.value("y")
    final, _, prediction = evaluation(p.tensor("logits"), y)
    setting = f"x={p.value('x')}, y={y}, {p.value('steps')} steps at lr {p.value('lr'):g}"
    verdict.note(initial_loss=p.value("initial_loss"), final_loss=final, prediction=prediction, expected=y,
                 returned_losses=_every_tenth(p.value("losses")))
    verdict.note(curve_steps=_every_tenth_step(p.value("losses")), threshold=OVERFIT_THRESHOLD)
    verdict.check(final < OVERFIT_THRESHOLD,  # NaN fails too
                  f"after fit_fixed_batch ({setting}) the loss in eval mode is {final:.4g} (it started at "
                  f"{p.value('initial_loss'):.4f}); expected below {OVERFIT_THRESHOLD:g}")
    wrong = [t for t, (a, b) in enumerate(zip(prediction[0], y[0])) if a != b]
    verdict.check(not wrong, f"after fit_fixed_batch ({setting}) the model predicts {prediction[0]} (argmax); expected {y[0]}, "
                             f"wrong at positions {wrong}")
    verdict.ok(f"loss {p.value('initial_loss'):.4f} -> {final:.2e} (below {OVERFIT_THRESHOLD:g}) and argmax == y at every position")


@criterion("contradictory_labels", kind="overfit",
           title={"en": "Contradictory labels converge to their optimum (log 2 per contested position), not below",
                  "zh": "矛盾标签收敛到其最优值（每个矛盾位置 log 2），且不会更低"},
           hint={"en": "Two identical inputs with different targets cannot both be fitted: the best is probability 1/2 each, a loss of "
                       "log 2 at those positions. A loss stuck well above that is the same pipeline problem as a fixed batch that does "
                       "not overfit: check zero_grad, backward on the real loss tensor, the lr and the optimizer step.",
                 "zh": "两条相同输入、不同目标无法同时拟合：最优是各占一半概率，这些位置的损失为 log 2。损失明显高于该值，"
                       "与固定批次无法过拟合是同一类管线问题：检查 zero_grad、对真正的损失张量反向传播、学习率和 optimizer.step()。"})
def test_contradictory_labels(obs, verdict):
    p = obs.probe("contradictory_labels")
    x, y = p.value("x"), p.value("y")
    final, per_position_loss, _ = evaluation(p.tensor("logits"), y)
    verdict.note(curve_steps=_every_tenth_step(p.value("losses")), threshold=_optimum(x, y)[0] + CONTRADICTORY_MARGIN)
    best, contested = _optimum(x, y)
    setting = (f"two identical rows {x[0]} with targets {y[0]} and {y[1]} (contested at positions {contested}), "
               f"{p.value('steps')} steps at lr {p.value('lr'):g}")
    verdict.note(optimum=best, final_loss=final, initial_loss=p.value("initial_loss"),
                 per_position_loss=per_position_loss, returned_losses=_every_tenth(p.value("losses")))
    verdict.check(math.isfinite(final), f"after fit_fixed_batch ({setting}) the loss in eval mode is {final}; expected a finite loss "
                                        f"near the optimum {best:.4f}")
    verdict.check(final >= best - OPTIMUM_SLACK,
                  f"after fit_fixed_batch ({setting}) the loss is {final:.6f}, below the optimum {best:.6f} that identical "
                  "inputs allow: the model was changed so that it no longer gives identical rows identical predictions")
    verdict.check(final <= best + CONTRADICTORY_MARGIN,
                  f"after fit_fixed_batch ({setting}) the loss in eval mode is {final:.4f} (it started at {p.value('initial_loss'):.4f}); "
                  f"the optimum is {best:.4f} (log 2 at each contested position, 0 elsewhere); expected at most "
                  f"{best + CONTRADICTORY_MARGIN:.4f}")
    verdict.ok(f"loss {final:.4f}, within {final - best:.1e} of the optimum {best:.4f} = log 2 × {len(contested)}·2/{len(y) * len(y[0])} "
               "(never demanded lower, not judged against 0.1)")


# --- helpers ------------------------------------------------------------------------------------------

def evaluation(logits: torch.Tensor, y: list[list[int]]) -> tuple[float, list[list[float]], list[list[int]]]:
    """The eval-mode mean cross-entropy (float64), the loss at each position and the argmax predictions, from the
    logits the trained model gave for the batch; a loss of NaN when the logits do not fit the targets."""
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


def _total_norm(grads) -> float:
    """The norm of all gradients together, in float64, as clip_grad_norm_ measures it (NaN and inf propagate)."""
    grads = [g.double().reshape(-1) for g in grads]
    return float(torch.cat(grads).norm()) if grads else 0.0


def _of_type(type_name: str) -> str:
    return "None" if type_name == "NoneType" else f"a value of type {type_name}"


def _float(value):
    """Probes record NaN and infinities as the strings 'nan', 'inf', '-inf' (JSON has no such numbers)."""
    if isinstance(value, str) and value in ("nan", "inf", "-inf"):
        return float(value)
    return value


def _same(got, want) -> bool:
    """Equal hyper-parameters: `got` is a number and equals `want` to HYPER_TOLERANCE relative."""
    return isinstance(got, (int, float)) and not isinstance(got, bool) and math.isclose(got, want, rel_tol=HYPER_TOLERANCE, abs_tol=0.0)


def _float32_note(got, want) -> str:
    """A hint when `got` is `want` rounded to float32 (relative error around 6e-8)."""
    if isinstance(got, float) and want and abs(got - want) <= 1e-6 * abs(want):
        return " — that is the float32 rounding of it: was the loss copied into a float32 tensor, e.g. torch.tensor(loss.item())?"
    return ""


def _call(probe_name: str, asked: dict) -> str:
    if probe_name == "optimizer_defaults":
        return "make_optimizer(model)"
    return f"make_optimizer(model, lr={asked['lr']:g}, weight_decay={asked['weight_decay']:g}, betas={tuple(asked['betas'])})"


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:LISTED])
    return shown + (f" and {len(names) - LISTED} more" if len(names) > LISTED else "")


def _check_loss_list(verdict, call: str, losses: dict, steps: int) -> None:
    verdict.check(losses["type"] == "list", f"{call} returned {_of_type(losses['type'])}; expected a list of {steps} floats")
    verdict.check(losses.get("length") == steps, f"{call} returned {losses.get('length')} losses; expected {steps}, one per step")
    verdict.check(losses.get("all_float"), f"{call} returned a list of values of type {', '.join(losses.get('element_types', []))}; "
                                           "expected Python floats (train_step returns float(loss))")


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
    for row, targets in zip(x, y):
        for t, target in enumerate(targets):
            groups[(t, tuple(row[: t + 1]))].append(target)
    total = sum(-c * math.log(c / len(ts)) for ts in groups.values() for c in Counter(ts).values())
    contested = sorted({t for (t, _), ts in groups.items() if len(set(ts)) > 1})
    return total / sum(len(t) for t in y), contested
