"""Hidden criteria of exercise `layer_norm`: LayerNorm and PreNormResidual.

Inputs, weights and upstream gradients are read from the reference run (`ref`): the same seeded probes drew
them before any student code ran, so a submission cannot change what it is compared against.
"""

import math

import torch
import torch.nn.functional as F

from grader.i18n import Text, t, verbatim
from grader.judge.common import forbidden_api_criterion
from grader.judge.compare import describe_outcome, difference, gradient_summary, raised, where_raised
from grader.judge.criterion import criterion
from grader.judge.observations import recorded_breach

EXERCISE = "layer_norm"

EXACT_F64 = 1e-10           # float64 arithmetic of the probe's own or the student's own adds: rounding only
# A float64 input may be normalised in float32 inside the student's LayerNorm (x.float() ... .type_as(x) is legal and
# common), so float64 values are judged at float32 rounding too: FLOAT32_ATOL and FLOAT32_RTOL below.
FLOAT32_ATOL = 1e-5         # float32 against the float64 reference: correct formulas land within ~3e-6 on
FLOAT32_RTOL = 1e-5         #   outputs of size ~5 (a few float32 ulps); every formula bug we know errs by > 1e-3
SAME_TOKEN = 1e-12          # float64: a token's output must not move at all when another token changes
ZERO_MEAN = 1e-5            # a normalised row (weight 1, bias 0) has mean 0 up to rounding: float32 inside rounds 8
                            #   outputs of size <= 3 by <= 2e-7 each; a forgotten mean leaves |mean(x)|/std ~ 0.25
POPULATION_TOLERANCE = 1e-4 # rows of variance 1..9 at D = 4: N vs N - 1 changes outputs by ~15%, while eps
                            #   placement (judged by its own criterion) moves them by < 1e-5; 1e-4 tells these apart
EPS_TOLERANCE = 1e-3        # rows of variance 1e-6 around offsets of size ~2: eps inside vs outside the root (or a
                            #   hard-coded eps) differ by a factor ~3. float32 inside rounds the offsets by 1.2e-7,
                            #   1.2e-4 of these rows' 1e-3 spread: outputs of ~0.3 move by up to ~7e-5
DIAGNOSE = 1e-8             # float64: an alternative formula "matches" the output when it agrees this closely
FD_TOLERANCE = 1e-2         # relative, central differences of the student's forward (steps in probes/layer_norm.py):
                            #   float32 inside (legal) leaves <= 2.3e-4 (20 seeds measured), the reference ~2e-4 of
                            #   truncation; a detached mean is off by 2.4 (240 %), a detached variance by 13 (1300 %)
SUBLAYER_EFFECT = 1e-3         # a block with a linear sublayer (weights ~0.3) moves its output by O(1) away from x
EPS_AGREEMENT = 1e-9        # relative to var + eps: float64 estimates of one eps from each element agree to ~1e-13;
                            #   float32 inside scatters them by ~1e-7 or more


def layer_norm(x, weight=None, bias=None, eps=1e-5, *, unbiased=False, eps_outside=False, dim=-1):
    """The normalisation in float64, and the usual wrong versions of it (for naming a student's mistake)."""
    x = x.double()
    mean = x.mean(dim=dim, keepdim=True)
    var = x.var(dim=dim, keepdim=True, unbiased=unbiased)
    y = (x - mean) / (var.sqrt() + eps if eps_outside else (var + eps).sqrt())
    if weight is not None:
        y = y * weight.double()
    if bias is not None:
        y = y + bias.double()
    return y


def alternatives(x, w, b, eps):
    """(what the student's code does, what it should do, the output that mistake gives) for the known bugs."""
    x_hat = layer_norm(x, eps=eps)
    affine_fix = t("return x_hat * weight + bias")
    return [
        (t("divides the variance by D - 1 (the unbiased estimate, the default of torch.var / Tensor.std)"),
         t("pass unbiased=False (or correction=0)"), layer_norm(x, w, b, eps, unbiased=True)),
        (t("adds eps outside the square root, (x - mean) / (sqrt(var) + eps)"),
         t("use (x - mean) / sqrt(var + eps)"), layer_norm(x, w, b, eps, eps_outside=True)),
        (t("uses x.std() (unbiased) plus eps outside the root"),
         t("use (x - mean) / sqrt(var + eps) with the population variance"),
         layer_norm(x, w, b, eps, unbiased=True, eps_outside=True)),
        (t("takes the statistics over axis -2 (the sequence axis) instead of the last axis"), t("reduce over dim=-1"),
         layer_norm(x, w, b, eps, dim=-2)),
        (t("ignores weight and bias"), affine_fix, layer_norm(x, eps=eps) if w is not None else None),
        (t("adds the bias before scaling, (x_hat + bias) * weight"), affine_fix,
         (x_hat + b.double()) * w.double() if w is not None else None),
        (t("swaps weight and bias, x_hat * bias + weight"), affine_fix,
         x_hat * b.double() + w.double() if w is not None else None),
    ]


