"""Evidence that the HTML report draws (grader/render/pictures.py), made small and JSON-able in the judge."""

from __future__ import annotations

import torch

from grader.judge.compare import unravel

MAP_SIDE = 12  # rows and columns kept of a heat map: enough to see a pattern, small enough for the report


def attention_map(got: torch.Tensor, want: torch.Tensor) -> dict | None:
    """Evidence for the report's pair of heat maps: the [Tq, Tk] slice of the student's and of the expected weights
    (or mask values) at the leading index where the two differ most, rounded to 4 digits (non-finite values stay, and
    jsonable writes them as strings). None when the shapes differ or there is no [Tq, Tk] to slice."""
    if list(got.shape) != list(want.shape) or got.dim() < 2 or got.numel() == 0:
        return None
    g, w = got.detach().double(), want.detach().double()
    gap = torch.nan_to_num((g - w).abs(), nan=float("inf")).reshape(-1, *g.shape[-2:]).amax(dim=(-2, -1))
    lead = list(unravel(torch.argmax(gap), g.shape[:-2])) if g.dim() > 2 else []
    part = (slice(0, MAP_SIDE), slice(0, MAP_SIDE))

    def rows(t: torch.Tensor) -> list[list[float]]:
        return [[round(float(x), 4) for x in row] for row in t[tuple(lead)][part]]

    return {"index": lead, "got": rows(g), "expected": rows(w)}
