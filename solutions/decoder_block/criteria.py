"""Hidden criteria of exercise `decoder_block`: CausalSelfAttention and count_block_parameters."""

import math

import torch

from grader.i18n import t, verbatim
from grader.judge.compare import describe_outcome, difference, gradient_summary, position_changes, prefix_leaks, raised
from grader.judge.criterion import criterion

EXERCISE = "decoder_block"
CAUSAL_TOLERANCE = 1e-10  # float64: anything above rounding noise is information from the future
READS_THE_PAST = 1e-6     # float64: a position that attends to position 0 moves by ~1e-2 or more when it changes
VALUE_TOLERANCE = 1e-5    # float32, same weights: only the order of floating-point operations may differ
CAUSAL_SHAPE = [2, 8, 16] # the causality probe's x, [B, T, C]: the output keeps that shape
DROPOUT_P = 0.5           # the dropout probe's rate: kept elements are scaled by 1 / (1 - p) = 2, exactly
NON_FINITE_CAUSE = t("the output holds NaN or inf for finite inputs: a mask applied by arithmetic (scores + (~mask) * "
                     "-inf gives 0 * -inf = NaN at every allowed score) or scores divided by zero; use masked_fill")
OUTPUT_DROPOUT_TOLERANCE = 1e-6  # dropout of the output is 0 or exactly 2 x the eval value; weight dropout mixes values
# A weight that dropout kept is exactly 2 x its eval value (a power of two; float32 inside rounds both passes alike);
# dropout on the scores before the softmax renormalises the row and moves the kept weights by ~10 %.
KEPT_WEIGHT_TOLERANCE = 1e-6
READ_SHAPE = [8, 16]      # the dropout-position probe: 8 positions, 2 heads of 8 channels (probes/decoder_block.py)
SUM_TOLERANCE = 1e-5      # float32 inside is legal: a row of at most 8 weights sums to 1 within ~1e-6


@criterion("output_shape", kind="shape",
           title=t("CausalSelfAttention keeps the shape [B, T, C]"),
           hint=t("Split C into H heads of D = C / H channels, attend, then merge the heads back (transpose(1, 2) "
                  "before the view) and apply out_proj."))
def test_output_shape(obs, verdict):
    out = obs.probe("forward").tensor("out")
    verdict.check(list(out.shape) == [2, 7, 16], t("the output for x of shape [2, 7, 16] has shape {shape}; expected "
                                                   "[2, 7, 16]", shape=list(out.shape)))
    verdict.ok(t("x of shape [2, 7, 16] gives an output of shape [2, 7, 16]"))


@criterion("causality", kind="causality", requires=("output_shape",),
           title=t("No position reads the future"),
           hint=t("Mask scores of keys after the query (positions j > i) with -inf before the softmax; the mask is "
                  "True on and below the diagonal (tril), not above it."))