def eps_used(got, x, w=None, b=None) -> float | None:
    """The eps a float64 output was computed with, when one eps explains every element: each element gives
    sqrt(var + eps) = (x - mean) / x_hat with x_hat = (out - bias) / weight, so eps = ratio**2 - var. None when the
    estimates disagree (another formula, or float32 inside) or the output is not finite."""
    x, got = x.double(), got.double()
    if list(got.shape) != list(x.shape) or not bool(torch.isfinite(got).all()):
        return None
    x_hat = got
    if b is not None:
        x_hat = x_hat - b.double()
    if w is not None:
        x_hat = x_hat / w.double()
    centred = x - x.mean(dim=-1, keepdim=True)
    var = x.var(dim=-1, keepdim=True, unbiased=False)
    usable = (x_hat.abs() > 0.5) & (centred.abs() > 0.5 * var.sqrt())   # away from 0: a well-conditioned ratio
    if int(usable.sum()) < 4:
        return None
    estimates = ((centred / x_hat) ** 2 - var)[usable]
    eps = float(estimates.median())
    if not float(estimates.max() - estimates.min()) <= EPS_AGREEMENT * (float(var.max()) + abs(eps)):
        return None
    return eps


def diagnose(got, x, w=None, b=None, eps=1e-5, tolerance=DIAGNOSE) -> Text | None:
    """' Your output matches ...' when a known mistake explains `got`, else None."""
    for does, fix, output in alternatives(x, w, b, eps):
        if output is not None and difference(got, output, atol=tolerance, rtol=tolerance) is None:
            return t(" Your output matches a LayerNorm that {does}: {fix}.", does=does, fix=fix)
    return None


def missing_tensor(p, key: str) -> bool:
    return key in p.not_tensors


# --- LayerNorm ------------------------------------------------------------------------------------

@criterion("parameters_registered", kind="registration",
           title=t("weight (ones) and bias (zeros) are registered nn.Parameters of shape [dim]"),
           hint=t("In __init__ write self.weight = nn.Parameter(torch.ones(dim)) and self.bias = "
                  "nn.Parameter(torch.zeros(dim)); a plain tensor attribute is invisible to optimizers and "
                  "state_dict."))
def test_parameters_registered(obs, verdict):
    p = obs.probe("parameters")
    names = p.value("parameter_names")
    verdict.note(parameter_names=names)
    for name, fill, init in (("weight", 1.0, "ones"), ("bias", 0.0, "zeros")):
        kind = p.value(f"{name}_kind")
        if kind == "missing":
            verdict.fail(t("LayerNorm(6) has no attribute `{name}`; the contract asks for self.{name} = "
                           "nn.Parameter(torch.{init}(dim))", name=name, init=init))
        if kind != "Parameter":
            verdict.fail(t("LayerNorm(6).{name} is a {kind}, not an nn.Parameter: optimizers and state_dict will not "
                           "see it", name=name, kind=kind))
        if not p.value(f"{name}_registered"):
            verdict.fail(t("`{name}` is not among the module's named_parameters() {names}: register it as an attribute "
                           "of the module", name=name, names=names))
        if not p.value(f"{name}_requires_grad"):
            verdict.fail(t("LayerNorm(6).{name} has requires_grad=False; it must be trainable", name=name))
        value = p.tensor(name)
        verdict.check(list(value.shape) == [6], t("LayerNorm(6).{name} has shape {shape}; expected [6]", name=name,
                                                  shape=list(value.shape)))
        wrong = (value.double() != fill).nonzero()
        if len(wrong):
            i = int(wrong[0][0])
            verdict.fail(t("LayerNorm(6).{name}[{index}] starts at {value:.6g}; {name} must start at all {init}",
                           name=name, index=i, value=float(value[i]), init=init))
    extra = sorted(set(names) - {"weight", "bias"})
    verdict.check(not extra, t("LayerNorm(6) has parameters {extra} besides weight and bias; LayerNorm has exactly "
                               "those two (2·dim numbers)", extra=extra))
    verdict.ok(t("LayerNorm(6) has exactly two nn.Parameters, weight = ones(6) and bias = zeros(6)"))


