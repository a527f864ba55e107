"""Hidden criteria of exercise `param_count`: count_parameters and parameter_breakdown.

The student's numbers are compared with the reference solution's, and the reference's with the trusted
model (grader.probes.lm) built from the same configs in the reference run: if those two ever disagree the
grader itself is wrong, and the criterion says so instead of blaming the student.

When a count is off on many random configs, the difference is fitted exactly as an integer combination of
monomials of the sizes (N·f, V·d, ...), so the message can say "off by -N·f - N·d on every config" and name
the part of the model that such a difference points to.
"""

from __future__ import annotations

import torch

from grader.i18n import Text, join, t, verbatim
from grader.judge.compare import where_raised
from grader.judge.criterion import criterion
from grader.judge.verdicts import Blocked, GraderFault, StudentRaised

EXERCISE = "param_count"
PARTS = ("token_embedding", "position_embedding", "blocks", "final_norm", "head")
# Counts are integers: every comparison is exact (tolerance 0); a float equal in value passes the value
# criteria, and `returns_python_ints` alone asks for the type.
FLOAT_EXACT_LIMIT = 2 ** 53  # above this, a float cannot hold every integer: float arithmetic stops being exact
FIT_TOLERANCE = 1e-6  # a fitted coefficient this close to an integer is rounded, then the fit is re-checked exactly
EXAMPLES = 3  # mismatching configs listed as evidence

LETTERS = "V = vocab_size, C = block_size, d = d_model, h = n_heads, N = n_layers, f = d_ff"

# Monomials a counting mistake is made of (the letters are the chapter's: V, C, d, h, N, f).
MONOMIALS = {
    "V·d": lambda c: c["vocab_size"] * c["d_model"],
    "C·d": lambda c: c["block_size"] * c["d_model"],
    "N·d²": lambda c: c["n_layers"] * c["d_model"] ** 2,
    "N·d·f": lambda c: c["n_layers"] * c["d_model"] * c["d_ff"],
    "N·d": lambda c: c["n_layers"] * c["d_model"],
    "N·f": lambda c: c["n_layers"] * c["d_ff"],
    "N·h": lambda c: c["n_layers"] * c["n_heads"],
    "N": lambda c: c["n_layers"],
    "d²": lambda c: c["d_model"] ** 2,
    "d·f": lambda c: c["d_model"] * c["d_ff"],
    "d": lambda c: c["d_model"],
    "f": lambda c: c["d_ff"],
    "h": lambda c: c["n_heads"],
    "V": lambda c: c["vocab_size"],
    "C": lambda c: c["block_size"],
    "1": lambda c: 1,
}

_ONE_BLOCK = {"d²": 4, "d·f": 2, "f": 1, "d": 5}  # 4d² + 2df + f + d + 2·2d: one block's parameters
# Known mistakes, as the exact difference (got - expected) they make: coefficients of MONOMIALS.
DIAGNOSES = [
    ({"N·f": -1, "N·d": -1}, t("the two feed-forward biases are missing (f + d per block)")),
    ({"N·f": -1}, t("the bias of the first feed-forward Linear(d, f) is missing (f per block)")),
    ({"N·d": -4, "d": -2}, t("every LayerNorm is missing: two per block and final_norm, each 2·d (weight and bias)")),
    ({"N·d": -4}, t("both LayerNorms of each block are missing (ln_attention and ln_feedforward, 2·d each)")),
    ({"N·d": -2}, t("one LayerNorm per block is missing, or only the weights of the two were counted (2·d per block)")),
    ({"N·d": -1}, t("d per block is missing: the bias of the second feed-forward Linear(f, d), or a LayerNorm's bias")),
    ({"N·d": 4}, t("biases on Q, K, V and O were counted (4·d per block); those projections have no bias")),
    ({"N·d": 3}, t("biases on Q, K and V were counted (3·d per block); the projections have no bias")),
    ({"N·d²": -1}, t("one of the four d×d attention projections is missing (Q, K, V and O: 4·d² per block)")),
    ({"N·d²": -4}, t("the attention projections are missing (Q, K, V and O: 4·d² per block)")),
    ({"N·d·f": -1}, t("one of the two feed-forward matrices is missing (d·f each)")),
    ({"d": -2}, t("final_norm is missing: a LayerNorm(d) with weight and bias, 2·d")),
    ({"d": -1}, t("d is missing once: final_norm counted with its weight only?")),
    ({"V·d": -1}, t("d·V is missing: the head counted as tied to token_embedding? In this course head is its own "
                    "Linear(d, V, bias=False)")),
    ({"V·d": 1, "C·d": -1}, t("the position table counted with vocab_size rows; it has block_size rows: C·d")),
    ({"C·d": -1}, t("the learned position table is missing (block_size rows: C·d)")),
    ({"C·d": 1}, t("the position table counted twice (C·d too many)")),
    ({"V": 1}, t("a bias on the head was counted (V); the head has none")),
    ({"N·d²": -4, "N·d·f": -2, "N·f": -1, "N·d": -5, **_ONE_BLOCK},
     t("only one block was counted: the model has n_layers distinct blocks, each with its own weights")),
    (dict(_ONE_BLOCK), t("one block too many: count n_layers blocks")),
]