def test_causality(obs, verdict):
    p = obs.probe("causality")
    verdict.note(leak_tolerance=CAUSAL_TOLERANCE)
    base = p.tensor("base")
    if list(base.shape) != CAUSAL_SHAPE:
        verdict.fail(t("x of shape {want} gave an output of shape {shape}; expected {want}",
                       want=CAUSAL_SHAPE, shape=list(base.shape)))
    perturbed = []
    for position in range(CAUSAL_SHAPE[1] - 1):
        out = p.tensor(f"changed_after_{position}")
        if list(out.shape) != CAUSAL_SHAPE:
            verdict.fail(t("after changing the inputs after position {position} the output has shape {shape}; expected "
                           "{want}", position=position, shape=list(out.shape), want=CAUSAL_SHAPE))
        perturbed.append(out)
    leaks = prefix_leaks(base, perturbed, axis=1)
    verdict.note(max_change_per_prefix=leaks)
    bad = [position for position, leak in enumerate(leaks) if not leak <= CAUSAL_TOLERANCE]  # NaN fails too
    if bad:
        first = bad[0]
        if not torch.isfinite(base[:, : first + 1]).all():
            verdict.fail(t("the output at positions 0..{position} holds NaN or inf even before any input changes, so "
                           "no change there can be measured", position=first))
        change = t("became NaN") if math.isnan(leaks[first]) else t("by up to {leak:.3g}", leak=leaks[first])
        verdict.fail(t("changing the inputs after position {position} changed the output at positions 0..{position} "
                       "{change} (expected no change at all); {leaking} of {prefixes} prefixes leak",
                       position=first, change=change, leaking=len(bad), prefixes=len(leaks)))
    first = p.tensor("changed_first")
    if list(first.shape) != CAUSAL_SHAPE:
        verdict.fail(t("after changing the input at position 0 the output has shape {shape}; expected {want}",
                       shape=list(first.shape), want=CAUSAL_SHAPE))
    reach = position_changes(base, first, axis=1)
    verdict.note(change_from_position_0=reach)
    unmoved = [position for position in range(1, len(reach)) if not reach[position] > READS_THE_PAST]  # NaN too
    if unmoved:
        verdict.fail(t("changing the input at position 0 left the output at positions {positions} unchanged (largest "
                       "change there {change:.3g}): those positions do not attend to the earlier ones, so that the "
                       "future does not reach them proves nothing", positions=unmoved,
                       change=max(reach[position] for position in unmoved)))
    verdict.ok(t("perturbing every future suffix (positions 1..7) left every earlier output unchanged (max change "
                 "{change:.1e}), and changing position 0 reached every later position", change=max(leaks)))


@criterion("values_match_reference", kind="values", requires=("output_shape",),
           title=t("Output equals the reference with the same weights"),
           hint=t("Check the 1/sqrt(D) scale (D is the head size, not C), the softmax over the key axis (dim=-1), q·k "
                  "(not q·v), and merging heads with transpose(1, 2) before view."))
def test_values_match_reference(obs, ref, verdict):
    got, want = obs.probe("forward"), ref.probe("forward")
    for key, label in (("out", "T=7, H=4"), ("out_h_equals_t", "T=H=4")):
        problem = difference(got.tensor(key), want.tensor(key), atol=VALUE_TOLERANCE, rtol=1e-4)
        if problem:
            biases = [n for n, shape in got.value("parameter_shapes").items() if len(shape) < 2]
            cause = (NON_FINITE_CAUSE if not torch.isfinite(got.tensor(key)).all() else
                     t("the module also holds {biases}, which the reference does not have (the projections are "
                       "bias-free), so the seeded weights alone do not fix the output", biases=", ".join(biases))
                     if biases else
                     t("likely causes: the scale (1/sqrt(D), D = C / H), the softmax axis (keys, dim=-1), scores from "
                       "q and k, or merging heads without transpose(1, 2)"))
            verdict.fail(t("with the same projection weights ({sizes}) the output differs from the reference: "
                           "{problem}; {cause}", sizes=label, problem=problem, cause=cause))
    verdict.ok(t("with the same weights the output matches the reference within {tolerance:g}, also when H == T",
                 tolerance=VALUE_TOLERANCE))


@criterion("gradients_reach_projections", kind="gradient", requires=("output_shape",),
           title=t("Finite gradients reach all four projections"),
           hint=t("Use q_proj, k_proj, v_proj and out_proj in forward, keep the computation in autograd (no .detach(), "
                  ".item() or .data), and make sure masked scores use -inf via masked_fill, not NaN-producing "
                  "arithmetic."))
def test_gradients_reach_projections(obs, verdict):
    p = obs.probe("gradients")
    grads = {name: gradient_summary(p, f"grad.{name}") for name in p.value("parameters")}
    verdict.note(grads=grads)
    for name in ("q_proj.weight", "k_proj.weight", "v_proj.weight", "out_proj.weight"):
        g = grads.get(name, "missing")
        if g == "missing":
            verdict.fail(t("the module has no parameter `{name}`; the contract asks for q_proj, k_proj, v_proj, "
                           "out_proj = nn.Linear(d_model, d_model, bias=False)", name=name))
        if g is None:
            verdict.fail(t("`{name}` received no gradient: it is not used on the path from the input to the output",
                           name=name))
        if not g["finite"]:
            verdict.fail(t("`{name}` received a non-finite gradient (NaN or inf)", name=name))
        if g["norm"] == 0.0:
            verdict.fail(t("`{name}` received an all-zero gradient: its output does not reach the result", name=name))
    x_grad = gradient_summary(p, "input_grad")
    verdict.check(x_grad is not None and x_grad["finite"], t("the gradient with respect to the input is missing or not "
                                                             "finite"))
    verdict.ok(t("q_proj, k_proj, v_proj and out_proj all receive finite, non-zero gradients"))