@criterion("output_shape_dtype", kind="shape",
           title=t("LayerNorm keeps the input's shape and dtype"),
           hint=t("Reduce with keepdim=True so mean and var broadcast back over the last axis, and create no tensor of "
                  "a fixed dtype (torch.tensor(eps) is float32)."))
def test_output_shape_dtype(obs, verdict):
    p = obs.probe("shapes")
    for key, shape, dtype in (("out_btc", [2, 5, 8], torch.float32), ("out_2d", [4, 8], torch.float32),
                              ("out_4d", [2, 3, 5, 8], torch.float32), ("out_float64", [2, 5, 8], torch.float64)):
        out = p.tensor(key)
        verdict.check(list(out.shape) == shape, t("LayerNorm(8) on x of shape {shape} returned shape {got}; expected "
                                                  "{shape}", shape=shape, got=list(out.shape)))
        verdict.check(out.dtype == dtype, t("LayerNorm(8) on a {dtype} input of shape {shape} returned {got}; expected "
                                            "{dtype} (the input's dtype)", dtype=str(dtype)[6:], shape=shape,
                                            got=str(out.dtype)[6:]))
    verdict.ok(t("shapes [4, 8], [2, 5, 8] and [2, 3, 5, 8] are kept; float32 stays float32 and float64 stays float64"))


@criterion("normalises_last_axis", kind="values",
           title=t("Each token is normalised on its own, over the last axis"),
           hint=t("Take mean and variance with dim=-1, keepdim=True. dim=1 on [B, T, C] averages over the sequence, so "
                  "one token's output depends on the others."))
def test_normalises_last_axis(obs, ref, verdict):
    got, inputs = obs.probe("last_axis"), ref.probe("last_axis")
    x = inputs.tensor("x")
    shape = list(x.shape)   # [B, T, C], as the probe drew it
    out, out_changed = got.tensor("out"), got.tensor("out_changed")
    for value in (out, out_changed):
        verdict.check(list(value.shape) == shape, t("x of shape {shape} gave an output of shape {got}", shape=shape,
                                                    got=list(value.shape)))
        verdict.check(bool(torch.isfinite(value).all()), t("on x of shape {shape} the output holds NaN or inf values",
                                                           shape=shape))
    moved = (out_changed.double() - out.double()).abs().amax(dim=-1)   # [B, T]
    moved[0, 3] = 0.0                                                # the token that was changed
    if moved.max() > SAME_TOKEN:
        b, pos = (int(i) for i in torch.nonzero(moved == moved.max())[0])
        axis = verbatim("")
        for dim, name in ((-2, t("axis -2 (the sequence axis T)")), (0, t("axis 0 (the batch axis B)"))):
            if difference(out, layer_norm(x, dim=dim), atol=DIAGNOSE, rtol=DIAGNOSE) is None:
                axis = t(" Your output matches a normalisation over {axis}.", axis=name)
        verdict.fail(t("on x of shape [B, T, C] = {shape}, changing only token (b=0, t=3) changed the output of token "
                       "(b={b}, t={pos}) by up to {moved:.3g} (expected no change): the statistics mix tokens instead "
                       "of being taken over the last axis alone.{axis}", shape=shape, b=b, pos=pos,
                       moved=float(moved.max()), axis=axis))
    means = out.double().mean(dim=-1)
    worst = means.abs().max()
    if worst > ZERO_MEAN:
        b, pos = (int(i) for i in torch.nonzero(means.abs() == worst)[0])
        verdict.fail(t("with weight 1 and bias 0 the output of token (b={b}, t={pos}) has mean {mean:.6g} over the "
                       "last axis; a normalised vector has mean 0 (subtract the mean taken over dim=-1)",
                       b=b, pos=pos, mean=float(means[b, pos])))
    verdict.ok(t("on {shape} each token's output has mean 0 over the last axis (max |mean| {worst:.1e}) and does not "
                 "move when another token changes", shape=shape, worst=float(worst)))


@criterion("population_variance", kind="values",
           title=t("The variance is the population variance (divide by D)"),
           hint=t("torch.var, Tensor.var and Tensor.std divide by D - 1 by default; pass unbiased=False (or "
                  "correction=0), or compute ((x - mean) ** 2).mean(-1)."))
