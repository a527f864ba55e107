"""Probes of exercise `masks` (masks.py): causal_mask, padding_mask, combine_masks, masked_softmax.

Each function is probed on inputs the grader builds itself, so that a bug in one function does not hide
behind another; one probe (`no_leak`) then chains the student's own four functions end to end.
"""

import torch

from grader.worker.probe import probe, student_tensor, student_value, tensor_facts

PAD = 0
CAUSAL_SIZES = (1, 4, 7)
NO_LEAK_HEADS = 3   # not 4 or 8: a combined mask copied for a hard-coded head count cannot fit by luck


def attempt(ctx, key, call):
    """ctx.outcome, plus what came back when it is a tensor: its data's shape, dtype and device (never what the
    object says of itself), and the tensor itself."""
    value = ctx.outcome(key, call)
    if isinstance(value, torch.Tensor):
        ctx.values[key].update(tensor_facts(value))
        ctx.tensor(key, value)
    return value


def mask_with_some_true(ctx, shape, dim=-1, p=0.6):
    """A random bool mask of `shape` where every line along `dim` keeps at least one True."""
    dim = dim % len(shape)
    moved = list(shape)
    moved.append(moved.pop(dim))
    mask = ctx.randbool(*moved, p=p)
    keep = ctx.randint(0, moved[-1], tuple(moved[:-1]))
    mask.scatter_(-1, keep.unsqueeze(-1), True)
    return mask.movedim(-1, dim).contiguous()


def padded_ids(ctx, lengths, T, left=()):
    """[B, T] ids in 1..49 (never PAD), padded with PAD after each row's length (or before it, for rows in `left`)."""
    ids = ctx.randint(1, 50, (len(lengths), T))
    for b, n in enumerate(lengths):
        if b in left:
            ids[b, : T - n] = PAD
        else:
            ids[b, n:] = PAD
    return ids


@probe
def causal(student, ctx):
    for T in CAUSAL_SIZES:
        attempt(ctx, f"T{T}", lambda T=T: student.causal_mask(T))
    attempt(ctx, "device_str", lambda: student.causal_mask(5, device="cpu"))
    attempt(ctx, "device_obj", lambda: student.causal_mask(5, device=torch.device("cpu")))
    # The meta device holds no data, so only there does a mask built on the CPU whatever `device` says show.
    meta = ctx.outcome("device_meta", lambda: student.causal_mask(5, device="meta"))
    if isinstance(meta, torch.Tensor):
        ctx.values["device_meta"].update(tensor_facts(meta))


@probe
def padding(student, ctx):
    right = padded_ids(ctx, (3, 6, 1), 6)                     # right padding, a row without pad, a lone token
    ctx.tensor("right.ids", right)
    attempt(ctx, "right", lambda: student.padding_mask(right.clone(), PAD))
    # pad_id = 3 while token 0 is an ordinary word: only ids equal to pad_id are padding
    other = torch.tensor([[0, 5, 3, 3, 3], [3, 3, 0, 1, 2], [7, 0, 0, 4, 3]])
    ctx.tensor("pad3.ids", other)
    attempt(ctx, "pad3", lambda: student.padding_mask(other.clone(), 3))


@probe
def combine(student, ctx):
    cases = {"B3_T6": padded_ids(ctx, (4, 6, 2), 6, left=(2,)), "B1_T4": padded_ids(ctx, (3,), 4)}
    for name, ids in cases.items():
        T = ids.shape[1]
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        padding = (ids != PAD)[:, None, None, :]
        ctx.tensor(f"{name}.causal", causal)
        ctx.tensor(f"{name}.padding", padding)
        attempt(ctx, name, lambda c=causal, p=padding: student.combine_masks(c.clone(), p.clone()))


@probe
def no_leak(student, ctx):
    """The student's own causal_mask, padding_mask, combine_masks and masked_softmax, chained."""
    T = 6
    ids = padded_ids(ctx, (6, 4, 2), T)                       # right padding: every query sees at least itself
    B = ids.shape[0]
    allowed = torch.ones(T, T, dtype=torch.bool).tril() & (ids != PAD)[:, None, None, :]   # [B, 1, T, T]
    allowed = allowed.expand(B, NO_LEAK_HEADS, T, T)
    ctx.tensor("ids", ids)
    ctx.tensor("allowed", allowed)
    mask = student.combine_masks(student.causal_mask(T), student.padding_mask(ids.clone(), PAD))
    ctx.tensor("mask", mask)
    scores = ctx.randn(B, NO_LEAK_HEADS, T, T, dtype=torch.float64) * 2
    ctx.tensor("p", student.masked_softmax(scores.clone(), mask))
    # overwrite every future and padded score with something else: nothing may change
    changed = torch.where(allowed, scores, ctx.randn(B, NO_LEAK_HEADS, T, T, dtype=torch.float64) * 10)
    ctx.tensor("p_changed", student.masked_softmax(changed, mask))