@criterion("eval_deterministic", kind="determinism", requires=("output_shape",),
           title=t("Eval mode is deterministic with dropout > 0"),
           hint=t("Use nn.Dropout (or F.dropout with training=self.training) on the attention weights, so that "
                  "model.eval() turns it off."))
def test_eval_deterministic(obs, verdict):
    p = obs.probe("dropout")
    first, second, other = p.tensor("eval_first"), p.tensor("eval_second"), p.tensor("eval_other")
    for output in (first, second):
        verdict.check(bool(torch.isfinite(output).all()),
                      t("with dropout=0.5 the eval-mode output holds NaN or inf, so whether two calls agree cannot be "
                        "judged: {cause}", cause=NON_FINITE_CAUSE))
    problem = difference(second, first, atol=0.0)
    verdict.check(problem is None, t("with dropout=0.5 in eval mode two calls on the same input differ: {problem}",
                                     problem=problem))
    verdict.check(difference(other, first, atol=0.0) is not None,
                  t("in eval mode another input gives exactly the same output: the output does not depend on the "
                    "input, and a constant is deterministic by construction"))
    verdict.ok(t("with dropout=0.5, two eval-mode calls on the same input give identical outputs"))


@criterion("dropout_in_training", kind="values", requires=("eval_deterministic",),
           title=t("Dropout acts in training mode"),
           hint=t("Store the dropout probability and apply dropout to the attention weights after the softmax; it must "
                  "change the output in train() mode."))
def test_dropout_in_training(obs, verdict):
    p = obs.probe("dropout")
    verdict.check(bool(torch.isfinite(p.tensor("eval_first")).all()),
                  t("with dropout=0.5 the eval-mode output is not finite, so whether dropout acts cannot be seen: "
                    "{cause}",
                    cause=NON_FINITE_CAUSE))
    same = difference(p.tensor("train"), p.tensor("eval_first"), atol=0.0) is None
    verdict.check(not same, t("with dropout=0.5 the train-mode output equals the eval-mode output: dropout is not "
                              "applied"))
    verdict.ok(t("with dropout=0.5 the train-mode output differs from the eval-mode output"))


@criterion("dropout_on_attention_weights", kind="values", requires=("dropout_in_training",),
           title=t("Dropout acts on the attention weights, not on the output"),
           hint=t("Apply the dropout to the attention weights right after the softmax (weights = "
                  "dropout(softmax(scores))), then multiply by V; not to the block's output or after out_proj."))
def test_dropout_on_attention_weights(obs, verdict):
    p = obs.probe("dropout")
    train, evaluated = p.tensor("train").double(), p.tensor("eval_first").double()
    kept = evaluated / (1.0 - DROPOUT_P)
    dropped_or_scaled = (train.abs() <= OUTPUT_DROPOUT_TOLERANCE) \
        | ((train - kept).abs() <= OUTPUT_DROPOUT_TOLERANCE * (1 + kept.abs()))
    zeros = int((train.abs() <= OUTPUT_DROPOUT_TOLERANCE).sum())
    verdict.note(elements=train.numel(), zero_elements=zeros)
    if bool(dropped_or_scaled.all()):
        verdict.fail(t("with dropout={p} every one of the {count} train-mode output elements is either 0 ({zeros} of "
                       "them) or exactly {scale:g} x its eval-mode value: the dropout is applied to the output, "
                       "element by element, not to the attention weights",
                       p=DROPOUT_P, count=train.numel(), zeros=zeros, scale=1 / (1 - DROPOUT_P)))
    verdict.ok(t("the train-mode output mixes values (dropout on the attention weights), not 0 or 2 x the eval output "
                 "element by element"))


