"""Hidden criteria of exercise `attention`: scaled_dot_product_attention(q, k, v, mask=None) -> (out, weights)."""

import math

import torch

from grader.i18n import Text, join, t, verbatim
from grader.judge.common import forbidden_api_criterion
from grader.judge.compare import difference, position_changes, prefix_leaks, unravel, where_raised
from grader.judge.criterion import criterion
from grader.judge.evidence import attention_map
from grader.judge.observations import recorded_breach

EXERCISE = "attention"
VALUE_ATOL, VALUE_RTOL = 1e-5, 1e-4  # float32 on both sides; only the order of floating-point operations may differ
SUM_TOLERANCE = 1e-5                 # float32 sum of at most 7 probabilities
CAUSAL_TOLERANCE = 1e-10             # float64: anything above rounding noise is information from the future
READS_THE_PAST = 1e-6                # float64: a query that may read position 0 moves by ~0.1 when position 0 changes
BROADCAST_TOLERANCE = 1e-6           # the same code on the same numbers; only the mask's shape differs
DIAGNOSE_TOLERANCE = 1e-4            # close enough to a known wrong formula to name it as the likely mistake
ZERO_GRADIENT = 1e-12                # float64: a quantity that cannot influence the loss gets no gradient
CAUSAL_SHAPE = [2, 2, 6, 8]          # the causality probe's q, k, v: [B, H, T, D], so out is [B, H, T, Dv] with Dv = D
# Gradients against the reference's, float64 inputs: a function may compute in float32 inside (legal, e.g. a softmax
# in float32 cast back), which rounds weights and their backward by ~6e-8 relative; summed over 7 keys with q, k, v
# of size ~3 that is ~1e-6. A softmax backward that drops the -w·sum(w·g) term errs by ~0.1.
GRADIENT_ATOL, GRADIENT_RTOL = 1e-5, 1e-4

AXES = ("batch", "head", "query", "key")
# How a location names each axis; "axis" stands for leading axes the names do not cover.
AXIS_LABELS = {
    "batch": lambda i: t("batch {i}", i=i),
    "head": lambda i: t("head {i}", i=i),
    "query": lambda i: t("query {i}", i=i),
    "key": lambda i: t("key {i}", i=i),
    "channel": lambda i: t("channel {i}", i=i),
    "column": lambda i: t("column {i}", i=i),
    "axis": lambda i: t("axis {i}", i=i),
}


def _at(index, names=AXES) -> Text:
    """`(1, 0, 3, 2)` -> 'batch 1, head 0, query 3, key 2' (names align with the last axes)."""
    names = names[-len(index):] if len(index) <= len(names) else ("axis",) * (len(index) - len(names)) + names
    return join((AXIS_LABELS[n](i) for n, i in zip(names, index, strict=False)), t(", "))


def _first(condition: torch.Tensor) -> tuple[int, ...]:
    return tuple(int(i) for i in torch.nonzero(condition)[0])


def _row(tensor: torch.Tensor, index) -> list[float]:
    return [round(float(x), 4) for x in tensor[tuple(index)]]


def _wrong_formulas(q: torch.Tensor, k: torch.Tensor, d_v: int) -> list[tuple[Text, torch.Tensor]]:
    """The weights that the usual mistakes produce, each with the mistake's name."""
    q, k = q.double(), k.double()
    d = q.shape[-1]
    s = q @ k.transpose(-2, -1)
    return [
        (t("softmax(q·kᵀ) with no scale at all (the 1/sqrt(D) = 1/sqrt({d}) is missing)", d=d), s.softmax(-1)),
        (t("scores divided by D = {d} instead of sqrt(D) = {root:g}", d=d, root=math.sqrt(d)), (s / d).softmax(-1)),
        (t("scores divided by sqrt(Dv) = sqrt({d_v}), the width of v, instead of sqrt(D) = sqrt({d})", d_v=d_v, d=d),
         (s / math.sqrt(d_v)).softmax(-1)),
        (t("scores multiplied by sqrt(D) = {root:g} instead of divided", root=math.sqrt(d)),
         (s * math.sqrt(d)).softmax(-1)),
        (t("a softmax over the query axis (dim=-2) instead of the key axis (dim=-1)"), (s / math.sqrt(d)).softmax(-2)),
    ]


def _diagnosis(weights: torch.Tensor, q: torch.Tensor, k: torch.Tensor, d_v: int) -> Text:
    for label, candidate in _wrong_formulas(q, k, d_v):
        if list(candidate.shape) == list(weights.shape) \
                and difference(weights, candidate, atol=DIAGNOSE_TOLERANCE) is None:
            return t("; your weights equal {mistake}", mistake=label)
    return verbatim("")


