"""VARIANT state_dict_shapes: the shapes of the model's state_dict, written out by name, then multiplied."""

from math import prod
from operator import attrgetter

_SIZES = attrgetter("vocab_size", "block_size", "d_model", "n_layers", "d_ff")


def _shapes(config):
    V, C, d, N, f = _SIZES(config)
    yield "token_embedding.weight", (V, d)
    yield "position_embedding.weight", (C, d)
    for i in range(N):
        for ln in ("ln_attention", "ln_feedforward"):
            yield f"blocks.{i}.{ln}.weight", (d,)
            yield f"blocks.{i}.{ln}.bias", (d,)
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            yield f"blocks.{i}.attention.{proj}.weight", (d, d)
        yield f"blocks.{i}.feedforward.fc_in.weight", (f, d)
        yield f"blocks.{i}.feedforward.fc_in.bias", (f,)
        yield f"blocks.{i}.feedforward.fc_out.weight", (d, f)
        yield f"blocks.{i}.feedforward.fc_out.bias", (d,)
    yield "final_norm.weight", (d,)
    yield "final_norm.bias", (d,)
    yield "head.weight", (V, d)


def parameter_breakdown(config) -> dict[str, int]:
    parts = dict.fromkeys(("token_embedding", "position_embedding", "blocks", "final_norm", "head"), 0)
    for name, shape in _shapes(config):
        parts[name.split(".", 1)[0]] += prod(shape)
    return parts


def count_parameters(config) -> int:
    return sum(prod(shape) for _, shape in _shapes(config))
