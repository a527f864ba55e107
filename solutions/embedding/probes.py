"""Probes of exercise `embedding` (embedding.py): TokenEmbedding, a lookup table from ids to vectors."""

import torch
from torch import nn

from grader.worker.probe import probe, student_tensor, tensor_facts

VOCAB, DIM = 13, 6                       # V != dim, so a table stored as [dim, V] shows in its shape
ID_SHAPES = [(7,), (3, 5), (2, 3, 4)]    # 1-D, 2-D and 3-D ids: the output appends dim to any shape
PADDED = 9                               # a padding row that is not row 0 (a hard-coded 0 must not pass)
GRAD_CASES = [("pad0", 0), ("pad9", PADDED), ("nopad", None)]


def seeded_ids(ctx, shape, padding_idx=None):
    """Random ids in [0, V) that always contain 0 and V - 1 (and the padding id, several times, when given)."""
    ids = ctx.randint(0, VOCAB, shape)
    flat = ids.view(-1)
    flat[0], flat[-1] = 0, VOCAB - 1
    if padding_idx is not None:
        flat[1::3] = padding_idx
    return ids


def seed_weight(ctx, module, keep_row=None):
    """Overwrite the student's table with seeded values (every implementation then looks up the same numbers);
    `keep_row` keeps the student's own padding row, whatever it holds."""
    weight = student_tensor("the weight of your TokenEmbedding", getattr(module, "weight", None), shape=[VOCAB, DIM])
    with torch.no_grad():
        new = ctx.randn(VOCAB, DIM, dtype=weight.dtype)
        if keep_row is not None:
            new[keep_row] = module.weight[keep_row]
        module.weight.copy_(new)


@probe
def table(student, ctx):
    # Facts about the module object itself (its class, its attribute's class, registration): no tensor carries them.
    emb = student.TokenEmbedding(VOCAB, DIM)
    weight = getattr(emb, "weight", None)
    params = ({name: tensor_facts(p)["shape"] for name, p in emb.named_parameters()}
              if isinstance(emb, nn.Module) else {})
    ctx.record(is_module=isinstance(emb, nn.Module),
               weight_type=type(weight).__name__,
               weight_is_parameter=isinstance(weight, nn.Parameter),
               weight_shape=tensor_facts(weight)["shape"] if isinstance(weight, torch.Tensor) else None,
               weight_requires_grad=bool(getattr(weight, "requires_grad", False)),
               weight_dtype="torch." + tensor_facts(weight)["dtype"] if isinstance(weight, torch.Tensor) else None,
               parameters=params,
               weight_registered=any(p is weight for p in emb.parameters()) if isinstance(emb, nn.Module) else False)
    # The padding row right after construction, for a padding row at 0 and one elsewhere.
    for pad in (0, PADDED):
        padded = student.TokenEmbedding(VOCAB, DIM, padding_idx=pad)
        ctx.tensor(f"init_pad{pad}", padded.weight)


@probe
def lookup(student, ctx):
    emb = student.TokenEmbedding(VOCAB, DIM)
    seed_weight(ctx, emb)
    for i, shape in enumerate(ID_SHAPES):
        ids = seeded_ids(ctx, shape)
        ctx.tensor(f"ids_{i}", ids)
        ctx.tensor(f"weight_{i}", emb.weight)  # the student's own table, read just before the call
        ctx.tensor(f"out_{i}", emb(ids))
    # With a padding row: the values are still weight[ids] (the padding row is whatever the student's init left).
    padded = student.TokenEmbedding(VOCAB, DIM, padding_idx=PADDED)
    seed_weight(ctx, padded, keep_row=PADDED)
    ids = seeded_ids(ctx, (3, 5), padding_idx=PADDED)
    ctx.tensor("ids_pad", ids)
    ctx.tensor("weight_pad", padded.weight)
    ctx.tensor("out_pad", padded(ids))


