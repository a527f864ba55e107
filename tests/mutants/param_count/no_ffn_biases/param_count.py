"""MUTANT no_ffn_biases: the feed-forward biases are forgotten.

A parameter ledger for the TransformerLM of the course (exercise transformer_lm).

The model, per block and in total:
    token_embedding     Embedding(V, d)                       V*d
    position_embedding  Embedding(C, d), learned, absolute    C*d
    blocks, each        ln_attention    LayerNorm(d)           2d   (weight + bias)
                        attention       Q, K, V, O: Linear(d, d, bias=False)   4*d*d
                        ln_feedforward  LayerNorm(d)           2d
                        feedforward     Linear(d, f) + GELU + Linear(f, d), biases   d*f + f + f*d + d
    final_norm          LayerNorm(d)                          2d
    head                Linear(d, V, bias=False)               d*V   (not tied to token_embedding)

Pure integer arithmetic: exact for any size, no module is built.
"""


def parameter_breakdown(config) -> dict[str, int]:
    """Parameters per part of the model described by config.

    Args:
        config: any object with integer attributes vocab_size, block_size, d_model,
            n_heads, n_layers and d_ff (n_heads is read for completeness: splitting
            d_model into heads adds no parameters).

    Returns:
        dict with exactly the keys token_embedding, position_embedding, blocks
        (all n_layers blocks together), final_norm and head; the values sum to
        count_parameters(config).
    """
    V, C = config.vocab_size, config.block_size
    d, f, N = config.d_model, config.d_ff, config.n_layers
    layer_norm = 2 * d  # weight and bias, both [d]
    attention = 4 * d * d  # Q, K, V, O projections, no bias
    feedforward = d * f + f * d  # up and down projections with biases
    per_block = layer_norm + attention + layer_norm + feedforward
    return {
        "token_embedding": V * d,
        "position_embedding": C * d,
        "blocks": N * per_block,  # every block is a distinct module with its own weights
        "final_norm": layer_norm,
        "head": d * V,  # untied: counted separately from token_embedding
    }


def count_parameters(config) -> int:
    """Total number of parameters of the model described by config (see parameter_breakdown)."""
    return sum(parameter_breakdown(config).values())
