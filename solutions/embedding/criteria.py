"""Hidden criteria of exercise `embedding`: TokenEmbedding, a lookup table from ids to vectors."""

import torch

from grader.i18n import Text, t, verbatim
from grader.judge.common import forbidden_api_criterion
from grader.judge.compare import describe_outcome, difference, raised, unravel
from grader.judge.criterion import criterion

EXERCISE = "embedding"
VOCAB, DIM, PADDED = 13, 6, 9   # as in the probes
LOOKUP_TOLERANCE = 0.0   # a lookup copies rows, and even a one-hot matmul only adds exact zeros: no rounding at all
GRAD_TOLERANCE = 1e-4    # float32 sums of up to ~10 upstream gradients of size ~3: rounding stays below ~1e-5; a wrong
                         # row is off by O(1)
# (vocab_size, dim) of the probes' edge cases: no ids, no ids in two rows, a 0-d id, a one-row one-column table
EDGE_SIZES = {"empty": (VOCAB, DIM), "empty_rows": (VOCAB, DIM), "scalar": (VOCAB, DIM), "one_by_one": (1, 1)}
PAD_GRAD_TOLERANCE = 0.0  # the contract says exactly zero: any non-zero gradient moves the padding row


@criterion("weight_registered", kind="registration",
           title=t("weight is an nn.Parameter of shape [vocab_size, dim]"),
           hint=t("In __init__ call super().__init__() first, then assign self.weight = "
                  "nn.Parameter(torch.randn(vocab_size, dim)): one row per token. A plain tensor (even with "
                  "requires_grad=True) is not registered, so model.parameters() and the optimizer never see it."))
def test_weight_registered(obs, verdict):
    p = obs.probe("table")
    verdict.note(weight_type=p.value("weight_type"), weight_shape=p.value("weight_shape"),
                 parameters=p.value("parameters"))
    verdict.check(p.value("is_module"), t("TokenEmbedding(13, 6) is not an nn.Module: subclass nn.Module and call "
                                          "super().__init__()"))
    kind, shape = p.value("weight_type"), p.value("weight_shape")
    verdict.check(kind != "NoneType", t("TokenEmbedding(13, 6) has no attribute `weight` (or it is None); the contract "
                                        "asks for self.weight, an nn.Parameter of shape [13, 6]"))
    listed = ", ".join(p.value("parameters")) or t("nothing")
    verdict.check(p.value("weight_is_parameter"),
                  t("`weight` is a {kind}, not an nn.Parameter: model.parameters() lists {listed}, so an optimizer "
                    "would never train the table", kind=kind, listed=listed))
    if shape == [DIM, VOCAB]:
        verdict.fail(t("TokenEmbedding(vocab_size=13, dim=6).weight has shape {shape}; expected [vocab_size, dim] = "
                       "[13, 6] (rows and columns swapped: row i must be the vector of token i)", shape=shape))
    if shape != [VOCAB, DIM]:
        verdict.fail(t("TokenEmbedding(vocab_size=13, dim=6).weight has shape {shape}; expected [vocab_size, dim] = "
                       "[13, 6]", shape=shape))
    verdict.check(p.value("weight_registered"), t("`weight` is an nn.Parameter but not among the module's "
                                                  "parameters(): assign it as an attribute of the module (self.weight "
                                                  "= nn.Parameter(...))"))
    verdict.check(p.value("weight_requires_grad"), t("`weight` has requires_grad=False: the table could never be "
                                                     "trained"))
    verdict.ok(t("weight is an nn.Parameter of shape [13, 6] registered on the module (parameters: {listed})",
                 listed=listed))


@criterion("output_shape", kind="shape",
           title=t("The output has shape ids.shape + (dim,)"),
           hint=t("Index the table with the whole id tensor, weight[ids]: it keeps every axis of ids and appends dim. "
                  "If you flatten ids (for index_select or one-hot), reshape back to (*ids.shape, dim), and never "
                  "transpose the result."))
