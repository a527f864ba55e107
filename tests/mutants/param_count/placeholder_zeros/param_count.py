"""MUTANT placeholder_zeros: placeholders: count_parameters returns 0 and parameter_breakdown five zeros; consistent, ints and the same for any config object by construction, which earns nothing

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
    # a placeholder: the five keys, every part 0
    return {"token_embedding": 0, "position_embedding": 0, "blocks": 0, "final_norm": 0, "head": 0}


def count_parameters(config) -> int:
    """Total number of parameters of the model described by config (see parameter_breakdown)."""
    return 0  # a placeholder