def describe_config(c: dict) -> str:
    return "config(" + ", ".join(f"{k}={c[k]:_}" for k in
                                 ("vocab_size", "block_size", "d_model", "n_heads", "n_layers", "d_ff")) + ")"


def is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def show(returned: dict) -> Text:
    """A recorded return value, as the student would recognise it."""
    value, kind = returned.get("value"), returned.get("type")
    if kind == "int" and isinstance(value, int):
        return verbatim(f"{value:_}")
    if kind == "float" and is_number(value):
        return t("{value} (a float)", value=repr(value))
    return t("{value} (a {kind})", value=repr(value), kind=kind) if value is not None else t("a {kind}", kind=kind)


def off_by(value, want: int) -> Text:
    if isinstance(value, int):
        return verbatim(f"{value - want:+_}")
    if is_number(value) and value == int(value):
        return verbatim(f"{int(value) - want:+_}")  # exact, not the float subtraction (which rounds above 2**53)
    if is_number(value):
        return verbatim(f"{value - want:+.6g}")
    return t("not a number")


def example(indices: list[int]) -> int:
    """The config to quote: the course's fixed-batch config (index 1) when it is among them, else the first."""
    return 1 if 1 in indices else indices[0]


def raised_error(outcome: dict) -> Text:
    """The exception an outcome recorded, `Type: message` as the student's code raised it (cut short)."""
    r = outcome["raised"]
    return verbatim(f"{r['type']}: {r['message']}"[:393])


def student_raised(call: str, outcome: dict, n_raised: int, n_total: int):
    more = (t(" ({raised} of {total} configs raised)", raised=n_raised, total=n_total) if n_raised > 1
            else verbatim(""))
    memory = outcome["raised"].get("limit") == "memory"
    tail = (t("; building a model (or any tensor) to count cannot work at this size: use integer arithmetic")
            if memory else verbatim(""))
    raise StudentRaised(t("{call} raised {error}{where}{more}{tail}", call=call, error=raised_error(outcome),
                          where=where_raised(outcome["raised"]), more=more, tail=tail), error=outcome["raised"])


def fit_difference(configs: list[dict], diffs: list[int]) -> dict[str, int] | None:
    """Integer coefficients c_m with diff == sum c_m·m(config) on every config exactly, or None."""
    if len(configs) < len(MONOMIALS) + 4:
        return None
    names = list(MONOMIALS)
    columns = torch.tensor([[float(MONOMIALS[m](c)) for m in names] for c in configs], dtype=torch.float64)
    scale = columns.abs().amax(dim=0).clamp_min(1.0)
    target = torch.tensor([float(d) for d in diffs], dtype=torch.float64).unsqueeze(1)
    solution = torch.linalg.lstsq(columns / scale, target).solution.squeeze(1) / scale
    coefficients = {}
    for name, value in zip(names, solution.tolist(), strict=False):
        rounded = round(value)
        if abs(value - rounded) > FIT_TOLERANCE * max(1.0, abs(value)):
            return None
        if rounded:
            coefficients[name] = rounded
    for c, d in zip(configs, diffs, strict=False):  # exact, in integers
        if sum(k * MONOMIALS[m](c) for m, k in coefficients.items()) != d:
            return None
    return coefficients or None


