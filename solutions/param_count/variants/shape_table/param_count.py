"""VARIANT shape_table: each part is a table of (rows, cols, bias) linear maps, summed."""

import math


def _table(config):
    V, C, d, f = config.vocab_size, config.block_size, config.d_model, config.d_ff
    norm = [(1, d, True)]  # a LayerNorm as a [1, d] weight plus a [d] bias
    block = norm + [(d, d, False)] * 4 + norm + [(d, f, True), (f, d, True)]
    return {
        "token_embedding": [(V, d, False)],
        "position_embedding": [(C, d, False)],
        "blocks": block * config.n_layers,
        "final_norm": norm,
        "head": [(d, V, False)],
    }


def _size(rows, cols, bias):
    return math.prod((rows, cols)) + (cols if bias else 0)


def parameter_breakdown(config) -> dict[str, int]:
    return {part: sum(_size(*entry) for entry in entries) for part, entries in _table(config).items()}


def count_parameters(config) -> int:
    return sum(_size(*entry) for entries in _table(config).values() for entry in entries)
