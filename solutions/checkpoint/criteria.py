"""Hidden criteria of exercise `checkpoint`: save_checkpoint, load_checkpoint and generate."""

import re

import torch

from grader.i18n import Text, join, t, verbatim
from grader.judge.compare import describe_outcome, difference, raised
from grader.judge.criterion import criterion

EXERCISE = "checkpoint"
# Reload and resume repeat the same computation, in the same order, on the same CPU: the results are equal bit for
# bit or something was not restored. No tolerance (0.0): "close" would hide a lost RNG state or optimizer moment.
EXACT = 0.0
SEED_VOCAB = "_^pqabc$"  # seed 004's vocabulary, to show the seed-flow sequences as text


def _short(outcome: dict) -> Text | str:
    """An outcome in one line: the exception type and its first sentence, without terminal colour codes (a call
    that returned is said by `describe_outcome`)."""
    if not raised(outcome):
        return describe_outcome(outcome)
    message = re.sub(r"\x1b\[[0-9;]*m", "", outcome["raised"]["message"]).strip()
    # the first sentence, whole: "failed reading zip archive: failed finding central directory" is one sentence,
    # and cutting it at its colon would leave the message hanging on it
    first = re.split(r"(?<=\.)\s", message, maxsplit=1)[0]
    first = (first if len(first) <= 160 else first[:159] + "…").rstrip(" :")
    if not first:
        return t("raised {error}", error=raised(outcome))
    return t("raised {error}: {message}", error=raised(outcome), message=first)


# --- save / load ----------------------------------------------------------------------------------

@criterion("reload_identical_logits", kind="determinism",
           title=t("A reloaded model gives bitwise-identical logits"),
           hint=t("Save model.state_dict() and restore it with model.load_state_dict(...) on the model passed to "
                  "load_checkpoint (strict, every key); do not rebuild, re-initialise or round the weights."))
def test_reload_identical_logits(obs, verdict):
    p = obs.probe("reload")
    saved, loaded, before = p.tensor("logits_saved"), p.tensor("logits_loaded"), p.tensor("logits_before_load")
    if torch.equal(loaded, saved):
        verdict.ok(t("a freshly built model (other initial weights) gives exactly the saved model's logits after "
                     "load_checkpoint"))
        return
    if torch.equal(loaded, before):
        verdict.fail(t("after load_checkpoint the freshly built model still gives its own initial logits, not the "
                       "saved model's: the stored weights never reached `model`"))
    verdict.fail(t("after load_checkpoint the logits differ from the saved model's: {problem}; expected bitwise "
                   "equality",
                   problem=difference(loaded, saved, atol=EXACT)))


@criterion("returns_step_and_meta", kind="api",
           title=t("load_checkpoint returns {{\"step\": ..., \"meta\": {{...}}}} as saved"),
           hint=t("Store step as an int and the **meta keyword arguments as a dict, and return {{\"step\": state[...], "
                  "\"meta\": state[...]}} from load_checkpoint."))