def formula(coefficients: dict[str, int]) -> str:
    text = ""
    for name, k in coefficients.items():
        sign = "-" if k < 0 else "+"
        size = abs(k)
        term = name if size == 1 else (f"{size}" if name == "1" else f"{size}·{name}")
        text += f" {sign} {term}" if text else (f"-{term}" if k < 0 else term)
    return text


def matches(pattern: dict[str, int], configs: list[dict], diffs: list[int]) -> bool:
    return all(sum(k * MONOMIALS[m](c) for m, k in pattern.items()) == d for c, d in zip(configs, diffs, strict=False))


def explain(configs: list[dict], diffs: list[int]) -> tuple[Text | None, Text | None]:
    """(`; on every config the difference is exactly <formula>: <likely cause>`, the likely cause when one is
    known), or (None, None) when no formula fits.

    The known mistakes are tried first, exactly; only then is a general integer fit attempted."""
    for pattern, cause in DIAGNOSES:
        if matches(pattern, configs, diffs):
            return exactly(pattern, cause), cause
    return diagnosis(fit_difference(configs, diffs))


def diagnosis(coefficients: dict[str, int] | None) -> tuple[Text | None, Text | None]:
    """(`off by <formula>` with its likely cause, the cause when one is known) for a fitted difference."""
    if not coefficients:
        return None, None
    for pattern, cause in DIAGNOSES:
        if pattern == coefficients:
            return exactly(coefficients, cause), cause
    if any("h" in name for name in coefficients):
        cause = t("your count changes with n_heads, but heads only split d_model into slices, they add no parameters")
        return exactly(coefficients, cause), cause
    return exactly(coefficients, t("find the part of the model that term belongs to")), None


def exactly(coefficients: dict[str, int], cause: Text) -> Text:
    return t("; on every config the difference is exactly {formula}: {cause}", formula=formula(coefficients),
             cause=cause)


def legend(text: Text, has_formula: bool) -> Text:
    """The letters' meaning, once, after a message that uses them in a formula."""
    return t("{text} ({letters})", text=text, letters=LETTERS) if has_formula else text


def grader_fault(problem: Text):
    raise GraderFault(t("grader fault: {problem}. This is the grader's fault, not your code's: no point is taken for "
                        "it; please report it", problem=problem))


def reference_parts(ref_probe, index: int) -> dict:
    """The reference's breakdown of config `index`, after checking it against the trusted built model."""
    built = ref_probe.value("built")[index]
    outcome = ref_probe.value("breakdowns")[index]
    items = outcome.get("returned", {}).get("items", {})
    parts = {k: items.get(k, {}).get("value") for k in PARTS}
    if parts != built:
        grader_fault(t("the reference breakdown {parts} of {config} differs from the trusted model built from it, "
                       "{built}", parts=parts, config=describe_config(ref_probe.value("configs")[index]), built=built))
    return parts


def count_of(outcome: dict):
    return outcome["returned"]["value"] if "returned" in outcome else None


def reads_no_size(verdict, call: str, outcomes: list[dict], configs: list[dict]) -> None:
    """The positive control of the criteria about what a count is (consistent, an int, the same for any config
    object): the count must come from the sizes. One number for 40 different configs (0 from a placeholder) is
    consistent, an int and the same for any object by construction, and proves none of it."""
    values = {repr(count_of(o)) for o in outcomes if "returned" in o}
    if len(values) == 1 and len(outcomes) > 1:
        verdict.fail(t("{call} returns {value} for each of {count} different configs: it reads none of the sizes, so "
                       "what this criterion checks of the count shows nothing", call=call, value=values.pop(),
                       count=len(configs)))


@criterion("total_matches_model", kind="param_count",
           title=t("count_parameters equals the built model's parameter count on 40 configurations"),
           hint=t("Add every part of the model of exercise transformer_lm: token table V·d, position table C·d, per "
                  "block two LayerNorms (2·d each), Q/K/V/O (4·d², no bias) and the feed-forward (d·f + f + f·d + d, "
                  "with biases), then final_norm (2·d) and an untied head (d·V, no bias). n_heads adds no parameters."))