def test_population_variance(obs, ref, verdict):
    x = ref.probe("population").tensor("x")
    out = obs.probe("population").tensor("out")
    want = layer_norm(x)
    problem = difference(out, want, atol=POPULATION_TOLERANCE)
    if problem:
        biased = layer_norm(x, unbiased=True)
        if difference(out, biased, atol=POPULATION_TOLERANCE) is None:
            ratio = float((out.double() / want).median())
            verdict.fail(t("on rows of D = 4 channels every output is {ratio:.4f} times the expected value (sqrt(3/4) "
                           "= 0.8660): your variance divides by D - 1 = 3, the unbiased estimate; LayerNorm divides by "
                           "D = 4",
                           ratio=ratio))
        verdict.fail(t("on rows of D = 4 channels (weight 1, bias 0) the output differs from the population-variance "
                       "normalisation: {problem}.{cause}", problem=problem, cause=diagnose(out, x) or verbatim("")))
    verdict.ok(t("on rows of D = 4 channels the output matches the population-variance normalisation (within "
                 "{tolerance:g}); the unbiased estimate would be off by 13%", tolerance=POPULATION_TOLERANCE))


@criterion("eps_inside_sqrt", kind="values",
           title=t("eps is added to the variance inside the square root"),
           hint=t("Divide by torch.sqrt(var + self.eps) (or multiply by torch.rsqrt(var + self.eps)), with the eps "
                  "given to __init__; (x - mean) / (std + eps) is a different function."))
def test_eps_inside_sqrt(obs, ref, verdict):
    got, inputs = obs.probe("eps"), ref.probe("eps")
    x, out = inputs.tensor("x_default"), got.tensor("out_default")
    verdict.check(list(out.shape) == list(x.shape), t("x of shape {shape} gave an output of shape {got}",
                                                      shape=list(x.shape), got=list(out.shape)))
    constant = out[4:]
    if not torch.isfinite(constant).all():
        verdict.fail(t("constant rows (variance exactly 0) gave {value}: 0 / sqrt(0) — add eps to the variance inside "
                       "the square root so the denominator is never 0",
                       value=float(constant[~torch.isfinite(constant)][0])))
    if constant.abs().max() > EPS_TOLERANCE:
        verdict.fail(t("a constant row must normalise to 0 (then the output is the bias, here 0); got values up to "
                       "{largest:.3g}.{cause}", largest=float(constant.abs().max()),
                       cause=diagnose(out, x) or verbatim("")))
    accepted = [layer_norm(x), layer_norm(x, unbiased=True)]   # the variance estimator is judged by its own criterion
    if all(difference(out, want, atol=EPS_TOLERANCE, rtol=EPS_TOLERANCE) for want in accepted):
        problem = difference(out[:4], accepted[0][:4], atol=EPS_TOLERANCE, rtol=EPS_TOLERANCE)
        outside = any(difference(out, layer_norm(x, eps_outside=True, unbiased=u), atol=EPS_TOLERANCE,
                                 rtol=EPS_TOLERANCE) is None
                      for u in (False, True))
        eps = eps_used(out[:4], x[:4])
        if not outside and eps is not None and abs(eps - 1e-5) > 1e-3 * 1e-5:
            verdict.fail(t("on rows of variance 1e-6 (below eps = 1e-5) your outputs match a LayerNorm with eps = "
                           "{eps:.3g}: the default is eps=1e-5 (__init__(self, dim, eps=1e-5)), stored and used as "
                           "given", eps=eps))
        if outside:
            verdict.fail(t("on rows of variance 1e-6 (below eps = 1e-5) your outputs reach {got:.4g} where eps inside "
                           "the root gives {want:.4g}: your code adds eps outside the square root, "
                           "(x - mean) / (sqrt(var) + eps)",
                           got=float(out[:4].abs().max()), want=float(accepted[0][:4].abs().max())))
        verdict.fail(t("on rows of variance 1e-6 (below eps = 1e-5) the output differs from (x - mean) / sqrt(var + "
                       "eps): {problem}.{cause}", problem=problem, cause=diagnose(out, x) or verbatim("")))
    x_custom, out_custom = inputs.tensor("x_custom"), got.tensor("out_custom")
    accepted = [layer_norm(x_custom, eps=1e-2), layer_norm(x_custom, eps=1e-2, unbiased=True)]
    if all(difference(out_custom, want, atol=EPS_TOLERANCE, rtol=EPS_TOLERANCE) for want in accepted):
        problem = difference(out_custom, accepted[0], atol=EPS_TOLERANCE, rtol=EPS_TOLERANCE)
        ignored = any(difference(out_custom, layer_norm(x_custom, eps=1e-5, unbiased=u), atol=EPS_TOLERANCE,
                                 rtol=EPS_TOLERANCE) is None
                      for u in (False, True))
        reason = (t(" It matches eps = 1e-5: the eps passed to __init__ is ignored (store it as self.eps and use it).")
                  if ignored else verbatim(""))
        verdict.fail(t("LayerNorm(6, eps=1e-2) on rows of variance 9e-4 differs from (x - mean) / sqrt(var + 0.01): "
                       "{problem}.{reason}", problem=problem, reason=reason))
    verdict.ok(t("rows of variance 1e-6 match (x - mean) / sqrt(var + eps), constant rows give exactly 0, and eps=1e-2 "
                 "given to __init__ is used"))


