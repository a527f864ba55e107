"""Hostile: an attention that reads the future, which forges its causality observation the way the runner once
acknowledged observations. While the causality probe runs it writes a `causality.json` and `causality.safetensors`
a causal attention would have produced (later positions change, earlier ones do not) into every observation folder
it can name, and the acknowledgement line `causality <json sha256> <tensors sha256>` on every descriptor it holds
(the runner's acknowledgement pipe was one of them). With FORGE = False it is the same code without the forgery."""

import hashlib
import json
import math
import os
import sys

import torch
import torch.nn as nn
from safetensors.torch import save

FORGE = True
_forged = []


def _forge_causality(like: torch.Tensor) -> None:
    """A causality observation that shows no leak: position <= t never changes when the input after t does."""
    base = torch.randn(like.shape, dtype=torch.float64)
    tensors = {"base": base}
    for t in range(like.shape[1] - 1):
        changed = base.clone()
        changed[:, t + 1:] += 1.0
        tensors[f"changed_after_{t}"] = changed
    data = save(tensors)
    text = json.dumps({"probe": "causality", "status": "ok", "error": None, "values": {}, "not_tensors": {},
                       "tensors": sorted(tensors), "calls": {"returned": 0, "raised": 0}, "forbidden_calls": [],
                       "seconds": 0.01}).encode()
    folders = {"obs"}
    frame = sys._getframe(1)
    while frame is not None:
        job = frame.f_locals.get("job")
        if isinstance(job, dict) and isinstance(job.get("obs_dir"), str):
            folders.add(job["obs_dir"])
        frame = frame.f_back
    for folder in folders:
        try:
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, "causality.safetensors"), "wb") as fh:
                fh.write(data)
            with open(os.path.join(folder, "causality.json"), "wb") as fh:
                fh.write(text)
        except OSError:
            pass
    ack = f"causality {hashlib.sha256(text).hexdigest()} {hashlib.sha256(data).hexdigest()}\n".encode()
    written = 0
    for fd in range(3, 256):
        try:
            os.write(fd, ack)
            written += 1
        except OSError:
            pass
    print(f"FORGED causality: files in {len(folders)} folders, the acknowledgement on {written} descriptors", flush=True)


def _in_causality_probe() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "causality" and frame.f_code.co_filename.endswith("decoder_block.py"):
            return True
        frame = frame.f_back
    return False


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention without the causal mask: every position reads the future."""

    def __init__(self, d_model, n_heads, dropout=0.0):
        super().__init__()
        if n_heads <= 0 or d_model % n_heads != 0:
            raise ValueError(f"n_heads={n_heads} must be positive and divide d_model={d_model}")
        self.n_heads, self.head_dim = n_heads, d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=False)
        self.k_proj = nn.Linear(d_model, d_model, bias=False)
        self.v_proj = nn.Linear(d_model, d_model, bias=False)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)
        self.attn_dropout = nn.Dropout(dropout)

    def forward(self, x):
        if FORGE and not _forged and _in_causality_probe():
            _forged.append(True)
            _forge_causality(x)
        B, T, C = x.shape
        q, k, v = (p(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
                   for p in (self.q_proj, self.k_proj, self.v_proj))
        weights = self.attn_dropout((q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)).softmax(dim=-1))
        return self.out_proj((weights @ v).transpose(1, 2).reshape(B, T, C))


def count_block_parameters(d_model, n_heads, d_ff):
    if n_heads <= 0 or d_model % n_heads != 0:
        raise ValueError(f"n_heads={n_heads} must be positive and divide d_model={d_model}")
    return 4 * d_model * d_model + (d_model * d_ff + d_ff) + (d_ff * d_model + d_model) + 4 * d_model