def test_returns_step_and_meta(obs, ref, verdict):
    info = obs.probe("reload").value("info")
    want = ref.probe("reload")
    step, meta = want.value("expected_step"), want.value("expected_meta")
    verdict.note(returned=info)
    if info.get("type") != "dict":
        verdict.fail(t("load_checkpoint returned a {kind}; expected a dict {{'step': {step}, 'meta': {{...}}}}",
                       kind=info.get("type"), step=step))
    missing = [k for k in ("step", "meta") if k not in info["keys"]]
    if missing:
        verdict.fail(t("load_checkpoint returned a dict with keys {keys}; it lacks {missing}", keys=info["keys"],
                       missing=missing))
    if info["step_type"] != "int" or info["step"] != step:
        verdict.fail(t("save_checkpoint(..., step={step}, ...) then load_checkpoint returned step={got} (a {kind}); "
                       "expected the int {step}", step=step, got=repr(info["step"]), kind=info["step_type"]))
    got = info["meta"]
    if not isinstance(got, dict):
        verdict.fail(t("load_checkpoint returned meta as a {kind}; expected the dict of keyword arguments given to "
                       "save_checkpoint", kind=info["meta_type"]))
    if got != meta:
        absent = sorted(set(meta) - set(got))
        extra = sorted(set(got) - set(meta))
        changed = [k for k in meta if k in got and got[k] != meta[k]]
        parts = ([t("missing {keys}", keys=absent)] if absent else []) \
            + ([t("unexpected {keys}", keys=extra)] if extra else []) \
            + [t("{key} is {got}, saved "
                 "{saved}", key=repr(k), got=repr(got[k]), saved=repr(meta[k])) for k in changed[:3]]
        differences = join(parts, t("; "))  # built apart: Babel misses a t(...) nested in another call's arguments
        verdict.fail(t("the returned meta is not what was saved: {differences}", differences=differences))
    kinds = info.get("meta_types")
    if kinds != want.value("expected_meta_types"):
        changed = [k for k in meta if isinstance(kinds, dict) and kinds.get(k) != want.value("expected_meta_types")[k]]
        verdict.fail(t("the returned meta holds the saved values in other containers ({keys}): a tuple must come "
                       "back a tuple, a list a list", keys=changed[:3]))
    p = obs.probe("reload")
    for key in ("save_step0", "load_step0"):
        if raised(p.value(key)):
            verdict.fail(t("save_checkpoint(..., step=0) then load_checkpoint: {call} {outcome}; step 0 (an untrained "
                           "run) is a step like any other", call=verbatim(key.split("_")[0]),
                           outcome=describe_outcome(p.value(key))))
    zero = p.value("info_step0")
    if zero.get("step") != 0 or zero.get("step_type") != "int":
        verdict.fail(t("save_checkpoint(..., step=0) then load_checkpoint returned step={got}; expected the int 0",
                       got=repr(zero.get("step"))))
    verdict.ok(t("load_checkpoint returned step={step} and the saved meta ({count} keys, nested values and tuples "
                 "included); step 0 comes back as 0", step=step, count=len(meta)))


@criterion("file_weights_only", kind="api",
           title=t("The checkpoint file loads with torch.load(weights_only=True)"),
           hint=t("Save a dict of state_dicts, tensors and plain values (int, str, float, bool, None, list, dict): "
                  "model.state_dict(), optimizer.state_dict(), torch.get_rng_state(), never the model or optimizer "
                  "object itself, nor instances of your own classes."))
def test_file_weights_only(obs, verdict):
    p = obs.probe("saved_file")
    outcome = p.value("weights_only_load")
    if raised(outcome):
        refused = p.value("refused_global") if p.has("refused_global") else None
        if refused:
            verdict.fail(t("torch.load(path, weights_only=True) refused the file save_checkpoint wrote: it holds a "
                           "pickled `{name}` object ({qualified}), and weights_only accepts only tensors, state dicts "
                           "and plain values", name=refused.rsplit(".", 1)[-1], qualified=refused))
        verdict.fail(t("torch.load(path, weights_only=True) on the file save_checkpoint wrote {outcome}; a checkpoint "
                       "must hold only tensors and plain values", outcome=_short(outcome)))
    keys = p.value("keys")
    verdict.check(keys is not None, t("torch.load(path, weights_only=True) gives a {kind}; expected a dict holding the "
                                      "model, optimizer and RNG state, step and meta", kind=outcome.get("returned")))
    verdict.ok(t("torch.load(weights_only=True) reads the checkpoint: a dict with keys {keys}", keys=keys), keys=keys)


@criterion("load_refuses_pickled_code", kind="api",
           title=t("load_checkpoint never runs code stored in the file"),
           hint=t("Read the file with torch.load(path, map_location=\"cpu\", weights_only=True) and nothing else: no "
                  "weights_only=False, no fallback to it when the safe load fails."))