@criterion("matches_reference", kind="values",
           title=t("Matches torch.nn.LayerNorm with the same weight and bias"),
           hint=t("y = (x - mean) / sqrt(var + eps) * weight + bias, with mean and population variance over the last "
                  "axis; apply the weight first, then add the bias."))
def test_matches_reference(obs, ref, verdict):
    got, inputs = obs.probe("reference"), ref.probe("reference")
    x, w, b = inputs.tensor("x64"), inputs.tensor("w64"), inputs.tensor("b64")
    out = got.tensor("out64")
    want = F.layer_norm(x, (x.shape[-1],), w, b, eps=1e-5)
    problem = difference(out, want, atol=FLOAT32_ATOL, rtol=FLOAT32_RTOL)  # float32 inside is legal
    if problem:
        cause = diagnose(out, x, w, b, tolerance=FLOAT32_ATOL)
        eps = eps_used(out, x, w, b) if cause is None else None
        if eps is not None and abs(eps - 1e-5) > 1e-3 * 1e-5:
            cause = t(" Your output is a LayerNorm with eps = {eps:.3g}: the default is eps=1e-5 (__init__(self, dim, "
                      "eps=1e-5)), stored and used as given.", eps=eps)
        verdict.fail(t("in float64 on x of shape {shape} with random weight and bias, the output differs from "
                       "torch.nn.LayerNorm: {problem}.{cause}", shape=list(x.shape), problem=problem,
                       cause=cause or verbatim("")))
    x32, w32, b32 = inputs.tensor("x32"), inputs.tensor("w32"), inputs.tensor("b32")
    out32 = got.tensor("out32")
    verdict.check(out32.dtype == torch.float32, t("a float32 input gave a {dtype} output; expected float32",
                                                  dtype=str(out32.dtype)[6:]))
    want32 = F.layer_norm(x32.double(), (x32.shape[-1],), w32.double(), b32.double(), eps=1e-5)
    problem = difference(out32, want32, atol=FLOAT32_ATOL, rtol=FLOAT32_RTOL)
    if problem:
        verdict.fail(t("in float32 on x of shape {shape} with random weight and bias, the output differs from "
                       "torch.nn.LayerNorm (computed in float64): {problem}.{cause}", shape=list(x32.shape),
                       problem=problem,
                       cause=diagnose(out32, x32, w32, b32, tolerance=FLOAT32_ATOL) or verbatim("")))
    verdict.ok(t("with random weight and bias, in float64 and in float32: within {atol:g} + {rtol:g}·|expected| of "
                 "torch.nn.LayerNorm", atol=FLOAT32_ATOL, rtol=FLOAT32_RTOL))


@criterion("gradients_flow", kind="gradient",
           title=t("Gradients reach x, weight and bias and equal the derivative of your forward"),
           hint=t("Keep the whole computation in autograd: no .detach(), .data, .item() or torch.no_grad() on the mean "
                  "or the variance, and use self.weight and self.bias themselves in forward."))
