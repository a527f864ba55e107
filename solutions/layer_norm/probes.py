"""Probes of exercise `layer_norm` (norm.py): LayerNorm and PreNormResidual.

Every input is drawn from the probe's generator before student code can run, in the same order for every
submission, so the judge reads the inputs from the reference run and never trusts the ones a worker wrote.
"""

import torch
import torch.nn as nn

from grader.worker.probe import ContractBreach, probe, student_tensor, student_value

F64 = torch.float64
# Central-difference steps of the gradient probe, per input. The output is linear in weight and bias: exact at any
# step, so a large one keeps float32 rounding inside the student's forward (legal) far below it. In x the
# truncation error grows as step^2 while float32 rounding shrinks as 1/step: 5e-3 keeps both near 2e-4 relative.
FD_STEPS = {"x": 5e-3, "w": 0.1, "b": 0.1}


def unit_rows(ctx, rows: int, dim: int) -> torch.Tensor:
    """Rows with mean exactly 0 and population variance 1 (float64), so the judge knows every row's spread."""
    z = ctx.randn(rows, dim, dtype=F64)
    z = z - z.mean(dim=-1, keepdim=True)
    return z / z.pow(2).mean(dim=-1, keepdim=True).sqrt()


def set_affine(module, weight: torch.Tensor, bias: torch.Tensor) -> None:
    """Overwrite weight and bias with the judge's values (the student's tensors keep their own dtype)."""
    with torch.no_grad():
        for name, value in (("weight", weight), ("bias", bias)):
            if not hasattr(module, name):
                raise ContractBreach("your LayerNorm has no attribute `{name}`, which the contract names", name=name)
            student_tensor("the weight or bias of your LayerNorm", getattr(module, name), shape=list(value.shape))
            getattr(module, name).copy_(value)


class GraderNorm(nn.Module):
    """The grader's own LayerNorm (population variance, eps 1e-5 inside the root, the judge's weight and bias),
    put in place of a block's `norm`: the block's output is then judged against x + sublayer(norm(x)) computed in
    the judge alone, whatever the student's LayerNorm gives."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor):
        super().__init__()
        self.register_buffer("weight", weight.clone())
        self.register_buffer("bias", bias.clone())

    def forward(self, h):
        mean = h.mean(dim=-1, keepdim=True)
        var = ((h - mean) ** 2).mean(dim=-1, keepdim=True)
        return (h - mean) / torch.sqrt(var + 1e-5) * self.weight + self.bias


class ZeroSublayer(nn.Module):
    """A sublayer whose output is all zeros and carries no gradient: the pre-norm block must be the identity."""

    def forward(self, h):
        return torch.zeros_like(h)


class RecordingSublayer(nn.Module):
    """A linear sublayer with the judge's weights that remembers every input it received."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor):
        super().__init__()
        self.linear = nn.Linear(weight.shape[1], weight.shape[0]).to(weight.dtype)
        with torch.no_grad():
            self.linear.weight.copy_(weight)
            self.linear.bias.copy_(bias)
        self.seen: list[torch.Tensor] = []

    def forward(self, h):
        if isinstance(h, torch.Tensor):
            self.seen.append(h.detach().clone())
        return self.linear(h)


def linear_sublayer(ctx, dim: int, dtype=torch.float32) -> RecordingSublayer:
    return RecordingSublayer(ctx.randn(dim, dim, dtype=dtype) * 0.3, ctx.randn(dim, dtype=dtype) * 0.3)


# --- LayerNorm ------------------------------------------------------------------------------------

@probe
def parameters(student, ctx):
    # Facts about the module object itself (an attribute's class, its registration): no tensor carries them.
    ln = student.LayerNorm(6)
    named = dict(ln.named_parameters())
    ctx.record(parameter_names=sorted(named))
    for name in ("weight", "bias"):
        value = getattr(ln, name, None)
        kind = ("missing" if value is None
                else "Parameter" if isinstance(value, nn.Parameter) else type(value).__name__)
        ctx.record(**{f"{name}_kind": kind, f"{name}_registered": name in named,
                      f"{name}_requires_grad": bool(isinstance(value, torch.Tensor) and value.requires_grad)})
        ctx.tensor(name, value)


@probe
def shapes(student, ctx):
    ln = student.LayerNorm(8)
    inputs = {"btc": ctx.randn(2, 5, 8), "2d": ctx.randn(4, 8), "4d": ctx.randn(2, 3, 5, 8)}
    x64 = ctx.randn(2, 5, 8, dtype=F64)
    with torch.no_grad():
        for key, x in inputs.items():
            ctx.tensor(f"out_{key}", ln(x))
        ctx.tensor("out_float64", student.LayerNorm(8).double()(x64))