def test_load_refuses_pickled_code(obs, verdict):
    p = obs.probe("pickled_code")
    if not p.value("planted"):
        verdict.fail(t("your checkpoint file holds a {kind}, not a dict, so the grader could not test the loader with "
                       "it; save a dict", kind=p.value("checkpoint_type")))
    outcome = p.value("load_planted")
    if p.value("canary_ran"):
        verdict.fail(t("load_checkpoint executed code stored in the file: the grader added one pickled object to a "
                       "copy of your own checkpoint, and loading that copy ran the function the object names (then "
                       "load_checkpoint {outcome}); a loader that unpickles arbitrary objects lets any downloaded "
                       "checkpoint run code on your machine", outcome=describe_outcome(outcome)))
    clean = p.value("load_clean")
    if raised(clean):
        verdict.fail(t("load_checkpoint on the checkpoint exactly as save_checkpoint wrote it {outcome}: a loader that "
                       "refuses every file also refuses the planted one, which proves nothing; the clean file must "
                       "load",
                       outcome=describe_outcome(clean)))
    if not p.value("clean_restored"):
        verdict.fail(t("load_checkpoint on the checkpoint exactly as save_checkpoint wrote it returned, but the model "
                       "does not hold the saved weights afterwards: a loader that loads nothing runs no stored code "
                       "either, which proves nothing"))
    if raised(outcome):
        verdict.ok(t("a copy of the checkpoint carrying a pickled function call was loaded without running it "
                     "(load_checkpoint raised {error}), and the clean checkpoint loads", error=raised(outcome)))
    else:
        verdict.ok(t("a copy of the checkpoint carrying a pickled function call was loaded without running it "
                     "(load_checkpoint ignored it), and the clean checkpoint loads"))


@criterion("expect_mismatch_raises", kind="errors",
           title=t("ValueError when `expect` disagrees with the stored meta"),
           hint=t("Before restoring anything, compare every key of `expect` with the stored meta and raise ValueError "
                  "naming the key and both values; a matching `expect` must load normally."))
def test_expect_mismatch_raises(obs, ref, verdict):
    p = obs.probe("expect")
    expects = ref.probe("expect").value("expects")
    stored = ref.probe("expect").value("stored_meta")
    verdict.note(stored_meta=stored, absent_key=p.value("absent_key"))
    matching = p.value("matching")
    if raised(matching):
        verdict.fail(t("load_checkpoint(..., expect={expect}) with every key equal to the stored meta {outcome}; a "
                       "matching `expect` must load", expect=expects["matching"], outcome=describe_outcome(matching)))
    for key in ("wrong_vocab", "wrong_second_key"):
        outcome = p.value(key)
        if raised(outcome) != "ValueError":
            verdict.fail(t("load_checkpoint(..., expect={expect}) against the stored meta {stored} {outcome}; expected "
                           "ValueError", expect=expects[key], stored=stored, outcome=describe_outcome(outcome)))
    verdict.ok(t("ValueError for a differing vocab and for a differing second key; a matching `expect` loads"))


@criterion("atomic_save", kind="errors",
           title=t("A save that fails halfway leaves the previous checkpoint intact"),
           hint=t("torch.save to a temporary file in the same folder as `path`, flush and os.fsync it, then os.replace "
                  "it onto `path`; if anything raises, delete the temporary file and re-raise. Never write `path` "
                  "directly."))
