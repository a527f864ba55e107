"""VARIANT helpers: one small function per kind of module, composed like the model itself."""


def embedding(rows: int, dim: int) -> int:
    return rows * dim


def linear(n_in: int, n_out: int, bias: bool) -> int:
    return n_in * n_out + (n_out if bias else 0)


def layer_norm(dim: int) -> int:
    return dim + dim  # weight and bias


def attention(d: int) -> int:
    return sum(linear(d, d, bias=False) for _ in ("q", "k", "v", "o"))


def feedforward(d: int, f: int) -> int:
    return linear(d, f, bias=True) + linear(f, d, bias=True)


def block(d: int, f: int) -> int:
    return layer_norm(d) + attention(d) + layer_norm(d) + feedforward(d, f)


def parameter_breakdown(config) -> dict[str, int]:
    d = config.d_model
    return {
        "token_embedding": embedding(config.vocab_size, d),
        "position_embedding": embedding(config.block_size, d),
        "blocks": sum(block(d, config.d_ff) for _ in range(config.n_layers)),
        "final_norm": layer_norm(d),
        "head": linear(d, config.vocab_size, bias=False),
    }


def count_parameters(config) -> int:
    total = 0
    for value in parameter_breakdown(config).values():
        total += value
    return total