@criterion("dropout_defaults_to_zero", kind="values", requires=("dropout_in_training",),
           title=t("Dropout defaults to 0.0: without a rate, train mode equals eval mode"),
           hint=t("Keep the contract's signature __init__(self, d_model, n_heads, dropout=0.0): a module built without "
                  "a dropout rate drops nothing, in train() mode too."))
def test_dropout_defaults_to_zero(obs, verdict):
    # the positive control is the required dropout_in_training: with dropout=0.5 train mode does drop, so an
    # equality here means the default rate is 0, not that train mode never drops
    p = obs.probe("default_dropout")
    built = verbatim(f"CausalSelfAttention({p.value('d_model')}, {p.value('n_heads')})")
    train, evaluated = p.tensor("train"), p.tensor("eval")
    verdict.check(bool(torch.isfinite(evaluated).all()),
                  t("{module} in eval mode gives NaN or inf, so train mode cannot be compared with it: {cause}",
                    module=built, cause=NON_FINITE_CAUSE))
    problem = difference(train, evaluated, atol=VALUE_TOLERANCE, rtol=1e-4)
    verdict.check(problem is None, t("{module}, built without a dropout rate, gives another output in train mode than "
                                     "in eval mode on the same x of shape {shape}: {problem}; the contract's default "
                                     "is dropout=0.0, which drops nothing", module=built, shape=p.value("shape"),
                                     problem=problem))
    verdict.ok(t("{module}, built without a dropout rate, gives the same output in train and eval mode (default "
                 "dropout=0.0)", module=built))


@criterion("projections_bias_free", kind="registration",
           title=t("Q, K, V and O projections have no bias"),
           hint=t("Build each projection as nn.Linear(d_model, d_model, bias=False): the contract's attention holds "
                  "four [d_model, d_model] weights and no vector."))
def test_projections_bias_free(obs, verdict):
    shapes = obs.probe("forward").value("parameter_shapes")
    verdict.note(parameter_shapes=shapes)
    # (no positive control needed here: the probe fills q_proj, k_proj, v_proj and out_proj by name, so a module
    # without them never reaches this criterion: it is the student's breach of the contract)
    vectors = [f"{name} {shape}" for name, shape in shapes.items() if len(shape) < 2]
    verdict.check(not vectors, t("CausalSelfAttention(16, 4) registers {count} bias-like parameters ({vectors}); the "
                                 "contract's Q/K/V/O projections are nn.Linear(..., bias=False)",
                                 count=len(vectors), vectors=", ".join(vectors[:4])))
    verdict.ok(t("CausalSelfAttention(16, 4) holds only weight matrices ({count} parameters), no "
                 "bias", count=len(shapes)))


@criterion("rejects_nonpositive_heads", kind="errors",
           title=t("ValueError for n_heads <= 0"),
           hint=t("Check n_heads > 0 before d_model % n_heads: 12 % -4 == 0 passes the divisibility check, and 12 % 0 "
                  "raises ZeroDivisionError instead of ValueError."))
def test_rejects_nonpositive_heads(obs, verdict):
    p = obs.probe("bad_heads")
    ok = p.value("d12_h4")
    verdict.check(raised(ok) is None, t("CausalSelfAttention(d_model=12, n_heads=4) {outcome}; it is valid and must "
                                        "construct, so refusing the others would prove nothing",
                                        outcome=describe_outcome(ok)))
    one = p.value("d12_h1")
    verdict.check(raised(one) is None, t("CausalSelfAttention(d_model=12, n_heads=1) {outcome}; a single head is "
                                         "valid (1 divides every d_model): refuse n_heads <= 0, not n_heads <= 1",
                                         outcome=describe_outcome(one)))
    for key, arguments in (("d12_h0", "d_model=12, n_heads=0"), ("d12_hminus4", "d_model=12, n_heads=-4")):
        outcome = p.value(key)
        if raised(outcome) != "ValueError":
            why = (t(": n_heads=0 reached d_model % n_heads; check n_heads > 0 first")
                   if raised(outcome) == "ZeroDivisionError" else
                   t(": 12 % -4 == 0 passes the divisibility check; check n_heads > 0 too")
                   if raised(outcome) is None and key == "d12_hminus4" else verbatim(""))
            verdict.fail(t("CausalSelfAttention({arguments}) {outcome}; expected ValueError{why}",
                           arguments=arguments, outcome=describe_outcome(outcome), why=why))
    verdict.ok(t("ValueError for n_heads = 0 and n_heads = -4; (12, 4) and (12, 1) construct"))