def test_atomic_save(obs, verdict):
    p = obs.probe("atomic_save")
    for key, when in (("after_first", t("after the first save_checkpoint")),
                      ("after_second", t("after a second save_checkpoint onto the same path"))):
        listed = p.value(key)
        if listed != ["run.pt"]:
            verdict.fail(t("{when} the folder holds {listed}; expected only ['run.pt']: a temporary file was left "
                           "behind or the checkpoint was written under another name", when=when, listed=listed))
    failed = p.value("failed_save")
    after = p.value("info_after_failure") or {}
    verdict.note(failed_save=failed, listing_after_failure=p.value("after_failed"))
    if p.value("digest_after_failed_save") != p.value("digest_before_failed_save"):
        if not raised(failed) and after and after.get("step") == 3:
            verdict.fail(t("save_checkpoint succeeded with a model and an optimizer whose state_dict() cannot be "
                           "written completely (the file now holds step 3), so the grader could not make it fail "
                           "halfway: save model.state_dict() and optimizer.state_dict() as they are"))
        if raised(p.value("load_after_failure")):
            verdict.fail(t("a save that failed halfway (torch.save raised OSError while writing the model's state) "
                           "changed the previous checkpoint at `path`: its bytes are no longer those of the step-2 "
                           "checkpoint, and loading it now {outcome}", outcome=_short(p.value("load_after_failure"))))
        verdict.fail(t("a save that failed halfway (torch.save raised OSError while writing the model's state) changed "
                       "the previous checkpoint at `path`: its bytes are no longer those of the step-2 checkpoint"))
    listed = p.value("after_failed")
    if listed != ["run.pt"]:
        verdict.fail(t("after a save that failed halfway the folder holds {listed}; expected only ['run.pt']: delete "
                       "the temporary file when the save fails", listed=listed))
    loaded = p.value("load_after_failure")
    if raised(loaded):
        verdict.fail(t("after a failed save, load_checkpoint on the intact previous file "
                       "{outcome}", outcome=_short(loaded)))
    verdict.check(after.get("step") == 2, t("after a failed save, load_checkpoint returned step={step}; expected 2, "
                                            "the step of the previous checkpoint", step=repr(after.get("step"))))
    if raised(failed):
        verdict.ok(t("a save that failed halfway left the previous checkpoint byte for byte and still loadable (step "
                     "2), with no temporary file left behind"))
    else:
        verdict.ok(t("a save that failed halfway left the previous checkpoint byte for byte and still loadable (step "
                     "2), with no temporary file left behind (note: your save_checkpoint returned without raising; a "
                     "failed save should raise)"))


@criterion("resume_bitwise", kind="resume",
           title=t("Resume in a fresh process equals straight training, bit for bit (dropout on)"),
           hint=t("Weights alone do not resume training: save optimizer.state_dict() (AdamW's exp_avg, exp_avg_sq, "
                  "step) and torch.get_rng_state() (the dropout masks), and restore them with "
                  "optimizer.load_state_dict(...) and torch.set_rng_state(...) in load_checkpoint."))