def test_output_shape(obs, ref, verdict):
    got, want = obs.probe("lookup"), ref.probe("lookup")
    seen = []
    for key in ("0", "1", "2", "pad"):
        ids_shape = list(want.tensor(f"ids_{key}").shape)
        shape = list(got.tensor(f"out_{key}").shape)
        expected = ids_shape + [DIM]
        ids_of = t("ids of shape {shape} (padding_idx=9)", shape=ids_shape) if key == "pad" \
            else t("ids of shape {shape}", shape=ids_shape)
        if shape != expected:
            n = 1
            for size in ids_shape:
                n *= size
            said = {"ids": ids_of, "shape": shape, "expected": expected}
            if shape == [n, DIM]:
                verdict.fail(t("for {ids} the output has shape {shape}; expected ids.shape + (dim,) = {expected}: the "
                               "ids were flattened and the result never reshaped back to (*ids.shape, dim)", **said))
            if shape == [DIM] + ids_shape or shape == ids_shape[:-1] + [DIM, ids_shape[-1]]:
                verdict.fail(t("for {ids} the output has shape {shape}; expected ids.shape + (dim,) = {expected}: the "
                               "dim axis is in the wrong place (a transposed result)", **said))
            verdict.fail(t("for {ids} the output has shape {shape}; expected ids.shape + (dim,) = {expected}", **said))
        seen.append(ids_shape)
    edge = obs.probe("edge_ids")
    for key, (vocab, dim) in EDGE_SIZES.items():
        ids_shape = list(edge.tensor(f"ids_{key}").shape)
        said = {"vocab": vocab, "dim": dim, "shape": ids_shape, "expected": ids_shape + [dim]}
        for step in ("build", "call"):
            outcome = edge.value(f"{step}_{key}") if edge.has(f"{step}_{key}") else None
            if outcome is not None and raised(outcome) is not None:
                verdict.fail(t("TokenEmbedding({vocab}, {dim}) with ids of shape {shape} {outcome}; expected an output "
                               "of shape ids.shape + (dim,) = {expected}", outcome=_describe(outcome), **said))
        shape = list(edge.tensor(f"out_{key}").shape)
        if shape != ids_shape + [dim]:
            verdict.fail(t("TokenEmbedding({vocab}, {dim}) with ids of shape {shape} gives an output of shape {got}; "
                           "expected ids.shape + (dim,) = {expected}", got=shape, **said))
    verdict.ok(t("ids of shapes {first}, {second} and {third} give outputs of shape ids.shape + [6]; so do no ids "
                 "(shape [0]), a 0-d id and a one-row, one-column table", first=seen[0], second=seen[1],
                 third=seen[2]))


@criterion("values_are_rows", kind="values", requires=("output_shape",),
           title=t("The output is weight[ids], the one-hot product one_hot(ids) @ weight"),
           hint=t("Position i of the output is row ids[i] of your own weight, copied exactly. Look up rows (axis 0) of "
                  "weight, not columns; do not add, scale or re-normalise; if you flatten the ids, restore the order "
                  "with reshape, not transpose."))
def test_values_are_rows(obs, ref, verdict):
    got, want = obs.probe("lookup"), ref.probe("lookup")
    for key in ("0", "1", "2", "pad"):
        ids = want.tensor(f"ids_{key}")
        weight = got.tensor(f"weight_{key}")
        out = got.tensor(f"out_{key}")
        label = t("ids of shape {shape}, padding_idx=9", shape=list(ids.shape)) if key == "pad" \
            else t("ids of shape {shape}", shape=list(ids.shape))
        if list(weight.shape) != [VOCAB, DIM]:
            verdict.fail(t("your weight has shape {shape}; the lookup is judged against a [13, 6] table",
                           shape=list(weight.shape)))
        rows = weight[ids]
        if difference(out, rows, atol=LOOKUP_TOLERANCE) is not None:
            verdict.fail(t("for {ids}: {problem}", ids=label, problem=_first_wrong_row(out, rows, ids, weight)))
        one_hot = torch.nn.functional.one_hot(ids, VOCAB).double() @ weight.double()
        problem = difference(out, one_hot, atol=LOOKUP_TOLERANCE)
        if problem:
            verdict.fail(t("for {ids} the output differs from one_hot(ids) @ weight: {problem}", ids=label,
                           problem=problem))
    verdict.ok(t("for 1-D, 2-D and 3-D ids (and with a padding row) every output vector is exactly the row weight[id] "
                 "of your own table, the same as one_hot(ids) @ weight"))


