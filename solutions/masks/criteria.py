"""Hidden criteria of exercise `masks`: causal_mask, padding_mask, combine_masks, masked_softmax."""

import torch

from grader.i18n import Text, join, t, verbatim
from grader.judge.compare import difference, unravel
from grader.judge.criterion import criterion
from grader.judge.evidence import attention_map

EXERCISE = "masks"
SUM_TOLERANCE = 1e-5       # float32 sums of at most 7 probabilities
VALUE_TOLERANCE = 1e-6     # float32 softmax of the same scores; only the order of operations may differ
LEAK_TOLERANCE = 1e-12     # float64: a masked score that changes the result by more than rounding is a leak
ZERO_GRADIENT = 1e-12      # float64: a masked score cannot influence the output, so its gradient is 0
GRAD_TOLERANCE = 1e-5      # float64 scores, but a softmax computed in float32 inside (legal) rounds the gradient's
                           #   terms (size <= 3) by ~1e-7; a softmax backward without its -p*sum(p*g) term errs by ~0.1


# --- reading what a call returned -------------------------------------------------------------------
def _returned_tensor(verdict, p, key: str, call: str) -> dict:
    """The recorded info of a call that must have returned a tensor; fails with what happened otherwise."""
    info = p.value(key)
    if "raised" in info:
        r = info["raised"]
        at = t(" at {where}", where=r["where"]) if r.get("where") else verbatim("")
        verdict.fail(t("{call} raised {error}{at}", call=call, error=verbatim(f"{r['type']}: {r['message'][:200]}"),
                       at=at))
    if "shape" not in info:
        verdict.fail(t("{call} returned a {kind}; expected a torch.Tensor", call=call, kind=info["returned"]))
    # shape and dtype of the data the probe stored, not what the returned object said of itself
    stored = p.tensor(key)
    return {**info, "shape": list(stored.shape), "dtype": str(stored.dtype).replace("torch.", "")}


def _bool_grid(m: torch.Tensor) -> str:
    return "[" + ", ".join("".join("1" if x else "0" for x in row) for row in m.tolist()) + "]"


# How a location names each axis of the scores [B, H, Tq, Tk].
AXIS_LABELS = {
    "batch": lambda i: t("batch {i}", i=i),
    "head": lambda i: t("head {i}", i=i),
    "query": lambda i: t("query {i}", i=i),
    "key": lambda i: t("key {i}", i=i),
}


def _at(index, names) -> Text:
    """`(1, 0, 3, 2)` -> 'batch 1, head 0, query 3, key 2'."""
    return join((AXIS_LABELS[n](i) for n, i in zip(names, index, strict=False)), t(", "))


def _first(condition: torch.Tensor) -> tuple[int, ...]:
    return tuple(int(i) for i in torch.nonzero(condition)[0])


# --- causal_mask ----------------------------------------------------------------------------------------
@criterion("causal_mask_shape", kind="shape",
           title=t("causal_mask(T) is a bool [T, T] tensor on the requested device"),
           hint=t("Build it from a bool tensor, e.g. torch.ones(T, T, dtype=torch.bool, device=device).tril(); an "
                  "additive float mask (0 / -inf) is a different convention and does not belong here."))