def test_resume_bitwise(obs, verdict):
    first, fresh = obs.probe("resume_first_half"), obs.probe("resume_fresh_process")
    steps, half = first.value("steps"), first.value("saved_step")
    names = [k[len("straight."):] for k in first.tensor_names if k.startswith("straight.")]
    verdict.check(bool(names), t("probe `resume_first_half` recorded no parameters (internal: the grader expected "
                                 "them)"))
    differing = [n for n in names if not torch.equal(fresh.tensor("resumed." + n), first.tensor("straight." + n))]
    verdict.note(parameters=len(names), differing=differing[:10])
    if not differing:
        verdict.ok(t("{half} steps, save, load in a new process with other weights and another RNG state, {more} more "
                     "steps: all {count} parameter tensors equal the {steps}-step straight run bit for bit (dropout "
                     "0.1)",
                     half=half, more=steps - half, count=len(names), steps=steps))
        return
    summary = t("after {half} steps, save, load in a new process and {more} more steps, {differing} of {count} "
                "parameter tensors differ from the {steps}-step straight run (dropout 0.1)",
                half=half, more=steps - half, differing=len(differing), count=len(names), steps=steps)

    for n in names:
        if not torch.equal(fresh.tensor("loaded." + n), first.tensor("saved." + n)):
            verdict.fail(t("{summary}: right after load_checkpoint the model's `{name}` already differs from the saved "
                           "model ({problem}); the weights were not restored", summary=summary, name=n,
                           problem=difference(fresh.tensor("loaded." + n), first.tensor("saved." + n), atol=EXACT)))

    if fresh.value("optimizer_state_entries") == 0 or "exp_avg_after_load" not in fresh.tensor_names:
        verdict.fail(t("{summary}: the optimizer state was not restored. After load_checkpoint(path, model, optimizer) "
                       "AdamW holds no state (no exp_avg, exp_avg_sq or step), so the first resumed update acts like a "
                       "first step again", summary=summary))
    for key, label in (("exp_avg", t("first moments (exp_avg)")), ("exp_avg_sq", t("second moments (exp_avg_sq)")),
                       ("adam_step", t("step counters"))):
        problem = difference(fresh.tensor(key + "_after_load"), first.tensor(key + "_at_save"), atol=EXACT)
        if problem:
            verdict.fail(t("{summary}: the optimizer state was not restored as saved: AdamW's {moments} after loading "
                           "differ from those at save time "
                           "({problem})", summary=summary, moments=label, problem=problem))

    rng_after = fresh.tensor("rng_after_load")
    if not torch.equal(rng_after, first.tensor("rng_at_save")):
        if torch.equal(rng_after, fresh.tensor("rng_before_load")):
            verdict.fail(t("{summary}: the torch RNG state was not restored. After load_checkpoint the generator is "
                           "not where it was when the checkpoint was saved (load_checkpoint left the new process's "
                           "generator untouched), so the resumed steps draw other dropout masks than the straight run",
                           summary=summary))
        verdict.fail(t("{summary}: the torch RNG state was not restored. After load_checkpoint the generator is not "
                       "where it was when the checkpoint was saved, so the resumed steps draw other dropout masks than "
                       "the straight run", summary=summary))

    n = differing[0]
    problem = difference(fresh.tensor("resumed." + n), first.tensor("straight." + n), atol=EXACT)
    verdict.fail(t("{summary}, although weights, optimizer and RNG state were restored; first: `{name}`, {problem}",
                   summary=summary, name=n, problem=problem))


@criterion("rng_restored_on_every_load", kind="resume",
           title=t("load_checkpoint restores the RNG state with or without an optimizer"),
           hint=t("Call torch.set_rng_state(state['rng_state']) on every path of load_checkpoint, not inside the `if "
                  "optimizer is not None:` branch: resuming for evaluation or with a new optimizer still needs the "
                  "generator where it was saved."))
def test_rng_restored_on_every_load(obs, verdict):
    p = obs.probe("rng_every_load")
    saved = p.tensor("rng_at_save")
    calls = {"model_only": "load_checkpoint(path, model)", "with_optimizer": "load_checkpoint(path, model, optimizer)",
             "with_expect": "load_checkpoint(path, model, expect=...)"}
    restored = []
    for case, call in calls.items():
        outcome = p.value(case)
        if raised(outcome):
            verdict.fail(t("{call} on a checkpoint that save_checkpoint wrote {outcome}", call=call,
                           outcome=describe_outcome(outcome)))
        before, after = p.tensor(f"{case}.rng_before"), p.tensor(f"{case}.rng_after")
        verdict.check(not torch.equal(before, saved),
                      t("the RNG state before {call} already equals the saved one (internal: the grader moves it away "
                        "first)", call=call))
        if not torch.equal(after, saved):
            # built apart: Babel misses a t(...) nested in another call's arguments
            untouched = t(" (the call left the generator untouched)") if torch.equal(after, before) else verbatim("")
            comma, none = t(", "), t("none")
            earlier = join([verbatim(calls[c]) for c in restored], comma) if restored else none
            verdict.fail(t("after {call} the torch RNG state is not the one saved in the checkpoint{untouched}; "
                           "restored on: {restored}", call=call, untouched=untouched, restored=earlier))
        restored.append(case)
    verdict.ok(t("load_checkpoint restored the saved RNG state on all three paths: model only, with an optimizer, with "
                 "expect"))


