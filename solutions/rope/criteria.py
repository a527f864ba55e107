"""Hidden criteria of exercise `rope`: apply_rope, rotary position embedding with rotate-half pairing.

Inputs are read from the reference run (`ref`): the same seeded probes drew them before any student code ran.
Property criteria (norms, relative positions, pairing, slices, leading axes, gradients) compare the student's
outputs with each other, so one formula mistake costs the value criteria, not every criterion.
"""

import torch

from grader.i18n import Text, t, verbatim
from grader.judge.compare import describe_outcome, difference, raised
from grader.judge.criterion import criterion
from grader.judge.verdicts import Verdict

EXERCISE = "rope"

# Angles computed in float32 (the common inv_freq recipe) are off by about position * 1.2e-7 rad; that is
# accepted. Every formula mistake we know (pairing, exponent, direction, base, positions) errs by > 1e-2.
VALUE_TOLERANCE = 1e-5      # positions below 16, inputs of size ~3: float32 angles err by < 2e-6 here
LONG_TOLERANCE = 1e-3       # positions up to 4095: float32 angles (ulp of 4095 rad is 2.4e-4) gave <= 7e-5 in trials
FLOAT32_TOLERANCE = 1e-5    # float32 input against the float64 reference: a few float32 ulps
NORM_RTOL = 1e-6            # cos and sin computed in float32 keep cos^2 + sin^2 = 1 to ~1e-7
RELATIVE_RTOL = 1e-5        # spread of <rope(q, m), rope(k, n)> over pairs with the same m - n, relative to |q||k|
SAME_CALL = 1e-6            # the student's function against itself: only float32 rounding of the angles may differ
LEAK = 1e-9                 # a channel outside a pair must stay exactly 0 (0 * cos = 0)
ROTATED = 1e-3              # below this the output at positions >= 1 counts as unrotated
# x.grad against central differences of the student's own forward (step h = 0.5, probes/rope.py): exact for a map
# linear in x but for rounding. float32 inside the function (legal) rounds each nudged output (|x + h| <= 5) to
# ~3 * 2^-24 * 5 = 1e-6; a column differs in the two outputs of one pair, each weighted by |g| <= 4 and divided by
# 2h = 1: <= 1e-5 per element. 1e-4 leaves a factor of ten; a detached or wrong backward errs by ~|g| sin(p).
GRAD_TOLERANCE = 1e-4


