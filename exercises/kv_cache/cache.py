"""Exercise `kv_cache`: a key/value cache for the language model, and greedy decoding that uses it.

The model below is a complete, working copy of the `transformer_lm` exercise. Its forward raises
NotImplementedError when a cache is asked for: you make `TransformerLM.forward(tokens, targets=None,
past_key_values=None, use_cache=False)` serve that request (changing CausalSelfAttention and
TransformerBlock as you need), and you write `generate_cached` at the bottom of this file.

- With use_cache=True the result's "past_key_values" is a tuple with one (k, v) per block, each of
  shape [B, n_heads, T_past + T, d_model // n_heads]: the keys and values of every position so far.
- With past_key_values given, `tokens` holds only the new positions: their position embeddings
  continue at T_past, and they attend to every cached position and causally among themselves.
- T_past + T > block_size raises ValueError. With use_cache=False and no past_key_values, forward is
  exactly what it is now ("past_key_values" is None).
- The new positions' logits equal a full forward over the whole sequence (within float32 rounding).

Run the public tests with `pytest exercises/kv_cache`.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

# --------------------------------------------------------------------------------------------------
# Working copy of the `transformer_lm` model (Config + TransformerLM). Its forward works without a
# cache; extend it (and the attention and block it calls) so that it works with one.
# --------------------------------------------------------------------------------------------------


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
        # Fail here, with the field's name, rather than later inside a reshape with a cryptic message.
        for name in ("vocab_size", "block_size", "d_model", "n_heads", "n_layers", "d_ff"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"Config.{name} must be an int, got {value!r}")
            if value <= 0:
                raise ValueError(f"Config.{name} must be positive, got {value}")
        if self.vocab_size < 3:
            raise ValueError(f"Config.vocab_size must be >= 3 (UNK/BOS/EOS are reserved), got {self.vocab_size}")
        if self.d_model % self.n_heads != 0:
            raise ValueError(
                f"Config.n_heads={self.n_heads} must divide Config.d_model={self.d_model} "
                f"(d_model % n_heads = {self.d_model % self.n_heads})"
            )
        dropout = self.dropout
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0.0 <= dropout < 1.0:
            # `not 0 <= x < 1` is also True for NaN, which must not slip through.
            raise ValueError(f"Config.dropout must be a number in [0, 1), got {dropout!r}")


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

    def forward(
        self,
        tokens: torch.Tensor,
        targets: torch.Tensor | None = None,
        past_key_values: object | None = None,
        use_cache: bool = False,
    ) -> dict:
        """Return {"logits": [B, T, V], "loss": scalar or None, "past_key_values": None}."""
        if past_key_values is not None or use_cache:
            raise NotImplementedError("this model has no KV cache yet: pass past_key_values=None, use_cache=False")
        if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.dtype != torch.long:
            raise ValueError(f"tokens must be a 2-D int64 tensor [B, T], got {_describe(tokens)}")
        B, T = tokens.shape
        if B == 0 or T == 0:
            raise ValueError(f"tokens must be non-empty, got shape {tuple(tokens.shape)}")
        if T > self.config.block_size:
            # Never wrap or clip positions: the position table has exactly block_size learned rows.
            raise ValueError(f"sequence length T={T} exceeds block_size={self.config.block_size}")
        if targets is not None:
            # Targets are already aligned by the caller (targets[:, t] is the token after tokens[:, t]);
            # shifting them again here would train the model to predict two tokens ahead.
            if not isinstance(targets, torch.Tensor) or targets.shape != tokens.shape or targets.dtype != torch.long:
                raise ValueError(
                    f"targets must be an int64 tensor of shape {tuple(tokens.shape)}, got {_describe(targets)}"
                )
            n_scored = int((targets != IGNORE_INDEX).sum())
            if n_scored == 0:
                raise ValueError(f"targets hold no scored position (every entry is {IGNORE_INDEX})")

        positions = torch.arange(T, device=tokens.device)  # (T,)
        # (B, T, d) + (T, d): the position table is shared by every sequence in the batch, by design.
        x = self.token_embedding(tokens) + self.position_embedding(positions)  # (B, T, d)
        x = self.embedding_dropout(x)
        for block in self.blocks:  # each block reads the previous block's output
            x = block(x)  # (B, T, d)
        x = self.final_norm(x)  # the last block's output is unnormalised: do not skip this
        logits = self.head(x)  # (B, T, V): every position, since training scores every position

        loss = None
        if targets is not None:
            # Sum over scored positions / number of scored positions = mean over scored positions.
            # `loss` stays a graph tensor; log it with loss.item(), never rebuild a tensor from that float.
            loss = F.cross_entropy(
                logits.reshape(B * T, -1),  # (B*T, V)
                targets.reshape(B * T),  # (B*T,)
                ignore_index=IGNORE_INDEX,
                reduction="sum",
            ) / n_scored
        return {"logits": logits, "loss": loss, "past_key_values": None}


# --------------------------------------------------------------------------------------------------
# Exercise `kv_cache`: make TransformerLM.forward serve use_cache / past_key_values (above), then
# implement generate_cached below.
# --------------------------------------------------------------------------------------------------


def generate_cached(model: nn.Module, prompt_ids: list[int], max_new_tokens: int,
                    eos_id: int | None) -> tuple[list[int], str]:
    """Greedy decoding with the KV cache. Returns (prompt + new tokens, stop reason).

    The same contract as `generate` of the checkpoint exercise, and the same ids and stop reasons:
    model.eval(), no gradients; before each new token, if the sequence already holds
    model.config.block_size tokens, return (ids, "context_limit"); otherwise append the argmax of the
    last position's logits, and if it equals eos_id return (ids, "eos") with the EOS token included;
    after max_new_tokens new tokens return (ids, "max_new_tokens").

    Run the whole prompt once with use_cache=True, then feed each new token alone, together with the
    past_key_values the previous call returned. Start every call of generate_cached with no cache.
    """
    raise NotImplementedError("kv_cache: implement generate_cached")