def test_gradients_flow(obs, ref, verdict):
    got, inputs = obs.probe("gradients"), ref.probe("gradients")
    for key, name in (("x_grad", t("the input "
                                   "x")), ("weight_grad", verbatim("weight")), ("bias_grad", verbatim("bias"))):
        if missing_tensor(got, key):
            seen = verbatim("None") if got.not_tensors[key] == "NoneType" else t("a {kind}", kind=got.not_tensors[key])
            verdict.fail(t("no gradient reached {name} (its .grad is {seen}): it is not an nn.Parameter that requires "
                           "grad, it is not used in forward, or the computation left autograd", name=name, seen=seen))
        grad = got.tensor(key)
        verdict.check(bool(torch.isfinite(grad).all()), t("the gradient of {name} contains NaN or inf", name=name))
    checks, steps, g = [], inputs.value("fd_steps"), inputs.tensor("g").double()
    for key, name in (("x", "x"), ("w", "weight"), ("b", "bias")):
        step = steps[key]
        direction = inputs.tensor(f"dir_{key}").double()
        grad = got.tensor({"x": "x_grad", "w": "weight_grad", "b": "bias_grad"}[key]).double()
        verdict.check(list(grad.shape) == list(direction.shape),
                      t("the gradient of {name} has shape {got}; expected {want}", name=name, got=list(grad.shape),
                        want=list(direction.shape)))
        analytic = float((grad * direction).sum())
        plus, minus = (_loss(got.tensor(f"out_{key}_{sign}"), g) for sign in ("plus", "minus"))
        if not (math.isfinite(plus) and math.isfinite(minus)):
            verdict.fail(t("the forward pass gave a non-finite loss ({plus}, {minus}) when {name} was nudged by "
                           "±{step:g}", plus=plus, minus=minus, name=name, step=step))
        numeric = (plus - minus) / (2 * step)
        checks.append({"parameter": name, "autograd": analytic, "finite_difference": numeric})
        if not abs(analytic - numeric) <= FD_TOLERANCE * max(1.0, abs(numeric)):  # NaN fails too
            verdict.fail(t("along a random direction the gradient of {name} gives {analytic:.8g}, but nudging {name} "
                           "and re-running your forward changes the loss at a rate of {numeric:.8g}: part of the "
                           "computation is hidden from autograd", name=name, analytic=analytic, numeric=numeric),
                         checks=checks)
    verdict.ok(t("x, weight and bias receive finite gradients equal to finite differences of your forward (relative "
                 "agreement {tolerance:g})", tolerance=FD_TOLERANCE), checks=checks)


def _loss(out, g):
    """The probe's loss sum(out * g), in float64; NaN when the output does not have g's shape."""
    return float((out.double() * g).sum()) if list(out.shape) == list(g.shape) else math.nan


def _largest_change(after, before) -> float:
    """The largest change, in float64, of a tensor the student's code was handed (inf when its shape changed,
    NaN when a value became NaN: neither equals 0)."""
    if list(after.shape) != list(before.shape):
        return math.inf
    return float((after.double() - before.double()).abs().max()) if before.numel() else 0.0


# --- PreNormResidual ------------------------------------------------------------------------------

@criterion("prenorm_identity", kind="values",
           title=t("A zero sublayer makes PreNormResidual the identity"),
           hint=t("forward must return x + self.sublayer(self.norm(x)); normalising after the addition (post-norm) or "
                  "scaling the residual breaks the identity."))
def test_prenorm_identity(obs, ref, verdict):
    x = ref.probe("prenorm_identity").tensor("x")
    out = obs.probe("prenorm_identity").tensor("out")
    verdict.check(list(out.shape) == list(x.shape), t("x of shape {shape} gave an output of shape {got}",
                                                      shape=list(x.shape), got=list(out.shape)))
    problem = difference(out, x, atol=0.0)
    if problem:
        post = verbatim("")
        if difference(out, layer_norm(x), atol=1e-4) is None:
            post = t(" The output equals norm(x): the block normalises after the residual addition (post-norm).")
        verdict.fail(t("with a sublayer that returns zeros the output should be x exactly: {problem}.{post}",
                       problem=problem, post=post))
    # the positive control: with a sublayer that does something, the block is no longer the identity
    structure, drawn = obs.probe("prenorm_structure"), ref.probe("prenorm_structure")
    x_other, out_other = drawn.tensor("x"), structure.tensor("out")
    if difference(out_other, x_other, atol=SUBLAYER_EFFECT) is None:
        verdict.fail(t("with a sublayer that returns zeros the output is x, but with a linear sublayer it is x as "
                       "well: the block never adds what its sublayer returns, so being the identity shows nothing"))
    verdict.ok(t("with a sublayer that returns zeros, the output equals x bit for bit (and a linear sublayer changes "
                 "it)"))