def test_total_matches_model(obs, ref, verdict):
    got, want = obs.probe("counts"), ref.probe("counts")
    configs = want.value("configs")
    if got.value("configs") != configs:
        verdict.fail(t("the configurations recorded in your run differ from those the grader drew from its seed: "
                       "something in your file changed Python's random module"))
    expected = []
    for c, outcome, built in zip(configs, want.value("counts"), want.value("built"), strict=False):
        value = count_of(outcome)
        if value != sum(built.values()) or not isinstance(value, int):
            grader_fault(t("the reference solution counts {value} for {config}, but the trusted model built from it "
                           "has {built} parameters", value=repr(value), config=describe_config(c),
                           built=sum(built.values())))
        expected.append(value)
    outcomes = got.value("counts")
    raised = [o for o in outcomes if "raised" in o]
    if raised:
        i = outcomes.index(raised[0])
        student_raised(f"count_parameters({describe_config(configs[i])})", raised[0], len(raised), len(configs))
    not_numbers = [i for i, o in enumerate(outcomes) if not is_number(o["returned"]["value"])]
    if not_numbers:
        i = not_numbers[0]
        verdict.fail(t("count_parameters({config}) returned {got}; expected the number {want:_}",
                       config=describe_config(configs[i]), got=show(outcomes[i]["returned"]), want=expected[i]))
    values = [o["returned"]["value"] for o in outcomes]
    wrong = [i for i, (g, w) in enumerate(zip(values, expected, strict=False)) if g != w]
    verdict.note(configs_checked=len(configs))
    verdict.note(counts=[{"part": describe_config(c), "expected": w, "observed": g}
                         for c, g, w in zip(configs, values, expected, strict=False) if g != w][:EXAMPLES])
    if wrong:
        integral = all(g == int(g) for g in values)
        cause, _ = (explain(configs, [int(g) - w for g, w in zip(values, expected, strict=False)]) if integral
                    else (None, None))
        i = example(wrong)
        said = t("count_parameters({config}) returned {got}; the model built from this config has {want:_} parameters "
                 "(off by {off}). {wrong} of {total} configs are off{cause}", config=describe_config(configs[i]),
                 got=show(outcomes[i]["returned"]), want=expected[i], off=off_by(values[i], expected[i]),
                 wrong=len(wrong), total=len(configs), cause=cause or verbatim(""))
        verdict.fail(legend(said, cause is not None),
                     mismatches=[{"config": configs[j], "returned": values[j], "built": expected[j]}
                                 for j in wrong[:EXAMPLES]])
    verdict.ok(t("exact on all {count} configs (vocab_size 3..300, block_size 1..64, n_layers 1..4, n_heads 1..8, "
                 "d_ff 1..200): every count equals sum(p.numel()) of the built model", count=len(configs)))


@criterion("large_sizes_exact", kind="param_count", requires=("total_matches_model",),
           title=t("count_parameters is exact on sizes far too large to build"),
           hint=t("Use Python int arithmetic only: no model or tensor, no float (/, ** 2.0, math.pow, float()), no "
                  "numpy or torch integers (they overflow). Python ints never lose a digit."))
def test_large_sizes_exact(obs, ref, verdict):
    got, want = obs.probe("counts"), ref.probe("counts")
    configs, outcomes = want.value("large_configs"), got.value("large")
    for c, outcome, ref_outcome in zip(configs, outcomes, want.value("large"), strict=False):
        call = f"count_parameters({describe_config(c)})"
        if "raised" in outcome:
            student_raised(call, outcome, 1, 1)
        w, returned = count_of(ref_outcome), outcome["returned"]
        g = returned["value"]
        if g == w:
            continue
        if returned["type"] == "float":
            why = (t("; a float holds every integer only up to 2**53 = {limit:_}, and this model has {count:_} "
                     "parameters: compute with Python ints", limit=FLOAT_EXACT_LIMIT, count=w)
                   if w > FLOAT_EXACT_LIMIT else t(": a float intermediate lost precision; compute with Python ints"))
        elif returned["type"] != "int":
            why = t(": a {kind} has a fixed width and can overflow; compute with Python ints", kind=returned["type"])
        else:
            why = t(": the formula agrees on small configs but not here; look for float or fixed-width intermediates")
        verdict.note(counts=[{"part": call, "expected": w, "observed": g}])
        verdict.fail(t("{call} returned {got}; expected exactly {want:_} (off by {off}){why}", call=call,
                       got=show(returned), want=w, off=off_by(g, w), why=why))
    counts = join((verbatim(f"{count_of(o):_}") for o in want.value("large")), t(" and "))
    verdict.ok(t("exact on {counts} parameters (the second above 2**53), without building anything", counts=counts))


