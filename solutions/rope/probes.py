"""Probes of exercise `rope` (rope.py): apply_rope.

Every input is drawn from the probe's generator before student code runs, in the same order for every
submission, so the judge reads the inputs from the reference run and never trusts the ones a worker wrote.
"""

import torch

from grader.worker.probe import probe, student_tensor, student_value

F64 = torch.float64
# Central differences along every input element. RoPE is linear in x, so they are exact at any step; the step
# only divides the rounding of the outputs, which float32 inside the student's function (legal) puts near
# 2^-24 * |x + h|. A large, exactly representable step keeps that far below the tolerance (criteria/rope.py).
FD_STEP = 0.5


def record_inputs(ctx, **tensors) -> None:
    for key, value in tensors.items():
        ctx.tensor(key, value)


@probe
def shapes(student, ctx):
    inputs = {"bhtd": ctx.randn(2, 3, 5, 8), "td": ctx.randn(5, 8), "btd_float64": ctx.randn(2, 5, 8, dtype=F64),
              "d2": ctx.randn(3, 4, 2)}
    for key, x in inputs.items():
        ctx.tensor(f"out_{key}", student.apply_rope(x.clone()))


@probe
def values(student, ctx):
    x64 = ctx.randn(2, 3, 6, 16, dtype=F64)    # [B, H, T, D], H != T
    x32 = ctx.randn(2, 9, 10)                  # D = 10: an odd number of pairs
    x_long = ctx.randn(4096, 8, dtype=F64)     # default positions up to 4095
    record_inputs(ctx, x64=x64, x32=x32, x_long=x_long)
    ctx.tensor("out64", student.apply_rope(x64.clone()))
    ctx.tensor("out32", student.apply_rope(x32.clone()))
    ctx.tensor("out_long", student.apply_rope(x_long.clone()))


@probe
def pairing(student, ctx):
    # batch j holds the one-hot vector e_j at every position: the output shows which channels e_j is mixed into
    D, T = 8, 3
    ctx.record(channels=D, positions=T)
    x = torch.eye(D, dtype=F64)[:, None, :].repeat(1, T, 1)   # [D, T, D]
    ctx.tensor("out", student.apply_rope(x))


@probe
def norms(student, ctx):
    x = ctx.randn(2, 16, 12, dtype=F64) * 2
    ctx.tensor("x", x)
    ctx.tensor("out", student.apply_rope(x.clone()))


@probe
def relative(student, ctx):
    # the same query vector at positions 0..11 and the same key vector at positions 0..11
    T, D = 12, 16
    q, k = ctx.randn(D, dtype=F64), ctx.randn(D, dtype=F64)
    record_inputs(ctx, q=q, k=k)
    ctx.tensor("rq", student.apply_rope(q.expand(T, D).clone()))
    ctx.tensor("rk", student.apply_rope(k.expand(T, D).clone()))


@probe
def positions(student, ctx):
    # every call with explicit positions is compared with the student's own call on the whole sequence
    x = ctx.randn(2, 3, 12, 8, dtype=F64)
    long = ctx.randn(4096, 8, dtype=F64)
    far_positions = torch.tensor([4093, 7, 4095, 0, 2048, 3, 1000, 4094, 12, 4090])
    record_inputs(ctx, x=x, far_positions=far_positions)
    ctx.tensor("full", student.apply_rope(x.clone()))
    ctx.tensor("part", student.apply_rope(x[..., 4:9, :].clone(), positions=torch.arange(4, 9)))
    ctx.tensor("last", student.apply_rope(x[..., 11:12, :].clone(), positions=torch.tensor([11])))
    whole = student_tensor("your output", student.apply_rope(long.clone()), like=("x", long))
    ctx.tensor("long_far_rows", whole[far_positions])
    ctx.tensor("far", student.apply_rope(long[far_positions].clone(), positions=far_positions.clone()))


@probe
def custom_base(student, ctx):
    x = ctx.randn(6, 12, dtype=F64)
    ctx.tensor("x", x)
    ctx.tensor("out_100", student.apply_rope(x.clone(), base=100.0))
    ctx.tensor("out_500000", student.apply_rope(x.clone(), base=500000.0))


@probe
def leading_dims(student, ctx):
    x_square = ctx.randn(2, 4, 4, 6, dtype=F64)     # [B, H, T, D] with H == T: axis mix-ups keep the shape
    x_5d = ctx.randn(2, 2, 3, 5, 4, dtype=F64)      # two extra leading axes
    x_td = ctx.randn(7, 6, dtype=F64)               # no leading axis at all
    record_inputs(ctx, x_square=x_square, x_5d=x_5d, x_td=x_td)
    for key, x in (("square", x_square), ("5d", x_5d)):
        ctx.tensor(f"out_{key}", student.apply_rope(x.clone()))
        rows = x.reshape(-1, *x.shape[-2:])
        # the same [T, D] matrices one at a time: a batched call must rotate each of them on its own
        slices = [student_tensor("your output", student.apply_rope(r.clone()), like=("x", r)) for r in rows]
        ctx.tensor(f"slices_{key}", torch.stack(slices).reshape(x.shape))
    ctx.tensor("out_td", student.apply_rope(x_td.clone()))


@probe
def gradients(student, ctx):
    x = ctx.randn(2, 7, 8, dtype=F64)
    g = ctx.randn(2, 7, 8, dtype=F64)
    record_inputs(ctx, x=x, g=g)
    ctx.record(fd_step=FD_STEP)
    leaf = x.clone().requires_grad_(True)
    out = student.apply_rope(leaf)
    ctx.tensor("out", out)
    student_tensor("your output", out, like=("x", x), depends_on="x")
    with student_value("backward() from the output of apply_rope failed"):
        (out * g).sum().backward()
    ctx.tensor("x_grad", leaf.grad)
    # the student's own function with each input element nudged by +-FD_STEP in turn: the judge takes central
    # differences, a gradient of the student's forward that no backward of the student's can bend
    with torch.no_grad():
        for sign, label in ((1.0, "plus"), (-1.0, "minus")):
            outs = []
            for k in range(x.numel()):
                nudged = x.clone().reshape(-1)
                nudged[k] += sign * FD_STEP
                outs.append(student.apply_rope(nudged.reshape(x.shape)))
            with student_value("the outputs of apply_rope for inputs of one shape could not be stacked"):
                ctx.tensor(f"nudged_{label}", torch.stack(outs))   # [x.numel(), *x.shape]


@probe
def bad_input(student, ctx):
    ctx.outcome("odd_d", lambda: student.apply_rope(ctx.randn(4, 7)))
    ctx.outcome("odd_d_4d", lambda: student.apply_rope(ctx.randn(2, 2, 5, 5)))
    ctx.outcome("positions_short", lambda: student.apply_rope(ctx.randn(6, 8), positions=torch.arange(5)))
    ctx.outcome("positions_long", lambda: student.apply_rope(ctx.randn(2, 6, 8), positions=torch.arange(7)))
    ctx.outcome("valid", lambda: student.apply_rope(ctx.randn(6, 8), positions=torch.arange(10, 16)))
