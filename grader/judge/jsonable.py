"""Evidence made plain JSON: tensors become lists, non-finite floats become strings, the rest stays small."""

from __future__ import annotations

import math
from typing import Any

import torch


def jsonable(value: Any, depth: int = 0) -> Any:
    if depth > 6:
        return repr(value)[:200]
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        return jsonable(value.tolist() if value.numel() <= 256 else f"tensor of shape {list(value.shape)}", depth + 1)
    if isinstance(value, dict):
        return {str(k): jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v, depth + 1) for v in value[:256]]
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    return repr(value)[:200]
