"""Probes of exercise `attention` (attention.py): scaled_dot_product_attention(q, k, v, mask=None).

Every probe records the inputs it made (before the student's code can touch them), so that the criteria
can say not only *that* a result is wrong but *which* wrong formula it matches.
"""

import math

import torch

from grader.worker.probe import (ContractBreach, describe_exception, is_stub_raise, probe, student_tensor,
                                 student_value,
                                 tensor_facts)

# Tq != Tk everywhere a softmax axis could be confused, and Dv != D so that reading the values with the
# keys (or scaling by the value width) changes a shape or a number.
B, H, TQ, TK, D, DV = 2, 3, 5, 7, 16, 12
SCALE_D, SCALE_TQ, SCALE_TK, SCALE_DV = 64, 4, 6, 8   # D = 64: a missing 1/sqrt(D) is a factor 8 on the scores
CAUSAL_T = 6


def attend(student, q, k, v, mask=None):
    """Call the student's function on fresh copies (so in-place edits cannot reach the inputs) and unpack it."""
    args = [q.clone(), k.clone(), v.clone()]
    if mask is not None:
        args.append(mask.clone())
    result = student.scaled_dot_product_attention(*args)
    return unpack(result)


def attend_recorded(student, ctx, inputs: dict, record: tuple[str, ...], prefix: str = ""):
    """Record the `record` inputs (in that order), call the student's function on `inputs` (q, k, v and an optional
    mask) and record what it returned as `out` and `weights`, every key after `prefix`."""
    for name in record:
        ctx.tensor(prefix + name, inputs[name])
    out, weights = attend(student, inputs["q"], inputs["k"], inputs["v"], inputs.get("mask"))
    ctx.tensor(prefix + "out", out)
    ctx.tensor(prefix + "weights", weights)
    return out, weights


class WrongReturn(ContractBreach):
    """The student's function returned something other than the tuple (out, weights) of two tensors."""


def unpack(result):
    if isinstance(result, (tuple, list)) and len(result) != 2:
        raise WrongReturn("scaled_dot_product_attention returned a {what} of length {length}; the contract asks for a "
                          "tuple (out, weights)", what=type(result).__name__, length=len(result))
    if not isinstance(result, (tuple, list)):
        raise WrongReturn("scaled_dot_product_attention returned a {what}; "
                          "the contract asks for a tuple (out, weights)",
                          what=type(result).__name__)
    out, weights = result
    for name, value in (("out", out), ("weights", weights)):
        if not isinstance(value, torch.Tensor):
            raise WrongReturn("scaled_dot_product_attention returned {name} as a {kind}; expected a tensor", name=name,
                              kind=type(value).__name__)
    return out, weights


def rows_with_a_key(ctx, *shape, p=0.6):
    """A random bool mask where every query row keeps at least one key."""
    mask = ctx.randbool(*shape, p=p)
    keep = ctx.randint(0, shape[-1], tuple(shape[:-1]))
    mask.scatter_(-1, keep.unsqueeze(-1), True)
    return mask


@probe
def shapes(student, ctx):
    """Shapes of (out, weights) with 2, 3, 4 and 5 axes; each case recorded on its own."""
    cases = {
        "batch_heads": ((B, H, TQ, D), (B, H, TK, D), (B, H, TK, DV), None),
        "no_batch": ((TQ, D), (TK, D), (TK, DV), None),
        "one_batch_axis": ((4, 6, 8), (4, 9, 8), (4, 9, 3), None),
        "three_batch_axes": ((2, 2, 3, TQ, D), (2, 2, 3, TK, D), (2, 2, 3, TK, DV), None),
        "three_batch_axes_masked": ((2, 2, 3, TQ, D), (2, 2, 3, TK, D), (2, 2, 3, TK, DV), (TQ, TK)),
    }
    results = {}
    for name, (qs, ks, vs, ms) in cases.items():
        q, k, v = ctx.randn(*qs), ctx.randn(*ks), ctx.randn(*vs)
        mask = None if ms is None else rows_with_a_key(ctx, *ms)
        entry = {"q": list(qs), "k": list(ks), "v": list(vs), "mask": None if ms is None else list(ms)}
        try:
            out, weights = attend(student, q, k, v, mask)
        except Exception as exc:  # noqa: BLE001 - recorded per case, judged by the criterion
            if is_stub_raise(exc, ctx.student_file):
                raise
            entry["raised"] = describe_exception(exc, ctx.student_file)
        else:
            entry.update(out=tensor_facts(out)["shape"], weights=tensor_facts(weights)["shape"])
        results[name] = entry
    ctx.record(cases=results)


@probe
def values(student, ctx):
    """No mask, float32, Tq=5 != Tk=7, D=16 != Dv=12."""
    q, k, v = ctx.randn(B, H, TQ, D), ctx.randn(B, H, TK, D), ctx.randn(B, H, TK, DV)
    attend_recorded(student, ctx, {"q": q, "k": k, "v": v}, ("q", "k", "v"))