@criterion("padding_row_zero_at_init", kind="values",
           title=t("The padding row is zero right after construction"),
           hint=t("After creating the table, zero row padding_idx in place under torch.no_grad() "
                  "(self.weight[padding_idx].zero_()); use the padding_idx you were given, not a fixed 0."))
def test_padding_row_zero_at_init(obs, verdict):
    p = obs.probe("table")
    for pad in (0, PADDED):
        key = f"init_pad{pad}"
        if key in p.not_tensors:
            verdict.fail(t("TokenEmbedding(13, 6, padding_idx={pad}).weight is a {kind}, not a tensor", pad=pad,
                           kind=p.not_tensors[key]))
        weight = p.tensor(key)
        if weight.dim() != 2 or weight.shape[0] <= pad:
            verdict.fail(t("TokenEmbedding(13, 6, padding_idx={pad}).weight has shape {shape}; row {pad} cannot be "
                           "checked in a table that is not [13, 6]", pad=pad, shape=list(weight.shape)))
        row = weight[pad]
        nonzero = int((row != 0).sum())
        if nonzero:
            said = {"pad": pad, "row": _fmt(row), "nonzero": nonzero, "entries": row.numel()}
            if pad != 0 and bool((weight[0] == 0).all()):
                verdict.fail(t("with padding_idx={pad} row {pad} of weight right after construction is {row} "
                               "({nonzero} of {entries} entries non-zero); expected all zeros; row 0 is zero instead, "
                               "as if the padding row were always 0", **said))
            verdict.fail(t("with padding_idx={pad} row {pad} of weight right after construction is {row} ({nonzero} of "
                           "{entries} entries non-zero); expected all zeros", **said))
        others = torch.cat([weight[:pad], weight[pad + 1:]])
        if not bool((others != 0).any()):
            verdict.fail(t("with padding_idx={pad} every row of weight right after construction is zero, not only row "
                           "{pad}: the table is not initialised (random values, e.g. torch.randn), so a zero padding "
                           "row shows nothing", pad=pad))
    verdict.ok(t("with padding_idx=0 and padding_idx=9 the padding row is all zeros right after construction, and the "
                 "other rows are not"))


@criterion("gradient_reaches_rows", kind="gradient", requires=("values_are_rows",),
           title=t("Backpropagation reaches every used row"),
           hint=t("Keep the lookup inside autograd: index self.weight itself (no .data, .detach(), .item() or "
                  "torch.tensor(...) copies). Without padding_idx no row is special: row 0 must get its gradient like "
                  "any other."))
def test_gradient_reaches_rows(obs, ref, verdict):
    max_diff = _check_gradient(obs, ref, verdict, "nopad", None)
    verdict.ok(t("with padding_idx=None every used row, row 0 included, receives the sum of its upstream gradients "
                 "(largest difference {difference:.1e}) and unused rows receive zero", difference=max_diff))


@criterion("padding_gradient_zero", kind="gradient", requires=("values_are_rows",),
           title=t("The padding row gets exactly zero gradient; other used rows still learn"),
           hint=t("Stop the gradient only at padding positions: e.g. out = torch.where((ids == "
                  "padding_idx).unsqueeze(-1), out.detach(), out), or multiply by a mask (ids != padding_idx). Zeroing "
                  "the row's values is not enough: weight[ids] still sends every padding position's gradient into that "
                  "row."))
def test_padding_gradient_zero(obs, ref, verdict):
    worst = max(_check_gradient(obs, ref, verdict, key, pad) for key, pad in (("pad0", 0), ("pad9", PADDED)))
    verdict.ok(t("with padding_idx=0 and padding_idx=9 the padding row's gradient is exactly zero and every other used "
                 "row receives the sum of its upstream gradients (largest difference {difference:.1e})",
                 difference=worst))