def _describe_case(case: dict) -> Text:
    if case.get("mask"):
        return t("q {q}, k {k}, v {v}, mask {mask}", q=case["q"], k=case["k"], v=case["v"], mask=case["mask"])
    return t("q {q}, k {k}, v {v}", q=case["q"], k=case["k"], v=case["v"])


def _expected_shapes(case: dict) -> tuple[list[int], list[int]]:
    lead = case["q"][:-1]
    return lead + [case["v"][-1]], lead + [case["k"][-2]]


def _judge_case(verdict, case: dict) -> None:
    where = _describe_case(case)
    if "raised" in case:
        r = case["raised"]
        if r["type"] == "WrongReturn":          # the probe's own complaint about what came back
            verdict.fail(t("with {setting}, {breach}", setting=where, breach=recorded_breach(r)))
        verdict.fail(t("with {setting} your function raised {error}{at}", setting=where, error=_raised(r),
                       at=where_raised(r)))
    want_out, want_w = _expected_shapes(case)
    if case["out"] != want_out or case["weights"] != want_w:
        verdict.fail(t("with {setting} it returned out {out} and weights {weights}; "
                       "expected out {want_out} = [..., Tq, Dv] and weights {want_weights} = [..., Tq, Tk]",
                       setting=where, out=case["out"], weights=case["weights"], want_out=want_out,
                       want_weights=want_w))


def _raised(r: dict) -> Text:
    """What the student's code raised, as the exception said it: type and message, in the student's words."""
    return verbatim(f"{r['type']}: {r['message'][:200]}")


@criterion("output_shapes", kind="shape",
           title=t("out is [B, H, Tq, Dv] and weights [B, H, Tq, Tk]"),
           hint=t("Scores are q @ k.transpose(-2, -1) (transpose the last two axes, never .T or transpose(1, 2)); the "
                  "output is weights @ v, so its last axis is the width of v (Dv), not of k. Return the tuple (out, "
                  "weights)."))
def test_output_shapes(obs, verdict):
    case = obs.probe("shapes").value("cases")["batch_heads"]
    _judge_case(verdict, case)
    verdict.ok(t("q {q}, k {k}, v {v} give out {out} and weights {weights}", q=case["q"], k=case["k"], v=case["v"],
                 out=case["out"], weights=case["weights"]))


@criterion("any_batch_axes", kind="shape",
           title=t("Works with any number of leading batch axes (none, one, three)"),
           hint=t("Index axes from the end: k.transpose(-2, -1), softmax(dim=-1), q.size(-1). Never hard-code 4 axes "
                  "(transpose(2, 3), view(B, H, T, T)) or assume a 2-D k (k.T)."))
def test_any_batch_axes(obs, verdict):
    cases = obs.probe("shapes").value("cases")
    names = ("no_batch", "one_batch_axis", "three_batch_axes", "three_batch_axes_masked")
    for name in names:
        _judge_case(verdict, cases[name])
    verdict.ok(t("correct shapes for q with 2, 3 and 5 axes, also with a [Tq, Tk] mask against 5-D scores"))


@criterion("values_match_reference", kind="values", requires=("output_shapes",),
           title=t("out and weights equal softmax(q·kᵀ/√D)·v"),
           hint=t("weights = softmax(q @ k.transpose(-2, -1) / sqrt(D), dim=-1) with D = q.size(-1); out = weights @ "
                  "v. Keys meet the queries, values are what is read: do not swap k and v."))
def test_values_match_reference(obs, ref, verdict):
    got, want = obs.probe("values"), ref.probe("values")
    q, k, v = want.tensor("q"), want.tensor("k"), want.tensor("v")
    inputs = {"q": list(q.shape), "k": list(k.shape), "v": list(v.shape)}   # the probe's inputs, as it drew them
    weights = got.tensor("weights")
    verdict.note(attention_map=attention_map(weights, want.tensor("weights")))
    problem = difference(weights, want.tensor("weights"), atol=VALUE_ATOL, rtol=VALUE_RTOL)
    if problem:
        verdict.fail(t("without a mask (q {q}, k {k}, v {v}) the weights differ from softmax(q·kᵀ/√{d}): "
                       "{problem}{diagnosis}", **inputs, d=q.shape[-1], problem=problem,
                       diagnosis=_diagnosis(weights, q, k, v.shape[-1])))
    problem = difference(got.tensor("out"), want.tensor("out"), atol=VALUE_ATOL, rtol=VALUE_RTOL)
    if problem:
        verdict.fail(t("without a mask (q {q}, k {k}, v {v}) the weights are right but out differs from weights @ v: "
                       "{problem}", **inputs, problem=problem))
    verdict.ok(t("without a mask (q {q}, k {k}, v {v}) out and weights match the reference within {atol:g} + "
                 "{rtol:g}·|expected|", **inputs, atol=VALUE_ATOL, rtol=VALUE_RTOL))


