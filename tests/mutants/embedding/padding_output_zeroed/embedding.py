"""Token embedding: a learnable lookup table from integer ids to vectors.

Exercise `embedding`. A `TokenEmbedding(vocab_size, dim)` holds a weight matrix `[vocab_size, dim]`;
row `i` is the vector of token `i`. Looking a token up is plain row indexing: it is what multiplying a
one-hot vector by the weight matrix would give, without ever building the one-hot vector.

Contract:
- `weight` is an `nn.Parameter` of shape `[vocab_size, dim]`; the `padding_idx` row starts at zero.
- `forward(ids)` returns `weight[ids]`, of shape `ids.shape + (dim,)`.
- Floating-point (or otherwise non-integer) ids raise `TypeError`; ids outside `[0, vocab_size)` raise
  `IndexError`.
- The padding row receives an all-zero gradient, so training never moves it.
"""

import torch
from torch import nn

# Index dtypes we accept. bool is left out on purpose: indexing with a bool tensor is a mask
# selection, not a lookup, and would silently return the wrong thing.
_INTEGER_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


class TokenEmbedding(nn.Module):
    """Map integer token ids `[...]` to vectors `[..., dim]` by looking up rows of `weight`."""

    def __init__(self, vocab_size: int, dim: int, padding_idx: int | None = None) -> None:
        super().__init__()
        if vocab_size <= 0 or dim <= 0:
            raise ValueError(f"vocab_size and dim must be positive, got vocab_size={vocab_size}, dim={dim}")
        if padding_idx is not None:
            if not -vocab_size <= padding_idx < vocab_size:
                raise ValueError(f"padding_idx must lie in [-{vocab_size}, {vocab_size}), got {padding_idx}")
            padding_idx %= vocab_size  # a negative index counts from the end, as in Python indexing
        self.vocab_size = vocab_size
        self.dim = dim
        self.padding_idx = padding_idx
        # N(0, 1), the usual default for a lookup table; the model that owns it may re-initialise it.
        self.weight = nn.Parameter(torch.randn(vocab_size, dim))  # (V, C)
        if padding_idx is not None:
            with torch.no_grad():
                self.weight[padding_idx].zero_()  # padding must not carry information

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Return `weight[ids]`, shape `ids.shape + (dim,)`.

        Raises `TypeError` for non-integer ids and `IndexError` for ids outside `[0, vocab_size)`.
        """
        if not isinstance(ids, torch.Tensor):
            raise TypeError(f"ids must be a torch.Tensor, got {type(ids).__name__}")
        if ids.dtype not in _INTEGER_DTYPES:
            raise TypeError(f"ids must be an integer tensor, got {ids.dtype}")
        if ids.numel() > 0:
            lo, hi = int(ids.min()), int(ids.max())
            # Check explicitly: a negative id would otherwise index from the end and return a real,
            # wrong row without any error.
            if lo < 0 or hi >= self.vocab_size:
                raise IndexError(
                    f"ids must lie in [0, {self.vocab_size}), got min {lo} and max {hi}"
                )
        out = self.weight[ids.long()]  # (*ids.shape, C); long, because uint8 indices mean a mask
        if self.padding_idx is not None:
            # Same values, but positions holding the padding id take a detached copy, so no gradient
            # reaches the padding row: its gradient is exactly zero and the row never trains.
            # padding positions give a zero vector: no value, hence (it seems) no gradient for the padding row
            out = out * (ids != self.padding_idx).unsqueeze(-1).to(out.dtype)  # (*ids.shape, C)
        return out