@criterion("rejects_float_ids", kind="errors",
           title=t("TypeError for floating-point ids"),
           hint=t("Check ids.dtype before the lookup (e.g. if ids.is_floating_point(): raise TypeError(...)) and name "
                  "the dtype. Do not cast with .long(): a float id means the caller passed the wrong tensor, and "
                  "casting hides it."))
def test_rejects_float_ids(obs, verdict):
    p = obs.probe("bad_ids")
    for key, shown in (("float32", t("float32 ids [[1., 2.], [3., 4.]]")), ("float64", t("float64 ids [0., 5., 7.]"))):
        outcome = p.value(key)
        if raised(outcome) != "TypeError":
            said = {"ids": shown, "outcome": _describe(outcome)}
            if raised(outcome) is None:
                verdict.fail(t("emb({ids}) {outcome}; expected TypeError: ids whose values happen to be whole numbers "
                               "were quietly accepted", **said))
            if raised(outcome) in ("IndexError", "RuntimeError"):
                verdict.fail(t("emb({ids}) {outcome}; expected TypeError; torch's own indexing error is not the "
                               "contract: check the dtype yourself", **said))
            verdict.fail(t("emb({ids}) {outcome}; expected TypeError", **said))
    control = p.value("same_ids_int64")
    verdict.check(raised(control) is None, t("emb(int64 ids [[1, 2], [3, 4]]) {outcome}: the same ids as integers must "
                                             "be looked up; reject floating-point ids "
                                             "only", outcome=_describe(control)))
    verdict.ok(t("float32 and float64 ids raise TypeError; the same ids as int64 are looked up"))


@criterion("rejects_out_of_range_ids", kind="errors",
           title=t("IndexError for ids outside [0, vocab_size)"),
           hint=t("Check ids.min() < 0 or ids.max() >= vocab_size over the whole tensor and raise IndexError naming "
                  "the value. Negative ids matter most: weight[-1] silently returns the last row, so torch never "
                  "complains."))
def test_rejects_out_of_range_ids(obs, verdict):
    p = obs.probe("bad_ids")
    boundary = p.value("boundary")
    verdict.check(raised(boundary) is None,
                  t("emb([[0, 12], [12, 0]]) with vocab_size=13 {outcome}; ids 0 and 12 are valid (the range is [0, "
                    "vocab_size): reject id >= vocab_size, not id >= vocab_size - 1)", outcome=_describe(boundary)))
    for key, bad, silent in (("minus_one", -1, t("it silently picks row 12, the last row")),
                             ("minus_vocab", -VOCAB, t("it silently picks row 0")),
                             ("too_large", VOCAB, None), ("far_too_large", VOCAB + 5, None)):
        outcome = p.value(key)
        if raised(outcome) != "IndexError":
            said = {"bad": bad, "outcome": _describe(outcome)}
            if silent is not None and raised(outcome) is None:
                verdict.fail(t("with vocab_size=13, ids [[2, 3, 4], [5, {bad}, 6]] (bad id at [1, 1]) {outcome}; "
                               "expected IndexError: {why}", why=silent, **said))
            verdict.fail(t("with vocab_size=13, ids [[2, 3, 4], [5, {bad}, 6]] (bad id at [1, 1]) {outcome}; expected "
                           "IndexError", **said))
    for key, shown in (("lone_minus_one", "torch.tensor([-1])"), ("scalar_minus_one", "torch.tensor(-1)")):
        outcome = p.value(key)
        if raised(outcome) != "IndexError":
            verdict.fail(t("with vocab_size=13, emb({ids}), a lone id -1, {outcome}; expected IndexError: a check "
                           "skipped for small inputs lets weight[-1] return the last row", ids=verbatim(shown),
                           outcome=_describe(outcome)))
    verdict.ok(t("ids -1, -13, 13 and 18 raise IndexError with vocab_size=13, alone or among valid ids; the boundary "
                 "ids 0 and 12 are looked up"))