@criterion("scaled_by_sqrt_d", kind="values", requires=("output_shapes",),
           title=t("Scores are divided by √D (checked with D = 64)"),
           hint=t("Divide q·kᵀ by math.sqrt(D) with D = q.size(-1), the width of q and k (not of v, not the number of "
                  "keys). Without it the scores' spread grows with D and the softmax saturates to nearly one-hot."))
def test_scaled_by_sqrt_d(obs, ref, verdict):
    got, want = obs.probe("scale"), ref.probe("scale")
    q, k, v = want.tensor("q"), want.tensor("k"), want.tensor("v")
    weights, expected = got.tensor("weights"), want.tensor("weights")
    d = q.shape[-1]
    verdict.note(first_row_weights=_row(weights, (0, 0, 0)), expected_first_row=_row(expected, (0, 0, 0)))
    verdict.note(attention_map=attention_map(weights, expected))
    problem = difference(weights, expected, atol=VALUE_ATOL, rtol=VALUE_RTOL)
    if problem:
        verdict.fail(t("with D = {d} (q {q}, k {k}, v {v}) the weights differ from softmax(q·kᵀ/{root:g}): "
                       "{problem}{diagnosis}", d=d, q=list(q.shape), k=list(k.shape), v=list(v.shape),
                       root=math.sqrt(d), problem=problem, diagnosis=_diagnosis(weights, q, k, v.shape[-1])))
    verdict.ok(t("with D = {d} the weights equal softmax(q·kᵀ/{root:g}): the scores are divided by √D", d=d,
                 root=math.sqrt(d)))


@criterion("softmax_over_keys", kind="values", requires=("output_shapes",),
           title=t("Each query's weights sum to 1 over the keys (Tq ≠ Tk)"),
           hint=t("Normalise over the last axis, the keys: softmax(dim=-1). Over dim=-2 (the queries) the shape is "
                  "still [..., Tq, Tk] but it is each key's column that sums to 1."))
def test_softmax_over_keys(obs, ref, verdict):
    weights, expected = obs.probe("values").tensor("weights").double(), ref.probe("values").tensor("weights")
    queries, keys = expected.shape[-2:]
    verdict.note(attention_map=attention_map(weights, expected))
    negative = weights < 0
    if negative.any():
        i = _first(negative)
        verdict.fail(t("the weight at {location} is {weight:.4g}; probabilities cannot be negative", location=_at(i),
                       weight=float(weights[i])))
    error = (weights.sum(-1) - 1).abs()
    verdict.note(max_row_sum_error=float(error.max()))
    if not float(error.max()) <= SUM_TOLERANCE:  # NaN fails too
        i = unravel(torch.argmax(error), error.shape)
        columns = float((weights.sum(-2) - 1).abs().max())
        why = (t(" Each key's column sums to 1 instead: the softmax runs over the query axis.")
               if columns <= SUM_TOLERANCE else verbatim(""))
        verdict.fail(t("with Tq = {queries} queries and Tk = {keys} keys, the weights of {location} sum to {total:.6g} "
                       "over the keys; expected 1 (tolerance {tolerance:g}).{why}", queries=queries, keys=keys,
                       location=_at(i, AXES[:3]),
                       total=float(weights[i].sum()), tolerance=SUM_TOLERANCE, why=why))
    verdict.ok(t("every query's {keys} weights sum to 1 (largest error {error:.1e})", keys=keys,
                 error=float(error.max())))


@criterion("masked_weights_zero", kind="values", requires=("output_shapes",),
           title=t("Masked weights are exactly 0 and the rest still sum to 1"),
           hint=t("True means 'may attend'. Before the softmax: scores.masked_fill(~mask, float('-inf')). Multiplying "
                  "the weights by the mask after the softmax leaves rows that no longer sum to 1; masked_fill(mask, "
                  "...) hides exactly the keys that should be read."))
