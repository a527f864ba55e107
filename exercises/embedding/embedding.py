"""Token embedding: a learnable lookup table from integer ids to vectors.

Exercise `embedding`. A `TokenEmbedding(vocab_size, dim)` holds a weight matrix `[vocab_size, dim]`;
row `i` is the vector of token `i`. Looking a token up gives the same result as multiplying a one-hot
vector by the weight matrix, but a real implementation never builds the one-hot vector.

Contract:
- `weight` is an `nn.Parameter` of shape `[vocab_size, dim]`; the `padding_idx` row starts at zero.
- `forward(ids)` returns `weight[ids]`, of shape `ids.shape + (dim,)`.
- Floating-point ids raise `TypeError`; ids outside `[0, vocab_size)` raise `IndexError`.
- The padding row receives an all-zero gradient, so training never moves it.

Write it with plain tensor operations: torch's ready-made embedding layer and its functional form
are not allowed here (README.md lists the forbidden calls). Imports: torch, math, the standard library.
"""

import torch
from torch import nn


class TokenEmbedding(nn.Module):
    """Map integer token ids `[...]` to vectors `[..., dim]` by looking up rows of `weight`."""

    def __init__(self, vocab_size: int, dim: int, padding_idx: int | None = None) -> None:
        """Create the table.

        - Call `super().__init__()` first, as in every `nn.Module`.
        - `self.weight` must be an `nn.Parameter` of shape `[vocab_size, dim]` (random init is fine).
        - When `padding_idx` is given, that row of `weight` must be all zeros right after construction.
        """
        raise NotImplementedError("embedding: implement TokenEmbedding.__init__")

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Return `weight[ids]`, shape `ids.shape + (dim,)`, for ids of any shape.

        - Non-integer ids (e.g. float32) raise `TypeError` naming the dtype you got.
        - Any id `< 0` or `>= vocab_size` raises `IndexError` naming the offending value. Beware:
          a negative index would otherwise quietly pick a row from the end of the table.
        - When `padding_idx` is set, backpropagating through the output must leave an all-zero
          gradient on the padding row, while the returned values stay exactly `weight[ids]`.
        """
        raise NotImplementedError("embedding: implement TokenEmbedding.forward")