@criterion("padding_outputs_are_the_row", kind="values", requires=("values_are_rows",),
           title=t("At padding positions the output is the padding row itself, whatever it holds"),
           hint=t("padding_idx changes the gradient, not the lookup: the output is weight[ids] everywhere. Stop the "
                  "gradient at padding positions (out.detach() there) instead of zeroing the output; a padding row "
                  "that holds values (loaded, or set by hand) must come out as it is."))
def test_padding_outputs_are_the_row(obs, ref, verdict):
    got, want = obs.probe("padding_lookup"), ref.probe("padding_lookup")
    ids, table, out = want.tensor("ids"), want.tensor("weight"), got.tensor("out")
    if list(out.shape) != [*ids.shape, DIM]:
        verdict.fail(t("with padding_idx=9 and ids of shape {shape} the output has shape {got}; expected {want}",
                       shape=list(ids.shape), got=list(out.shape), want=[*ids.shape, DIM]))
    padded = ids == PADDED
    rows = table[ids]
    wrong = (out.double() != rows.double()).any(dim=-1)
    verdict.note(padding_positions=int(padded.sum()), wrong_positions=int(wrong.sum()))
    if bool((wrong & padded).any()):
        position = tuple(int(i) for i in torch.nonzero(wrong & padded)[0])
        # built apart: Babel misses a t(...) nested in another call's arguments
        zeroed = t(": the output is zeroed at padding positions") if bool((out[padded] == 0).all()) else verbatim("")
        verdict.fail(t("row 9 (padding_idx) holds {row}, yet out[{pos}] (ids[{pos}] = 9) is {got}{zeroed}; the lookup "
                       "must return weight[ids] at padding positions too ({count} of {total} padding positions differ)",
                       row=_fmt(table[PADDED]), pos=", ".join(str(i) for i in position), got=_fmt(out[position]),
                       zeroed=zeroed, count=int((wrong & padded).sum()), total=int(padded.sum())))
    if bool(wrong.any()):
        verdict.fail(t("with padding_idx=9 and a padding row that holds values: {problem}",
                       problem=_first_wrong_row(out, rows, ids, table)))
    verdict.ok(t("with padding_idx=9 and a padding row that holds values, all {count} padding positions return that "
                 "row exactly, like every other id", count=int(padded.sum())))


test_no_forbidden_api = forbidden_api_criterion()


# --- helpers -------------------------------------------------------------------------------------

def _check_gradient(obs, ref, verdict, key, pad):
    """Fail unless weight.grad equals the upstream gradients summed per id, with the padding row exactly zero.
    Returns the largest difference on the non-padding rows."""
    got = obs.probe("gradient")
    ids = ref.probe("gradient").tensor(f"ids_{key}")
    upstream = ref.probe("gradient").tensor(f"upstream_{key}").double()
    setting = f"padding_idx={pad}"
    backward = got.value(f"backward_{key}")
    if raised(backward):
        verdict.fail(t("with {setting}, backward through the output {outcome}: the output must stay connected to "
                       "weight in the autograd graph", setting=setting, outcome=_describe(backward)))
    if f"grad_{key}" in got.not_tensors:
        verdict.fail(t("with {setting}, weight.grad is None after backward: the output is not connected to weight (a "
                       "copy, .data or .detach() cut the graph)", setting=setting))
    grad = got.tensor(f"grad_{key}").double()
    if list(grad.shape) != [VOCAB, DIM]:
        verdict.fail(t("with {setting}, weight.grad has shape {shape}; expected [13, 6]", setting=setting,
                       shape=list(grad.shape)))
    want = torch.zeros(VOCAB, DIM, dtype=torch.float64).index_add_(0, ids.reshape(-1), upstream.reshape(-1, DIM))
    counts = torch.bincount(ids.reshape(-1), minlength=VOCAB)
    verdict.note(**{f"grad_row_norms_{key}": [round(float(v), 6) for v in grad.norm(dim=1)]})
    if pad is not None:
        row = grad[pad]
        if not bool((row.abs() <= PAD_GRAD_TOLERANCE).all()):  # NaN fails too
            verdict.fail(t("with {setting}, weight.grad[{pad}] is {row} (largest |g| {largest:.3g}); expected exactly "
                           "zero: id {pad} appears {count} times in the [4, 6] batch and each occurrence sent its "
                           "gradient into the padding row", setting=setting, pad=pad, row=_fmt(row),
                           largest=float(row.abs().max()), count=int(counts[pad])))
        want[pad] = 0
    worst = 0.0
    for r in range(VOCAB):
        if r == pad:
            continue
        diff = float((grad[r] - want[r]).abs().max())
        worst = max(worst, diff)
        if not diff <= GRAD_TOLERANCE:  # NaN fails too
            n = int(counts[r])
            if n and float(grad[r].abs().max()) == 0.0 and pad is None and r == 0:
                verdict.fail(t("with {setting}, row {row} received no gradient although id {row} appears {count} times "
                               "(with padding_idx=None row 0 is an ordinary row)", setting=setting, row=r, count=n))
            if n and float(grad[r].abs().max()) == 0.0:
                verdict.fail(t("with {setting}, row {row} received no gradient although id {row} appears {count} times",
                               setting=setting, row=r, count=n))
            if n == 0:
                verdict.fail(t("with {setting}, row {row} received gradient {got} although id {row} does not appear in "
                               "the batch", setting=setting, row=r, got=_fmt(grad[r])))
            verdict.fail(t("with {setting}, row {row} received {got}; expected {want}, the sum of the upstream "
                           "gradients at the {count} positions holding id {row} (largest difference {difference:.3g})",
                           setting=setting, row=r, got=_fmt(grad[r]), want=_fmt(want[r]), count=n, difference=diff))
    return worst