def test_masked_weights_zero(obs, ref, verdict):
    p = obs.probe("masked")
    mask, weights, out, v = p.tensor("mask"), p.tensor("weights").double(), p.tensor("out"), p.tensor("v")
    verdict.note(attention_map=attention_map(weights, ref.probe("masked").tensor("weights")))
    if list(weights.shape) != list(mask.shape):
        verdict.fail(t("with a {mask} mask the weights have shape {shape}; expected {mask}", mask=list(mask.shape),
                       shape=list(weights.shape)))
    leaked = (weights != 0) & ~mask
    if leaked.any():
        i = _first(leaked)
        reversed_ = bool((weights[mask] == 0).all())
        why = (t(" Your weights are zero exactly where the mask is True: the mask is read the wrong way round "
                 "(True must mean 'may attend').") if reversed_ else
               t(" The -inf fill reached the weights: it was applied after the softmax instead of to the scores before "
                 "it.") if bool((weights[leaked] == float("-inf")).all()) else verbatim(""))
        verdict.fail(t("{leaked} of {masked} masked positions have a non-zero weight, e.g. {weight:.4g} at {location} "
                       "where the mask is False.{why}", leaked=int(leaked.sum()), masked=int((~mask).sum()),
                       weight=float(weights[i]), location=_at(i), why=why))
    error = (weights.sum(-1) - 1).abs()
    if not float(error.max()) <= SUM_TOLERANCE:  # NaN fails too
        i = unravel(torch.argmax(error), error.shape)
        total = float(weights[i].sum())
        why = (t("Every weight of that row is 0: nothing is attended, there is no softmax over the allowed keys.")
               if total == 0 else
               t("Zeroing after the softmax does this: the masked keys still took their share of the probability.")
               if float((weights.sum(-1) - 1).max()) <= SUM_TOLERANCE else
               t("A sum above 1 means the softmax normalised over another axis than the keys (dim=-1)."))
        verdict.fail(t("the masked positions are 0, but the weights of {location} sum to {total:.6g} over its "
                       "{allowed} allowed keys; expected 1. {why}", location=_at(i, AXES[:3]), total=total,
                       allowed=int(mask[i].sum()), why=why))
    problem = difference(out, weights @ v.double(), atol=VALUE_ATOL, rtol=VALUE_RTOL)
    if problem:
        verdict.fail(t("the masked weights are right, but out is not weights @ v: {problem}", problem=problem))
    verdict.ok(t("all {masked} masked weights are exactly 0 and every row sums to 1 over its allowed keys",
                 masked=int((~mask).sum())))


@criterion("causality", kind="causality", requires=("output_shapes",),
           title=t("With a causal mask, no query reads the future"),
           hint=t("The mask must act before the softmax (masked_fill with -inf): zeroing weights afterwards still lets "
                  "future scores change the normalisation. Softmax over the keys (dim=-1), not over the queries."))
def test_causality(obs, verdict):
    p = obs.probe("causality")
    base = p.tensor("base")
    if list(base.shape) != CAUSAL_SHAPE:
        verdict.fail(t("with q, k, v of shape {want} and a causal mask the output has shape {shape}; expected {want}",
                       want=CAUSAL_SHAPE, shape=list(base.shape)))
    perturbed = []
    for position in range(CAUSAL_SHAPE[-2] - 1):
        out = p.tensor(f"changed_after_{position}")
        if list(out.shape) != CAUSAL_SHAPE:
            verdict.fail(t("after changing q, k and v after position {position} the output has shape {shape}; "
                           "expected {want}", position=position, shape=list(out.shape), want=CAUSAL_SHAPE))
        perturbed.append(out)
    leaks = prefix_leaks(base, perturbed, axis=-2)
    verdict.note(max_change_per_prefix=leaks)
    verdict.note(leak_tolerance=CAUSAL_TOLERANCE)
    bad = [position for position, leak in enumerate(leaks) if not leak <= CAUSAL_TOLERANCE]  # NaN fails too
    if bad:
        position = bad[0]
        if not torch.isfinite(base[..., : position + 1, :]).all():
            verdict.fail(t("with a causal mask the output at positions 0..{position} holds NaN or inf even before any "
                           "input changes, so no change there can be measured", position=position))
        change = (t("became NaN") if math.isnan(leaks[position]) else
                  t("changed by up to {change:.3g}", change=leaks[position]))
        verdict.fail(t("with a causal mask, changing q, k and v after position {position} reached the output at "
                       "positions 0..{position}: it {change} (expected no change at all); {leaking} of {prefixes} "
                       "prefixes leak", position=position, change=change, leaking=len(bad), prefixes=len(leaks)))
    first = p.tensor("changed_first")
    if list(first.shape) != CAUSAL_SHAPE:
        verdict.fail(t("after changing q, k and v at position 0 the output has shape {shape}; expected {want}",
                       shape=list(first.shape), want=CAUSAL_SHAPE))
    reach = position_changes(base, first, axis=-2)
    verdict.note(change_from_position_0=reach)
    unmoved = [position for position in range(1, len(reach)) if not reach[position] > READS_THE_PAST]  # NaN too
    if unmoved:
        verdict.fail(t("with a causal mask, changing q, k and v at position 0 left the output at positions {positions} "
                       "unchanged (largest change there {change:.3g}): those queries do not read the keys they may "
                       "read, so that the future does not reach them proves nothing", positions=unmoved,
                       change=max(reach[position] for position in unmoved)))
    verdict.ok(t("changing every future suffix of q, k and v left every earlier output unchanged (max change "
                 "{change:.1e}), and changing position 0 reached every later query", change=max(leaks)))