@criterion("breakdown_keys_and_sum", kind="api",
           title=t("parameter_breakdown has exactly the five keys, summing to count_parameters"),
           hint=t("Return a dict with exactly the keys token_embedding, position_embedding, blocks (all n_layers "
                  "blocks together), final_norm and head; compute count_parameters as the sum of its values so the two "
                  "can never disagree."))
def test_breakdown_keys_and_sum(obs, ref, verdict):
    p, want = obs.probe("sums"), ref.probe("sums")
    configs, breakdowns, totals = p.value("configs"), p.value("breakdowns"), p.value("totals")
    for name, outcomes in (("parameter_breakdown", breakdowns), ("count_parameters", totals)):
        raised = [o for o in outcomes if "raised" in o]
        if raised:
            i = outcomes.index(raised[0])
            student_raised(f"{name}({describe_config(configs[i])})", raised[0], len(raised), len(configs))
    reads_no_size(verdict, "count_parameters", totals, configs)
    for i, (c, parts, total) in enumerate(zip(configs, breakdowns, totals, strict=False)):
        parts = parts["returned"]
        call = f"parameter_breakdown({describe_config(c)})"
        if "items" not in parts:
            verdict.fail(t("{call} returned a {kind}; expected a dict with the keys {keys}", call=call,
                           kind=parts["type"], keys=", ".join(PARTS)))
        keys = set(parts["items"])
        missing, extra = [k for k in PARTS if k not in keys], sorted(keys - set(PARTS))
        if missing or extra or parts["n_keys"] != len(PARTS):
            detail = join(([t("missing {keys}", keys=missing)] if missing else [])
                          + ([t("unexpected {keys}", keys=extra)] if extra else []), t("; "))
            verdict.fail(t("{call} has the keys {keys}; expected exactly {want} ({detail})", call=call,
                           keys=sorted(keys), want=list(PARTS), detail=detail),
                         keys=sorted(keys))
        values = {k: v["value"] for k, v in parts["items"].items()}
        bad = [k for k in PARTS if not is_number(values[k])]
        if bad:
            verdict.fail(t("{call}['{key}'] is {got}; expected a number", call=call, key=bad[0],
                           got=show(parts["items"][bad[0]])))
        g = total["returned"]["value"]
        if not is_number(g):
            verdict.fail(t("count_parameters({config}) returned {got}; expected a number", config=describe_config(c),
                           got=show(total["returned"])))
        if sum(values.values()) != g:
            verdict.fail(_sum_disagrees(c, values, total["returned"], want, i), parts=values)
    verdict.ok(t("on {count} configs the dict has exactly the five keys and its values sum to count_parameters",
                 count=len(configs)))


def _sum_disagrees(config: dict, values: dict, returned: dict, want, index: int) -> Text:
    """Why the parts of a breakdown do not sum to count_parameters, named by which side the built model agrees with
    (the reference run drew the same configs): a wrong part with a right total, a wrong total with right parts, or
    both wrong."""
    model_total = count_of(want.value("totals")[index])
    model_parts = {k: v.get("value") for k, v in want.value("breakdowns")[index]["returned"]["items"].items()}
    total, parts = returned["value"], sum(values.values())
    said = {"config": describe_config(config), "parts": parts, "got": show(returned), "off": off_by(total, parts)}
    if total == model_total:
        wrong = [k for k in PARTS if values[k] != model_parts[k]]
        return t("for {config} count_parameters returns {got}, the model's count, but the parts of parameter_breakdown "
                 "sum to {parts:_} (off by {off}): '{part}' is {value}, where the model's {part} holds "
                 "{want:_}{more}", part=wrong[0], value=show({"type": type(values[wrong[0]]).__name__,
                                                         "value": values[wrong[0]]}),
                 want=model_parts[wrong[0]], more=t(" ({count} parts are off)", count=len(wrong)) if len(wrong) > 1
                 else verbatim(""), **said)
    if parts == model_total:
        return t("for {config} the parts of parameter_breakdown sum to {parts:_}, the model's count, but "
                 "count_parameters returns {got} (off by {off}): compute the total as the sum of the parts", **said)
    return t("for {config} the parts of parameter_breakdown sum to {parts:_}, but count_parameters returns {got} (off "
             "by {off}); the total must be the sum of the parts, and neither is the model's {model:_}",
             model=model_total, **said)