def test_causal_mask_shape(obs, verdict):
    p = obs.probe("causal")
    for T in (1, 4, 7):
        call = f"causal_mask({T})"
        info = _returned_tensor(verdict, p, f"T{T}", call)
        if info["shape"] != [T, T]:
            verdict.fail(t("{call} has shape {shape}; expected {want} (row = query, column = key)",
                           call=call, shape=info["shape"], want=[T, T]))
        if info["dtype"] != "bool":
            verdict.fail(t("{call} has dtype {dtype}; expected bool (True = may attend). A float mask mixes two "
                           "conventions: additive masks (0 / -inf) are added to scores, bool masks select them",
                           call=call, dtype=info["dtype"]))
    for key, call in (("device_str", 'causal_mask(5, device="cpu")'), ("device_obj", 'causal_mask(5, '
                                                                                     'device=torch.device("cpu"))')):
        info = _returned_tensor(verdict, p, key, call)
        if info["device"] != "cpu":
            verdict.fail(t("{call} is on {device}; expected cpu", call=call, device=info["device"]))
    meta, call = p.value("device_meta"), 'causal_mask(5, device="meta")'
    if "raised" in meta:
        verdict.fail(t("{call} raised {error}; the mask must be built on the device it is given (the meta device "
                       "holds no data, so nothing needs to be computed on the CPU)", call=call,
                       error=verbatim(f"{meta['raised']['type']}: {meta['raised']['message'][:200]}")))
    if meta.get("device") != "meta" or meta.get("shape") != [5, 5] or meta.get("dtype") != "bool":
        verdict.fail(t("{call} gave {what}; expected a bool [5, 5] tensor on the meta device: the device argument is "
                       "not used", call=call,
                       what=verbatim(f"{meta.get('dtype')} {meta.get('shape')} on {meta.get('device')}"
                                     if "device" in meta else meta.get("returned", "?"))))
    verdict.ok(t("causal_mask(T) is a bool [T, T] tensor for T = 1, 4, 7, and is built on the device it is given "
                 "(a string or a torch.device; the meta device too)"))


@criterion("causal_mask_direction", kind="causality", requires=("causal_mask_shape",),
           title=t("causal_mask is True on and below the diagonal"),
           hint=t("Row i is query i, column j is key j; query i may read keys j <= i, itself included: tril, not triu, "
                  "and not tril(diagonal=-1). True means 'may attend', never 'blocked'."))
def test_causal_mask_direction(obs, verdict):
    p = obs.probe("causal")
    for T in (7, 4, 1):
        got = p.tensor(f"T{T}")
        want = torch.ones(T, T, dtype=torch.bool).tril()
        if torch.equal(got, want):
            continue
        wrong = torch.nonzero(got != want)[0].tolist()
        i, j = wrong
        known = [
            (t("the upper triangle (triu): the mask is transposed, every query may read the future"),
             torch.ones(T, T, dtype=torch.bool).triu()),
            (t("the strict upper triangle (triu(1)): True marks the blocked future, the opposite of 'may attend'"),
             torch.ones(T, T, dtype=torch.bool).triu(1)),
            (t("the strict lower triangle (tril(-1)): the diagonal is missing, so no position may read itself and "
               "query 0 reads nothing"), torch.ones(T, T, dtype=torch.bool).tril(-1)),
        ]
        why = next((t(" Your mask is {label}.", label=label) for label, m in known if torch.equal(got, m)),
                   verbatim(""))
        access = (t("query {i} may read key {j}", i=i, j=j) if want[i, j] else
                  t("query {i} must not read key {j}", i=i, j=j))
        verdict.note(got=_bool_grid(got), expected=_bool_grid(want))
        verdict.note(attention_map=attention_map(got, want))
        verdict.fail(t("causal_mask({T})[{i}, {j}] is {got}; expected {want} ({access}).{why}", T=T, i=i, j=j,
                       got=bool(got[i, j]), want=bool(want[i, j]), access=access, why=why))
    verdict.ok(t("causal_mask(T) equals tril for T = 1, 4, 7: every query reads itself and the past, never the future"))


# --- padding_mask ---------------------------------------------------------------------------------------
@criterion("padding_mask_shape", kind="shape",
           title=t("padding_mask(ids, pad_id) is a bool [B, 1, 1, T] tensor"),
           hint=t("Padding hides keys, the last axis of the scores [B, H, Tq, Tk]: (ids != pad_id)[:, None, None, :]. "
                  "[B, 1, T, 1] would hide queries instead."))
