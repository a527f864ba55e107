"""Tensor comparisons that explain themselves: where the largest difference is, and both values there."""

from __future__ import annotations

import torch


def shape_of(t: torch.Tensor) -> list[int]:
    return list(t.shape)


def difference(got: torch.Tensor, want: torch.Tensor, atol: float, rtol: float = 0.0) -> str | None:
    """None when `got` matches `want` within atol + rtol*|want|; otherwise a sentence saying where it does not."""
    if list(got.shape) != list(want.shape):
        return f"shape {list(got.shape)}, expected {list(want.shape)}"
    if got.numel() == 0:
        return None
    g, w = got.double(), want.double()
    bad_nan = torch.isnan(g) & ~torch.isnan(w)
    if bad_nan.any():
        index = tuple(int(i) for i in torch.nonzero(bad_nan)[0])
        return f"NaN at index {index} where {float(w[index]):.6g} was expected ({int(bad_nan.sum())} NaN values in all)"
    excess = (g - w).abs() - (atol + rtol * w.abs())
    excess = torch.nan_to_num(excess, nan=0.0, posinf=float("inf"))
    if excess.max() <= 0:
        return None
    flat = int(torch.argmax(excess))
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), g.shape))
    return (f"largest difference {float((g - w).abs()[index]):.3g} at index {index}: got {float(g[index]):.6g}, "
            f"expected {float(w[index]):.6g} (tolerance {atol:g}{f' + {rtol:g}·|expected|' if rtol else ''})")


def prefix_leaks(base: torch.Tensor, perturbed: list[torch.Tensor], axis: int) -> list[float]:
    """Leak k: the largest change, in float64, of the values at positions 0..k along `axis` between `base` and
    `perturbed[k]` (the output once every input after position k was changed). Same shapes required. A NaN
    or inf anywhere in those prefixes makes the leak NaN or inf, which no `leak <= tolerance` lets pass."""
    leaks = []
    for k, out in enumerate(perturbed):
        before, after = base.double().narrow(axis, 0, k + 1), out.double().narrow(axis, 0, k + 1)
        leaks.append(float((after - before).abs().max()) if after.numel() else 0.0)
    return leaks


def raised(outcome: dict) -> str | None:
    """The exception type an `outcome` recorded, or None when the call returned."""
    return outcome["raised"]["type"] if "raised" in outcome else None


def describe_outcome(outcome: dict) -> str:
    if "raised" in outcome:
        r = outcome["raised"]
        return f"raised {r['type']}: {r['message']}"[:300]
    return f"returned a {outcome.get('returned', 'value')} without raising"