@probe
def scale(student, ctx):
    """D = 64 with unit-variance q and k: the unscaled scores have standard deviation 8, the scaled ones 1."""
    q, k = ctx.randn(B, 1, SCALE_TQ, SCALE_D), ctx.randn(B, 1, SCALE_TK, SCALE_D)
    v = ctx.randn(B, 1, SCALE_TK, SCALE_DV)
    attend_recorded(student, ctx, {"q": q, "k": k, "v": v}, ("q", "k", "v"))


@probe
def masked(student, ctx):
    """A full-shape [B, H, Tq, Tk] bool mask, every query row keeping at least one key."""
    q, k, v = ctx.randn(B, H, TQ, D), ctx.randn(B, H, TK, D), ctx.randn(B, H, TK, DV)
    mask = rows_with_a_key(ctx, B, H, TQ, TK)
    attend_recorded(student, ctx, {"q": q, "k": k, "v": v, "mask": mask}, ("mask", "v"))


@probe
def causality(student, ctx):
    """float64, a causal [B, H, T, T] mask; change the queries, keys and values after position t, and (the
    positive control) at position 0 alone, which every later query may read.

    Only the outputs are recorded: the judge measures what reached the earlier positions, and what reached
    the later ones."""
    q, k, v = (ctx.randn(B, 2, CAUSAL_T, 8, dtype=torch.float64) for _ in range(3))
    mask = torch.ones(CAUSAL_T, CAUSAL_T, dtype=torch.bool).tril().expand(B, 2, CAUSAL_T, CAUSAL_T).clone()
    ctx.tensor("base", attend(student, q, k, v, mask)[0])
    for position in range(CAUSAL_T - 1):
        changed = []
        for x in (q, k, v):
            x = x.clone()
            x[..., position + 1:, :] = ctx.randn(B, 2, CAUSAL_T - position - 1, 8, dtype=torch.float64) * 3
            changed.append(x)
        ctx.tensor(f"changed_after_{position}", attend(student, *changed, mask)[0])
    first = []
    for x in (q, k, v):
        x = x.clone()
        x[..., 0, :] = ctx.randn(B, 2, 8, dtype=torch.float64) * 3
        first.append(x)
    ctx.tensor("changed_first", attend(student, *first, mask)[0])


@probe
def broadcast(student, ctx):
    """Masks that broadcast against the scores, each next to the same mask expanded to the full shape."""
    q, k, v = ctx.randn(B, H, TQ, D), ctx.randn(B, H, TK, D), ctx.randn(B, H, TK, DV)
    key_vector = torch.ones(TK, dtype=torch.bool)
    hidden = int(ctx.randint(1, TK - 1, (1,)))
    key_vector[hidden:hidden + 2] = False                 # two keys hidden from every query
    forms = {
        "key_vector": (q, k, v, key_vector),                           # [Tk]
        "query_key": (q, k, v, rows_with_a_key(ctx, TQ, TK)),          # [Tq, Tk]
        "one_one_query_key": (q, k, v, rows_with_a_key(ctx, 1, 1, TQ, TK)),  # [1, 1, Tq, Tk]
        "batch_key": (q, k, v, rows_with_a_key(ctx, B, 1, 1, TK)),     # [B, 1, 1, Tk]
    }
    shapes = {}
    for name, (qq, kk, vv, mask) in forms.items():
        full = mask.expand(*qq.shape[:-1], kk.shape[-2]).clone()
        shapes[name] = {"mask": list(mask.shape), "scores": list(full.shape)}
        ctx.tensor(f"{name}.mask", full)
        for tag, m in (("broadcast", mask), ("full", full)):
            result = ctx.outcome(f"{name}.{tag}", lambda: attend(student, qq, kk, vv, m))
            if result is None:
                continue
            out, weights = result
            ctx.tensor(f"{name}.{tag}.out", out)
            ctx.tensor(f"{name}.{tag}.weights", weights)
    ctx.record(forms=shapes)


def fully_masked_layout(ctx, dtype):
    """q [2, 2, 5, 8], k/v with Tk = 6, Dv = 4; query rows with no key at all, and a key nobody may read."""
    q, k, v = ctx.randn(2, 2, 5, 8, dtype=dtype), ctx.randn(2, 2, 6, 8, dtype=dtype), ctx.randn(2, 2, 6, 4, dtype=dtype)
    mask = rows_with_a_key(ctx, 2, 2, 5, 6)
    mask[..., 4] = False             # key 4 is hidden from every query
    mask[0, :, 1, :] = False         # batch 0, every head: query 1 sees nothing
    mask[1, 0, 3, :] = False         # batch 1, head 0: query 3 sees nothing
    mask[1, 1, 0, :] = False         # batch 1, head 1: query 0 sees nothing
    return q, k, v, mask


