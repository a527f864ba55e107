"""Hidden criteria of exercise `kv_cache`: TransformerLM.forward with a KV cache, and generate_cached.

What the student's calls must equal was computed in the probes with the grader's trusted model (a full recompute)
and is read from the reference run: the student's run supplies only what the student's code returned and what
reached the student's model.
"""

from grader.i18n import Text, t
from grader.judge.compare import describe_outcome, difference, raised
from grader.judge.criterion import criterion

EXERCISE = "kv_cache"
# The contract's tolerance: float32 rounding (COURSE.md §13). The probes' models are float64, where a correct cache
# agrees with the full forward to ~1e-15; a student may compute in float32 inside forward (a float32 buffer, say),
# which rounds the keys and values by ~6e-8 relative and moves logits of order one by ~1e-7.
TOLERANCE = 1e-5
# What the probes call their teacher-forced runs, in words.
SCHEDULE_LABELS = {
    "one_token_prompt": t("a one-token prompt, then one token per call"),
    "long_prompt": t("a 4-token prompt, then 1, 2 and 3 tokens per call"),
}


def _cache_problem(facts: dict, expected: dict) -> Text | None:
    """What is wrong with a returned past_key_values, against the reference's for the same call, or None."""
    if facts["type"] not in ("tuple", "list"):
        return t("is a {kind}, not a tuple with one (k, v) per block", kind=facts["type"])
    if facts["length"] != expected["length"]:
        return t("holds {got} entries for a model of {blocks} blocks (one (k, v) per block)", got=facts["length"],
                 blocks=expected["length"])
    want = expected["layers"][0]["items"][0]["shape"]   # [B, n_heads, T_past + T, d_head] of the probe's model
    for i, layer in enumerate(facts["layers"]):
        if layer["type"] not in ("tuple", "list") or layer["length"] != 2:
            return t("block {block}'s entry is a {kind}, not a pair (k, v)", block=i, kind=layer["type"])
        for name, item in zip(("k", "v"), layer["items"], strict=True):
            if item["type"] != "Tensor":
                return t("block {block}'s {name} is a {kind}, not a tensor", block=i, name=name, kind=item["type"])
            if item["shape"] != want:
                return t("block {block}'s {name} has shape {shape}; expected [B, n_heads, T_past + T, d_head] = "
                         "{want}", block=i, name=name, shape=item["shape"], want=want)
    return None


@criterion("cache_shapes", kind="shape",
           title=t("past_key_values holds one (k, v) per block, [B, n_heads, T_past + T, d_head], growing each call"),
           hint=t("Return a tuple with one (k, v) per block; each block concatenates its new keys and values after the "
                  "cached ones on the positions axis (dim 2 of [B, n_heads, T, d_head]) and returns the result, so "
                  "the cache grows by the number of new positions with every call."))
def test_cache_shapes(obs, ref, verdict):
    p, r = obs.probe("schedules"), ref.probe("schedules")
    for name, sizes in r.value("schedules").items():
        length = 0
        for i, size in enumerate(sizes):
            length += size
            problem = _cache_problem(p.value(f"{name}.{i}.cache"), r.value(f"{name}.{i}.cache"))
            if problem is not None:
                verdict.fail(t("{run}: after call {call}, which fed {new} new position(s) after {past} cached ones, "
                               "past_key_values {problem}", run=SCHEDULE_LABELS[name], call=i + 1, new=size,
                               past=length - size, problem=problem))
    verdict.ok(t("after every call the cache held one (k, v) per block of shape [B, n_heads, T_past + T, d_head], "
                 "growing by the positions fed, up to block_size"))


@criterion("cached_logits_match", kind="values",
           title=t("Logits with the cache equal a full forward over the whole sequence, at every step"),
           hint=t("Each call must attend to every cached position and causally among its new positions: new "
                  "position i sits at T_past + i and may read keys 0..T_past + i. Hand each block its own layer's "
                  "cache, and continue the position embeddings at T_past."))
def test_cached_logits_match(obs, ref, verdict):
    p, r = obs.probe("schedules"), ref.probe("schedules")
    want = r.tensor("full_logits")
    for name, sizes in r.value("schedules").items():
        start = 0
        for i, size in enumerate(sizes):
            problem = difference(p.tensor(f"{name}.{i}.logits"), want[:, start:start + size], atol=TOLERANCE,
                                 rtol=TOLERANCE)
            if problem is not None:
                verdict.fail(t("{run}: call {call} (positions {first} to {last}, {past} cached) gave logits that "
                               "differ from a full forward over the whole sequence: {problem}",
                               run=SCHEDULE_LABELS[name], call=i + 1, first=start, last=start + size - 1,
                               past=start, problem=problem))
            start += size
    verdict.ok(t("fed in pieces with the cache (one token per call, and a 4-token prompt then 1, 2 and 3 tokens), "
                 "every call's logits equal the full forward's within {tolerance}", tolerance=TOLERANCE))


