"""Probes of exercise `param_count` (param_count.py): count_parameters and parameter_breakdown.

Every config handed to the student is a `types.SimpleNamespace` (or another plain object), never the
course's `Config` class: the contract is "any object with these attributes". The configurations are drawn
before any student code runs, from a private `random.Random` seeded with the probe's seed, so the student's
code cannot steer them and the reference run sees exactly the same ones.

Next to the student's numbers, `counts` builds the trusted model (grader.probes.lm) for every small config
and records sum(p.numel()) per part: the judge uses the reference run's copy of those numbers to check that
the reference solution itself agrees with a real model.
"""

import operator
import random
from types import SimpleNamespace

from grader.probes.lm import Config, TransformerLM
from grader.worker.probe import describe_exception, probe

FIELDS = ("vocab_size", "block_size", "d_model", "n_heads", "n_layers", "d_ff")
PARTS = ("token_embedding", "position_embedding", "blocks", "final_norm", "head")
N_RANDOM = 38  # plus the two fixed configs below: 40 configurations, each built in well under 10 ms
FIXED = [
    dict(vocab_size=3, block_size=1, d_model=1, n_heads=1, n_layers=1, d_ff=1),  # the smallest legal model
    dict(vocab_size=4, block_size=8, d_model=16, n_heads=2, n_layers=2, d_ff=32),  # the course's fixed batch
]
# Far too large to build. The first is GPT-3-like; the second's total (about 1.8e16, odd) is above 2**53,
# where a float can no longer hold every integer, so float arithmetic cannot come out exact by luck.
LARGE = [
    dict(vocab_size=50257, block_size=1_048_576, d_model=16384, n_heads=128, n_layers=96, d_ff=65536),
    dict(vocab_size=131_071, block_size=4_194_304, d_model=1_572_864, n_heads=12288, n_layers=601, d_ff=6_291_457),
]
MAX_BITS = 512  # a returned integer wider than this is recorded as text (JSON ints this wide are still exact)


def random_configs(seed: int) -> list[dict]:
    """The fixed configs, then N_RANDOM seeded ones: small enough to build, varied in every size."""
    rng = random.Random(seed)
    configs = [dict(c) for c in FIXED]
    for _ in range(N_RANDOM):
        n_heads = rng.randint(1, 8)
        configs.append(dict(vocab_size=rng.randint(3, 300), block_size=rng.randint(1, 64),
                            d_model=n_heads * rng.randint(1, 16), n_heads=n_heads,
                            n_layers=rng.randint(1, 4), d_ff=rng.randint(1, 200)))
    return configs


def number(value) -> dict:
    """What a returned count was: its type's name and its value as plain JSON (an int where it has one)."""
    kind = type(value).__name__
    if isinstance(value, float):
        return {"type": kind, "value": float(value) if value == value and abs(value) != float("inf") else repr(value)}
    try:
        exact = operator.index(value)  # ints, bools, numpy and 0-d torch integers
    except Exception:  # noqa: BLE001 - any object may come back
        try:
            approx = float(value)
        except Exception:  # noqa: BLE001
            return {"type": kind, "value": None}
        return {"type": kind, "value": approx if approx == approx and abs(approx) != float("inf") else repr(approx)}
    exact = int(exact)
    if exact.bit_length() > MAX_BITS:
        return {"type": kind, "value": f"an integer of {exact.bit_length()} bits"}
    return {"type": kind, "value": exact}


def call(student_file: str, fn) -> dict:
    """{"returned": ...} or {"raised": ...}; NotImplementedError still ends the probe (an untouched stub)."""
    try:
        return {"returned": fn()}
    except NotImplementedError:
        raise
    except Exception as exc:  # noqa: BLE001 - student code raising is an observation
        return {"raised": describe_exception(exc, student_file)}


def count_outcome(student, ctx, config) -> dict:
    got = call(ctx.student_file, lambda: student.count_parameters(config))
    if "returned" in got:
        got["returned"] = number(got["returned"])
    return got


def breakdown_outcome(student, ctx, config) -> dict:
    got = call(ctx.student_file, lambda: student.parameter_breakdown(config))
    if "returned" not in got:
        return got
    parts = got["returned"]
    if not isinstance(parts, dict):
        return {"returned": {"type": type(parts).__name__}}
    items = {}
    for key, value in list(parts.items())[:20]:
        items[key if isinstance(key, str) else repr(key)[:60]] = number(value)
    return {"returned": {"type": type(parts).__name__, "items": items, "n_keys": len(parts)}}


def built_parts(values: dict) -> dict:
    model = TransformerLM(Config(**values))
    return {part: sum(p.numel() for p in getattr(model, part).parameters()) for part in PARTS}


@probe
def counts(student, ctx):
    configs = random_configs(ctx.seed)
    built = [built_parts(c) for c in configs]  # before any student call
    results = [count_outcome(student, ctx, SimpleNamespace(**c)) for c in configs]
    large = [count_outcome(student, ctx, SimpleNamespace(**c)) for c in LARGE]
    ctx.record(configs=configs, built=built, counts=results, large_configs=LARGE, large=large)


@probe
def breakdowns(student, ctx):
    # Each probe has its own seed, so these are other configs than those of `counts`: more coverage.
    configs = random_configs(ctx.seed)
    built = [built_parts(c) for c in configs]
    results = [breakdown_outcome(student, ctx, SimpleNamespace(**c)) for c in configs]
    large = [breakdown_outcome(student, ctx, SimpleNamespace(**c)) for c in LARGE]
    ctx.record(configs=configs, built=built, breakdowns=results, large_configs=LARGE, large=large)


@probe
def sums(student, ctx):
    # Both functions on the same configs (a probe of its own, so that a submission with only one of the
    # two functions written still gets the other's criteria judged)
    configs = random_configs(ctx.seed)
    ctx.record(configs=configs,
               breakdowns=[breakdown_outcome(student, ctx, SimpleNamespace(**c)) for c in configs],
               totals=[count_outcome(student, ctx, SimpleNamespace(**c)) for c in configs])


class SlotsConfig:
    """Only the six attributes, no __dict__: vars(config) and config.__dict__ fail on it."""

    __slots__ = FIELDS

    def __init__(self, **values):
        for key, value in values.items():
            setattr(self, key, value)


class PropertyConfig:
    """Read-only properties over a private mapping: nothing but attribute access reads it."""

    def __init__(self, **values):
        self._values = dict(values)

    def __getattr__(self, name):
        try:
            return self.__dict__["_values"][name]
        except KeyError:
            raise AttributeError(name) from None


OBJECT_CONFIG = dict(vocab_size=37, block_size=11, d_model=12, n_heads=3, n_layers=2, d_ff=20)
EXTRA_FIELDS = dict(dropout=0.1, name="tiny", bias=True, tie_weights=False)


@probe
def config_objects(student, ctx):
    ctx.record(config=OBJECT_CONFIG, extra_fields=EXTRA_FIELDS,
               namespace=count_outcome(student, ctx, SimpleNamespace(**OBJECT_CONFIG)),
               with_extra_fields=count_outcome(student, ctx, SimpleNamespace(**OBJECT_CONFIG, **EXTRA_FIELDS)),
               slots=count_outcome(student, ctx, SlotsConfig(**OBJECT_CONFIG)),
               getattr_only=count_outcome(student, ctx, PropertyConfig(**OBJECT_CONFIG)))