@probe
def fully_masked(student, ctx):
    q, k, v, mask = fully_masked_layout(ctx, torch.float32)
    attend_recorded(student, ctx, {"q": q, "k": k, "v": v, "mask": mask}, ("mask", "v"))


@probe
def gradients(student, ctx):
    """float64 backward through out and weights, with fully masked query rows and a key hidden from all."""
    q, k, v, mask = fully_masked_layout(ctx, torch.float64)
    ctx.tensor("mask", mask)
    q, k, v = (x.clone().requires_grad_(True) for x in (q, k, v))
    out, weights = unpack(student.scaled_dot_product_attention(q, k, v, mask.clone()))
    ctx.tensor("weights", weights)  # the forward's weights: where a non-finite gradient comes from
    student_tensor("your out", out, depends_on="q, k, v")
    r_out = ctx.randn(*out.shape, dtype=torch.float64)
    r_weights = ctx.randn(*weights.shape, dtype=torch.float64)
    with student_value("backward through your out and weights failed"):
        ((out * r_out).sum() + (weights * r_weights).sum()).backward()
    for name, x in (("q", q), ("k", k), ("v", v)):
        ctx.tensor(f"{name}.grad", x.grad)  # None is recorded as its type: the judge tells "no gradient" from it


# Scores far from unit scale: q and k of size ~LARGE_SCALE give scores q·k/sqrt(D) of spread ~LARGE_SCALE^2 = 1e5,
# where a mask made by adding or filling a finite -1e4 leaves the masked keys in the softmax.
LARGE_SCALE = 316.0
LARGE_B, LARGE_H = 4, 4
# Scores all near -NEGATIVE_LEVEL: q and k pulled apart along one direction, by sqrt(NEGATIVE_LEVEL * sqrt(D)) each,
# so that q·k/sqrt(D) is -NEGATIVE_LEVEL give or take ~250. Every allowed score of every row is then far below a finite
# fill such as -1e4, which would give the masked keys the whole row; a fill with -inf or finfo.min still gives them 0.
NEGATIVE_LEVEL = 1e5


@probe
def large_scores(student, ctx):
    """float32 scores under a random mask that keeps a key in every row: of spread ~1e5 around 0, then (keys
    `negative.*`) all near -1e5."""
    ctx.record(scale=LARGE_SCALE, negative_level=NEGATIVE_LEVEL)
    q = ctx.randn(LARGE_B, LARGE_H, TQ, D) * LARGE_SCALE
    k = ctx.randn(LARGE_B, LARGE_H, TK, D) * LARGE_SCALE
    v = ctx.randn(LARGE_B, LARGE_H, TK, DV)
    mask = rows_with_a_key(ctx, LARGE_B, LARGE_H, TQ, TK)
    attend_recorded(student, ctx, {"q": q, "k": k, "v": v, "mask": mask}, ("q", "k", "v", "mask"))
    direction = ctx.randn(D)
    pull = direction / direction.norm() * math.sqrt(NEGATIVE_LEVEL * math.sqrt(D))
    q = ctx.randn(LARGE_B, LARGE_H, TQ, D) + pull
    k = ctx.randn(LARGE_B, LARGE_H, TK, D) - pull
    v = ctx.randn(LARGE_B, LARGE_H, TK, DV)
    mask = rows_with_a_key(ctx, LARGE_B, LARGE_H, TQ, TK)
    attend_recorded(student, ctx, {"q": q, "k": k, "v": v, "mask": mask}, ("q", "k", "v", "mask"), prefix="negative.")


@probe
def backward(student, ctx):
    """float64 backward through out and weights, without a mask and with one that keeps a key in every row: the
    judge compares each gradient with the reference's (the same inputs and upstream gradients)."""
    ctx.record(inputs={"q": [B, H, TQ, D], "k": [B, H, TK, D], "v": [B, H, TK, DV], "mask": [B, H, TQ, TK]})
    for case in ("unmasked", "masked"):
        q, k, v = ctx.randn(B, H, TQ, D, dtype=torch.float64), ctx.randn(B, H, TK, D, dtype=torch.float64), \
            ctx.randn(B, H, TK, DV, dtype=torch.float64)
        mask = rows_with_a_key(ctx, B, H, TQ, TK) if case == "masked" else None
        r_out = ctx.randn(B, H, TQ, DV, dtype=torch.float64)
        r_weights = ctx.randn(B, H, TQ, TK, dtype=torch.float64)
        leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]
        args = leaves if mask is None else [*leaves, mask.clone()]
        out, weights = unpack(student.scaled_dot_product_attention(*args))
        ctx.tensor(f"{case}.out", out)
        ctx.tensor(f"{case}.weights", weights)
        with student_value("backward() from the out and weights scaled_dot_product_attention returned failed"):
            ((out * r_out).sum() + (weights * r_weights).sum()).backward()
        for name, leaf in zip("qkv", leaves, strict=True):
            ctx.tensor(f"{case}.{name}.grad", leaf.grad)  # None is recorded as its type