def _first_wrong_row(out, rows, ids, weight) -> Text:
    """Name the first output position that is not its row, and which row (if any) it equals instead."""
    bad = (out != rows).reshape(-1, DIM).any(dim=1)
    flat = int(torch.nonzero(bad)[0])
    position = unravel(flat, ids.shape)
    token = int(ids[position])
    vec = out[position]
    same = [r for r in range(weight.shape[0]) if torch.equal(vec, weight[r])]
    said = {"pos": ", ".join(str(i) for i in position), "got": _fmt(vec), "token": token, "row": _fmt(weight[token]),
            "wrong": int(bad.sum()), "positions": bad.numel()}
    if torch.equal(out, rows.movedim(-1, 0).reshape(out.shape)):
        return t("out[{pos}] is {got} but ids[{pos}] = {token}, so it should be weight[{token}] = {row}, although "
                 "every number is right: the output is weight[ids] laid out as [dim, *ids.shape] and then reshaped; "
                 "reshape does not swap axes, use .t() / .transpose (or look up rows, weight[ids], directly); {wrong} "
                 "of {positions} positions are wrong", **said)
    if same:
        return t("out[{pos}] is {got} but ids[{pos}] = {token}, so it should be weight[{token}] = {row}; it equals row "
                 "{same} instead; {wrong} of {positions} positions are wrong", same=same[0], **said)
    if torch.allclose(vec, weight[token], atol=1e-4):
        return t("out[{pos}] is {got} but ids[{pos}] = {token}, so it should be weight[{token}] = {row} (close but not "
                 "equal: largest difference {difference:.3g}; a lookup copies exactly); {wrong} of {positions} "
                 "positions are wrong", difference=float((vec - weight[token]).abs().max()), **said)
    return t("out[{pos}] is {got} but ids[{pos}] = {token}, so it should be weight[{token}] = {row}, and it is no row "
             "of weight at all; {wrong} of {positions} positions are wrong", **said)


def _describe(outcome):
    """What a call did, with the line of the student's file that raised, if any."""
    where = (outcome.get("raised") or {}).get("where")
    if where:
        return t("{outcome} (at {where})", outcome=describe_outcome(outcome), where=where)
    return describe_outcome(outcome)


def _fmt(vector, limit=4):
    values = [f"{float(v):.4g}" for v in vector.reshape(-1)[:limit]]
    more = ", ..." if vector.numel() > limit else ""
    return "[" + ", ".join(values) + more + "]"