def test_padding_mask_shape(obs, verdict):
    p = obs.probe("padding")
    for key, call, B, T in (("right", "padding_mask(ids [3, 6], pad_id=0)", 3, 6), ("pad3", "padding_mask(ids [3, 5], "
                                                                                            "pad_id=3)", 3, 5)):
        info = _returned_tensor(verdict, p, key, call)
        if info["shape"] != [B, 1, 1, T]:
            why = {str([B, 1, T, 1]): t(": the padding sits on the query axis; it must hide keys, the last axis"),
                   str([B, T]): t(": the two singleton axes (heads, queries) are missing, so it cannot broadcast "
                                  "against [B, H, T, T]"),
                   str([B, 1, T]): t(": one singleton axis is missing; against [B, H, T, T] it would line up B with H"),
                   }.get(str(info["shape"]), verbatim(""))
            verdict.fail(t("{call} has shape {shape}; expected {want} = [B, 1, 1, T]{why}", call=call,
                           shape=info["shape"], want=[B, 1, 1, T], why=why))
        if info["dtype"] != "bool":
            verdict.fail(t("{call} has dtype {dtype}; expected bool (True = a real token that may be attended to)",
                           call=call, dtype=info["dtype"]))
    verdict.ok(t("padding_mask gives a bool [B, 1, 1, T] tensor"))


@criterion("padding_mask_values", kind="values", requires=("padding_mask_shape",),
           title=t("padding_mask is True exactly where ids != pad_id"),
           hint=t("Compare with the pad_id argument (not a hard-coded 0): ids != pad_id. True marks a real token (may "
                  "attend), False marks padding."))
def test_padding_mask_values(obs, verdict):
    p = obs.probe("padding")
    for key, pad in (("right", 0), ("pad3", 3)):
        ids = p.tensor(f"{key}.ids")
        got = p.tensor(key)[:, 0, 0, :]
        want = ids != pad
        if torch.equal(got, want):
            continue
        b, position = _first(got != want)
        if torch.equal(got, ~want):
            why = t(" Your mask is True on padding: it is reversed (True must mean a real token).")
        elif torch.equal(got, ids != 0):
            why = t(" Your mask treats id 0 as padding; it must use the pad_id argument.")
        else:
            why = verbatim("")
        verdict.note(ids=ids.tolist(), pad_id=pad, got=got.int().tolist(), expected=want.int().tolist())
        verdict.note(attention_map=attention_map(got, want))
        verdict.fail(t("with pad_id={pad}, the mask at batch {b}, position {position} (id {id}) is {got}; "
                       "expected {want}.{why}", pad=pad, b=b, position=position, id=int(ids[b, position]),
                       got=bool(got[b, position]), want=bool(want[b, position]), why=why))
    verdict.ok(t("padding_mask is True exactly at real tokens, with pad_id 0 and with pad_id 3 (where id 0 is a real "
                 "token)"))


# --- combine_masks --------------------------------------------------------------------------------------
@criterion("combine_masks_shape", kind="shape",
           title=t("combine_masks gives a bool [B, 1, T, T] mask, not one copy per head"),
           hint=t("causal [T, T] & padding [B, 1, 1, T] broadcasts to [B, 1, T, T] by itself; keep the head axis 1 (no "
                  "expand or repeat to H heads) so that it broadcasts against [B, H, T, T] scores."))
def test_combine_masks_shape(obs, verdict):
    p = obs.probe("combine")
    for key, B, T in (("B3_T6", 3, 6), ("B1_T4", 1, 4)):
        call = f"combine_masks(causal [{T}, {T}], padding [{B}, 1, 1, {T}])"
        info = _returned_tensor(verdict, p, key, call)
        shape = info["shape"]
        if shape != [B, 1, T, T]:
            if len(shape) == 4 and shape[0] == B and shape[2:] == [T, T] and shape[1] > 1:
                why = t(": {copies} copies of the same mask, one per head. Keep the head axis 1; broadcasting reaches "
                        "every head without building [B, H, T, T]", copies=shape[1])
            elif shape == [B, T, T]:
                why = t(": the head axis is missing, so against [B, H, T, T] scores B would line up with H")
            else:
                why = verbatim("")
            verdict.fail(t("{call} has shape {shape}; expected {want} = [B, 1, T, T]{why}", call=call, shape=shape,
                           want=[B, 1, T, T], why=why))
        if info["dtype"] != "bool":
            verdict.fail(t("{call} has dtype {dtype}; expected bool (combine with &, not * or +)", call=call,
                           dtype=info["dtype"]))
    verdict.ok(t("combine_masks gives a bool [B, 1, T, T] mask, shared by every head"))


@criterion("combine_masks_values", kind="values", requires=("combine_masks_shape",),
           title=t("combine_masks is the logical and: causal and not padding"),
           hint=t("A key may be read only if both masks allow it: causal & padding (or torch.logical_and). | would let "
                  "queries read the future or the padding."))