@criterion("rejects_bad_heads", kind="errors",
           title=t("ValueError when n_heads does not divide d_model"),
           hint=t("Check d_model % n_heads in __init__ and raise ValueError with both numbers in the message."))
def test_rejects_bad_heads(obs, verdict):
    p = obs.probe("bad_heads")
    for key, arguments in (("d10_h3", "d_model=10, n_heads=3"), ("d12_h5", "d_model=12, n_heads=5")):
        outcome = p.value(key)
        if raised(outcome) != "ValueError":
            verdict.fail(t("CausalSelfAttention({arguments}) {outcome}; expected ValueError",
                           arguments=arguments, outcome=describe_outcome(outcome)))
    ok = p.value("d12_h4")
    verdict.check(raised(ok) is None, t("CausalSelfAttention(d_model=12, n_heads=4) {outcome}; it is valid and must "
                                        "construct", outcome=describe_outcome(ok)))
    verdict.ok(t("ValueError for (10, 3) and (12, 5); (12, 4) constructs"))


@criterion("parameter_count_small", kind="param_count",
           title=t("count_block_parameters is exact on small sizes"),
           hint=t("Add up Q, K, V, O (d·d each, no bias), the feed-forward (d·f + f + f·d + d, with biases) and both "
                  "LayerNorms (2·d each)."))
def test_parameter_count_small(obs, ref, verdict):
    got, want = obs.probe("parameter_count"), ref.probe("parameter_count")
    verdict.note(counts=[{"part": f"count_block_parameters{tuple(size)}", "expected": w, "observed": g}
                         for size, g, w in zip(want.value("small_sizes"), got.value("small"), want.value("small"),
                                               strict=False)])
    for size, g, w in zip(want.value("small_sizes"), got.value("small"), want.value("small"), strict=False):
        if g != w:
            d, h, f = size
            verdict.fail(t("count_block_parameters({d}, {h}, {f}) returned {got}; the block has {want} parameters "
                           "(off by {off})", d=d, h=h, f=f, got=repr(g), want=w, off=_off(g, w)))
    verdict.ok(t("exact on {count} sizes", count=len(want.value("small"))))


@criterion("parameter_count_large", kind="param_count", requires=("parameter_count_small",),
           title=t("count_block_parameters is exact on a size too large to build"),
           hint=t("Compute the closed form with Python integers; never build a module or a tensor to count."))
def test_parameter_count_large(obs, ref, verdict):
    got, want = obs.probe("parameter_count_large"), ref.probe("parameter_count_large")
    g, w = got.value("large"), want.value("large")
    verdict.note(counts=[{"part": f"count_block_parameters{tuple(want.value('large_size'))}",
                          "expected": w, "observed": g}])
    d, h, f = want.value("large_size")
    verdict.check(g == w, t("count_block_parameters({d}, {h}, {f}) returned {got}; expected {want} (off by {off})",
                            d=d, h=h, f=f, got=repr(g), want=w, off=_off(g, w)))
    kind = got.value("large_type")
    verdict.check(kind == "int", t("count_block_parameters({d}, {h}, {f}) returned {got}, a {kind}: the value is right "
                                   "but the count must be a Python int; use integer arithmetic only (// not /, d * d "
                                   "not d ** 2.0 or math.pow, no float(), numpy or torch), which stays exact at any "
                                   "size",
                                   d=d, h=h, f=f, got=repr(g), kind=kind))
    verdict.ok(t("count_block_parameters({d}, {h}, {f}) = {want:,}, an exact Python int, without building the block",
                 d=d, h=h, f=f, want=w))