@probe
def last_axis(student, ctx):
    # [B, T, C] = [2, 5, 8], T != C; weight 1 and bias 0 set explicitly, so only the normalisation is seen
    x = ctx.randn(2, 5, 8, dtype=F64) * 2 + 0.5
    changed = x.clone()
    changed[0, 3] = changed[0, 3] * 4 + 3          # one token changes; no other token's output may move
    ctx.tensor("x", x)
    ctx.tensor("changed", changed)
    ln = student.LayerNorm(8).double()
    set_affine(ln, torch.ones(8, dtype=F64), torch.zeros(8, dtype=F64))
    with torch.no_grad():
        ctx.tensor("out", ln(x.clone()))
        ctx.tensor("out_changed", ln(changed.clone()))


@probe
def population(student, ctx):
    # D = 4: the unbiased estimate is 4/3 of the population variance, a 15% change in every output.
    # Every row has population variance between 1 and 9, far above eps, so eps placement barely matters here.
    scale = 1 + 2 * torch.rand(12, 1, generator=ctx.generator, dtype=F64)
    x = unit_rows(ctx, 12, 4) * scale + ctx.randn(12, 1, dtype=F64)
    ctx.tensor("x", x)
    ln = student.LayerNorm(4).double()
    set_affine(ln, torch.ones(4, dtype=F64), torch.zeros(4, dtype=F64))
    with torch.no_grad():
        ctx.tensor("out", ln(x.clone()))


@probe
def eps(student, ctx):
    # variance 1e-6, below the default eps = 1e-5, plus two constant rows (variance exactly 0)
    tiny = unit_rows(ctx, 4, 6) * 1e-3 + ctx.randn(4, 1, dtype=F64)
    constant = torch.tensor([[7.0] * 6, [-3.25] * 6], dtype=F64)
    x_default = torch.cat([tiny, constant])
    # eps = 1e-2 passed to the constructor, rows of variance 9e-4: a hard-coded 1e-5 is off by a factor 3
    x_custom = unit_rows(ctx, 4, 6) * 0.03 + ctx.randn(4, 1, dtype=F64)
    ctx.tensor("x_default", x_default)
    ctx.tensor("x_custom", x_custom)
    ones, zeros = torch.ones(6, dtype=F64), torch.zeros(6, dtype=F64)
    ln = student.LayerNorm(6).double()
    set_affine(ln, ones, zeros)
    custom = student.LayerNorm(6, eps=1e-2).double()
    set_affine(custom, ones, zeros)
    with torch.no_grad():
        ctx.tensor("out_default", ln(x_default.clone()))
        ctx.tensor("out_custom", custom(x_custom.clone()))


@probe
def reference(student, ctx):
    # float64 with the judge's weight and bias: the formula, judged to rounding
    x64 = ctx.randn(3, 5, 10, dtype=F64) * 3 + 1
    w64, b64 = 1 + 0.5 * ctx.randn(10, dtype=F64), 0.5 * ctx.randn(10, dtype=F64)
    # float32, the dtype the course trains in
    x32 = ctx.randn(2, 7, 12) * 2 - 0.5
    w32, b32 = 1 + 0.5 * ctx.randn(12), 0.5 * ctx.randn(12)
    for key, value in (("x64", x64), ("w64", w64), ("b64", b64), ("x32", x32), ("w32", w32), ("b32", b32)):
        ctx.tensor(key, value)
    ln64 = student.LayerNorm(10).double()
    set_affine(ln64, w64, b64)
    ln32 = student.LayerNorm(12)
    set_affine(ln32, w32, b32)
    given = x64.clone()
    with torch.no_grad():
        ctx.tensor("out64", ln64(given))
        ctx.tensor("out32", ln32(x32.clone()))
    ctx.record_input_after("x64", given)  # the judge compares it with the x64 it drew: an in-place edit shows


@probe
def gradients(student, ctx):
    x = ctx.randn(3, 4, 6, dtype=F64) * 2 + 1
    w, b = 0.5 + ctx.randn(6, dtype=F64).abs(), 0.5 * ctx.randn(6, dtype=F64)
    g = ctx.randn(3, 4, 6, dtype=F64)
    directions = {"x": ctx.randn(3, 4, 6, dtype=F64), "w": ctx.randn(6, dtype=F64), "b": ctx.randn(6, dtype=F64)}
    for key, value in (("x", x), ("w", w), ("b", b), ("g", g)):
        ctx.tensor(key, value)
    for key, value in directions.items():
        ctx.tensor(f"dir_{key}", value)
    ctx.record(fd_steps=FD_STEPS)
    ln = student.LayerNorm(6).double()
    set_affine(ln, w, b)
    leaf = x.clone().requires_grad_(True)
    out = ln(leaf)
    ctx.tensor("out", out)
    student_tensor("your output", out, like=("x", x), depends_on="x, weight, bias")
    with student_value("backward through your output failed"):
        (out * g).sum().backward()
    ctx.tensor("x_grad", leaf.grad)
    ctx.tensor("weight_grad", getattr(ln.weight, "grad", None))
    ctx.tensor("bias_grad", getattr(ln.bias, "grad", None))

    # the student's own forward, nudged along one random direction per input: the judge takes central differences
    for key in ("x", "w", "b"):
        for sign, label in ((1, "plus"), (-1, "minus")):
            step = {k: (sign * FD_STEPS[k] * directions[k] if k == key else 0) for k in directions}
            set_affine(ln, w + step["w"], b + step["b"])
            with torch.no_grad():
                ctx.tensor(f"out_{key}_{label}", ln(x + step["x"]))