@criterion("mask_broadcasting", kind="shape", requires=("masked_weights_zero",),
           title=t("A mask that broadcasts ([Tk], [Tq, Tk], [1, 1, Tq, Tk], [B, 1, 1, Tk]) acts like the full mask"),
           hint=t("Let broadcasting do the work: scores.masked_fill(~mask, -inf) and mask.any(dim=-1, keepdim=True) "
                  "accept any broadcastable mask. Boolean indexing (scores[~mask] = ...), view/reshape to the scores' "
                  "shape, or indexing the mask by batch and head only work for a full-size mask."))
def test_mask_broadcasting(obs, verdict):
    p = obs.probe("broadcast")
    forms = p.value("forms")
    for name, shapes in forms.items():
        setting = t("a mask of shape {mask} against scores {scores}", mask=shapes["mask"], scores=shapes["scores"])
        for tag in ("full", "broadcast"):
            outcome = p.value(f"{name}.{tag}")
            if "raised" in outcome:
                r = outcome["raised"]
                which = setting if tag == "broadcast" else t("the same mask expanded to {scores}",
                                                             scores=shapes["scores"])
                verdict.fail(t("with {setting} your function raised {error}{at}", setting=which, error=_raised(r),
                               at=where_raised(r)))
        for part in ("weights", "out"):
            problem = difference(p.tensor(f"{name}.broadcast.{part}"), p.tensor(f"{name}.full.{part}"),
                                 atol=BROADCAST_TOLERANCE)
            if problem:
                verdict.fail(t("with {setting}, {part} differs from what the same mask expanded to {scores} gives: "
                               "{problem}", setting=setting, part=part, scores=shapes["scores"], problem=problem))
    verdict.ok(t("masks of shapes {shapes} give exactly what their full-size versions give",
                 shapes=join((verbatim(f["mask"]) for f in forms.values()), t(", "))))


@criterion("fully_masked_row_zero", kind="values", requires=("output_shapes",),
           title=t("A query with every key masked gets all-zero weights and output, no NaN"),
           hint=t("softmax over a row of only -inf is 0/0 = NaN; a large negative fill (-1e9, finfo.min) instead gives "
                  "uniform weights. Find such rows with has_key = mask.any(dim=-1, keepdim=True), give them finite "
                  "scores (masked_fill(~has_key, 0.0)) and zero their weights after the softmax (masked_fill(~has_key, "
                  "0.0))."))
def test_fully_masked_row_zero(obs, ref, verdict):
    p = obs.probe("fully_masked")
    mask, out, weights = p.tensor("mask"), p.tensor("out"), p.tensor("weights")
    v = ref.probe("fully_masked").tensor("v")        # the input, as the reference run drew it
    want_out = list(mask.shape[:-1]) + [v.shape[-1]]
    if list(weights.shape) != list(mask.shape) or list(out.shape) != want_out:
        verdict.fail(t("with a {mask} mask the function returned out {out} and weights {weights}; expected out "
                       "{want_out} and weights {want_weights}", mask=list(mask.shape), out=list(out.shape),
                       weights=list(weights.shape),
                       want_out=want_out, want_weights=list(mask.shape)))
    verdict.note(attention_map=attention_map(weights, ref.probe("fully_masked").tensor("weights")))
    empty = ~mask.any(-1)                             # [B, H, Tq]: queries that may read nothing
    rows = [tuple(int(x) for x in i) for i in torch.nonzero(empty)]
    verdict.note(fully_masked_queries=[str(_at(i, AXES[:3])) for i in rows])
    for name, tensor in (("weights", weights), ("out", out)):
        bad = ~torch.isfinite(tensor)
        if bad.any():
            i = _first(bad)
            location = _at(i, AXES[:3] + ("column",))
            if bool(empty[i[:3]]):
                verdict.fail(t("{name} holds {count} non-finite values (NaN or inf), the first at {location}, a fully "
                               "masked query: a softmax over a row of only -inf is 0/0 = NaN", name=name,
                               count=int(bad.sum()), location=location))
            verdict.fail(t("{name} holds {count} non-finite values (NaN or inf), the first at {location}, a query that "
                           "has allowed keys, so it is not the fully masked rows: {cause}", name=name,
                           count=int(bad.sum()), location=location, cause=_non_finite_cause(weights, mask)))
    for i in rows:
        if bool((weights[i] != 0).any()):
            uniform = (t(" (uniform weights: the masked scores were filled with a finite number and nothing zeroes "
                         "the row afterwards)") if float(weights[i].max() - weights[i].min()) < 1e-6 else verbatim(""))
            verdict.fail(t("{location} may attend to no key, yet its weights are {row}; expected all zeros{uniform}",
                           location=_at(i, AXES[:3]), row=_row(weights, i), uniform=uniform))
        if bool((out[i] != 0).any()):
            verdict.fail(t("{location} may attend to no key, yet its output is {row}; expected all zeros",
                           location=_at(i, AXES[:3]), row=_row(out, i)))
    _check_rows_with_keys(verdict, weights.double(), out.double(), v.double(), mask, ~empty)
    verdict.ok(t("the {count} fully masked queries get all-zero weights and output, nothing is NaN, and the other "
                 "queries still attend (weights summing to 1 over their allowed keys, out = weights @ v)",
                 count=len(rows)))


