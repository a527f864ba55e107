"""Exercise param_count: a parameter ledger for the course's TransformerLM, by arithmetic alone.

The model (exercise transformer_lm), with V = vocab_size, C = block_size, d = d_model,
h = n_heads, N = n_layers, f = d_ff:
    token_embedding     learned table [V, d]
    position_embedding  learned absolute table [C, d]
    blocks              N distinct blocks, each:
                          ln_attention    LayerNorm(d) with weight and bias
                          attention       Q, K, V and output projections, Linear(d, d, bias=False)
                          ln_feedforward  LayerNorm(d) with weight and bias
                          feedforward     Linear(d, f) -> GELU -> Linear(f, d), both with bias
    final_norm          LayerNorm(d) with weight and bias
    head                Linear(d, V, bias=False), NOT tied to token_embedding

Fill in both functions. Use integer arithmetic only (no model is built, no floats):
the grader also asks for sizes far too large to instantiate.
Run the public tests with:  pytest exercises/param_count
"""


def parameter_breakdown(config) -> dict[str, int]:
    """Number of parameters in each part of the model described by config.

    Args:
        config: any object with integer attributes vocab_size, block_size, d_model,
            n_heads, n_layers and d_ff (a dataclass, a SimpleNamespace, ...).

    Returns:
        dict with exactly the keys "token_embedding", "position_embedding", "blocks"
        (all n_layers blocks together), "final_norm" and "head", each a Python int;
        the values sum to count_parameters(config).
    """
    raise NotImplementedError("param_count: implement parameter_breakdown")


def count_parameters(config) -> int:
    """Total number of parameters of the model described by config, as a Python int."""
    raise NotImplementedError("param_count: implement count_parameters")