def rope(x, positions=None, base=10000.0, *, pairing="half", exponent=2.0, first_i=0, direction=1.0, seq_dim=-2,
         second_sign=1.0):
    """Rotary embedding in float64, and the usual wrong versions of it (for naming a student's mistake)."""
    x = x.double()
    T, D = x.shape[seq_dim], x.shape[-1]
    pos = torch.arange(T) if positions is None else positions
    i = torch.arange(D // 2, dtype=torch.float64) + first_i
    angles = direction * pos.double()[:, None] * base ** (-exponent * i / D)     # [T, D/2]
    if seq_dim == -3:
        angles = angles[:, None, :]
    cos, sin = angles.cos(), angles.sin()
    if pairing == "half":
        x1, x2 = x[..., : D // 2], x[..., D // 2:]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + second_sign * x1 * sin), dim=-1)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)


# the formula mistakes we can name: (what the student's code does, how `rope` reproduces it)
FORMULA_MISTAKES = [
    (t("pairs adjacent channels (2i, 2i+1); the course uses rotate-half pairing (i, i + "
       "D/2)"), {"pairing": "interleaved"}),
    (t("uses the angle p * base**(-i/D); the exponent is -2i/D"), {"exponent": 1.0}),
    (t("counts i from 1 (base**(-2(i+1)/D)); i runs from 0 to D/2 - 1"), {"first_i": 1}),
    (t("rotates the other way; the first half is x1*cos - x2*sin and the second half x2*cos + x1*sin"),
     {"direction": -1.0}),
    (t("computes the second half as x2*cos - x1*sin, which is not a rotation; it must be x2*cos + x1*sin"),
     {"second_sign": -1.0}),
]


def alternatives(x, positions=None, base=10000.0):
    """(what the student's code does, the output that mistake gives) for the known bugs."""
    found = [(does, rope(x, positions, base, **kwargs)) for does, kwargs in FORMULA_MISTAKES]
    if positions is not None:
        found.append((t("ignores the positions argument and rotates the rows as positions 0..T-1"),
                      rope(x, None, base)))
    if base != 10000.0:
        found.append((t("ignores the base argument and uses 10000"), rope(x, positions)))
    if x.dim() >= 3 and x.shape[-3] == x.shape[-2]:
        found.append((t("lays the angles along axis -3 (the head axis H) instead of the sequence axis -2"),
                      rope(x, positions, base, seq_dim=-3)))
    return found


def own_formula(obs, ref) -> dict:
    """The keyword arguments of `rope` that reproduce the student's default call: {} for the course's formula or an
    unknown one, else the named mistake, so that criteria about other arguments judge those arguments alone."""
    try:
        x, out = ref.probe("values").tensor("x64"), obs.probe("values").tensor("out64")
    except Verdict:   # the values probe failed: `values_match_reference` reports it; judge against the course's formula
        return {}
    if difference(out, rope(x), atol=VALUE_TOLERANCE) is None:
        return {}
    for _, kwargs in FORMULA_MISTAKES:
        if difference(out, rope(x, **kwargs), atol=VALUE_TOLERANCE) is None:
            return kwargs
    return {}


def diagnose(got, x, positions=None, base=10000.0, atol=VALUE_TOLERANCE) -> Text:
    """' Your rotation ...' when a known mistake explains `got`, else an empty text."""
    if difference(got, x, atol=atol) is None:
        return t(" Your output equals the input: nothing is rotated.")
    for does, output in alternatives(x, positions, base):
        if difference(got, output, atol=atol) is None:
            return t(" Your rotation {does}.", does=does)
    if got.dim() >= 2 and list(got.shape) == list(x.shape):
        if difference(got[..., 0, :], x[..., 0, :], atol=atol):
            return t(" Position 0 is not left unchanged (its angle is 0, so it must come out as it went in).")
    return verbatim("")


def check_shape(verdict, out, x, label: Text):
    verdict.check(list(out.shape) == list(x.shape),
                  t("{label}: x of shape {shape} gave an output of shape {got}; expected the same shape", label=label,
                    shape=list(x.shape), got=list(out.shape)))
    check_finite(verdict, out, label)


def check_finite(verdict, out, label: Text):
    bad = ~torch.isfinite(out)
    if bad.any():
        index = tuple(int(i) for i in torch.nonzero(bad)[0])
        verdict.fail(t("{label}: the output holds {count} NaN or inf values, the first at index {index}", label=label,
                       count=int(bad.sum()), index=index))


@criterion("output_shape_dtype", kind="shape",
           title=t("Output has the input's shape and dtype, for any leading axes"),
           hint=t("Index the last two axes with x.shape[-2] and x.shape[-1] (not x.shape[1]), let cos and sin of shape "
                  "[T, D/2] broadcast over the leading axes, and cast them to x.dtype."))
def test_output_shape_dtype(obs, verdict):
    p = obs.probe("shapes")
    for key, shape, dtype in (("bhtd", [2, 3, 5, 8], torch.float32), ("td", [5, 8], torch.float32),
                              ("btd_float64", [2, 5, 8], torch.float64), ("d2", [3, 4, 2], torch.float32)):
        out = p.tensor(f"out_{key}")
        verdict.check(list(out.shape) == shape, t("apply_rope on x of shape {shape} returned shape {got}; expected "
                                                  "{shape}",
                                                  shape=shape, got=list(out.shape)))
        verdict.check(out.dtype == dtype, t("apply_rope on a {dtype} x of shape {shape} returned {got}; expected "
                                            "{dtype} (the input's dtype)", dtype=str(dtype)[6:], shape=shape,
                                            got=str(out.dtype)[6:]))
    verdict.ok(t("shapes [2, 3, 5, 8], [5, 8], [2, 5, 8] and [3, 4, 2] are kept, and so are float32 and float64"))


@criterion("norm_preserved", kind="values",
           title=t("Every vector keeps its length, and is rotated"),
           hint=t("Each pair (x_i, x_{{i+D/2}}) must go through a true 2-D rotation: (a*cos - b*sin, b*cos + a*sin), "
                  "with cos and sin of the same angle."))
def test_norm_preserved(obs, ref, verdict):
    x = ref.probe("norms").tensor("x")
    out = obs.probe("norms").tensor("out")
    label = t("32 vectors of 12 channels")
    check_shape(verdict, out, x, label)
    check_finite(verdict, out, label)
    before, after = x.norm(dim=-1), out.double().norm(dim=-1)
    ratio = (after / before - 1).abs()
    if ratio.max() > NORM_RTOL:
        b, pos = (int(i) for i in torch.nonzero(ratio == ratio.max())[0])
        verdict.fail(t("the vector at (batch {b}, position {pos}) has length {after:.6g} after the rotation and "
                       "{before:.6g} before (relative change {change:.2g}; expected < {tolerance:g})", b=b, pos=pos,
                       after=float(after[b, pos]), before=float(before[b, pos]), change=float(ratio.max()),
                       tolerance=NORM_RTOL))
    moved = (out.double()[:, 1:] - x[:, 1:]).abs().max()
    verdict.check(moved > ROTATED, t("the output equals the input at every position (largest change {moved:.2g}): "
                                     "nothing is rotated", moved=float(moved)))
    verdict.ok(t("at 32 positions every vector keeps its length (largest relative change {change:.1e}) and is rotated",
                 change=float(ratio.max())))


@criterion("relative_position", kind="values",
           title=t("<rope(q, m), rope(k, n)> depends only on m - n"),
           hint=t("The angle must be linear in the position, p * theta_i, with the same theta_i for q and k; then "
                  "rotating q by m and k by n leaves a rotation by m - n in their dot product."))
def test_relative_position(obs, ref, verdict):
    inputs, got = ref.probe("relative"), obs.probe("relative")
    q, k = inputs.tensor("q"), inputs.tensor("k")
    rq, rk = got.tensor("rq").double(), got.tensor("rk").double()
    q_label, k_label = t("q repeated at 12 positions"), t("k repeated at 12 positions")
    check_shape(verdict, rq, q.expand(12, 16), q_label)
    check_shape(verdict, rk, k.expand(12, 16), k_label)
    check_finite(verdict, rq, q_label)
    check_finite(verdict, rk, k_label)
    scores = rq @ rk.T                          # scores[m, n] = <rope(q, m), rope(k, n)>
    scale = float(q.norm() * k.norm())
    worst, worst_d, means = 0.0, 0, []
    for d in range(-11, 12):
        diag = scores.diagonal(-d)              # entries with m - n = d
        means.append(float(diag.mean()))
        spread = float(diag.max() - diag.min())
        if spread > worst:
            worst, worst_d = spread, d
    verdict.note(largest_spread=worst / scale, at_offset=worst_d)
    if worst > RELATIVE_RTOL * scale:
        diag = scores.diagonal(-worst_d)
        lo, hi = int(diag.argmin()), int(diag.argmax())
        m0 = max(worst_d, 0)
        verdict.fail(t("for m - n = {offset} the score ranges from {low:.6g} (m={m_low}, n={n_low}) to {high:.6g} "
                       "(m={m_high}, n={n_high}): it depends on the absolute positions, not only on m - n "
                       "(|q||k| = {scale:.4g})", offset=worst_d, low=float(diag[lo]), m_low=m0 + lo,
                       n_low=m0 + lo - worst_d, high=float(diag[hi]), m_high=m0 + hi, n_high=m0 + hi - worst_d,
                       scale=scale))
    verdict.check(max(means) - min(means) > ROTATED * scale,
                  t("the score is the same for every m - n: positions are not encoded at all"))
    verdict.ok(t("for every offset m - n in -11..11 the score is the same at all (m, n) (largest spread "
                 "{spread:.1e}·|q||k|), and it changes with m - n", spread=worst / scale))


@criterion("rotate_half_pairing", kind="values",
           title=t("Channel i is rotated together with channel i + D/2 (rotate-half)"),
           hint=t("Split the last axis into halves, x1 = x[..., :D/2] and x2 = x[..., D/2:], and return cat(x1*cos - "
                  "x2*sin, x2*cos + x1*sin); do not pair x[..., 0::2] with x[..., 1::2]."))
def test_rotate_half_pairing(obs, ref, verdict):
    out = obs.probe("pairing").tensor("out").double()
    D, T = (ref.probe("pairing").value(key) for key in ("channels", "positions"))   # the probe's one-hot inputs
    shape = [D, T, D]
    verdict.check(list(out.shape) == shape, t("x of shape {shape} gave an output of shape {got}", shape=shape,
                                              got=list(out.shape)))
    check_finite(verdict, out, t("one-hot inputs of shape {shape}", shape=shape))
    mixes = {}
    for j in range(D):
        mixes[j] = [c for c in range(D) if out[j, :, c].abs().max() > LEAK]
    verdict.note(channels_reached_from=mixes)
    half = {j: sorted({j, (j + D // 2) % D}) for j in range(D)}
    verdict.note(expected_reached_from=half)
    adjacent = {j: sorted({j, j ^ 1}) for j in range(D)}
    if mixes == adjacent:
        verdict.fail(t("your rotation pairs adjacent channels (2i, 2i+1); the course uses rotate-half pairing "
                       "(i, i + D/2): with D = {d}, channel 0 must turn with channel {half}, not with channel 1", d=D,
                       half=D // 2))
    for j in range(D):
        if not set(mixes[j]) <= set(half[j]):
            partner = half[j][0] if half[j][0] != j else half[j][1]
            verdict.fail(t("with D = {d}, the one-hot input on channel {channel} reached channels {reached}; "
                           "rotate-half pairing mixes it only with channel {partner} (channels {pair})", d=D, channel=j,
                           reached=mixes[j], partner=partner, pair=half[j]))
    unpaired = [j for j in range(D) if set(mixes[j]) != set(half[j])]
    verdict.check(not unpaired, t("with D = {d}, the one-hot input on channel {channel} never reached its partner "
                                  "channel at positions 1 and 2: that pair is not rotated", d=D,
                                  channel=unpaired[0] if unpaired else 0))
    verdict.ok(t("with D = {d}, every channel i is mixed with channel i + D/2 (mod D) and with no other channel", d=D))


@criterion("values_match_reference", kind="values",
           title=t("Values equal the reference rotation, including large positions"),
           hint=t("theta_i = base ** (-2 * i / D) for i = 0 .. D/2 - 1, angle = position * theta_i; out = cat(x1*cos - "
                  "x2*sin, x2*cos + x1*sin) with x1, x2 the two halves of the last axis."))
def test_values_match_reference(obs, ref, verdict):
    got, inputs = obs.probe("values"), ref.probe("values")
    x = inputs.tensor("x64")
    out = got.tensor("out64")
    problem = difference(out, rope(x), atol=VALUE_TOLERANCE)
    if problem:
        verdict.fail(t("on x of shape [B, H, T, D] = {shape} (float64) the output differs from the rotate-half "
                       "reference: {problem}.{cause}", shape=list(x.shape), problem=problem, cause=diagnose(out, x)))
    x32, out32 = inputs.tensor("x32"), got.tensor("out32")
    verdict.check(out32.dtype == torch.float32, t("a float32 input gave a {dtype} output; expected float32",
                                                  dtype=str(out32.dtype)[6:]))
    problem = difference(out32, rope(x32), atol=FLOAT32_TOLERANCE, rtol=FLOAT32_TOLERANCE)
    if problem:
        verdict.fail(t("on a float32 x of shape {shape} (D/2 = {pairs} pairs) the output differs from the reference: "
                       "{problem}.{cause}", shape=list(x32.shape), pairs=x32.shape[-1] // 2, problem=problem,
                       cause=diagnose(out32, x32, atol=FLOAT32_TOLERANCE)))
    x_long, out_long = inputs.tensor("x_long"), got.tensor("out_long")
    problem = difference(out_long, rope(x_long), atol=LONG_TOLERANCE)
    if problem:
        verdict.fail(t("on a sequence of T = {rows} rows (positions 0..{last}, D = {d}) the output differs from the "
                       "reference: {problem} (index = (position, channel)).{cause}", rows=x_long.shape[0],
                       last=x_long.shape[0] - 1, d=x_long.shape[-1], problem=problem,
                       cause=diagnose(out_long, x_long, atol=LONG_TOLERANCE)))
    verdict.ok(t("matches the rotate-half reference on {shape} (within {tolerance:g}), on float32 {shape32}, "
                 "and at positions up to {last} (within {long_tolerance:g})", shape=list(x.shape),
                 tolerance=VALUE_TOLERANCE, shape32=list(x32.shape), last=x_long.shape[0] - 1,
                 long_tolerance=LONG_TOLERANCE))


@criterion("explicit_positions", kind="values",
           title=t("Explicit positions: a slice with its positions gives the matching rows"),
           hint=t("Build the angles from the positions argument when it is given (not from arange(T)): a cached "
                  "decoding step at position t must be rotated by t, not by 0."))
def test_explicit_positions(obs, ref, verdict):
    got, inputs = obs.probe("positions"), ref.probe("positions")
    x = inputs.tensor("x")
    full = got.tensor("full").double()
    check_shape(verdict, full, x, t("the full sequence"))
    verdict.check(difference(full[..., 1:, :], x[..., 1:, :], atol=ROTATED) is not None,
                  t("apply_rope(x) returned x unchanged at every position: nothing is rotated, so positions cannot be "
                    "judged"))
    kwargs = own_formula(obs, ref)
    for key, s, e in (("part", 4, 9), ("last", 11, 12)):
        part = got.tensor(key)
        problem = difference(part, full[..., s:e, :], atol=SAME_CALL)
        if problem:
            ignored = verbatim("")
            if difference(part, rope(x[..., s:e, :], **kwargs), atol=VALUE_TOLERANCE) is None:
                ignored = t(" Your rows are rotated as positions 0..{last}: the positions argument is ignored (build "
                            "the angles from positions, not from arange(T)).", last=e - s - 1)
            verdict.fail(t("apply_rope(x[..., {start}:{end}, :], positions=arange({start}, {end})) differs from rows "
                           "{start}..{last} of apply_rope(x): {problem}.{ignored}", start=s, end=e, last=e - 1,
                           problem=problem, ignored=ignored))
    far, far_rows = got.tensor("far"), got.tensor("long_far_rows")
    positions = inputs.tensor("far_positions").tolist()
    problem = difference(far, far_rows, atol=SAME_CALL)
    if problem:
        verdict.fail(t("rows at the unordered positions {positions}, rotated with those positions, differ from the "
                       "same rows of apply_rope on the whole 4096-row sequence: {problem} (index = (row, channel))",
                       positions=positions, problem=problem))
    verdict.ok(t("a slice with positions arange(4, 9), a single decoding step at position 11, and ten scattered "
                 "positions up to 4095 all give the rows of the full call"))


@criterion("custom_base", kind="values",
           title=t("The base argument sets the frequencies"),
           hint=t("Use the base passed in: theta_i = base ** (-2 * i / D), not a hard-coded 10000."))
def test_custom_base(obs, ref, verdict):
    got, x = obs.probe("custom_base"), ref.probe("custom_base").tensor("x")
    kwargs = own_formula(obs, ref)   # a pairing or exponent mistake is judged by values_match_reference, not here
    for key, base in (("out_100", 100.0), ("out_500000", 500000.0)):
        out = got.tensor(key)
        want = rope(x, base=base, **kwargs)
        problem = difference(out, want, atol=VALUE_TOLERANCE)
        if problem:
            if difference(out, rope(x, **kwargs), atol=VALUE_TOLERANCE) is None:
                verdict.fail(t("apply_rope(x, base={base:g}) returned the same rotation as base 10000: the base "
                               "argument is ignored", base=base))
            verdict.fail(t("apply_rope(x, base={base:g}) on x of shape [6, 12] differs from the reference: "
                           "{problem}.{cause}", base=base, problem=problem, cause=diagnose(out, x, base=base)))
    verdict.ok(t("base = 100 and base = 500000 change the frequencies as base ** (-2i/D) predicts"))


@criterion("leading_dims", kind="values",
           title=t("Any leading axes: each [T, D] matrix is rotated on its own"),
           hint=t("The sequence is axis -2 whatever comes before it: with [B, H, T, D] take T = x.shape[-2] and let "
                  "[T, D/2] angles broadcast; do not assume 4 axes or put the positions on axis 1."))
def test_leading_dims(obs, ref, verdict):
    got, inputs = obs.probe("leading_dims"), ref.probe("leading_dims")
    for key, label in (("square", verbatim("[B, H, T, D] = [2, 4, 4, 6] (H == T)")), ("5d", verbatim("[2, 2, 3, 5, "
                                                                                                     "4]"))):
        x, out, slices = inputs.tensor(f"x_{key}"), got.tensor(f"out_{key}"), got.tensor(f"slices_{key}")
        check_shape(verdict, out, x, label)
        verdict.check(difference(out, x, atol=ROTATED) is not None,
                      t("on x of shape {shape} the output equals the input: nothing is rotated", shape=label))
        problem = difference(out, slices, atol=SAME_CALL)
        if problem:
            axis = verbatim("")
            if x.shape[-3] == x.shape[-2] and difference(out, rope(x, seq_dim=-3), atol=VALUE_TOLERANCE) is None:
                axis = t(" The positions run along axis -3 (H) instead of axis -2 (T).")
            verdict.fail(t("on x of shape {shape} the batched output differs from rotating each [T, D] matrix on its "
                           "own: {problem}.{axis}", shape=label, problem=problem, axis=axis))
    x_td, out_td = inputs.tensor("x_td"), got.tensor("out_td")
    check_shape(verdict, out_td, x_td, verbatim("[T, D] = [7, 6]"))
    verdict.ok(t("for [2, 4, 4, 6] (H == T) and [2, 2, 3, 5, 4] the batched output equals each [T, D] matrix rotated "
                 "on its own; [7, 6] works too"))


@criterion("gradient_flows", kind="gradient",
           title=t("Backpropagation through apply_rope gives the exact, finite gradient"),
           hint=t("Compute the output from x with tensor operations only (no .detach(), .data, .numpy() or in-place "
                  "writes into a tensor that needs grad); cos and sin need no gradient."))
def test_gradient_flows(obs, ref, verdict):
    got, inputs = obs.probe("gradients"), ref.probe("gradients")
    if "x_grad" in got.not_tensors:
        verdict.fail(t("no gradient reached x (x.grad is None): the output is not computed from x inside autograd"))
    x = inputs.tensor("x")
    grad = got.tensor("x_grad").double()
    verdict.check(list(grad.shape) == list(x.shape), t("x.grad has shape {got}; expected {want}", got=list(grad.shape),
                                                       want=list(x.shape)))
    verdict.check(bool(torch.isfinite(grad).all()), t("x.grad contains NaN or inf"))
    g = inputs.tensor("g").double()
    plus, minus = got.tensor("nudged_plus"), got.tensor("nudged_minus")
    nudged_shape = [x.numel(), *x.shape]
    for out in (plus, minus):
        verdict.check(list(out.shape) == nudged_shape, t("apply_rope on x of shape {shape} returned shape {got}",
                                                         shape=list(x.shape), got=list(out.shape[1:])))
    slopes = ((plus.double() - minus.double()) * g).flatten(1).sum(1) / (2 * inputs.value("fd_step"))
    if not bool(torch.isfinite(slopes).all()):
        verdict.fail(t("the forward pass gave a non-finite output when one element of x was nudged by {step:g}",
                       step=inputs.value("fd_step")))
    numeric = slopes.reshape(x.shape)
    verdict.note(largest_gradient_difference=float((grad - numeric).abs().max()), tolerance=GRAD_TOLERANCE)
    problem = difference(grad, numeric, atol=GRAD_TOLERANCE)
    if problem:
        verdict.fail(t("x.grad differs from the gradient that nudging each element of x and calling apply_rope again "
                       "gives: {problem} (index = (batch, position, channel)); part of the computation is hidden from "
                       "autograd, or its backward is not the forward's", problem=problem))
    verdict.ok(t("x.grad is finite and equals, element by element, the central differences of your apply_rope "
                 "(within {tolerance:g})", tolerance=GRAD_TOLERANCE))


@criterion("rejects_bad_input", kind="errors",
           title=t("ValueError for an odd D and for positions of the wrong length"),
           hint=t("Check x.shape[-1] % 2 and positions.shape == (T,) at the start and raise ValueError naming the "
                  "value you saw; do not let a broadcasting error (RuntimeError) or a silent truncation happen "
                  "instead."))
def test_rejects_bad_input(obs, verdict):
    p = obs.probe("bad_input")
    for key, label in (("odd_d", t("x of shape [4, 7] (D = 7)")), ("odd_d_4d", t("x of shape [2, 2, 5, 5] (D = 5)")),
                       ("positions_short", t("x of shape [6, 8] with positions of length 5")),
                       ("positions_long", t("x of shape [2, 6, 8] with positions of length 7"))):
        outcome = p.value(key)
        if raised(outcome) != "ValueError":
            verdict.fail(t("apply_rope on {label} {outcome}; expected ValueError", label=label,
                           outcome=describe_outcome(outcome)))
    valid = p.value("valid")
    verdict.check(raised(valid) is None, t("apply_rope on x of shape [6, 8] with positions arange(10, 16) {outcome}; "
                                           "it is valid and must return", outcome=describe_outcome(valid)))
    verdict.ok(t("ValueError for D = 7, D = 5, and positions of length 5 and 7 for T = 6; valid positions are "
                 "accepted"))