# --- generate -------------------------------------------------------------------------------------

def _as_text(ids, vocab):
    if isinstance(ids, list) and all(isinstance(i, int) and 0 <= i < len(vocab) for i in ids):
        return '"' + "".join(vocab[i] for i in ids) + '"'
    return repr(ids)


def _call(entry: dict, vocab=None) -> Text:
    r = entry["request"]
    prompt = _as_text(r["prompt"], vocab) if vocab else r["prompt"]
    return t("generate(model, {prompt}, max_new_tokens={max_new_tokens}, eos_id={eos_id}) with block_size={block_size}",
             prompt=prompt, max_new_tokens=r["max_new_tokens"], eos_id=r["eos_id"], block_size=r["block_size"])


def _result(entry: dict, vocab=None) -> Text:
    if "raised" in entry:
        e = entry["raised"]
        error = f"{e['type']}: {e['message']}"[:300 - len("raised ")]  # the sentence stays within 300 characters
        if e.get("where"):
            return t("raised {error} at {where}", error=error, where=e["where"])
        return t("raised {error}", error=error)
    if "returned" in entry:
        return t("returned a {kind}, not a tuple (ids, reason)", kind=entry["returned"])
    ids = _as_text(entry["ids"], vocab) if vocab else entry["ids"]
    return t("returned ({ids}, {reason})", ids=ids, reason=repr(entry["reason"]))


def _check_runs(obs, ref, verdict, keys, vocab=None, explain=None):
    """Fail at the first run whose result differs from the reference's; `explain(got, want)` may name the mistake."""
    got, want = obs.probe("generate"), ref.probe("generate")
    for key in keys:
        g, w = got.value(key), want.value(key)
        if "raised" in g or "returned" in g or g["ids"] != w["ids"] or g["reason"] != w["reason"]:
            said = {"call": _call(w, vocab), "result": _result(g, vocab),
                    "ids": _as_text(w["ids"], vocab) if vocab else w["ids"], "reason": repr(w["reason"])}
            explanation = explain(g, w) if explain and "ids" in g else None
            if explanation is not None:
                verdict.fail(t("{call} {result}; expected ({ids}, {reason}): {explanation}", explanation=explanation,
                               **said))
            verdict.fail(t("{call} {result}; expected ({ids}, {reason})", **said))
    return got


@criterion("generate_stops_at_eos", kind="values",
           title=t("generate: seed 004's ^pa -> ^pab$ and ^qa -> ^qac$, stopping at EOS"),
           hint=t("Append the chosen token first, then, if it equals eos_id, return (ids, \"eos\"): the EOS token is "
                  "part of the output. Return the ids as a list of Python ints (int(...))."))
def test_generate_stops_at_eos(obs, ref, verdict):
    def explain(g, w):
        if g["ids"] == w["ids"][:-1]:
            return t("the EOS token was not appended before stopping")
        if isinstance(g["ids"], list) and g["ids"][: len(w["ids"])] == w["ids"]:
            return t("decoding went on after the EOS token was generated")
        if g["ids"] == w["ids"] and g["reason"] == "context_limit" and w["reason"] == "eos":
            return t("the EOS token filled the last free position; it still ends the sequence with reason 'eos'")
        return None

    got = _check_runs(obs, ref, verdict, ["seed:^pa", "seed:^qa", "seed:^p"], SEED_VOCAB, explain)
    _check_runs(obs, ref, verdict, ["eos_fills_block"], None, explain)
    entry = got.value("seed:^pa")
    if entry["ids_type"] != "list":
        verdict.fail(t("generate returned the ids as a {kind}; expected a list of Python ints", kind=entry["ids_type"]))
    if entry["element_types"] != ["int"]:
        verdict.fail(t("generate returned a list whose elements are {kinds}; expected Python ints only (convert with "
                       "int(...) or .item())", kinds=", ".join(entry["element_types"])))
    verdict.ok(t('"^pa" -> ("^pab$", "eos"), "^qa" -> ("^qac$", "eos"), "^p" -> ("^pab$", "eos"); an EOS filling the '
                 "last free position is appended with reason 'eos'"))