def test_combine_masks_values(obs, verdict):
    p = obs.probe("combine")
    for key in ("B3_T6", "B1_T4"):
        causal, padding, got = p.tensor(f"{key}.causal"), p.tensor(f"{key}.padding"), p.tensor(key)
        want = causal & padding
        if torch.equal(got, want):
            continue
        verdict.note(attention_map=attention_map(got, want))
        b, _, i, j = _first(got != want)
        if torch.equal(got, causal | padding):
            why = t(" Your mask is causal | padding, the logical or: a key needs both masks to allow it.")
        elif torch.equal(got, causal & padding.transpose(-1, -2)):
            why = t(" Your mask hides padded queries instead of padded keys: the padding belongs on the last axis.")
        else:
            why = verbatim("")
        reason = (t("a future key") if j > i else
                  t("a padding key") if not bool(padding[b, 0, 0, j]) else t("a visible key"))
        verdict.fail(t("the combined mask at batch {b}, query {i}, key {j} ({reason}) is {got}; expected {want}.{why}",
                       b=b, i=i, j=j, reason=reason, got=bool(got[b, 0, i, j]), want=bool(want[b, 0, i, j]), why=why))
    verdict.ok(t("combine_masks equals causal & padding, with right and left padding"))


# --- the four together ------------------------------------------------------------------------------------
@criterion("combined_no_leak", kind="causality",
           title=t("Causal + padding, end to end: no weight on future or padded keys, and they cannot change anything"),
           hint=t("With your own functions: masked_softmax(scores, combine_masks(causal_mask(T), padding_mask(ids, "
                  "pad))) must give 0 to future and padded keys, keep every visible key, and not change when the "
                  "masked scores change. Mask before the softmax (masked_fill with -inf), not by multiplying "
                  "afterwards."))
def test_combined_no_leak(obs, ref, verdict):
    p = obs.probe("no_leak")
    ids, allowed = p.tensor("ids"), p.tensor("allowed")
    probs, changed = p.tensor("p"), p.tensor("p_changed")
    names = ("batch", "head", "query", "key")
    verdict.note(ids=ids.tolist())
    verdict.note(attention_map=attention_map(probs, ref.probe("no_leak").tensor("p")))
    if list(probs.shape) != list(allowed.shape):
        verdict.fail(t("masked_softmax(scores {scores}, your combined mask) has shape {shape}; expected {scores}",
                       scores=list(allowed.shape), shape=list(probs.shape)))
    bad = ~torch.isfinite(probs)
    if bad.any():
        verdict.fail(t("the result holds {count} NaN or inf values, the first at {location}", count=int(bad.sum()),
                       location=_at(_first(bad), names)))
    leaked = (probs != 0) & ~allowed
    if leaked.any():
        b, h, i, j = _first(leaked)
        what = t("a future key") if j > i else t("a padding key (ids[{b}, {j}] is the pad id)", b=b, j=j)
        mask = p.tensor("mask")
        culprit = verbatim("")
        try:
            mask_allows = bool(torch.broadcast_to(mask, allowed.shape)[b, h, i, j])
            culprit = (t(" Your combined mask allows it: check causal_mask, padding_mask and combine_masks.")
                       if mask_allows else t(" Your combined mask forbids it, so masked_softmax lets it through."))
        except RuntimeError:
            pass
        verdict.fail(t("{count} weights on future or padding keys are not 0, e.g. {weight:.4g} at {location}: "
                       "{what}.{culprit}", count=int(leaked.sum()), weight=float(probs[b, h, i, j]),
                       location=_at((b, h, i, j), names), what=what, culprit=culprit))
    sums = probs.double().sum(-1)                              # over the keys: a softmax sums to 1 on every row
    if not float((sums - 1).abs().max()) <= SUM_TOLERANCE:      # NaN fails too (every query sees itself)
        i = unravel(torch.argmax((sums - 1).abs()), sums.shape)
        verdict.fail(t("the weights of {location} sum to {total:.6g} over its visible keys; expected 1: masked_softmax "
                       "must normalise what the mask allows, or zeros on the masked keys show nothing",
                       location=_at(i, names[:3]), total=float(sums[i])))
    missing = (probs == 0) & allowed
    if missing.any():
        b, h, i, j = _first(missing)
        verdict.fail(t("{location} gets weight 0 although that key is visible (a real token at or before the query); "
                       "{count} visible keys are hidden in all", location=_at((b, h, i, j), names),
                       count=int(missing.sum())))
    problem = difference(changed, probs, atol=LEAK_TOLERANCE)
    if problem:
        verdict.fail(t("overwriting the scores of future and padding keys (which all got weight 0) changed the result "
                       "('got' after, 'expected' before): {problem}. They still sit in the softmax's normalisation: "
                       "mask before the softmax, do not multiply after it", problem=problem))
    verdict.ok(t("future and padding keys get weight exactly 0, every visible key is kept, and overwriting the masked "
                 "scores changes nothing"))


