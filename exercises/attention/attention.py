"""Single-head scaled dot-product attention, written out by hand.

Exercise `attention`. Each query scores every key with a dot product, the scores are divided by
`sqrt(D)`, masked, turned into probabilities with a softmax over the key axis, and the output is the
probability-weighted sum of the values.

Contract:
- `scaled_dot_product_attention(q, k, v, mask=None) -> (out, weights)` with `q [..., Tq, D]`,
  `k [..., Tk, D]`, `v [..., Tk, Dv]`, `out [..., Tq, Dv]`, `weights [..., Tq, Tk]`.
- `mask` is a bool tensor broadcastable to `[..., Tq, Tk]`; `True` means "this query may attend to
  this key". It is applied to the scores, before the softmax.
- Weights sum to 1 over the key axis and masked weights are exactly 0. A query whose keys are all
  masked gets all-zero weights and an all-zero output, with no NaN in the forward or backward pass.

Write the computation yourself: PyTorch's fused attention function and its multi-head attention module
are not allowed here (README.md lists the forbidden calls). Imports: torch, math, the standard library.
"""

import math

import torch


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attend from `q [..., Tq, D]` over `k [..., Tk, D]` / `v [..., Tk, Dv]`.

    Returns `(out [..., Tq, Dv], weights [..., Tq, Tk])`.

    - Any number of leading batch axes (`...`) must work, e.g. `[B, H, T, D]`.
    - Keys decide *where* to look (they meet the queries); values decide *what* is read.
    - `mask` is optional, bool, broadcastable to `[..., Tq, Tk]`, True = may attend. Apply it before
      the softmax so the surviving weights still sum to 1 and masked weights are exactly 0.
    - A query row with every key masked: weights and output all zero, and `.backward()` through the
      result must not produce NaN anywhere.
    """
    raise NotImplementedError("attention: implement scaled_dot_product_attention")