@criterion("generate_max_new_tokens", kind="values",
           title=t("generate stops after max_new_tokens new tokens"),
           hint=t("Loop at most max_new_tokens times (zero means no new token) and return (prompt + new tokens, "
                  "\"max_new_tokens\") when the budget is spent; eos_id may be None."))
def test_generate_max_new_tokens(obs, ref, verdict):
    _check_runs(obs, ref, verdict, ["budget", "budget_no_eos_id", "budget_zero"])
    verdict.ok(t("3, 4 and 0 new tokens without EOS give exactly that many new tokens and reason 'max_new_tokens'"))


@criterion("generate_context_limit", kind="values",
           title=t("generate stops at block_size with \"context_limit\", checked before each new token"),
           hint=t("At the top of each iteration, before calling the model: if len(ids) >= model.config.block_size, "
                  "return (ids, \"context_limit\"). Never crop the prompt, and never call the model on more than "
                  "block_size tokens."))
def test_generate_context_limit(obs, ref, verdict):
    def explain(g, w):
        lengths = [c["length"] for c in g["calls"]]
        block = w["request"]["block_size"]
        if isinstance(g["ids"], list) and len(g["ids"]) > block:
            return t("the sequence grew past block_size={block}: the limit must be checked before each new token",
                     block=block)
        if not w["calls"] and lengths:
            return t("the prompt already holds block_size={block} tokens, yet the model was called {calls} time(s)",
                     block=block, calls=len(lengths))
        return None

    _check_runs(obs, ref, verdict, ["fills_block", "prompt_at_block"], None, explain)
    verdict.ok(t("a short prompt is extended to exactly block_size tokens, and a prompt already at block_size is "
                 "returned unchanged, both with reason 'context_limit'"))


@criterion("generate_last_position", kind="values",
           title=t("generate is greedy on the LAST position's logits"),
           hint=t("logits has shape [1, T, V]; the next token is int(logits[0, -1].argmax()). Position 0 (or the "
                  "argmax of the flattened [T, V] table) predicts the token after the first token, not after the "
                  "last."))
def test_generate_last_position(obs, ref, verdict):
    def explain(g, w):
        return t("each position of this model prefers another token (position 0 the most strongly); only the last "
                 "position's choice is the next token")

    _check_runs(obs, ref, verdict, ["last_position"], None, explain)
    verdict.ok(t("with every position preferring another token, generate follows the last position's argmax"))


@criterion("generate_eval_mode", kind="determinism",
           title=t("generate runs the model in eval() mode"),
           hint=t("Call model.eval() at the start of generate (and run under torch.no_grad()): in train() mode dropout "
                  "makes the greedy continuation random."))
def test_generate_eval_mode(obs, verdict):
    entry = obs.probe("generate").value("train_mode")
    if "raised" in entry or "returned" in entry:
        verdict.fail(t("{call} on a model handed over in train() mode {result}", call=_call(entry),
                       result=_result(entry)))
    calls = entry["calls"]
    training = sum(1 for c in calls if c["training"])
    verdict.note(calls=calls)
    verdict.check(bool(calls), t("generate never called the model, so its mode could not be observed"))
    verdict.check(training == 0, t("a model handed to generate in train() mode was still in training mode in "
                                   "{training} of {calls} forward calls: dropout stays active during generation",
                                   training=training, calls=len(calls)))
    verdict.ok(t("a model handed over in train() mode ran all {calls} forward calls in eval() mode", calls=len(calls)))