@criterion("prenorm_structure", kind="values",
           title=t("forward is x + sublayer(norm(x)) with norm a LayerNorm"),
           hint=t("In __init__ store self.norm = LayerNorm(dim) and self.sublayer = sublayer (a module attribute, so "
                  "its parameters are registered); in forward call the sublayer once, on self.norm(x), and add x."))
def test_prenorm_structure(obs, ref, verdict):
    got, inputs = obs.probe("prenorm_structure"), ref.probe("prenorm_structure")
    verdict.check(got.value("norm_is_layernorm"),
                  t("block.norm is a {kind}; it must be the LayerNorm class of your "
                    "norm.py", kind=got.value("norm_class")))
    verdict.check(got.value("sublayer_registered"),
                  t("the sublayer's parameters are not among block.parameters(): store it as a module attribute "
                    "(self.sublayer = sublayer)"))
    calls = got.value("calls")
    verdict.check(calls == 1, t("forward called the sublayer {calls} times; expected exactly once", calls=calls))
    x = inputs.tensor("x")
    W, c = inputs.tensor("sub_weight"), inputs.tensor("sub_bias")
    w, b = inputs.tensor("norm_weight"), inputs.tensor("norm_bias")
    # The output is judged with the grader's own LayerNorm in place of block.norm: the expectation is computed here
    # from the inputs alone, never from what the student's norm returned.
    out = got.tensor("out_grader_norm")
    normed = layer_norm(x, w, b)
    sublayer = normed @ W.T + c
    problem = difference(out, x + sublayer, atol=EXACT_F64, rtol=EXACT_F64)
    if problem:
        hint = verbatim("")
        if difference(out, sublayer, atol=1e-6) is None:
            hint = t(" The output equals sublayer(norm(x)) alone: the residual x is not added.")
        elif difference(out, normed + sublayer, atol=1e-6) is None:
            hint = t(" The output is norm(x) + sublayer(norm(x)): add the raw x, not its normalised version.")
        elif difference(out, layer_norm(x + x @ W.T + c, w, b), atol=1e-6) is None:
            hint = t(" The output is norm(x + sublayer(x)): that is post-norm; the course uses pre-norm.")
        verdict.fail(t("with block.norm replaced by a LayerNorm of the grader's, the output is not x + "
                       "sublayer(norm(x)): {problem}.{hint}", problem=problem, hint=hint))
    # What the sublayer received in the block as written, against the student's own norm called directly.
    received, own = got.tensor("received").double(), got.tensor("own_norm").double()
    if not bool(torch.isfinite(own).all()):
        verdict.fail(t("block.norm(x) holds NaN or inf for a finite x of shape {shape} (rows of spread ~2), so what "
                       "the sublayer receives cannot be judged; LayerNorm must be finite here", shape=list(x.shape)))
    problem = difference(received, own, atol=SAME_TOKEN, rtol=SAME_TOKEN)
    if problem:
        if difference(received, x, atol=SAME_TOKEN) is None:
            verdict.fail(t("the sublayer received x itself, not norm(x): normalise first, then call the sublayer."))
        verdict.fail(t("the sublayer did not receive block.norm(x): {problem}", problem=problem))
    verdict.ok(t("block.norm is your LayerNorm, the sublayer is registered, called once on norm(x), and the output is "
                 "x + sublayer(norm(x))"))


@criterion("input_not_modified", kind="values",
           title=t("The input x is never modified in place"),
           hint=t("Write return x + self.sublayer(self.norm(x)), not x += ... or x.add_(...); in LayerNorm, x - mean "
                  "instead of x.sub_(mean)."))