@probe
def gradient(student, ctx):
    for key, pad in GRAD_CASES:
        emb = student.TokenEmbedding(VOCAB, DIM, padding_idx=pad)
        ids = seeded_ids(ctx, (4, 6), padding_idx=pad)
        upstream = ctx.randn(4, 6, DIM)
        ctx.tensor(f"ids_{key}", ids)
        ctx.tensor(f"upstream_{key}", upstream)
        out = emb(ids)
        weight = getattr(emb, "weight", None)
        ctx.outcome(f"backward_{key}", lambda: (student_tensor("your output", out, shape=list(upstream.shape),
                                                              depends_on="weight") * upstream).sum().backward())
        ctx.tensor(f"grad_{key}", getattr(weight, "grad", None))  # None is recorded as its type


@probe
def bad_ids(student, ctx):
    emb = student.TokenEmbedding(VOCAB, DIM)
    # Valid first: the boundary ids 0 and V - 1 must be looked up, not rejected.
    ctx.outcome("boundary", lambda: emb(torch.tensor([[0, VOCAB - 1], [VOCAB - 1, 0]])))
    ctx.outcome("float32", lambda: emb(torch.tensor([[1.0, 2.0], [3.0, 4.0]])))
    ctx.outcome("float64", lambda: emb(torch.tensor([0.0, 5.0, 7.0], dtype=torch.float64)))
    # the positive control of the two above: the same ids as int64 must be looked up
    ctx.outcome("same_ids_int64", lambda: emb(torch.tensor([[1, 2], [3, 4]])))
    # The bad id sits in the middle of a 2-D batch, not first, so checking ids[0] alone is not enough.
    for key, bad in (("too_large", VOCAB), ("far_too_large", VOCAB + 5), ("minus_one", -1), ("minus_vocab", -VOCAB)):
        ctx.outcome(key, lambda bad=bad: emb(torch.tensor([[2, 3, 4], [5, bad, 6]])))
    # A lone bad id, alone in a 1-D tensor and as a 0-d tensor: a check that skips small inputs lets it wrap.
    ctx.outcome("lone_minus_one", lambda: emb(torch.tensor([-1])))
    ctx.outcome("scalar_minus_one", lambda: emb(torch.tensor(-1)))


@probe
def padding_lookup(student, ctx):
    # A padding row that holds values (a table loaded from a checkpoint, or trained before padding_idx was set):
    # the lookup is still weight[ids], the padding row included; only its gradient is held at zero.
    emb = student.TokenEmbedding(VOCAB, DIM, padding_idx=PADDED)
    seed_weight(ctx, emb)                 # every row, the padding row too, gets seeded non-zero values
    ids = seeded_ids(ctx, (3, 5), padding_idx=PADDED)
    ctx.tensor("ids", ids)
    ctx.tensor("weight", emb.weight)      # the student's table as the call found it
    ctx.tensor("out", emb(ids))


# Id shapes at the edges of `ids.shape + (dim,)`: no id at all, a 0-d id, and a table of one row and one column.
EDGE_CASES = [("empty", (VOCAB, DIM), lambda: torch.zeros(0, dtype=torch.long)),
              ("empty_rows", (VOCAB, DIM), lambda: torch.zeros(2, 0, dtype=torch.long)),
              ("scalar", (VOCAB, DIM), lambda: torch.tensor(VOCAB - 2)),
              ("one_by_one", (1, 1), lambda: torch.zeros(2, 3, dtype=torch.long))]


@probe
def edge_ids(student, ctx):
    for key, (vocab, dim), make_ids in EDGE_CASES:
        ids = make_ids()
        ctx.tensor(f"ids_{key}", ids)
        emb = ctx.outcome(f"build_{key}", lambda vocab=vocab, dim=dim: student.TokenEmbedding(vocab, dim))
        if emb is None:
            continue
        out = ctx.outcome(f"call_{key}", lambda emb=emb, ids=ids: emb(ids))
        ctx.tensor(f"out_{key}", out)
