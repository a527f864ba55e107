"""Probes of exercise `decoder_block` (block.py): CausalSelfAttention and count_block_parameters."""

import torch

from grader.worker.probe import ContractBreach, probe, student_tensor, student_value, tensor_facts

D_MODEL, N_HEADS, D_FF = 16, 4, 40
PROJECTIONS = ["q_proj.weight", "k_proj.weight", "v_proj.weight", "out_proj.weight"]
SMALL_SIZES = [(8, 2, 16), (16, 4, 40), (24, 3, 7), (64, 8, 256), (10, 5, 1)]
LARGE_SIZE = (65536, 64, 262144)
# A count above 2^53 (about 2.2e17), where float64 no longer holds every integer: d odd, d_ff = 4d + 1, one head.
HUGE_SIZE = (134217731, 1, 536870925)
# The dropout-position probe reads the attention weights from the output: CausalSelfAttention(16, 2) has 8 channels
# per head, so 8 positions whose inputs are one-hot in every head, and value and output projections set to identity.
READ_D_MODEL, READ_HEADS, READ_T, READ_BATCH = 16, 2, 8, 32


def seeded_attention(student, ctx, dropout=0.0, dtype=torch.float32):
    attn = student.CausalSelfAttention(D_MODEL, N_HEADS, dropout).to(dtype)
    ctx.fill_parameters(attn, PROJECTIONS)
    return attn


@probe
def forward(student, ctx):
    attn = seeded_attention(student, ctx).eval()
    x = ctx.randn(2, 7, D_MODEL)
    # what is registered, a fact about the module that no output carries: Q/K/V/O have no bias
    ctx.record(parameter_shapes={name: tensor_facts(p)["shape"] for name, p in attn.named_parameters()})
    with torch.no_grad():
        ctx.tensor("out", attn(x))
        # H == T: a merge that forgets the transpose keeps the right shape and still mixes positions
        ctx.tensor("out_h_equals_t", attn(ctx.randn(3, N_HEADS, D_MODEL)))


@probe
def causality(student, ctx):
    """The outputs for x and for x changed after each position t; the judge measures what reached 0..t."""
    attn = seeded_attention(student, ctx, dtype=torch.float64).eval()
    x = ctx.randn(2, 8, D_MODEL, dtype=torch.float64)
    with torch.no_grad():
        ctx.tensor("base", attn(x.clone()))
        for t in range(x.shape[1] - 1):
            changed = x.clone()
            changed[:, t + 1:] = ctx.randn(2, x.shape[1] - t - 1, D_MODEL, dtype=torch.float64) * 3
            ctx.tensor(f"changed_after_{t}", attn(changed))
        # the positive control: position 0 alone changed, which every later position may read
        changed = x.clone()
        changed[:, 0] = ctx.randn(2, D_MODEL, dtype=torch.float64) * 3
        ctx.tensor("changed_first", attn(changed))


@probe
def gradients(student, ctx):
    attn = seeded_attention(student, ctx).train()
    x = ctx.randn(2, 6, D_MODEL).requires_grad_(True)
    out = student_tensor("your output", attn(x), like=("x", x), depends_on="x")
    with student_value("backward through your output failed"):
        (out * ctx.randn(*out.shape)).sum().backward()
    names = []
    for name, p in attn.named_parameters():
        names.append(name)
        ctx.tensor(f"grad.{name}", p.grad)  # None is recorded as its type
    ctx.record(parameters=names)
    ctx.tensor("input_grad", x.grad)


@probe
def dropout(student, ctx):
    attn = seeded_attention(student, ctx, dropout=0.5)
    x = ctx.randn(2, 6, D_MODEL)
    with torch.no_grad():
        attn.eval()
        first, second = attn(x), attn(x)
        attn.train()
        trained = attn(x)
        # the positive control of determinism: another input gives another output (a constant is deterministic too)
        attn.eval()
        other = attn(ctx.randn(2, 6, D_MODEL))
    ctx.tensor("eval_first", first)
    ctx.tensor("eval_second", second)
    ctx.tensor("train", trained)
    ctx.tensor("eval_other", other)


@probe
def default_dropout(student, ctx):
    """CausalSelfAttention(d_model, n_heads) with dropout left at its default, which the contract fixes at 0.0: in
    train mode it must give what eval mode gives (the dropout probe proves that train mode can drop at all)."""
    attn = student.CausalSelfAttention(D_MODEL, N_HEADS)
    ctx.fill_parameters(attn, PROJECTIONS)
    x = ctx.randn(2, 6, D_MODEL)
    ctx.record(d_model=D_MODEL, n_heads=N_HEADS, shape=list(x.shape))
    with torch.no_grad():
        ctx.tensor("train", attn.train()(x))
        ctx.tensor("eval", attn.eval()(x))