# --- PreNormResidual ------------------------------------------------------------------------------

@probe
def prenorm_identity(student, ctx):
    x = ctx.randn(2, 5, 8) * 3 + 1
    ctx.tensor("x", x)
    block = student.PreNormResidual(8, ZeroSublayer())
    with torch.no_grad():
        ctx.tensor("out", block(x.clone()))


@probe
def prenorm_structure(student, ctx):
    x = ctx.randn(2, 5, 8, dtype=F64) * 2 + 1
    sub = linear_sublayer(ctx, 8, F64)
    w, b = 0.5 + ctx.randn(8, dtype=F64).abs(), 0.5 * ctx.randn(8, dtype=F64)
    for key, value in (("x", x), ("sub_weight", sub.linear.weight), ("sub_bias", sub.linear.bias),
                       ("norm_weight", w), ("norm_bias", b)):
        ctx.tensor(key, value)
    block = student.PreNormResidual(8, sub).double()
    norm = getattr(block, "norm", None)
    own = {id(p) for p in block.parameters()}
    ctx.record(norm_class=type(norm).__name__, norm_is_layernorm=isinstance(norm, student.LayerNorm),
               sublayer_registered=all(id(p) in own for p in sub.parameters()))
    with torch.no_grad():
        if isinstance(norm, student.LayerNorm):
            set_affine(norm, w, b)
            ctx.tensor("own_norm", norm(x.clone()))   # the student's own LayerNorm, called directly
        sub.seen.clear()
        ctx.tensor("out", block(x.clone()))
    # A count of calls into the grader's own sublayer: an event in this process, with no value to record instead.
    ctx.record(calls=len(sub.seen))
    if sub.seen:
        ctx.tensor("received", sub.seen[0])
    # the same block with the grader's own norm in place of block.norm: the judge computes what it must give from
    # the inputs alone, so that no expectation rests on what the student's LayerNorm returned
    if isinstance(block, nn.Module) and norm is not None:
        block.norm = GraderNorm(w, b)
        with torch.no_grad():
            ctx.tensor("out_grader_norm", block(x.clone()))


@probe
def prenorm_inplace(student, ctx):
    x = ctx.randn(2, 5, 8, dtype=F64) * 2 + 1
    given = ctx.hand_over("x", x)
    sub = linear_sublayer(ctx, 8, F64)
    ctx.tensor("sub_weight", sub.linear.weight)
    ctx.tensor("sub_bias", sub.linear.bias)
    block = student.PreNormResidual(8, sub).double()
    block(given)                                     # with autograd on, as in training
    ctx.record_input_after("x", given)               # the judge compares it with the x it drew
    # the positive control: with the grader's norm in place of block.norm, what the block returns for a fresh copy
    # of x, so that an untouched input counts only for a block that computes x + sublayer(norm(x))
    if isinstance(block, nn.Module) and getattr(block, "norm", None) is not None:
        block.norm = GraderNorm(torch.ones(8, dtype=F64), torch.zeros(8, dtype=F64))
        ctx.tensor("out_grader_norm", block(ctx.hand_over("x_again", x)))


@probe
def residual_gradient(student, ctx):
    x = ctx.randn(2, 5, 8, dtype=F64) * 2 + 1
    g = ctx.randn(2, 5, 8, dtype=F64)
    ctx.tensor("g", g)
    block = student.PreNormResidual(8, ZeroSublayer()).double()
    leaf = x.clone().requires_grad_(True)

    def backward_through_zero_sublayer():
        out = student_tensor("your block's output", block(leaf), like=("x", x), depends_on="x")
        (out * g).sum().backward()

    ctx.outcome("zero_sublayer", backward_through_zero_sublayer)
    ctx.tensor("x_grad", leaf.grad)

    # a real sublayer: the gradient must also reach the norm's weight and bias and the sublayer
    x2 = ctx.randn(2, 5, 8, dtype=F64)
    g2 = ctx.randn(2, 5, 8, dtype=F64)
    sub = linear_sublayer(ctx, 8, F64)
    block2 = student.PreNormResidual(8, sub).double()
    leaf2 = x2.clone().requires_grad_(True)

    def backward_through_linear_sublayer():
        out = student_tensor("your block's output", block2(leaf2), like=("x", x2), depends_on="x")
        (out * g2).sum().backward()

    ctx.outcome("linear_sublayer", backward_through_linear_sublayer)
    # looked up on the norm and on the sublayer themselves: registration is judged by prenorm_structure
    norm = getattr(block2, "norm", None)
    named = list(norm.named_parameters(prefix="norm")) if isinstance(norm, torch.nn.Module) else []
    named += list(sub.named_parameters(prefix="sublayer"))
    for name, p in named:
        ctx.tensor(f"grad.{name}", p.grad)  # None is recorded as its type
    ctx.record(parameters=[name for name, _ in named])
    ctx.tensor("input_grad", leaf2.grad)