@criterion("breakdown_parts_exact", kind="param_count",
           title=t("Each part of parameter_breakdown equals that part of the built model"),
           hint=t("token_embedding = V·d; position_embedding = C·d (block_size rows); blocks = N·(4·d² + 2·d·f + f + d "
                  "+ 4·d) for all N blocks together; final_norm = 2·d; head = d·V (not tied)."))
def test_breakdown_parts_exact(obs, ref, verdict):
    got, want = obs.probe("breakdowns"), ref.probe("breakdowns")
    configs = want.value("configs")
    if got.value("configs") != configs:
        verdict.fail(t("the configurations recorded in your run differ from those the grader drew from its seed: "
                       "something in your file changed Python's random module"))
    expected = [reference_parts(want, i) for i in range(len(configs))]
    outcomes = got.value("breakdowns")
    raised = [o for o in outcomes if "raised" in o]
    if raised:
        i = outcomes.index(raised[0])
        student_raised(f"parameter_breakdown({describe_config(configs[i])})", raised[0], len(raised), len(configs))
    problems, causes, explained = [], [], False
    for part in PARTS:
        values = []
        for c, outcome in zip(configs, outcomes, strict=False):
            item = outcome["returned"].get("items", {}).get(part)
            if item is None:   # the keys are breakdown_keys_and_sum's to judge: without them no part can be
                raise Blocked(t("not judged: parameter_breakdown({config}) has no key '{key}', so its parts cannot be "
                                "compared with the model's (breakdown_keys_and_sum names the keys)",
                                config=describe_config(c), key=part))
            values.append(item["value"])
        wrong = [i for i, (g, w) in enumerate(zip(values, expected, strict=False)) if g != w[part]]
        if not wrong:
            continue
        numeric = all(is_number(g) and g == int(g) for g in values)
        said, cause = (explain(configs, [int(g) - w[part] for g, w in zip(values, expected, strict=False)]) if numeric
                       else (None, None))
        explained = explained or said is not None
        i = example(wrong)
        problems.append(t("'{part}' is off on {wrong} of {total} configs, e.g. for {config} it is {got}, but the built "
                          "model's {part} holds {want:_} parameters (off by {off}){cause}", part=part, wrong=len(wrong),
                          total=len(configs), config=describe_config(configs[i]),
                          got=show(outcomes[i]["returned"]["items"][part]), want=expected[i][part],
                          off=off_by(values[i], expected[i][part]), cause=said or verbatim("")))
        if cause is not None:
            causes.append(t("{part}: {cause}", part=part, cause=cause))
    verdict.note(**_first_config_off(configs, outcomes, expected))
    if problems:
        # the likely causes alone, in Chinese, as evidence next to the message (the bilingual message holds them too)
        verdict.fail(legend(join(problems, t("; ")), explained),
                     likely_causes_zh=[cause.render("zh") for cause in causes])
    for c, outcome, ref_outcome in zip(want.value("large_configs"), got.value("large"), want.value("large"),
                                       strict=False):
        call = f"parameter_breakdown({describe_config(c)})"
        if "raised" in outcome:
            student_raised(call, outcome, 1, 1)
        items, ref_items = outcome["returned"].get("items", {}), ref_outcome["returned"]["items"]
        for part in PARTS:
            w = ref_items[part]["value"]
            item = items.get(part)
            if item is None:
                verdict.fail(t("{call} has no key '{key}'", call=call, key=part))
            if item["value"] != w:
                why = (t("; a float holds every integer only up to 2**53 = {limit:_}: compute with Python ints",
                         limit=FLOAT_EXACT_LIMIT) if item["type"] != "int" else verbatim(""))
                verdict.fail(t("{call}['{key}'] is {got}; expected exactly {want:_} (off by {off}){why}", call=call,
                               key=part, got=show(item), want=w, off=off_by(item["value"], w), why=why))
    verdict.ok(t("every part matches the built model on {count} configs, and the reference exactly on {large} sizes "
                 "too large to build", count=len(configs), large=len(want.value("large_configs"))))


@criterion("returns_python_ints", kind="api",
           title=t("Counts are Python ints"),
           hint=t("Use integer operations only (+, *, //); no /, ** 2.0, math.pow, float(), numpy or torch. A "
                  "parameter count is an integer, and only Python ints stay exact at any size."))