@criterion("position_offset", kind="values",
           title=t("New positions continue at T_past and read the whole cache handed to forward"),
           hint=t("With past_key_values given, T_past = past_key_values[0][0].shape[2]: the new tokens' positions are "
                  "T_past, T_past + 1, ... (torch.arange(T_past, T_past + T)), not 0, 1, ..."))
def test_position_offset(obs, ref, verdict):
    p, r = obs.probe("given_cache"), ref.probe("given_cache")
    want = r.tensor("full_logits")
    for length, new in r.value("cases"):
        key = f"cache{length}+{new}"
        problem = difference(p.tensor(key + ".logits"), want[:, length:length + new], atol=TOLERANCE, rtol=TOLERANCE)
        if problem is not None:
            rows = p.value(key + ".positions")
            expected_rows = list(range(length, length + new))
            if rows and rows[0] is not None and rows[0] != expected_rows:
                verdict.fail(t("after a cache of {past} position(s) (in the contract's layout) the next {new} "
                               "position(s) gave logits that differ from the full forward's ({problem}); your forward "
                               "looked up position rows {rows}, expected {want}", past=length, new=new,
                               problem=problem, rows=rows[0], want=expected_rows))
            verdict.fail(t("after a cache of {past} position(s) (in the contract's layout) the next {new} position(s) "
                           "gave logits that differ from the full forward's: {problem}", past=length, new=new,
                           problem=problem))
    verdict.ok(t("handed caches of 1, 4 and block_size - 1 positions and then 1 or 3 new positions, forward gave the "
                 "full forward's logits at those positions within {tolerance}", tolerance=TOLERANCE))


@criterion("rejects_past_block_size", kind="errors",
           title=t("T_past + T > block_size raises ValueError"),
           hint=t("Before embedding, check T_past + T against config.block_size and raise ValueError: the position "
                  "table has block_size rows, and an index past it raises IndexError, not the contract's error."))
def test_rejects_past_block_size(obs, ref, verdict):
    p = obs.probe("context_limit")
    want = ref.probe("context_limit").tensor("full_logits")[:, -1:]   # the last position of a full block
    problem = difference(p.tensor("at_limit.logits"), want, atol=TOLERANCE, rtol=TOLERANCE)
    if problem is not None:
        verdict.fail(t("the positive control failed: one new position after a cache of block_size - 1 positions "
                       "(T_past + T = block_size, allowed) gave logits that differ from the full forward's: {problem}",
                       problem=problem))
    cases = {"two_past_almost_full": t("two new positions after a cache of block_size - 1"),
             "one_past_full": t("one new position after a cache of block_size positions"),
             "one_past_own_full": t("one new position after the cache your forward returned for block_size tokens")}
    for key, label in cases.items():
        outcome = p.value(key)
        if raised(outcome) != "ValueError":
            verdict.fail(t("{case} (T_past + T = block_size + 1): forward {outcome}; expected ValueError",
                           case=label, outcome=describe_outcome(outcome)))
    verdict.ok(t("T_past + T = block_size worked; block_size + 1 raised ValueError with the grader's cache and with "
                 "your own"))


def _call(request: dict) -> Text:
    return t("generate_cached(model, {prompt}, max_new_tokens={max_new_tokens}, eos_id={eos_id})",
             prompt=request["prompt"], max_new_tokens=request["max_new_tokens"], eos_id=request["eos_id"])