def _off(got, want):
    """How far a returned count is from the block's, in words when it is not an int."""
    if isinstance(got, bool) or not isinstance(got, (int, float)):
        return t("a non-number")
    return got - want if isinstance(got, int) else t("{off:g}, and it is a float, not an int", off=got - want)


@criterion("dropout_after_softmax", kind="values",
           requires=("dropout_in_training", "values_match_reference", "projections_bias_free"),
           title=t("Dropout zeroes attention weights after the softmax and scales the rest by 1/(1-p)"),
           hint=t("Apply dropout to the weights the softmax returned: weights = "
                  "self.attn_dropout(scores.softmax(dim=-1)). Dropout on the scores before the softmax only shifts "
                  "them: the softmax renormalises and no weight is dropped."))
def test_dropout_after_softmax(obs, verdict):
    p = obs.probe("dropout_position")
    evaluated, trained = p.tensor("eval").double(), p.tensor("train").double()
    if list(evaluated.shape) != [1, *READ_SHAPE] or list(trained.shape[1:]) != READ_SHAPE:
        verdict.fail(t("CausalSelfAttention(16, 2) on x of shape [B, 8, 16] returned shapes {eval_shape} (eval) and "
                       "{train_shape} (train); expected [B, 8, 16]", eval_shape=list(evaluated.shape),
                       train_shape=list(trained.shape)))
    verdict.check(bool(torch.isfinite(evaluated).all()), t("with dropout=0.5 the eval-mode output is not finite, so "
                                                           "where dropout acts cannot be seen: {cause}",
                                                           cause=NON_FINITE_CAUSE))
    # every output entry is one attention weight (v and out_proj are the identity on one-hot inputs; the required
    # criteria make sure the forward has the contract's structure): per entry, train mode must give 0 or twice the
    # eval value; entries whose weight is 0 anyway (future keys) say nothing
    rows = evaluated[0].reshape(-1)
    kept = trained.reshape(trained.shape[0], -1)                         # [B, entries]
    dropped = kept.abs() <= KEPT_WEIGHT_TOLERANCE * rows.abs()
    scaled = (kept - 2 * rows).abs() <= KEPT_WEIGHT_TOLERANCE * 2 * rows.abs()
    neither = ~(dropped | scaled)
    live = rows != 0
    dropped, scaled, entries = dropped & live, scaled & live, int(live.sum()) * kept.shape[0]
    verdict.note(entries=entries, dropped=int(dropped.sum()), kept=int(scaled.sum()), neither=int(neither.sum()))
    if neither.any():
        b, i = (int(j) for j in torch.nonzero(neither)[0])
        verdict.fail(t("with dropout=0.5 in train mode, {count} of {entries} attention weights are neither 0 nor 2 x "
                       "their eval value (e.g. {got:.6g} where the eval weight is {want:.6g}): dropout acts before the "
                       "softmax (on the scores), not on the weights it returns", count=int(neither.sum()),
                       entries=entries, got=float(kept[b, i]), want=float(rows[i])))
    verdict.check(bool(dropped.any()) and bool(scaled.any()),
                  t("with dropout=0.5 in train mode, {dropped} of {entries} attention weights were dropped and {kept} "
                    "kept; dropout should drop about half of them", dropped=int(dropped.sum()),
                    entries=entries, kept=int(scaled.sum())))
    verdict.ok(t("with dropout=0.5 in train mode every attention weight is 0 ({dropped} of {entries}) or exactly "
                 "2 x its eval value: dropout acts on the weights after the softmax", dropped=int(dropped.sum()),
                 entries=entries))