def test_input_not_modified(obs, ref, verdict):
    got, inputs = obs.probe("reference"), ref.probe("reference")
    x = inputs.tensor("x64")
    change = _largest_change(got.tensor("x64_after_call"), x)
    verdict.check(change == 0.0, t("LayerNorm's forward changed its input tensor by up to {change}: an in-place "
                                   "operation (sub_, div_, -=, /=) rewrote the caller's x", change=change))
    # the positive control: an untouched input counts only for a forward that normalises it (the reference's
    # output, or one a known formula mistake explains, which other criteria judge), never for one returning x as it is
    out, w, b = got.tensor("out64"), inputs.tensor("w64"), inputs.tensor("b64")
    normalised = (difference(out, F.layer_norm(x, (x.shape[-1],), w, b, eps=1e-5), atol=1e-5, rtol=1e-5) is None
                  or diagnose(out, x, w, b) is not None)
    if not normalised:
        verdict.fail(t("LayerNorm's forward leaves its input unchanged, but what it returns is no layer normalisation "
                       "of it ({problem}), so an untouched input shows nothing", problem=difference(
                           out, F.layer_norm(x, (x.shape[-1],), w, b, eps=1e-5), atol=1e-5, rtol=1e-5)))
    block, drawn = obs.probe("prenorm_inplace"), ref.probe("prenorm_inplace")
    x = drawn.tensor("x")
    change = _largest_change(block.tensor("x_after_call"), x)
    verdict.check(change == 0.0, t("PreNormResidual's forward changed the caller's x by up to {change}: the residual "
                                   "is modified in place (x += ... or x.add_(...)); return x + sublayer(norm(x)) "
                                   "instead",
                                   change=change))
    W, c = drawn.tensor("sub_weight"), drawn.tensor("sub_bias")
    residual, post_norm = x + layer_norm(x) @ W.T + c, layer_norm(x + x @ W.T + c)
    out = block.tensor("out_grader_norm")
    if difference(out, residual, atol=1e-6, rtol=1e-6) and difference(out, post_norm, atol=1e-6, rtol=1e-6):
        verdict.fail(t("PreNormResidual's forward leaves x unchanged, but with the grader's LayerNorm as block.norm it "
                       "returns neither x + sublayer(norm(x)) nor norm(x + sublayer(x)) ({problem}), so an untouched "
                       "input shows nothing", problem=difference(out, residual, atol=1e-6, rtol=1e-6)))
    verdict.ok(t("after LayerNorm and PreNormResidual, which both compute their result, the caller's x is unchanged"))


@criterion("residual_gradient", kind="gradient",
           title=t("The residual passes the gradient straight through"),
           hint=t("The output is x + sublayer(norm(x)), so d(out)/dx contains the identity: with a zero sublayer "
                  "x.grad equals the upstream gradient. An in-place add on x, a detach, or a norm after the addition "
                  "breaks this."))
def test_residual_gradient(obs, ref, verdict):
    got = obs.probe("residual_gradient")
    outcome = got.value("zero_sublayer")
    if raised(outcome) and outcome["raised"].get("breach"):
        verdict.fail(t("with a sublayer that returns zeros, {breach}", breach=recorded_breach(outcome["raised"])))
    if raised(outcome):
        verdict.fail(t("backward through PreNormResidual (input requires grad) {outcome}{where}",
                       outcome=describe_outcome(outcome), where=where_raised(outcome["raised"])))
    if missing_tensor(got, "x_grad"):
        verdict.fail(t("no gradient reached x through the residual (x.grad is None)"))
    g = ref.probe("residual_gradient").tensor("g")
    problem = difference(got.tensor("x_grad"), g, atol=SAME_TOKEN)
    if problem:
        verdict.fail(t("with a zero sublayer x.grad should equal the upstream gradient exactly: "
                       "{problem}", problem=problem))
    outcome = got.value("linear_sublayer")
    if raised(outcome) and outcome["raised"].get("breach"):
        verdict.fail(t("with a linear sublayer, {breach}", breach=recorded_breach(outcome["raised"])))
    if raised(outcome):
        verdict.fail(t("backward through PreNormResidual with a linear sublayer {outcome}{where}",
                       outcome=describe_outcome(outcome), where=where_raised(outcome["raised"])))
    grads = {name: gradient_summary(got, f"grad.{name}") for name in got.value("parameters")}
    verdict.note(grads=grads)
    verdict.check(any(n.startswith("norm.") for n in grads), t("block.norm has no parameters to receive a gradient"))
    for name, grad in grads.items():
        verdict.check(grad is not None, t("parameter `{name}` received no gradient", name=name))
        verdict.check(grad["finite"], t("parameter `{name}` received a non-finite gradient", name=name))
    x_grad = gradient_summary(got, "input_grad")
    verdict.check(x_grad is not None and x_grad["finite"],
                  t("with a linear sublayer the gradient of x is missing or not finite"))
    verdict.ok(t("with a zero sublayer x.grad equals the upstream gradient exactly; with a linear sublayer x and "
                 "{parameters} get finite gradients", parameters=", ".join(sorted(grads))))


test_no_forbidden_api = forbidden_api_criterion()
