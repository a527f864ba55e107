"""Tensor comparisons that explain themselves: where the largest difference is, and both values there."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from grader.i18n import Text, t, verbatim


def shape_of(t: torch.Tensor) -> list[int]:
    return list(t.shape)


def difference(got: torch.Tensor, want: torch.Tensor, atol: float, rtol: float = 0.0) -> Text | None:
    """None when `got` matches `want` everywhere; otherwise a sentence saying where it does not.

    A value matches when both are finite and within atol + rtol*|want|, or when both are the same infinity. NaN
    matches nothing, on either side: two NaN outputs are not "the same", and an expectation holding NaN (one
    computed from a broken output) cannot be met, so neither can pass for a match."""
    if list(got.shape) != list(want.shape):
        return t("shape {got}, expected {want}", got=list(got.shape), want=list(want.shape))
    if got.numel() == 0:
        return None
    g, w = got.double(), want.double()
    finite = torch.isfinite(g) & torch.isfinite(w)
    if bool(finite.all()):
        # every value finite (what nearly every comparison sees): no NaN or infinity to tell apart, so the excess
        # over the tolerance is computed directly, as the general case below computes it for finite values
        excess = (g - w).abs() - (atol + rtol * w.abs())
        return None if excess.max() <= 0 else _largest(g, w, excess, atol, rtol)
    nan_got = torch.isnan(g)
    if nan_got.any():
        index = tuple(int(i) for i in torch.nonzero(nan_got)[0])
        if bool(torch.isnan(w[index])):
            return t("NaN at index {index}, where the expected value is NaN too: NaN matches nothing ({count} NaN "
                     "values in all)", index=index, count=int(nan_got.sum()))
        return t("NaN at index {index} where {want:.6g} was expected ({count} NaN values in all)", index=index,
                 want=float(w[index]), count=int(nan_got.sum()))
    nan_want = torch.isnan(w)
    if nan_want.any():
        index = tuple(int(i) for i in torch.nonzero(nan_want)[0])
        return t("the expected value at index {index} is NaN, which nothing matches (got {got:.6g})", index=index,
                 got=float(g[index]))
    # |g - w| is computed on finite values only (inf - inf is NaN); an infinity matches only the same infinity
    gap = torch.where(finite, g, 0.0) - torch.where(finite, w, 0.0)
    allowed = atol + rtol * torch.where(finite, w, 0.0).abs()
    excess = torch.where(finite, gap.abs() - allowed, torch.where(g == w, -1.0, math.inf))
    if excess.max() <= 0:
        return None
    return _largest(g, w, excess, atol, rtol)


def _largest(g: torch.Tensor, w: torch.Tensor, excess: torch.Tensor, atol: float, rtol: float) -> Text:
    """The sentence for the value furthest past its tolerance (the first, where several are)."""
    flat = int(torch.argmax(excess))
    index = unravel(flat, g.shape)
    said = dict(diff=float((g[index] - w[index]).abs()), index=index, got=float(g[index]), want=float(w[index]),
                atol=atol)
    if rtol:
        return t("largest difference {diff:.3g} at index {index}: got {got:.6g}, expected {want:.6g} (tolerance "
                 "{atol:g} + {rtol:g}·|expected|)", rtol=rtol, **said)
    return t("largest difference {diff:.3g} at index {index}: got {got:.6g}, expected {want:.6g} (tolerance {atol:g})",
             **said)


def unravel(flat: int | torch.Tensor, shape: Sequence[int]) -> tuple[int, ...]:
    """The index of the `flat`-th value of a tensor of `shape` in row-major order (torch.unravel_index's answer,
    without the tensors it builds, nor its first call's import of sympy: a third of a second of the judging
    server's start)."""
    flat = int(flat)
    index = []
    for size in reversed(shape):
        flat, i = divmod(flat, size)
        index.append(i)
    return tuple(reversed(index))


def prefix_leaks(base: torch.Tensor, perturbed: list[torch.Tensor], axis: int) -> list[float]:
    """Leak k: the largest change, in float64, of the values at positions 0..k along `axis` between `base` and
    `perturbed[k]` (the output once every input after position k was changed). Same shapes required. A NaN
    or inf anywhere in those prefixes makes the leak NaN or inf, which no `leak <= tolerance` lets pass."""
    leaks = []
    for k, out in enumerate(perturbed):
        before, after = base.double().narrow(axis, 0, k + 1), out.double().narrow(axis, 0, k + 1)
        leaks.append(float((after - before).abs().max()) if after.numel() else 0.0)
    return leaks


def position_changes(base: torch.Tensor, changed: torch.Tensor, axis: int) -> list[float]:
    """Change k: the largest change, in float64, of the values at position k along `axis` between `base` and
    `changed` (the output once some input was changed). Same shapes required. NaN where either holds NaN, so that
    no `change > threshold` passes on it: the positive control of a causality check (a later position must move
    when an earlier input it reads changes)."""
    delta = (changed.double() - base.double()).abs().movedim(axis, 0)
    return [float(row.max()) if row.numel() else 0.0 for row in delta]


def raised(outcome: dict) -> str | None:
    """The exception type an `outcome` recorded, or None when the call returned."""
    return outcome["raised"]["type"] if "raised" in outcome else None


def where_raised(raised: dict) -> Text:
    """' at model.py:12 in f: code', the student's frame an exception came from (a recorded outcome's
    "raised"), when it passed through the student's file; else nothing."""
    return t(" at {where}", where=raised["where"]) if raised.get("where") else verbatim("")


def gradient_summary(observation, key: str) -> dict | None:
    """None when no gradient tensor was recorded under `key` (a `None` .grad is recorded as its type), else
    whether it is finite and its float64 norm."""
    if key in observation.not_tensors:
        return None
    grad = observation.tensor(key).double()
    return {"finite": bool(torch.isfinite(grad).all()), "norm": float(grad.norm())}


def describe_outcome(outcome: dict) -> Text:
    if "raised" in outcome:
        r = outcome["raised"]
        if r.get("breach"):   # the probe found what the code gave unusable: said as the probe worded it
            from grader.judge.observations import recorded_breach

            return t("gave what breaks the contract: {breach}", breach=recorded_breach(r))
        return t("raised {error}", error=verbatim(f"{r['type']}: {r['message']}"[:290]))
    return t("returned a {kind} without raising", kind=outcome.get("returned", "value"))