# --- masked_softmax -------------------------------------------------------------------------------------
@criterion("masked_softmax_normalised", kind="values",
           title=t("masked_softmax: masked entries exactly 0, rows sum to 1, values right (also with a broadcast "
                   "mask)"),
           hint=t("scores.masked_fill(~mask, float('-inf')).softmax(dim): masked_fill broadcasts the mask. Multiplying "
                  "the softmax by the mask afterwards leaves rows that sum to less than 1."))
def test_masked_softmax_normalised(obs, ref, verdict):
    p, r = obs.probe("softmax_values"), ref.probe("softmax_values")
    shapes = p.value("mask_shapes")
    for key in ("full", "query_key", "batch_key"):
        call = f"masked_softmax(scores [2, 3, 5, 7], mask {shapes[key]})"
        info = _returned_tensor(verdict, p, key, call)
        if info["shape"] != [2, 3, 5, 7]:
            verdict.fail(t("{call} has shape {shape}; expected [2, 3, 5, 7], the shape of the scores", call=call,
                           shape=info["shape"]))
        got, mask = p.tensor(key).double(), p.tensor(f"{key}.mask")
        verdict.note(attention_map=attention_map(got, r.tensor(key)))
        leaked = (got != 0) & ~mask
        if leaked.any():
            i = _first(leaked)
            verdict.fail(t("{call}: {count} masked entries are not 0, e.g. {value:.4g} at index {index}", call=call,
                           count=int(leaked.sum()), value=float(got[i]), index=i))
        error = (got.sum(-1) - 1).abs()
        if not float(error.max()) <= SUM_TOLERANCE:
            worst = torch.argmax(torch.nan_to_num(error, nan=float("inf")))
            i = unravel(worst, error.shape)
            why = (t(". The masked entries are 0 but still took their share: the mask was applied after the softmax")
                   if float(got.sum(-1).max()) <= 1 + SUM_TOLERANCE else verbatim(""))
            verdict.fail(t("{call}: the row at index {index} sums to {total:.6g}; expected 1 (tolerance {tolerance:g})"
                           "{why}", call=call, index=i, total=float(got[i].sum()), tolerance=SUM_TOLERANCE, why=why))
        problem = difference(got, r.tensor(key), atol=VALUE_TOLERANCE)
        if problem:
            verdict.fail(t("{call} differs from the softmax over the allowed entries: {problem}", call=call,
                           problem=problem))
    verdict.ok(t("masked entries are exactly 0 and every row equals the softmax over its allowed entries, with masks "
                 "[2, 3, 5, 7], [5, 7] and [2, 1, 1, 7]"))


@criterion("masked_softmax_large_scores", kind="values", requires=("masked_softmax_normalised",),
           title=t("masked_softmax: masked entries stay exactly 0 when the scores are large (spread ~1e5, or all near "
                   "-1e5)"),
           hint=t("Fill with float('-inf') before the softmax: a finite fill or an added -1e4 only hides entries whose "
                  "scores are within 1e4 of the others, and a filled entry outweighs every allowed one whose score is "
                  "below the fill, while exp(-inf) is 0 at any scale."))
