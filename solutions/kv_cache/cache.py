"""Reference solution of exercise `kv_cache`: a key/value cache for the language model and cached greedy decoding.

The model is the `transformer_lm` model with its attention, block and forward extended to take and return the
cache; the file is standalone, as the stub is.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

# --------------------------------------------------------------------------------------------------
# The `transformer_lm` model, with a KV cache in CausalSelfAttention, TransformerBlock and
# TransformerLM.forward.
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

    def forward(self, x: torch.Tensor, past_key_value: tuple[torch.Tensor, torch.Tensor] | None = None
                ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """x [B, T, C] holds the new positions; past_key_value the (k, v) [B, H, T_past, D] of the earlier ones.
        Returns the output [B, T, C] and the (k, v) [B, H, T_past + T, D] of every position so far."""
        B, T, C = x.shape  # (B, T, C)
        q = self._split(self.q_proj(x))  # (B, H, T, D)
        k = self._split(self.k_proj(x))  # (B, H, T, D)
        v = self._split(self.v_proj(x))  # (B, H, T, D)
        if past_key_value is not None:
            past_k, past_v = past_key_value
            # Positions are dim 2 of [B, H, T, D]: the new keys and values go after the cached ones.
            k = torch.cat([past_k, k], dim=2)  # (B, H, T_past + T, D)
            v = torch.cat([past_v, v], dim=2)  # (B, H, T_past + T, D)
        t_past = k.shape[2] - T
        # Dividing by sqrt(D) keeps the score variance near 1, so the softmax does not saturate at init.
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)  # (B, H, T, T_past + T)
        # New position i sits at T_past + i: it reads every cached key and the new ones up to itself. With no
        # cache this is exercise 9's lower triangle.
        allowed = torch.ones(T, t_past + T, dtype=torch.bool, device=x.device).tril(diagonal=t_past)
        scores = scores.masked_fill(~allowed, float("-inf"))  # mask BEFORE the softmax
        weights = torch.softmax(scores, dim=-1)  # (B, H, T, T_past + T), rows sum to 1
        weights = self.attn_dropout(weights)  # active in train() only
        y = weights @ v  # (B, H, T, D)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, H*D) = (B, T, C)
        return self.out_proj(y), (k, v)  # (B, T, C), the cache of this layer


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

    def forward(self, x: torch.Tensor, past_key_value: tuple[torch.Tensor, torch.Tensor] | None = None
                ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        # The residual path is never normalised, so a sublayer that outputs zeros leaves x unchanged.
        attended, present = self.attention(self.ln_attention(x), past_key_value)
        x = x + attended  # (B, T, C)
        x = x + self.feedforward(self.ln_feedforward(x))  # (B, T, C)
        return x, present


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
        """Return {"logits": [B, T, V], "loss": scalar or None, "past_key_values": the cache or None}.

        With past_key_values (one (k, v) [B, H, T_past, D] per block) `tokens` holds the new positions only."""
        if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.dtype != torch.long:
            raise ValueError(f"tokens must be a 2-D int64 tensor [B, T], got {_describe(tokens)}")
        B, T = tokens.shape
        if B == 0 or T == 0:
            raise ValueError(f"tokens must be non-empty, got shape {tuple(tokens.shape)}")
        t_past = self._cached_length(past_key_values, B)
        if t_past + T > self.config.block_size:
            # Never wrap or clip positions: the position table has exactly block_size learned rows.
            raise ValueError(f"sequence length T_past + T = {t_past} + {T} exceeds block_size={self.config.block_size}")
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

        # The new positions continue after the cached ones: restarting at 0 would give every new token the
        # first position's embedding.
        positions = torch.arange(t_past, t_past + T, device=tokens.device)  # (T,)
        # (B, T, d) + (T, d): the position table is shared by every sequence in the batch, by design.
        x = self.token_embedding(tokens) + self.position_embedding(positions)  # (B, T, d)
        x = self.embedding_dropout(x)
        presents = []
        for i, block in enumerate(self.blocks):  # each block reads the previous block's output
            # Each block reads its own layer's cache: the keys of one layer mean nothing to another.
            x, present = block(x, None if past_key_values is None else past_key_values[i])  # (B, T, d)
            presents.append(present)
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
        return {"logits": logits, "loss": loss, "past_key_values": tuple(presents) if use_cache else None}

    def _cached_length(self, past_key_values: object | None, batch: int) -> int:
        """T_past of a cache handed to forward (0 for none), after checking it has the contract's layout."""
        if past_key_values is None:
            return 0
        n_layers, heads = len(self.blocks), self.config.n_heads
        head_dim = self.config.d_model // heads
        if not isinstance(past_key_values, (tuple, list)) or len(past_key_values) != n_layers:
            raise ValueError(f"past_key_values must hold one (k, v) per block ({n_layers}), got {_describe(past_key_values)}")
        t_past = None
        for i, pair in enumerate(past_key_values):
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise ValueError(f"past_key_values[{i}] must be a pair (k, v), got {_describe(pair)}")
            for name, cached in zip("kv", pair, strict=True):
                if not isinstance(cached, torch.Tensor) or cached.dim() != 4 or cached.shape[0] != batch \
                        or cached.shape[1] != heads or cached.shape[3] != head_dim:
                    raise ValueError(f"past_key_values[{i}] {name} must be [{batch}, {heads}, T_past, {head_dim}], "
                                     f"got {_describe(cached)}")
                if t_past is None:
                    t_past = cached.shape[2]
                elif cached.shape[2] != t_past:
                    raise ValueError(f"past_key_values[{i}] {name} holds {cached.shape[2]} positions, not {t_past}")
        return int(t_past or 0)


# --------------------------------------------------------------------------------------------------
# Exercise `kv_cache`
# --------------------------------------------------------------------------------------------------


@torch.no_grad()
def generate_cached(model: nn.Module, prompt_ids: list[int], max_new_tokens: int,
                    eos_id: int | None) -> tuple[list[int], str]:
    """Greedy decoding with the KV cache: `generate`'s ids and stop reasons, the prompt run once, then each new
    token alone."""
    ids = [int(i) for i in prompt_ids]
    if not ids:
        raise ValueError("prompt_ids must hold at least one token")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be a non-negative int, got {max_new_tokens!r}")
    model.eval()  # no dropout: the same prompt must always give the same continuation
    device = next(model.parameters()).device
    block_size = model.config.block_size
    past = None      # a cache of this call's own: one kept from an earlier call holds another sequence
    pending = ids    # the positions the model has not seen yet: the prompt, then the last new token
    for _ in range(max_new_tokens):
        # Checked before each new token, as generate does: there is no position left for another token.
        if len(ids) >= block_size:
            return ids, "context_limit"
        tokens = torch.tensor([pending], dtype=torch.long, device=device)  # (1, T)
        out = model(tokens, past_key_values=past, use_cache=True)
        past = out["past_key_values"]
        next_id = int(out["logits"][0, -1].argmax())  # only the last position predicts the next token
        ids.append(next_id)
        if eos_id is not None and next_id == eos_id:
            return ids, "eos"  # EOS is kept in the output, then decoding stops
        pending = [next_id]
    return ids, "max_new_tokens"
