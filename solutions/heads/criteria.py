"""Hidden criteria of exercise `heads`: split_heads and merge_heads."""

import torch

from grader.i18n import Text, join, t, verbatim
from grader.judge.compare import describe_outcome, raised, unravel
from grader.judge.criterion import criterion
from grader.judge.verdicts import CriterionFailed

EXERCISE = "heads"
# Splitting and merging heads only moves numbers around: every comparison is exact (bitwise), no tolerance.
SPLIT_CASES = [(2, 5, 12, 3), (3, 4, 8, 4), (2, 6, 30, 6)]   # (B, T, C, H), as in the probes
MERGE_CASES = [(2, 3, 5, 4), (3, 4, 4, 2), (2, 6, 6, 5)]     # (B, H, T, D), as in the probes
NONCONTIGUOUS_CASE = (2, 3, 5, 4)


@criterion("split_shape", kind="shape",
           title=t("split_heads returns [B, H, T, C/H]"),
           hint=t("First cut the channels of each position into heads with reshape(B, T, H, C // H) (or view), then "
                  "move the head axis forward with transpose(1, 2). Return the tensor."))
def test_split_shape(obs, verdict):
    p = obs.probe("split")
    for i, (B, T, C, H) in enumerate(SPLIT_CASES):
        call = t("split_heads(x of shape {shape}, {heads})", shape=[B, T, C], heads=H)
        out = _output(p, verdict, i, call)
        want = [B, H, T, C // H]
        if list(out.shape) != want:
            why = verbatim("")
            if list(out.shape) == [B, T, H, C // H]:
                why = t(": that is [B, T, H, D], the head axis is still at position 2 (transpose(1, 2) is missing)")
            verdict.fail(t("{call} has shape {shape}; expected [B, H, T, C/H] = {want}{why}", call=call,
                           shape=list(out.shape), want=want, why=why))
    verdict.ok(t("split_heads gives [B, H, T, C/H] for H != T and for H == T"))


@criterion("split_values", kind="values", requires=("split_shape",),
           title=t("Head h at position t holds the channels h*D:(h+1)*D"),
           hint=t("reshape(B, T, H, D) first, transpose(1, 2) second. Reshaping straight to [B, H, T, D] always gives "
                  "the right shape but mixes positions with channels, and a view(B, T, H, D) without the transpose has "
                  "the right shape whenever H == T: only the values give these away."))
def test_split_values(obs, ref, verdict):
    got, inputs = obs.probe("split"), ref.probe("split")
    wrong = []
    for i, (B, T, C, H) in enumerate(SPLIT_CASES):
        D = C // H
        x = inputs.tensor(f"x_{i}")
        out = got.tensor(f"out_{i}")
        want = x.view(B, T, H, D).transpose(1, 2)
        if not torch.equal(out, want):
            index, g, w = _first_mismatch(out, want)
            b, h, position, d = index
            alike = _which(out, [
                (t("x.reshape({B}, {H}, {T}, {D}), a reshape straight to [B, H, T, D] without the transpose",
                   B=B, H=H, T=T, D=D), x.reshape(B, H, T, D)),
                (t("x.view({B}, {T}, {D}, {H}).permute(0, 3, 1, 2): head h takes every H-th channel (h, h+H, ...) "
                   "instead of the slice h*D:(h+1)*D", B=B, T=T, D=D, H=H), x.reshape(B, T, D, H).permute(0, 3, 1, 2)),
            ])
            wrong.append(t("{call}{equal}: out[{b}, {h}, {position}, {d}] is {got:.6g}; expected "
                           "x[{b}, {position}, {channel}] = {want:.6g} (channel h*D + d of position t){alike}",
                           call=t("split_heads(x of shape {shape}, {heads})", shape=[B, T, C], heads=H),
                           equal=_same_shape_note(H, T), b=b, h=h, position=position, d=d, got=g,
                           channel=h * D + d, want=w, alike=alike))
    _fail_first(verdict, wrong, len(SPLIT_CASES))
    verdict.ok(t("out[b, h, t] == x[b, t, h*D:(h+1)*D] exactly, for H != T and H == T"))


@criterion("merge_shape", kind="shape",
           title=t("merge_heads returns [B, T, H*D]"),
           hint=t("Move T back next to B with transpose(1, 2), then flatten the last two axes: .contiguous().view(B, "
                  "T, H * D) or .reshape(B, T, H * D). A view right after a transpose fails, because the memory is no "
                  "longer in that order."))
def test_merge_shape(obs, verdict):
    p = obs.probe("merge")
    cases = [(str(i), case, verbatim("")) for i, case in enumerate(MERGE_CASES)]
    cases.append(("strided", NONCONTIGUOUS_CASE, t(" (a non-contiguous transposed view)")))
    for key, (B, H, T, D), note in cases:
        call = t("merge_heads(y of shape {shape}{note})", shape=[B, H, T, D], note=note)
        out = _output(p, verdict, key, call)
        want = [B, T, H * D]
        verdict.check(list(out.shape) == want, t("{call} has shape {shape}; expected [B, T, H*D] = {want}", call=call,
                                                 shape=list(out.shape), want=want))
    verdict.ok(t("merge_heads gives [B, T, H*D] for H != T, H == T and a non-contiguous input"))


@criterion("merge_values", kind="values", requires=("merge_shape",),
           title=t("merge_heads puts head h back at channels h*D:(h+1)*D"),
           hint=t("transpose(1, 2) back to [B, T, H, D] before flattening the heads. Viewing [B, H, T, D] directly as "
                  "[B, T, H*D] keeps the shape but puts values of other positions into each position."))
def test_merge_values(obs, ref, verdict):
    got, inputs = obs.probe("merge"), ref.probe("merge")
    cases = [(str(i), case, verbatim("")) for i, case in enumerate(MERGE_CASES)]
    cases.append(("strided", NONCONTIGUOUS_CASE, t(", non-contiguous")))
    wrong = []
    for key, (B, H, T, D), note in cases:
        y = inputs.tensor(f"y_{key}")
        out = got.tensor(f"out_{key}")
        want = y.transpose(1, 2).reshape(B, T, H * D)
        if not torch.equal(out, want):
            (b, position, c), g, w = _first_mismatch(out, want)
            alike = _which(out, [
                (t("y.reshape({B}, {T}, {width}), a reshape without the transpose", B=B, T=T, width=H * D),
                 y.reshape(B, T, H * D)),
                (t("y.permute(0, 2, 3, 1).reshape(B, T, D*H): channels ordered d*H + h instead of h*D + d"),
                 y.permute(0, 2, 3, 1).reshape(B, T, H * D)),
            ])
            wrong.append(t("{call}{equal}: out[{b}, {position}, {c}] is {got:.6g}; expected y[{b}, {head}, {position}, "
                           "{channel}] = {want:.6g} (head c // D, channel c % D of position "
                           "t){alike}", call=t("merge_heads(y of shape {shape}{note})", shape=[B, H, T, D], note=note),
                           equal=_same_shape_note(H, T), b=b, position=position, c=c, got=g, head=c // D,
                           channel=c % D, want=w, alike=alike))
    _fail_first(verdict, wrong, len(cases))
    verdict.ok(t("out[b, t, h*D:(h+1)*D] == y[b, h, t] exactly, for H != T, H == T and a non-contiguous input"))


@criterion("round_trip", kind="values",
           title=t("merge_heads and split_heads undo each other exactly"),
           hint=t("merge_heads must reverse every step of split_heads in the opposite order: split is view then "
                  "transpose(1, 2), so merge is transpose(1, 2) then view/reshape. Pure data movement: the result must "
                  "be bitwise identical."))
def test_round_trip(obs, ref, verdict):
    got, inputs = obs.probe("round_trip"), ref.probe("round_trip")
    for i, (B, T, C, H) in enumerate(SPLIT_CASES):
        x = inputs.tensor(f"x_{i}")
        call = t("merge_heads(split_heads(x, {heads})) for x of shape {shape}", heads=H, shape=[B, T, C])
        _check_same(verdict, _output(got, verdict, f"x_{i}", call, prefix="back_"), x, call, "x", "t, c")
        _check_between(verdict, got, f"x_{i}", t("split_heads(x, {heads})", heads=H), [B, H, T, C // H])
    for i, (B, H, T, D) in enumerate(MERGE_CASES):
        y = inputs.tensor(f"y_{i}")
        call = t("split_heads(merge_heads(y), {heads}) for y of shape {shape}", heads=H, shape=[B, H, T, D])
        _check_same(verdict, _output(got, verdict, f"y_{i}", call, prefix="back_"), y, call, "y", "h, t, d")
        _check_between(verdict, got, f"y_{i}", t("merge_heads(y)"), [B, T, H * D])
    verdict.ok(t("merge_heads(split_heads(x, H)) == x and split_heads(merge_heads(y), H) == y bitwise, for H != T and "
                 "H == T"))


@criterion("rejects_indivisible", kind="errors",
           title=t("ValueError when n_heads does not divide C"),
           hint=t("At the top of split_heads check C % n_heads != 0 and raise ValueError naming C and n_heads, instead "
                  "of letting a later view fail with a confusing RuntimeError."))
def test_rejects_indivisible(obs, verdict):
    p = obs.probe("bad_heads")
    for key, C, H in (("c10_h3", 10, 3), ("c12_h5", 12, 5)):
        outcome = p.value(key)
        if raised(outcome) != "ValueError":
            verdict.fail(t("{outcome}; expected ValueError ({channels} channels cannot be cut into {heads} equal "
                           "heads)",
                           outcome=_describe(_split_call(C, H), outcome), channels=C, heads=H))
    ok = p.value("c12_h12")
    verdict.check(raised(ok) is None, t("{outcome}; it is valid (12 heads of 1 channel) and must return",
                                        outcome=_describe(_split_call(12, 12), ok)))
    verdict.ok(t("ValueError for C=10, H=3 and C=12, H=5; C=12, H=12 splits"))


@criterion("rejects_non_positive_heads", kind="errors",
           title=t("ValueError when n_heads <= 0"),
           hint=t("Check n_heads <= 0 first, before C % n_heads: 12 % 0 raises ZeroDivisionError, and 12 % -3 == 0 in "
                  "Python, so the divisibility test alone lets negative head counts through."))
def test_rejects_non_positive_heads(obs, verdict):
    p = obs.probe("bad_heads")
    for key, H in (("c12_h0", 0), ("c12_hm2", -2), ("c12_hm3", -3)):
        outcome = p.value(key)
        if raised(outcome) != "ValueError":
            verdict.fail(t("{outcome}; expected ValueError (the number of heads must be positive)",
                           outcome=_describe(_split_call(12, H), outcome)))
    ok = p.value("c12_h1")
    verdict.check(raised(ok) is None, t("{outcome}; one head is valid and must return",
                                        outcome=_describe(_split_call(12, 1), ok)))
    verdict.ok(t("ValueError for n_heads = 0, -2 and -3; n_heads = 1 splits"))


# --- helpers -------------------------------------------------------------------------------------

def _split_call(channels: int, heads: int) -> Text:
    return t("split_heads(x of shape {shape}, n_heads={heads})", shape=[2, 5, channels], heads=heads)


def _same_shape_note(heads: int, positions: int) -> Text:
    """Why a wrong layout got past the shape criterion: with H == T the transposed shape is the same."""
    return t(" (H == T: the shape is right, the values are not)") if heads == positions else verbatim("")


def _fail_first(verdict, wrong: list[Text], n_cases):
    """Fail with the first wrong case, saying how many of the cases were wrong."""
    if wrong:
        verdict.note(wrong_cases=[str(case) for case in wrong])
        more = (t(" ({wrong} of {total} inputs give wrong values)", wrong=len(wrong), total=n_cases) if len(wrong) > 1
                else t(" (1 of {total} inputs)", total=n_cases))
        verdict.fail(join((wrong[0], more)))


def _output(p, verdict, key, call: Text, prefix="out_"):
    """The tensor a call returned, or a failure saying what it raised or returned instead."""
    outcome = p.value(f"call_{key}")
    if raised(outcome):
        verdict.fail(_describe(call, outcome))
    if f"{prefix}{key}" in p.not_tensors:
        verdict.fail(t("{call} returned a {kind}, not a tensor", call=call, kind=p.not_tensors[f"{prefix}{key}"]))
    return p.tensor(f"{prefix}{key}")


def _check_between(verdict, p, key, call: Text, want: list[int]) -> None:
    """The positive control of the round trip: what the first function gave in between has the shape it must have,
    so that two functions which leave their input as it is (and so undo each other) do not pass for inverses."""
    between = p.value(f"{key}_between")
    if between != want:
        verdict.fail(t("the round trip gives back its input, but in between {call} returned {shape}; expected {want}: "
                       "functions that change nothing undo each other too, so the round trip proves nothing",
                       call=call, shape=between if between is not None else t("no tensor"), want=want))


def _check_same(verdict, got, want, call: Text, name, axes):
    if list(got.shape) != list(want.shape):
        verdict.fail(t("{call} has shape {shape}; expected {want}, the shape of {name}", call=call,
                       shape=list(got.shape), want=list(want.shape), name=name))
    if not torch.equal(got, want):
        index, g, w = _first_mismatch(got, want)
        at = ", ".join(str(i) for i in index)
        verdict.fail(t("{call}: at [{at}] (b, {axes}) got {got:.6g}, expected {name}[{at}] = {want:.6g}; {moved} of "
                       "{total} values moved (expected a bitwise-identical {name})", call=call, at=at, axes=axes,
                       got=g, name=name, want=w, moved=int((got != want).sum()), total=want.numel()))


def _first_mismatch(got, want):
    """The first index (in row-major order) where two same-shaped tensors differ, and both values there."""
    differs = (got != want).reshape(-1)
    if not differs.any():  # equal values but not torch.equal: only the dtype can differ
        raise CriterionFailed(t("the values are right but the dtype is {got}; expected {want}, the input's dtype",
                                got=str(got.dtype), want=str(want.dtype)))
    flat = int(torch.nonzero(differs)[0])
    index = unravel(flat, want.shape)
    return index, float(got[index]), float(want[index])


def _which(out, candidates: list[tuple[Text, torch.Tensor]]) -> Text:
    """'; your output equals <the first known wrong layout `out` equals exactly>', or nothing."""
    for layout, tensor in candidates:
        if torch.equal(out, tensor):
            return t("; your output equals {layout}", layout=layout)
    return verbatim("")


def _describe(call: Text, outcome: dict) -> Text:
    """What a call did: what it raised (and where in the student's file), or what it returned."""
    where = (outcome.get("raised") or {}).get("where")
    said = [call, verbatim(" "), describe_outcome(outcome)]
    if where:
        said.append(t(" (at {where})", where=where))
    return join(said)