def test_returns_python_ints(obs, verdict):
    counts, breakdowns = obs.probe("counts"), obs.probe("breakdowns")
    reads_no_size(verdict, "count_parameters", counts.value("counts"), counts.value("configs"))
    checked = 0
    for probe, configs_key, outcomes_key, name in (
            (counts, "configs", "counts", "count_parameters"), (counts, "large_configs", "large", "count_parameters"),
            (breakdowns, "configs", "breakdowns", "parameter_breakdown"),
            (breakdowns, "large_configs", "large", "parameter_breakdown")):
        configs, outcomes = probe.value(configs_key), probe.value(outcomes_key)
        if outcomes_key != "large":  # raises on the large sizes are judged by the criteria of those sizes
            raised = [o for o in outcomes if "raised" in o]
            if raised:
                i = outcomes.index(raised[0])
                student_raised(f"{name}({describe_config(configs[i])})", raised[0], len(raised), len(configs))
        for c, outcome in zip(configs, outcomes, strict=False):
            if "raised" in outcome:
                continue
            returned = outcome["returned"]
            if name == "parameter_breakdown" and "items" not in returned:
                continue  # not a dict at all: `breakdown_keys_and_sum` says so
            items = returned["items"] if name == "parameter_breakdown" else {"": returned}
            for key, item in items.items():
                checked += 1
                if item.get("type") != "int":
                    where = f"{name}({describe_config(c)})" + (f"['{key}']" if key else "")
                    verdict.fail(t("{where} is {got}; expected a Python int (integer arithmetic only: +, *, //)",
                                   where=where, got=show(item)))
    verdict.ok(t("all {count} returned counts and parts are Python ints", count=checked))


@criterion("accepts_any_config_object", kind="api",
           title=t("Any object with the six size attributes works as config"),
           hint=t("Read the sizes as attributes (config.vocab_size, or getattr(config, name)); do not use "
                  "vars(config), config.__dict__, config['...'] or dataclasses functions, and ignore attributes you do "
                  "not need (dropout, ...)."))
def test_accepts_any_config_object(obs, verdict):
    p = obs.probe("config_objects")
    c = p.value("config")
    base = p.value("namespace")
    if "raised" in base:
        student_raised(f"count_parameters(SimpleNamespace({describe_config(c)[7:-1]}))", base, 1, 1)
    want = base["returned"]["value"]
    counts = obs.probe("counts")
    reads_no_size(verdict, "count_parameters", counts.value("counts"), counts.value("configs"))
    labels = {"with_extra_fields": t("a SimpleNamespace with extra attributes "
                                     "{fields}", fields=p.value("extra_fields")),
              "slots": t("an object with __slots__ (no __dict__) holding only the six attributes"),
              "getattr_only": t("an object whose attributes are computed by __getattr__ (no __dict__ entries)")}
    for key, label in labels.items():
        outcome = p.value(key)
        if "raised" in outcome:
            verdict.fail(t("count_parameters on {label} raised {error}{where}; a plain SimpleNamespace with the same "
                           "sizes gives {count}: read the sizes as attributes (config.vocab_size)", label=label,
                           error=raised_error(outcome), where=where_raised(outcome["raised"]),
                           count=show(base["returned"])))
        g = outcome["returned"]["value"]
        if g != want:
            verdict.fail(t("count_parameters on {label} returned {got}, but {count} on a plain SimpleNamespace with "
                           "the same sizes; only the six size attributes may matter", label=label,
                           got=show(outcome["returned"]), count=show(base["returned"])))
    verdict.ok(t("a SimpleNamespace with extra attributes, a __slots__ object and a __getattr__ object all give the "
                 "same count, {count:_}", count=want) if isinstance(want, int) else
               t("every kind of config object gives the same count"))


def _first_config_off(configs, outcomes, expected) -> dict:
    """Evidence for the report's count chart: every part of the first config whose breakdown is off, expected
    against returned (nothing when every config is right)."""
    for config, outcome, want in zip(configs, outcomes, expected, strict=False):
        items = outcome["returned"]["items"]
        if any(items[part]["value"] != want[part] for part in PARTS):
            return {"counts_config": describe_config(config),
                    "counts": [{"part": part, "expected": want[part], "observed": items[part]["value"]}
                               for part in PARTS]}
    return {}