@criterion("future_weights_zero_negative_scores", kind="causality",
           requires=("causality", "values_match_reference", "projections_bias_free"),
           title=t("Future keys get exactly 0 weight even when every score is near -1e5"),
           hint=t("Fill the scores of future keys with float('-inf') before the softmax: masked_fill(~causal, "
                  "float('-inf')). A finite fill such as -1e4 outweighs every allowed key whose score is below it, and "
                  "queries and keys that point apart make scores that low: the future then takes the whole row."))
def test_future_weights_zero_negative_scores(obs, ref, verdict):
    p, level = obs.probe("negative_scores"), ref.probe("negative_scores").value("level")
    out = p.tensor("eval").double()
    setting = t("with q_proj and k_proj set so that every score is near -{level:g} (CausalSelfAttention(16, 2) on "
                "one-hot inputs, v_proj and out_proj the identity, so that the output shows the weights)", level=level)
    if list(out.shape) != [1, *READ_SHAPE]:
        verdict.fail(t("{setting} the output has shape {shape}; expected [1, 8, 16]", setting=setting,
                       shape=list(out.shape)))
    verdict.check(bool(torch.isfinite(out).all()), t("{setting} the output is not finite: {cause}", setting=setting,
                                                     cause=NON_FINITE_CAUSE))
    positions, channels = READ_SHAPE
    heads = channels // positions
    weights = out[0].reshape(positions, heads, positions).transpose(0, 1)   # [head, query, key]
    future = torch.ones(positions, positions, dtype=torch.bool).triu(1).expand_as(weights)
    leaked = (weights != 0) & future
    verdict.note(future_weights_not_zero=int(leaked.sum()), largest_future_weight=float(weights[future].abs().max()))
    if leaked.any():
        head, query, key = (int(i) for i in torch.nonzero(leaked)[0])
        verdict.fail(t("{setting} {leaked} of {future} weights on future keys are not 0, e.g. {weight:.4g} from query "
                       "{query} to key {key} in head {head}: every allowed score of the row is below a finite fill "
                       "(such as -1e4), so the future keys took the row; fill with -inf", setting=setting,
                       leaked=int(leaked.sum()), future=int(future.sum()), weight=float(weights[head, query, key]),
                       query=query, key=key, head=head))
    error = (weights.sum(-1) - 1).abs()
    if not float(error.max()) <= SUM_TOLERANCE:  # NaN fails too
        head, query = (int(i) for i in torch.nonzero(error == error.max())[0])
        verdict.fail(t("{setting} the weights of query {query} in head {head} sum to {total:.6g} over the keys; "
                       "expected 1", setting=setting, query=query, head=head, total=float(weights[head, query].sum())))
    verdict.ok(t("with every score near -{level:g} all {future} weights on future keys are exactly 0 and every row "
                 "sums to 1", level=level, future=int(future.sum())))


@criterion("parameter_count_above_2_53", kind="param_count", requires=("parameter_count_large",),
           title=t("count_block_parameters is exact above 2^53, where floats skip integers"),
           hint=t("Keep every step in Python ints: d * d, not d ** 2.0, float() or / (even when the result is turned "
                  "back into an int at the end, float64 holds only every second integer above 2^53, every 32nd near "
                  "2^58)."))
def test_parameter_count_above_2_53(obs, ref, verdict):
    got, want = obs.probe("parameter_count_huge"), ref.probe("parameter_count_huge")
    g, w = got.value("huge"), want.value("huge")
    d, h, f = want.value("huge_size")
    verdict.note(counts=[{"part": f"count_block_parameters{(d, h, f)}", "expected": w, "observed": g}])
    kind = got.value("huge_type")
    verdict.check(kind == "int" and g == w,
                  t("count_block_parameters({d}, {h}, {f}) returned {got} ({kind}); the block has {want} parameters "
                    "(off by {off}): above 2^53 = 9007199254740992 a float64 cannot hold every integer, so some step "
                    "was computed in floats", d=d, h=h, f=f, got=repr(g), kind=kind, want=w, off=_off(g, w)))
    verdict.ok(t("count_block_parameters({d}, {h}, {f}) = {want:,}, exact above 2^53", d=d, h=h, f=f, want=w))
