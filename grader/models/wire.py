"""The messages between a model handle (in the process that runs student code) and the model process.

A message is a frame: 4 bytes (big-endian) giving the length of a JSON header, the header, then the raw bytes of
each tensor the header lists (`"tensors": [[dtype, shape], ...]`), in order. Values inside the header refer to
those tensors as `{"$t": k}`; an object the model process keeps (a trainer's run) is `{"$h": id, "kind": kind}`; a
tuple is `{"$tuple": [...]}`. Nothing is pickled in either direction: a tensor is its dtype, its shape and its bytes,
so what one side sends can make the other build tensors and plain values, never objects of the sender's choosing.
Both sides read frames with `read_frame`, which refuses anything larger than the caps below before it allocates.
"""

from __future__ import annotations

import json
import math
import random
import struct
from collections.abc import Callable
from typing import Any

import torch

MAX_HEADER = 1 << 20          # bytes of one frame's JSON header
MAX_TENSOR_BYTES = 64 << 20   # bytes of all tensors of one frame together
MAX_TENSORS = 4096            # tensors in one frame (a model's named parameters, with room)
MAX_DIMS = 8
DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
          "bfloat16": torch.bfloat16, "int64": torch.int64, "int32": torch.int32, "int16": torch.int16,
          "int8": torch.int8, "uint8": torch.uint8, "bool": torch.bool}
NAMES = {dtype: name for name, dtype in DTYPES.items()}
_LENGTH = struct.Struct(">I")


class WireError(Exception):
    """A frame that breaks the format or a cap: the connection that carried it is ended."""


def encode(header: dict, tensors: list[torch.Tensor]) -> bytes:
    """One frame of `header` (JSON data) and `tensors` (plain, CPU, contiguous: `plain_bytes` makes them so)."""
    specs, chunks = [], []
    for t in tensors:
        if t.dtype not in NAMES:
            raise WireError(f"a tensor of dtype {t.dtype} cannot cross the model channel")
        specs.append([NAMES[t.dtype], list(t.shape)])
        chunks.append(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    text = json.dumps({**header, "tensors": specs}, allow_nan=True, separators=(",", ":")).encode("utf-8")
    if len(text) > MAX_HEADER or sum(map(len, chunks)) > MAX_TENSOR_BYTES or len(specs) > MAX_TENSORS:
        raise WireError("a message larger than the model channel carries")
    return b"".join([_LENGTH.pack(len(text)), text, *chunks])


def read_frame(read_exactly: Callable[[int], bytes]) -> tuple[dict, list[torch.Tensor]]:
    """The next frame, read with `read_exactly(n)` (which raises EOFError at the stream's end): its header and its
    tensors, each a fresh tensor owning its memory. WireError for anything malformed or over a cap."""
    (length,) = _LENGTH.unpack(read_exactly(_LENGTH.size))
    if length > MAX_HEADER:
        raise WireError("a message header larger than allowed")
    try:
        header = json.loads(read_exactly(length).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise WireError("a message header that is not JSON (or nested too deep)") from exc
    if not isinstance(header, dict):
        raise WireError("a message header that is not an object")
    specs = header.pop("tensors", [])
    if not isinstance(specs, list) or len(specs) > MAX_TENSORS:
        raise WireError("a message with a malformed tensor list")
    shapes = []
    total = 0
    for spec in specs:
        if not (isinstance(spec, list) and len(spec) == 2 and spec[0] in DTYPES and isinstance(spec[1], list)
                and len(spec[1]) <= MAX_DIMS
                and all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= MAX_TENSOR_BYTES
                        for n in spec[1])):
            raise WireError("a message with a malformed tensor")
        dtype = DTYPES[spec[0]]
        size = math.prod(spec[1]) * torch.empty((), dtype=dtype).element_size()
        total += size
        if total > MAX_TENSOR_BYTES:
            raise WireError("a message whose tensors are larger than allowed")
        shapes.append((dtype, spec[1], size))
    tensors = []
    for dtype, shape, size in shapes:
        data = bytearray(read_exactly(size)) if size else bytearray()
        flat = torch.frombuffer(data, dtype=torch.uint8) if size else torch.empty(0, dtype=torch.uint8)
        tensors.append(flat.view(dtype).reshape(shape).clone() if size else torch.empty(shape, dtype=dtype))
    return header, tensors


def pack(value: Any, tensors: list[torch.Tensor], keep: Callable[[Any], dict] | None = None) -> Any:
    """`value` as JSON data, its tensors appended to `tensors` (each as `to_plain` makes it); an object that is none
    of the plain kinds is handed to `keep` (the model process keeps it and answers a handle), or refused."""
    if isinstance(value, torch.Tensor):
        tensors.append(to_plain(value))
        return {"$t": len(tensors) - 1}
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value
    if isinstance(value, tuple):
        return {"$tuple": [pack(v, tensors, keep) for v in value]}
    if isinstance(value, list):
        return [pack(v, tensors, keep) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value) and not any(k.startswith("$") for k in value):
        return {k: pack(v, tensors, keep) for k, v in value.items()}
    if keep is not None:
        return keep(value)
    raise WireError(f"a value of type {type(value).__name__} cannot cross the model channel")


def unpack(value: Any, tensors: list[torch.Tensor], handle: Callable[[dict], Any] | None = None) -> Any:
    """The inverse of `pack`: `{"$t": k}` becomes the k-th tensor, `{"$h": ...}` what `handle` makes of it."""
    if isinstance(value, list):
        return [unpack(v, tensors, handle) for v in value]
    if isinstance(value, dict):
        if "$t" in value:
            k = value["$t"]
            if not isinstance(k, int) or not 0 <= k < len(tensors):
                raise WireError("a message refers to a tensor it does not carry")
            return tensors[k]
        if "$tuple" in value and isinstance(value["$tuple"], list):
            return tuple(unpack(v, tensors, handle) for v in value["$tuple"])
        if "$h" in value:
            if handle is None:
                raise WireError("a message names an object where only values are allowed")
            return handle(value)
        return {k: unpack(v, tensors, handle) for k, v in value.items()}
    return value


def to_plain(value: torch.Tensor) -> torch.Tensor:
    """A detached, contiguous CPU copy of a tensor's data, read past any subclass or `__torch_function__` it carries
    (what a student passes a handle may be anything that says it is a tensor)."""
    with torch._C.DisableTorchFunction():
        plain = torch._C.TensorBase.as_subclass(value, torch.Tensor)
        return torch._C.TensorBase.clone(torch._C.TensorBase.contiguous(
            torch._C.TensorBase.cpu(torch._C.TensorBase.detach(plain))))


def served_order(seed: int, group: str, count: int) -> list[int]:
    """The catalog positions of a group's entries in the order they are served under `seed`: position `order[i]`
    is served as index i. The model process serves in this order; the judge recomputes it to read the outcomes."""
    order = list(range(count))
    random.Random(f"{seed}:{group}").shuffle(order)
    return order