def _check_rows_with_keys(verdict, weights, out, v, mask, has_keys) -> None:
    """The positive control of `fully_masked_row_zero`: the queries that have allowed keys really attend, so that
    zeros on the fully masked ones are the function's doing, not a function that gives zeros everywhere."""
    sums = weights.sum(-1)                                  # [B, H, Tq]
    off = (sums - 1).abs() * has_keys
    if not float(off.max()) <= SUM_TOLERANCE:  # NaN fails too
        i = unravel(torch.argmax(torch.nan_to_num(off, nan=math.inf)), off.shape)
        verdict.fail(t("the fully masked queries get zeros, but the queries with allowed keys are not attended "
                       "right: the weights of {location}, which has {allowed} allowed keys, sum to {total:.6g}; "
                       "expected 1 (zeros for the fully masked queries count only where the others get a softmax)",
                       location=_at(i, AXES[:3]), allowed=int(mask[i].sum()), total=float(sums[i])))
    leaked = (weights != 0) & ~mask & has_keys.unsqueeze(-1)
    if leaked.any():
        i = _first(leaked)
        verdict.fail(t("the fully masked queries get zeros, but {location}, a query with allowed keys, puts weight "
                       "{weight:.4g} on a masked key; expected exactly 0", location=_at(i), weight=float(weights[i])))
    problem = difference(out * has_keys.unsqueeze(-1), (weights @ v) * has_keys.unsqueeze(-1), atol=VALUE_ATOL,
                         rtol=VALUE_RTOL)
    if problem:
        verdict.fail(t("the fully masked queries get zeros, but for the queries with allowed keys out is not "
                       "weights @ v: {problem}", problem=problem))


def _non_finite_cause(weights, mask) -> Text:
    """Why the weights of queries with allowed keys are not finite, from where the non-finite values sit."""
    with_keys = mask.any(-1, keepdim=True).expand_as(mask)
    bad = ~torch.isfinite(weights) & with_keys
    if bool(bad.any()) and bool((weights[bad] == float("-inf")).all()) and not bool((bad & mask).any()):
        return t("the weights are -inf exactly where the mask is False: the -inf fill was applied to the weights after "
                 "the softmax; fill the scores before it (scores.masked_fill(~mask, float('-inf')), then softmax)")
    if bool((~torch.isfinite(weights) & with_keys & mask).any()):
        return t("allowed keys have non-finite weights: the scores themselves are not finite (a mask applied by "
                 "arithmetic such as scores * mask + (1 - mask) * -inf gives 0 * -inf = NaN); use masked_fill")
    return t("the weights of masked keys are not finite: masked weights must be exactly 0")


@criterion("gradients_finite", kind="gradient", requires=("output_shapes",),
           title=t("Backward: finite gradients for q, k and v, none through masked keys or fully masked queries"),
           hint=t("NaN in the forward pass also poisons the backward pass, and so does repairing it afterwards "
                  "(nan_to_num or weights[weights != weights] = 0 only fix the forward). Give fully masked rows finite "
                  "scores before the softmax and zero them after it; keep everything in autograd (no .detach(), .data "
                  "or .item())."))