def test_masked_softmax_large_scores(obs, ref, verdict):
    p, r = obs.probe("softmax_large"), ref.probe("softmax_large")
    level = r.value("negative_level")
    cases = (("large", "mask", "masked_softmax(scores [4, 4, 5, 7] of spread ~1e5, mask [4, 4, 5, 7])",
              t("a finite fill (such as -1e4) is outweighed by scores this large; fill with -inf")),
             ("negative", "negative.mask",
              f"masked_softmax(scores [4, 4, 5, 7] all near -{level:g}, mask [4, 4, 5, 7])",
              t("every allowed score of the line is below a finite fill (such as -1e4), so the filled entries took "
                "the line; fill with -inf")))
    count = 0
    for key, mask_key, call, cause in cases:
        info = _returned_tensor(verdict, p, key, call)
        mask = r.tensor(mask_key)
        if info["shape"] != list(mask.shape):
            verdict.fail(t("{call} has shape {shape}; expected [4, 4, 5, 7], the shape of the scores", call=call,
                           shape=info["shape"]))
        got = p.tensor(key).double()
        bad = ~torch.isfinite(got)
        if bad.any():
            verdict.fail(t("{call}: {count} NaN or inf values, the first at index {index}: exp of a large score "
                           "overflows unless the largest score of the line is subtracted first (softmax does that)",
                           call=call, count=int(bad.sum()), index=_first(bad)))
        leaked = (got != 0) & ~mask
        if leaked.any():
            i = _first(leaked)
            verdict.fail(t("{call}: {count} masked entries are not 0, e.g. {value:.4g} at index {index}: {cause}",
                           call=call, count=int(leaked.sum()), value=float(got[i]), index=i, cause=cause))
        error = (got.sum(-1) - 1).abs()
        if not float(error.max()) <= SUM_TOLERANCE:  # NaN fails too
            i = unravel(torch.argmax(error), error.shape)
            verdict.fail(t("{call}: the row at index {index} sums to {total:.6g}; expected 1 (tolerance {tolerance:g})",
                           call=call, index=i, total=float(got[i].sum()), tolerance=SUM_TOLERANCE))
        count += int((~mask).sum())
    verdict.ok(t("with scores of spread ~1e5, and with every score near -{level:g}, all {count} masked entries are "
                 "exactly 0 and every row sums to 1", level=level, count=count))


@criterion("masked_softmax_fully_masked", kind="values",
           title=t("masked_softmax: a fully masked row is all zeros, never NaN"),
           hint=t("A softmax over only -inf is 0/0 = NaN. Find empty lines with has_any = mask.any(dim=dim, "
                  "keepdim=True) (along the softmax's dim, not always -1), give them finite scores before the softmax "
                  "and zero them after."))
def test_masked_softmax_fully_masked(obs, ref, verdict):
    p = obs.probe("fully_masked")
    for key, dim, call in (("rows", -1, "masked_softmax(scores [2, 2, 4, 5], mask)"),
                           ("cols", -2, "masked_softmax(scores [3, 4, 5], mask, dim=-2)")):
        _returned_tensor(verdict, p, key, call)
        got, mask = p.tensor(key), p.tensor(f"{key}.mask")
        verdict.note(attention_map=attention_map(got, ref.probe("fully_masked").tensor(key)))
        if list(got.shape) != list(mask.shape):
            verdict.fail(t("{call} has shape {shape}; expected {want}", call=call, shape=list(got.shape),
                           want=list(mask.shape)))
        bad = ~torch.isfinite(got)
        if bad.any():
            verdict.fail(t("{call}: {count} NaN or inf values, the first at index {index}; the mask has lines along "
                           "dim={dim} with every entry masked, and a softmax over only -inf is 0/0 = NaN", call=call,
                           count=int(bad.sum()), index=_first(bad), dim=dim))
        empty = ~mask.any(dim, keepdim=True)
        # the positive control: the lines that do have allowed entries are a softmax (sum 1, masked entries 0), so
        # that zeros on the fully masked lines are the function's doing and not zeros everywhere
        sums = got.double().sum(dim, keepdim=True)
        off = ((sums - 1).abs() * ~empty).amax()
        if not float(off) <= SUM_TOLERANCE:
            verdict.fail(t("{call}: the lines along dim={dim} that have allowed entries sum to as far as {off:.3g} "
                           "from 1; zeros on the fully masked lines count only where the others are a "
                           "softmax", call=call,
                           dim=dim, off=float(off)))
        nonzero = (got != 0) & empty
        if nonzero.any():
            i = _first(nonzero)
            index = list(i)
            index[dim] = slice(None)
            line = got[tuple(index)]
            verdict.fail(t("{call}: the line through index {index} along dim={dim} is fully masked, yet it is {line}; "
                           "expected all zeros", call=call, index=i, dim=dim,
                           line=[round(float(x), 4) for x in line]))
    verdict.ok(t("fully masked lines are all zeros (along dim=-1 and dim=-2), and nothing is NaN"))


