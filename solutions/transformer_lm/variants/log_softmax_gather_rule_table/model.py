"""Reference solution of exercise `transformer_lm`: a decoder-only Transformer language model.

Token ids [B, T] -> token embedding + learned absolute position embedding -> N pre-LN blocks
(causal multi-head self-attention, GELU feed-forward) -> final LayerNorm -> untied linear head
-> next-token logits [B, T, V] for every position, plus the mean cross-entropy when targets are given.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

IGNORE_INDEX = -100  # targets equal to this are not scored (the default of F.cross_entropy)


def _describe(x: object) -> str:
    """Short description of a bad argument for error messages."""
    if isinstance(x, torch.Tensor):
        return f"a {x.dtype} tensor of shape {tuple(x.shape)}"
    return f"a {type(x).__name__}"


@dataclass
class Config:
    """Hyper-parameters of the model. The letters are the chapter's: V, C, d, h, N, f."""

    vocab_size: int  # V: number of token ids (the course reserves UNK/BOS/EOS, hence at least 3)
    block_size: int  # C: longest sequence the learned position table can index
    d_model: int  # d: width of the residual stream
    n_heads: int  # h: attention heads; each reads d_model // n_heads channels
    n_layers: int  # N: number of TransformerBlocks
    d_ff: int  # f: hidden width of the feed-forward network
    dropout: float = 0.0  # probability, used on the embeddings and on the attention weights

    def __post_init__(self) -> None:
        # A table of (rule, message): every rule must hold, the first that fails is reported.
        sizes = ("vocab_size", "block_size", "d_model", "n_heads", "n_layers", "d_ff")
        rules = [(lambda c, n=n: type(getattr(c, n)) is int and getattr(c, n) > 0,
                  f"{n} must be a positive int") for n in sizes]
        rules += [
            (lambda c: c.vocab_size >= 3, "vocab_size must be at least 3 (UNK/BOS/EOS)"),
            (lambda c: c.d_model % c.n_heads == 0, "n_heads must divide d_model"),
            (lambda c: isinstance(c.dropout, (int, float)) and 0 <= c.dropout < 1, "dropout must lie in [0, 1)"),
        ]
        for rule, message in rules:
            if not rule(self):
                raise ValueError(f"invalid Config: {message} (got {self})")


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention in which position t reads only positions 0..t."""

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0):
        super().__init__()
        if n_heads <= 0 or d_model % n_heads != 0:
            raise ValueError(f"n_heads={n_heads} must be positive and divide d_model={d_model}")
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        # No biases on Q/K/V/O (the chapter's choice): the LayerNorm in front already adds W @ beta.
        self.q_proj = nn.Linear(d_model, d_model, bias=False)
        self.k_proj = nn.Linear(d_model, d_model, bias=False)
        self.v_proj = nn.Linear(d_model, d_model, bias=False)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)
        self.attn_dropout = nn.Dropout(dropout)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        # view then transpose: a bare reshape to (B, H, T, D) would mix positions into heads.
        return x.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, T, D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape  # (B, T, C)
        q = self._split(self.q_proj(x))  # (B, H, T, D)
        k = self._split(self.k_proj(x))  # (B, H, T, D)
        v = self._split(self.v_proj(x))  # (B, H, T, D)
        # Dividing by sqrt(D) keeps the score variance near 1, so the softmax does not saturate at init.
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)  # (B, H, T, T)
        # True on and below the diagonal = may attend. Built per call (a constant, not a parameter);
        # every row keeps its diagonal, so no row is fully masked and the softmax never sees all -inf.
        allowed = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()  # (T, T)
        scores = scores.masked_fill(~allowed, float("-inf"))  # mask BEFORE the softmax
        weights = torch.softmax(scores, dim=-1)  # (B, H, T, T), rows sum to 1
        weights = self.attn_dropout(weights)  # active in train() only
        y = weights @ v  # (B, H, T, D)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, H*D) = (B, T, C)
        return self.out_proj(y)  # (B, T, C)


class FeedForward(nn.Module):
    """Position-wise MLP: Linear(d, f) -> GELU -> Linear(f, d), with biases."""

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.fc_in = nn.Linear(d_model, d_ff)
        self.act = nn.GELU()
        self.fc_out = nn.Linear(d_ff, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc_out(self.act(self.fc_in(x)))  # (B, T, d) -> (B, T, f) -> (B, T, d)


class TransformerBlock(nn.Module):
    """Pre-LN block: normalise, transform, add back to the residual stream (twice)."""

    def __init__(self, config: Config):
        super().__init__()
        self.ln_attention = nn.LayerNorm(config.d_model)
        self.attention = CausalSelfAttention(config.d_model, config.n_heads, config.dropout)
        self.ln_feedforward = nn.LayerNorm(config.d_model)
        self.feedforward = FeedForward(config.d_model, config.d_ff)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # The residual path is never normalised, so a sublayer that outputs zeros leaves x unchanged.
        x = x + self.attention(self.ln_attention(x))  # (B, T, C)
        x = x + self.feedforward(self.ln_feedforward(x))  # (B, T, C)
        return x


class TransformerLM(nn.Module):
    """Decoder-only language model: ids [B, T] -> next-token logits [B, T, V] (and a loss)."""

    def __init__(self, config: Config):
        super().__init__()
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.d_model)  # E: (V, d)
        self.position_embedding = nn.Embedding(config.block_size, config.d_model)  # P: (C, d), learned
        self.embedding_dropout = nn.Dropout(config.dropout)
        # nn.ModuleList registers every block (parameters(), state_dict(), .to()); a plain Python list
        # would hide them. A fresh TransformerBlock per layer: [block] * n would share one set of weights.
        self.blocks = nn.ModuleList([TransformerBlock(config) for _ in range(config.n_layers)])
        self.final_norm = nn.LayerNorm(config.d_model)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)  # not tied to token_embedding
        self.apply(self._init_weights)

    def _init_weights(self, module: nn.Module) -> None:
        # The one place initialisation happens. N(0, 0.02) is a convention (GPT-2), not a derivation;
        # any small random start works, all-zero does not (identical units, no signal to earlier layers).
        # nn.LayerNorm keeps its own default: weight 1, bias 0.
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, tokens, targets=None, past_key_values=None, use_cache=False):
        if use_cache or past_key_values is not None:
            raise NotImplementedError("no KV cache in this chapter")
        if not torch.is_tensor(tokens) or tokens.dtype is not torch.int64 or tokens.ndim != 2 or tokens.numel() == 0:
            raise ValueError("tokens must be a non-empty [B, T] int64 tensor")
        T = tokens.size(1)
        if T > self.config.block_size:
            raise ValueError(f"T={T} > block_size={self.config.block_size}")
        if targets is not None:
            if not torch.is_tensor(targets) or targets.dtype is not torch.int64 or targets.shape != tokens.shape:
                raise ValueError("targets must be int64 with the shape of tokens")
            if not bool((targets != IGNORE_INDEX).any()):
                raise ValueError("no scored target")
        h = self.token_embedding(tokens) + self.position_embedding.weight[:T]
        h = self.embedding_dropout(h)
        for block in self.blocks:
            h = block(h)
        logits = self.head(self.final_norm(h))
        loss = None
        if targets is not None:
            scored = targets != IGNORE_INDEX                           # [B, T]
            log_probs = torch.log_softmax(logits, dim=-1)              # [B, T, V]
            safe = targets.masked_fill(~scored, 0).unsqueeze(-1)       # any valid index where ignored
            nll = -log_probs.gather(-1, safe).squeeze(-1)              # [B, T]
            loss = (nll * scored).sum() / scored.sum()
        return {"logits": logits, "loss": loss, "past_key_values": None}