@probe
def softmax_values(student, ctx):
    scores = ctx.randn(2, 3, 5, 7) * 2
    ctx.tensor("scores", scores)
    masks = {"full": mask_with_some_true(ctx, (2, 3, 5, 7)),      # [B, H, Tq, Tk]
             "query_key": mask_with_some_true(ctx, (5, 7)),         # [Tq, Tk] against [B, H, Tq, Tk]
             "batch_key": mask_with_some_true(ctx, (2, 1, 1, 7))}   # [B, 1, 1, Tk]
    for name, mask in masks.items():
        ctx.tensor(f"{name}.mask", mask.expand(2, 3, 5, 7).clone())
        attempt(ctx, name, lambda m=mask: student.masked_softmax(scores.clone(), m.clone()))
    ctx.record(mask_shapes={name: list(m.shape) for name, m in masks.items()})


def with_empty_lines(ctx, dtype):
    """scores [2, 2, 4, 5] with a mask where some query rows are fully masked; also a [3, 4, 5] case along dim=-2."""
    scores = ctx.randn(2, 2, 4, 5, dtype=dtype) * 2
    mask = mask_with_some_true(ctx, (2, 2, 4, 5))
    mask[0, 1, 2, :] = False
    mask[1, 0, 0, :] = False
    mask[1, 1, 3, :] = False
    cols = ctx.randn(3, 4, 5, dtype=dtype) * 2
    cols_mask = mask_with_some_true(ctx, (3, 4, 5), dim=-2)
    cols_mask[0, :, 2] = False
    cols_mask[2, :, 4] = False
    return scores, mask, cols, cols_mask


@probe
def fully_masked(student, ctx):
    scores, mask, cols, cols_mask = with_empty_lines(ctx, torch.float32)
    ctx.tensor("rows.mask", mask)
    ctx.tensor("cols.mask", cols_mask)
    attempt(ctx, "rows", lambda: student.masked_softmax(scores.clone(), mask.clone()))
    attempt(ctx, "cols", lambda: student.masked_softmax(cols.clone(), cols_mask.clone(), dim=-2))


@probe
def gradients(student, ctx):
    scores, mask, _, _ = with_empty_lines(ctx, torch.float64)
    ctx.tensor("mask", mask)
    scores = scores.clone().requires_grad_(True)
    p = student_tensor("your masked_softmax", student.masked_softmax(scores, mask.clone()), like=("scores", scores),
                       depends_on="scores")
    upstream = ctx.randn(*p.shape, dtype=torch.float64)
    with student_value("backward through your masked_softmax failed"):
        (p * upstream).sum().backward()
    ctx.tensor("grad", scores.grad)  # None is recorded as its type


def with_empty_row(ctx, shape):
    """A mask for a softmax along dim=-2: every column keeps an entry, while row 1 (along -1) is all False,
    so that looking for empty lines along the last axis instead of along dim changes the result."""
    inner = mask_with_some_true(ctx, shape[:-2] + (shape[-2] - 1, shape[-1]), dim=-2)
    empty = torch.zeros(shape[:-2] + (1, shape[-1]), dtype=torch.bool)
    return torch.cat([inner[..., :1, :], empty, inner[..., 1:, :]], dim=-2)


@probe
def softmax_dim(student, ctx):
    scores = ctx.randn(2, 5, 4, 3) * 2
    cases = {
        "dim_minus_2": (-2, with_empty_row(ctx, (2, 5, 4, 3))),
        "dim_1": (1, mask_with_some_true(ctx, (2, 5, 4, 3), dim=1)),
        "dim_minus_2_broadcast": (-2, with_empty_row(ctx, (4, 3))),   # [4, 3] against [2, 5, 4, 3]
        "dim_minus_4": (-4, mask_with_some_true(ctx, (2, 5, 4, 3), dim=0)),   # -ndim: the first axis, a valid dim
    }
    ctx.tensor("scores", scores)
    for name, (dim, mask) in cases.items():
        ctx.tensor(f"{name}.mask", mask.expand(2, 5, 4, 3).clone())
        attempt(ctx, name, lambda d=dim, m=mask: student.masked_softmax(scores.clone(), m.clone(), dim=d))
    ctx.record(cases={name: {"dim": dim, "mask": list(mask.shape)} for name, (dim, mask) in cases.items()})


# float32 scores all within ~300 of -NEGATIVE_LEVEL: every allowed score of a line is far below a finite fill such as
# -1e4, which would give the masked entries the whole line; a fill with -inf or finfo.min still gives them 0.
NEGATIVE_LEVEL = 1e5


@probe
def softmax_large(student, ctx):
    # float32 scores of spread ~1e5: a mask made by adding or filling a finite -1e4 leaves masked entries in the softmax
    scores = ctx.randn(4, 4, 5, 7) * 1e5
    mask = mask_with_some_true(ctx, (4, 4, 5, 7))
    ctx.tensor("scores", scores)
    ctx.tensor("mask", mask)
    attempt(ctx, "large", lambda: student.masked_softmax(scores.clone(), mask.clone()))
    negative = ctx.randn(4, 4, 5, 7) * 100 - NEGATIVE_LEVEL
    negative_mask = mask_with_some_true(ctx, (4, 4, 5, 7))
    ctx.record(negative_level=NEGATIVE_LEVEL)
    ctx.tensor("negative.scores", negative)
    ctx.tensor("negative.mask", negative_mask)
    attempt(ctx, "negative", lambda: student.masked_softmax(negative.clone(), negative_mask.clone()))
