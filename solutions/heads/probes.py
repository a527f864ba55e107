"""Probes of exercise `heads` (heads.py): split_heads and merge_heads."""

import torch

from grader.worker.probe import probe

# (B, T, C, H). H != T, then H == T twice (so a reshape without the transpose keeps the right shape),
# B never equal to H or T, and D = C / H > 1.
SPLIT_CASES = [(2, 5, 12, 3), (3, 4, 8, 4), (2, 6, 30, 6)]
# (B, H, T, D), with the same H != T / H == T pattern.
MERGE_CASES = [(2, 3, 5, 4), (3, 4, 4, 2), (2, 6, 6, 5)]
NONCONTIGUOUS_CASE = (2, 3, 5, 4)        # y given as a transposed view, as an attention output may be
BAD_HEADS = [("c10_h3", 10, 3), ("c12_h5", 12, 5), ("c12_h0", 12, 0), ("c12_hm2", 12, -2), ("c12_hm3", 12, -3)]
GOOD_HEADS = [("c12_h1", 12, 1), ("c12_h12", 12, 12)]


@probe
def split(student, ctx):
    for i, (B, T, C, H) in enumerate(SPLIT_CASES):
        x = ctx.randn(B, T, C)
        ctx.tensor(f"x_{i}", x)
        ctx.tensor(f"out_{i}", ctx.outcome(f"call_{i}", lambda: student.split_heads(x.clone(), H)))


@probe
def merge(student, ctx):
    for i, (B, H, T, D) in enumerate(MERGE_CASES):
        y = ctx.randn(B, H, T, D)
        ctx.tensor(f"y_{i}", y)
        ctx.tensor(f"out_{i}", ctx.outcome(f"call_{i}", lambda: student.merge_heads(y.clone())))
    # A non-contiguous input: [B, H, D, T] transposed to [B, H, T, D].
    B, H, T, D = NONCONTIGUOUS_CASE
    y = ctx.randn(B, H, D, T)
    ctx.tensor("y_strided", y.transpose(2, 3))
    ctx.tensor("out_strided", ctx.outcome("call_strided", lambda: student.merge_heads(y.clone().transpose(2, 3))))


def through(ctx, key, first, second):
    """second(first()), the shape of what `first` gave in between recorded as `<key>_between` (the positive control of
    the round trip: functions that change nothing also undo each other)."""
    def call():
        between = first()
        ctx.record(**{f"{key}_between": list(between.shape) if isinstance(between, torch.Tensor) else None})
        return second(between)
    return call


@probe
def round_trip(student, ctx):
    for i, (B, T, C, H) in enumerate(SPLIT_CASES):
        x = ctx.randn(B, T, C)
        ctx.tensor(f"x_{i}", x)
        ctx.tensor(f"back_x_{i}", ctx.outcome(f"call_x_{i}", through(
            ctx, f"x_{i}", lambda: student.split_heads(x.clone(), H), student.merge_heads)))
    for i, (B, H, T, D) in enumerate(MERGE_CASES):
        y = ctx.randn(B, H, T, D)
        ctx.tensor(f"y_{i}", y)
        ctx.tensor(f"back_y_{i}", ctx.outcome(f"call_y_{i}", through(
            ctx, f"y_{i}", lambda: student.merge_heads(y.clone()), lambda between: student.split_heads(between, H))))


@probe
def bad_heads(student, ctx):
    for key, C, H in GOOD_HEADS + BAD_HEADS:
        x = ctx.randn(2, 5, C)
        ctx.outcome(key, lambda: student.split_heads(x, H))