def test_gradients_finite(obs, ref, verdict):
    p = obs.probe("gradients")
    mask = p.tensor("mask")
    grads = {}
    for name in ("q", "k", "v"):
        if f"{name}.grad" in p.not_tensors:
            verdict.fail(t("{name} received no gradient: it is not on the path from the inputs to out and weights "
                           "(detached, or replaced by a copy that does not require grad)", name=name))
        grads[name] = p.tensor(f"{name}.grad")
    verdict.note(grad_norms={n: float(g.double().norm()) for n, g in grads.items() if torch.isfinite(g).all()})
    weights = p.tensor("weights")
    verdict.note(attention_map=attention_map(weights, ref.probe("gradients").tensor("weights")))
    empty = ~mask.any(-1)                                  # [B, H, Tq]: queries that may read nothing
    for name, g in grads.items():
        bad = ~torch.isfinite(g)
        if bad.any():
            i = _first(bad)
            axes = ("batch", "head", "query" if name == "q" else "key", "channel")
            forward_bad = ~torch.isfinite(weights)
            if bool((forward_bad & ~empty.unsqueeze(-1)).any()):
                cause = t("the forward's weights are already non-finite for queries that have allowed keys: {cause}",
                          cause=_non_finite_cause(weights, mask))
            elif bool(forward_bad.any()):
                cause = t("the forward's weights are NaN for queries whose every key is masked: a softmax over a row "
                          "of only -inf is 0/0 = NaN, and it flows back through the scores")
            else:
                cause = t("the forward is finite, so the NaN comes from the backward of a row of only -inf scores: "
                          "repairing the NaN after the softmax (nan_to_num, weights[weights != weights] = 0) fixes "
                          "only the forward")
            verdict.fail(t("{name}.grad holds {count} non-finite values (NaN or inf) of {total}, the first at "
                           "{location}; {cause}", name=name, count=int(bad.sum()), total=g.numel(),
                           location=_at(i, axes), cause=cause))
    for name, g in grads.items():
        if float(g.abs().max()) == 0.0:
            verdict.fail(t("{name}.grad is all zeros: {name} does not influence out or weights", name=name))
    q_leak = grads["q"].abs().amax(-1) * empty
    if float(q_leak.max()) > ZERO_GRADIENT:
        i = unravel(torch.argmax(q_leak), q_leak.shape)
        verdict.fail(t("{location} may attend to no key, so its output is constant zero, yet q.grad there reaches "
                       "{grad:.3g}; expected 0", location=_at(i, AXES[:3]), grad=float(q_leak[i])))
    hidden = ~mask.any(-2)                                 # [B, H, Tk]: keys no query may read
    if bool((weights.abs().sum(-1) * empty).any()):
        # fully masked queries with non-zero (uniform) weights read the hidden keys: fully_masked_row_zero charges that
        verdict.ok(t("q, k and v receive finite gradients and fully masked queries none; keys masked for every query "
                     "still get gradient through the fully masked queries' non-zero weights, which "
                     "fully_masked_row_zero judges"))
        return
    for name in ("k", "v"):
        leak = grads[name].abs().amax(-1) * hidden
        if float(leak.max()) > ZERO_GRADIENT:
            b, h, j = unravel(torch.argmax(leak), leak.shape)
            verdict.fail(t("key {j} (batch {b}, head {h}) is masked for every query, yet {name}.grad there reaches "
                           "{grad:.3g}; expected 0. That key still influences the result: through a query with no "
                           "allowed key (uniform weights instead of zeros), or through a mask applied after the "
                           "softmax (the masked score still sits in the softmax's "
                           "denominator)", j=j, b=b, h=h, name=name,
                           grad=float(leak[b, h, j])))
    verdict.ok(t("q, k and v receive finite gradients; fully masked queries and keys masked for every query receive "
                 "none"))


@criterion("masked_weights_zero_large_scores", kind="values", requires=("masked_weights_zero",),
           title=t("Masked weights stay exactly 0 when the scores are large (spread ~1e5, or all near -1e5)"),
           hint=t("Fill the masked scores with float('-inf') (masked_fill(~mask, float('-inf'))) before the softmax. "
                  "Adding or filling a finite number such as -1e4 only hides keys whose scores are within 1e4 of the "
                  "others, and a filled key outweighs every allowed key whose score is below the fill; exp(-inf) is 0 "
                  "at any scale."))