def weight_reader(student, ctx, dropout: float):
    """CausalSelfAttention(16, 2, dropout) in float64 whose output shows its attention weights: x[t] is one-hot on
    channel t of each head, and v_proj = out_proj = identity, so that output channel 8h + s at query t is head h's
    weight of key s. q_proj and k_proj hold seeded weights of order one (scores of order one). Returns the module and
    x [READ_BATCH, READ_T, READ_D_MODEL]."""
    attn = student.CausalSelfAttention(READ_D_MODEL, READ_HEADS, dropout).double()
    ctx.fill_parameters(attn, ["q_proj.weight", "k_proj.weight"], std=1.0)  # scores of order one
    with torch.no_grad():
        for name in ("v_proj.weight", "out_proj.weight"):
            square_parameter(attn, name).copy_(torch.eye(READ_D_MODEL, dtype=torch.float64))
    one_hot = torch.eye(READ_T, dtype=torch.float64).repeat(1, READ_HEADS)       # [T, C]: channels t and 8 + t
    return attn, one_hot.expand(READ_BATCH, READ_T, READ_D_MODEL).clone()


def square_parameter(attn, name: str) -> torch.Tensor:
    """The module's parameter `name` of shape [16, 16], which the contract names (its absence: the student's breach)."""
    params = dict(attn.named_parameters())
    if name not in params or list(params[name].shape) != [READ_D_MODEL, READ_D_MODEL]:
        raise ContractBreach("the module has no parameter `{name}` of shape [16, 16], which the contract names",
                             name=name)
    return params[name]


@probe
def dropout_position(student, ctx):
    """Eval mode gives the weights (weight_reader), train mode (dropout 0.5) the weights as dropout left them, for 32
    copies of the sequence: the judge sees where dropout acted."""
    attn, x = weight_reader(student, ctx, 0.5)
    with torch.no_grad():
        ctx.tensor("eval", attn.eval()(x[:1].clone()))
        ctx.tensor("train", attn.train()(x))


# The negative-scores probe pulls q and k apart along the first channel of each head: both one-hot inputs of x[t] add
# PULL to q and -PULL to k there, so that every score is -(2 * PULL)^2 / sqrt(8) = -NEGATIVE_LEVEL give or take ~10.
# Every allowed score is then far below a finite fill such as -1e4, which would give the future keys the whole row.
NEGATIVE_LEVEL = 1e5
PULL = (NEGATIVE_LEVEL * (READ_D_MODEL // READ_HEADS) ** 0.5) ** 0.5 / 2


@probe
def negative_scores(student, ctx):
    """The weights (weight_reader, eval mode) when every score of every row is near -NEGATIVE_LEVEL."""
    attn, x = weight_reader(student, ctx, 0.0)
    with torch.no_grad():
        for name, pull in (("q_proj.weight", PULL), ("k_proj.weight", -PULL)):
            square_parameter(attn, name)[::READ_D_MODEL // READ_HEADS] = pull   # row 8h: channel 0 of head h
    ctx.record(level=NEGATIVE_LEVEL, heads=READ_HEADS)
    with torch.no_grad():
        ctx.tensor("eval", attn.eval()(x[:1].clone()))


@probe
def bad_heads(student, ctx):
    ctx.outcome("d10_h3", lambda: student.CausalSelfAttention(10, 3))
    ctx.outcome("d12_h5", lambda: student.CausalSelfAttention(12, 5))
    ctx.outcome("d12_h4", lambda: student.CausalSelfAttention(12, 4))
    ctx.outcome("d12_h1", lambda: student.CausalSelfAttention(12, 1))   # one head: the smallest valid count
    # 12 % -4 == 0: only a positivity check rejects it; 12 % 0 divides by zero
    ctx.outcome("d12_h0", lambda: student.CausalSelfAttention(12, 0))
    ctx.outcome("d12_hminus4", lambda: student.CausalSelfAttention(12, -4))


@probe
def parameter_count(student, ctx):
    ctx.record(small=[student.count_block_parameters(*size) for size in SMALL_SIZES],
               small_sizes=SMALL_SIZES)


@probe
def parameter_count_large(student, ctx):
    # A probe of its own: a count that builds the block runs out of memory here, and must not take the
    # small sizes down with it. The type is recorded because JSON turns a 0-d tensor into a plain number.
    large = student.count_block_parameters(*LARGE_SIZE)
    ctx.record(large=large, large_type=type(large).__name__, large_size=LARGE_SIZE)


@probe
def parameter_count_huge(student, ctx):
    # Python ints are exact at any size; a count computed in floats is not above 2^53
    huge = student.count_block_parameters(*HUGE_SIZE)
    ctx.record(huge=huge, huge_type=type(huge).__name__, huge_size=HUGE_SIZE)