@criterion("masked_softmax_gradients", kind="gradient",
           title=t("masked_softmax: finite gradients, zero for masked scores"),
           hint=t("NaN in the forward pass poisons the backward pass, even when nan_to_num repairs the forward "
                  "afterwards, unless every score of that row went through masked_fill. Mask before the softmax and "
                  "keep the computation in autograd (no .detach(), .data or .item())."))
def test_masked_softmax_gradients(obs, ref, verdict):
    p = obs.probe("gradients")
    if "grad" in p.not_tensors:
        verdict.fail(t("after backward through masked_softmax the scores have no gradient: the result is detached from "
                       "them"))
    grad, mask = p.tensor("grad"), p.tensor("mask")
    verdict.note(attention_map=attention_map(grad, ref.probe("gradients").tensor("grad")))
    bad = ~torch.isfinite(grad)
    if bad.any():
        i = _first(bad)
        row = t("a fully masked row") if not bool(mask[i[:-1]].any()) else t("a row with allowed entries")
        verdict.fail(t("the gradient holds {count} NaN or inf values of {total}, the first at index {index} ({row})",
                       count=int(bad.sum()), total=grad.numel(), index=i, row=row))
    leak = grad.abs() * ~mask
    if float(leak.max()) > ZERO_GRADIENT:
        i = unravel(torch.argmax(leak), leak.shape)
        verdict.fail(t("the masked score at index {index} receives gradient {grad:.3g}; expected 0: a masked score "
                       "must not influence the result (it still sits in the softmax's normalisation)", index=i,
                       grad=float(grad[i])))
    problem = difference(grad, ref.probe("gradients").tensor("grad"), atol=GRAD_TOLERANCE)
    if problem:
        verdict.fail(t("the gradient with respect to the scores differs from the reference: "
                       "{problem}", problem=problem))
    verdict.ok(t("the gradient is finite, exactly 0 for masked scores (fully masked rows included), and matches the "
                 "reference"))


@criterion("masked_softmax_dim", kind="values",
           title=t("masked_softmax honours dim (dim=-2, dim=1, and a broadcast mask)"),
           hint=t("Pass dim to the softmax and to every reduction (mask.any(dim=dim, keepdim=True)); never hard-code "
                  "-1."))
def test_masked_softmax_dim(obs, ref, verdict):
    p, r = obs.probe("softmax_dim"), ref.probe("softmax_dim")
    for key, case in p.value("cases").items():
        call = f"masked_softmax(scores [2, 5, 4, 3], mask {case['mask']}, dim={case['dim']})"
        _returned_tensor(verdict, p, key, call)
        got, want = p.tensor(key), r.tensor(key)
        verdict.note(attention_map=attention_map(got, want))
        problem = difference(got, want, atol=VALUE_TOLERANCE)
        if problem:
            why = verbatim("")
            if list(got.shape) == list(want.shape):
                mask = p.tensor(f"{key}.mask")
                rows = mask.any(-1)                    # lines along the last axis with an allowed entry
                sums = got.double().sum(-1)
                if bool(((sums - 1).abs()[rows] <= SUM_TOLERANCE).all()):
                    why = t("; your result sums to 1 over the last axis instead: dim is not used")
            verdict.fail(t("{call} differs from the softmax along dim {dim}: "
                           "{problem}{why}", call=call, dim=case["dim"],
                           problem=problem, why=why))
    verdict.ok(t("masked_softmax normalises along the requested dim (-2, 1 and -4), also with a [4, 3] mask "
                 "against [2, 5, 4, 3] scores"))