def _check_run(obs_probe, ref_probe, verdict, key: str) -> None:
    """generate_cached's ids and stop reason equal generate's, and each new token's logits equal the full forward's."""
    got, want = obs_probe.value(key), ref_probe.value(key + ".expected")
    call = _call(got["request"])
    if "raised" in got:
        e = got["raised"]
        verdict.fail(t("{call} raised {error}", call=call, error=f"{e['type']}: {e['message']}"[:300]))
    if "returned" in got:
        verdict.fail(t("{call} returned a {kind}, not a tuple (ids, reason)", call=call, kind=got["returned"]))
    if got["ids"] != want["ids"] or got["reason"] != want["reason"]:
        verdict.fail(t("{call} returned ({ids}, {reason}); generate gives ({want_ids}, {want_reason})", call=call,
                       ids=got["ids"], reason=repr(got["reason"]), want_ids=want["ids"],
                       want_reason=repr(want["reason"])))
    prompt = len(got["request"]["prompt"])
    new = len(want["ids"]) - prompt
    calls = obs_probe.value(key + ".calls")
    if len(calls) < new:
        verdict.fail(t("{call} produced {new} new tokens but called model(...) {calls} time(s): each new token comes "
                       "from a call of the model", call=call, new=new, calls=len(calls)))
    expected = ref_probe.tensor(key + ".expected_logits")
    for j in range(new):   # the last `new` calls made the new tokens; each one's last position predicted one
        index = len(calls) - new + j
        logits = obs_probe.tensor(f"{key}.call{index}.logits")
        if logits.dim() != 3 or logits.shape[0] != 1 or logits.shape[1] < 1:
            verdict.fail(t("{call}: model call {index} returned logits of shape {shape}; expected [1, T, V]",
                           call=call, index=index + 1, shape=list(logits.shape)))
        problem = difference(logits[0, -1], expected[0, prompt + j - 1], atol=TOLERANCE, rtol=TOLERANCE)
        if problem is not None:
            verdict.fail(t("{call}: the logits that chose new token {step} differ from a full forward's over the same "
                           "{length} tokens: {problem}", call=call, step=j + 1, length=prompt + j, problem=problem))


@criterion("generate_one_token_prompt", kind="values",
           title=t("generate_cached from a one-token prompt: generate's ids, and the full forward's logits at every "
                   "step"),
           hint=t("Run the prompt once with use_cache=True, then feed only the new token with the past_key_values "
                  "the previous call returned; take the argmax of the last position's logits, as generate does."))
def test_generate_one_token_prompt(obs, ref, verdict):
    _check_run(obs.probe("generate"), ref.probe("generate"), verdict, "one_token")
    verdict.ok(t("from a one-token prompt generate_cached gave generate's ids and stop reason, each step's logits "
                 "equal to the full forward's within {tolerance}", tolerance=TOLERANCE))


@criterion("generate_long_prompt", kind="values",
           title=t("generate_cached from a longer prompt: generate's ids and stop reasons, and the full forward's "
                   "logits at every step"),
           hint=t("The first call gets the whole prompt (every position of it, so that the cache holds all of them); "
                  "only the calls after it get one token. Stop at EOS (appended) and at max_new_tokens as generate "
                  "does."))
def test_generate_long_prompt(obs, ref, verdict):
    for key in ("long_prompt", "long_prompt_eos", "no_budget"):
        _check_run(obs.probe("generate"), ref.probe("generate"), verdict, key)
    verdict.ok(t("from prompts of 4 and 3 tokens generate_cached gave generate's ids and stop reasons "
                 "('max_new_tokens', 'eos', and the prompt alone for max_new_tokens=0), each step's logits equal to "
                 "the full forward's within {tolerance}", tolerance=TOLERANCE))


@criterion("generate_context_limit", kind="values",
           title=t("generate_cached stops at block_size with \"context_limit\", as generate does"),
           hint=t("At the top of each iteration, before calling the model: if len(ids) >= model.config.block_size, "
                  "return (ids, \"context_limit\")."))
def test_generate_context_limit(obs, ref, verdict):
    p, r = obs.probe("generate"), ref.probe("generate")
    for key in ("fills_block", "prompt_at_block"):
        _check_run(p, r, verdict, key)
    calls = p.value("prompt_at_block.calls")
    if calls:
        verdict.fail(t("a prompt already holding block_size tokens was returned as it is, yet the model was called "
                       "{calls} time(s)", calls=len(calls)))
    verdict.ok(t("a short prompt was extended to exactly block_size tokens, and a prompt already at block_size "
                 "returned unchanged without a model call, both with reason 'context_limit'"))


@criterion("one_position_per_step", kind="api", requires=("generate_long_prompt",),
           title=t("After the prompt, each step feeds one position to the model and to attention"),
           hint=t("Keep the past_key_values each call returns and feed only the newest token with it: "
                  "model(torch.tensor([[next_id]]), past_key_values=past, use_cache=True). Feeding the whole "
                  "sequence again repeats the work the cache exists to save."))