def test_masked_weights_zero_large_scores(obs, ref, verdict):
    p = obs.probe("large_scores")
    want = ref.probe("large_scores")
    scale, level = want.value("scale"), want.value("negative_level")
    spread = verbatim(f"1e{round(math.log10(scale ** 2))}")   # the scores' spread: q·k of size scale² (over √D)
    mask = want.tensor("mask")
    cases = (("", t("with q and k of size ~{scale:g} (scores of spread ~{spread}) and a {mask} mask", scale=scale,
                    spread=spread, mask=list(mask.shape)),
              t("a finite fill (such as -1e4) is outweighed by scores this large; fill with -inf")),
             ("negative.", t("with every score near -{level:g} (q and k pulled apart) and a {mask} mask", level=level,
                             mask=list(want.tensor("negative.mask").shape)),
              t("every allowed score of the row is below a finite fill (such as -1e4), so the filled keys took the "
                "row; fill with -inf")))
    masked = 0
    for prefix, setting, cause in cases:
        mask, weights = want.tensor(prefix + "mask"), p.tensor(prefix + "weights").double()
        verdict.note(attention_map=attention_map(weights, want.tensor(prefix + "weights")))
        if list(weights.shape) != list(mask.shape):
            verdict.fail(t("{setting} the weights have shape {shape}; expected {mask}", setting=setting,
                           shape=list(weights.shape), mask=list(mask.shape)))
        bad = ~torch.isfinite(weights)
        if bad.any():
            verdict.fail(t("{setting} {count} weights are NaN or inf, the first at {location}: exp of a large score "
                           "overflows unless the row's largest score is subtracted first (softmax does that)",
                           setting=setting, count=int(bad.sum()), location=_at(_first(bad))))
        leaked = (weights != 0) & ~mask
        if leaked.any():
            i = _first(leaked)
            verdict.fail(t("{setting} {leaked} of {masked} masked positions have a non-zero weight, e.g. {weight:.4g} "
                           "at {location}: {cause}", setting=setting, leaked=int(leaked.sum()),
                           masked=int((~mask).sum()), weight=float(weights[i]), location=_at(i), cause=cause))
        error = (weights.sum(-1) - 1).abs()
        if not float(error.max()) <= SUM_TOLERANCE:  # NaN fails too
            i = unravel(torch.argmax(error), error.shape)
            verdict.fail(t("{setting} the weights of {location} sum to {total:.6g} over the keys; expected 1",
                           setting=setting, location=_at(i, AXES[:3]), total=float(weights[i].sum())))
        masked += int((~mask).sum())
    verdict.ok(t("with scores of spread ~{spread}, and with every score near -{level:g}, all {masked} masked weights "
                 "are exactly 0 and every row sums to 1", spread=spread, level=level, masked=masked))


@criterion("gradients_match_reference", kind="gradient", requires=("values_match_reference", "masked_weights_zero"),
           title=t("Backward: the gradients of q, k and v equal the reference's, with and without a mask"),
           hint=t("Let autograd differentiate the forward. A hand-written softmax backward must be grad_scores = w * "
                  "(g - (g * w).sum(-1, keepdim=True)); dropping the second term, or a backward that does not match "
                  "its forward, gives finite but wrong gradients."))
def test_gradients_match_reference(obs, ref, verdict):
    got, want = obs.probe("backward"), ref.probe("backward")
    inputs = want.value("inputs")   # the shapes the probe drew q, k, v and the mask in
    worst = {}
    for case, setting in (("unmasked", t("without a mask")),
                          ("masked", t("with a {mask} mask", mask=inputs["mask"]))):
        for part in ("out", "weights"):
            problem = difference(got.tensor(f"{case}.{part}"), want.tensor(f"{case}.{part}"), atol=VALUE_ATOL,
                                 rtol=VALUE_RTOL)
            if problem:
                verdict.fail(t("{setting} (float64 q {q}, k {k}, v {v}) the forward's {part} already differs from "
                               "the reference, so its gradients cannot match: {problem}", setting=setting,
                               q=inputs["q"], k=inputs["k"], v=inputs["v"], part=part, problem=problem))
        for name in ("q", "k", "v"):
            key = f"{case}.{name}.grad"
            if key in got.not_tensors:
                verdict.fail(t("{setting}, {name} received no gradient: it is not on the path from the inputs to out "
                               "and weights", setting=setting, name=name))
            grad, expected = got.tensor(key), want.tensor(key)
            problem = difference(grad, expected, atol=GRADIENT_ATOL, rtol=GRADIENT_RTOL)
            if problem:
                verdict.fail(t("{setting}, {name}.grad differs from the reference gradient: {problem}; the forward "
                               "matches, so the backward is not the derivative of the forward (a hand-written "
                               "backward?)", setting=setting, name=name, problem=problem))
            if list(grad.shape) == list(expected.shape):
                worst[f"{case}.{name}"] = float((grad.double() - expected.double()).abs().max())
    verdict.note(largest_gradient_difference=worst)
    verdict.ok(t("with and without a mask, the gradients of q, k and v equal the reference's within {atol:g} + "
                 "{rtol:g}·|expected|", atol=GRADIENT_ATOL, rtol=GRADIENT_RTOL))


test_no_forbidden_api = forbidden_api_criterion()