def test_one_position_per_step(obs, verdict):
    p = obs.probe("generate")
    seen_attention = 0
    for key in ("one_token", "long_prompt", "long_prompt_eos"):
        request, calls = p.value(key)["request"], p.value(key + ".calls")
        call = _call(request)
        prompt = len(request["prompt"])
        if not calls:
            verdict.fail(t("{call} never called model(...)", call=call))
        first = calls[0]
        if first["tokens"].get("shape") != [1, prompt] or first["past_length"] != 0:
            verdict.fail(t("{call}: the first model call got tokens {tokens} with {past} cached positions; expected "
                           "the whole prompt, [1, {prompt}], and no cache", call=call,
                           tokens=first["tokens"].get("shape", first["tokens"]["type"]), past=first["past_length"],
                           prompt=prompt))
        for index, entry in enumerate(calls[1:], start=1):
            shape = entry["tokens"].get("shape", entry["tokens"]["type"])
            if shape != [1, 1] or entry["past_length"] != prompt + index - 1:
                verdict.fail(t("{call}: model call {index} got tokens {tokens} with {past} cached positions; expected "
                               "one new token, [1, 1], after a cache of {want} positions", call=call, index=index + 1,
                               tokens=shape, past=entry["past_length"], want=prompt + index - 1))
            for reached in entry["attention"]:
                seen_attention += 1
                size = reached["input"].get("shape")
                if size is None or len(size) < 2 or size[1] != 1:
                    verdict.fail(t("{call}: in model call {index}, blocks[{block}].attention received input of shape "
                                   "{shape}; expected one query position, [1, 1, d_model]", call=call, index=index + 1,
                                   block=reached["block"], shape=size or reached["input"]["type"]))
    verdict.note(attention_calls_after_the_prompt=seen_attention)
    verdict.ok(t("the prompt was fed once, whole; every later call fed one token after the cache of all earlier "
                 "positions, and every attention it reached got one query position"))


@criterion("cache_not_shared", kind="values",
           title=t("A cache is never shared between calls"),
           hint=t("Make a new cache for every sequence: no module-level or model attribute that outlives a call of "
                  "generate_cached, and no buffer that a later sequence's forward writes over."))
def test_cache_not_shared(obs, ref, verdict):
    p, r = obs.probe("not_shared"), ref.probe("not_shared")
    problem = _cache_problem(p.value("first_cache"), r.value("first_cache"))
    if problem is not None:
        verdict.fail(t("the cache of a first sequence of 5 tokens {problem}", problem=problem))
    problem = difference(p.tensor("first_continued.logits"), r.tensor("full_logits")[:, 5:6], atol=TOLERANCE,
                         rtol=TOLERANCE)
    if problem is not None:
        verdict.fail(t("a first sequence's cache, continued after a second sequence made its own, gave logits that "
                       "differ from the full forward over the first sequence: {problem}", problem=problem))
    for key in ("first", "second"):
        _check_run(p, r, verdict, key)
    first_call = p.value("second.calls")[0]
    if first_call["past_length"] != 0:
        verdict.fail(t("the second call of generate_cached began with a cache of {past} positions: the first call's "
                       "cache was reused", past=first_call["past_length"]))
    verdict.ok(t("a first cache still continued its own sequence after a second was made, and two generate_cached "
                 "calls in a row each started from no cache and gave generate's ids"))


@criterion("no_cache_unchanged", kind="values", requires=("cached_logits_match",),
           title=t("use_cache=False is exercise 9's forward: its logits and loss, and past_key_values None"),
           hint=t("Without a cache request forward must stay exactly what it was: every position's logits, the mean "
                  "loss over scored positions, and \"past_key_values\": None."))
def test_no_cache_unchanged(obs, ref, verdict):
    p, r = obs.probe("no_cache"), ref.probe("no_cache")
    for key, call in (("default", "model(tokens)"),
                      ("explicit", "model(tokens, targets, past_key_values=None, use_cache=False)")):
        problem = difference(p.tensor(key + ".logits"), r.tensor("expected_logits"), atol=TOLERANCE, rtol=TOLERANCE)
        if problem is not None:
            verdict.fail(t("{call} gave logits that differ from exercise 9's forward: {problem}", call=call,
                           problem=problem))
        returned = p.value(key + ".past_key_values")
        if not returned["is_none"]:
            verdict.fail(t("{call} returned a {kind} as past_key_values; expected None when no cache is asked for",
                           call=call, kind=returned["type"]))
    problem = difference(p.tensor("explicit.loss"), r.tensor("expected_loss"), atol=TOLERANCE, rtol=TOLERANCE)
    if problem is not None:
        verdict.fail(t("the loss with use_cache=False differs from exercise 9's: {problem}", problem=problem))
    verdict.ok(t("with no cache asked for, forward gave exercise 9's logits and loss, and past_key_values None"))
