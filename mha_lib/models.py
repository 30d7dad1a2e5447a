"""A one-layer attention model for the previous-plus-last task, and its shipped weights.

Shape legend
    B   batch size
    L   padded sequence length
    H   heads
    d   head size
    D   model width, H*d
    V   vocabulary size (digits; the padding token is V)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from mha_lib._checks import check_positive_int
from mha_lib.multihead import MultiHeadAttention
from mha_lib.tasks import MAX_LEN, VOCAB_SIZE

PRETRAINED_FILE = "previous_plus_last.pt"
"""Name of the shipped checkpoint inside ``mha_lib/data``."""


@dataclass(frozen=True)
class ModelConfig:
    """Sizes of :class:`DigitAttentionModel` (the defaults are the shipped model's)."""

    vocab_size: int = VOCAB_SIZE
    max_len: int = MAX_LEN
    num_hiddens: int = 32
    num_heads: int = 4
    mlp_hiddens: int = 128


class DigitAttentionModel(nn.Module):
    """Embeddings, one :class:`~mha_lib.multihead.MultiHeadAttention` layer, an MLP read-out.

    ``X = token_embedding(tokens) + position_embedding(positions)``, then self-attention over
    the valid positions with a residual connection, then LayerNorm and a two-layer MLP that
    scores the V digits at every position. All information about *other* positions has to
    pass through the attention heads, which is what makes the heads worth studying.

    Shapes:
        tokens: (B, L) long, digits in [0, V) and padding V
        valid_lens: (B,)
        head_mask: None, (H,) or (B, H)
        logits: (B, L, V); weights: (B, H, L, L)

    Args:
        config: the sizes (:class:`ModelConfig`).
    """

    def __init__(self, config: ModelConfig = ModelConfig()) -> None:
        super().__init__()
        for name, value in asdict(config).items():
            check_positive_int(value, f"config.{name}")
        self.config = config
        D = config.num_hiddens
        self.token_embedding = nn.Embedding(config.vocab_size + 1, D)  # +1: the padding token
        self.position_embedding = nn.Embedding(config.max_len, D)
        self.attention = MultiHeadAttention(D, D, D, D, config.num_heads, dropout=0.0)
        self.norm = nn.LayerNorm(D)
        self.mlp = nn.Sequential(
            nn.Linear(D, config.mlp_hiddens), nn.ReLU(), nn.Linear(config.mlp_hiddens, config.vocab_size)
        )

    @property
    def num_heads(self) -> int:
        """H of the attention layer (smaller after pruning)."""
        return self.attention.num_heads

    def embed(self, tokens: Tensor) -> Tensor:
        """The attention layer's input: token plus position embeddings, (B, L) -> (B, L, D)."""
        if (
            not isinstance(tokens, Tensor) or tokens.dim() != 2 or tokens.is_floating_point()
            or tokens.is_complex() or tokens.dtype == torch.bool
        ):
            got = f"{tokens.dtype} of shape {tuple(tokens.shape)}" if isinstance(tokens, Tensor) else type(tokens).__name__
            raise ValueError(f"tokens must be an integer tensor of shape (B, L), got {got}")
        L = tokens.shape[1]
        if L > self.config.max_len:
            raise ValueError(f"tokens may have at most max_len = {self.config.max_len} positions, got {L}")
        if tokens.numel() and (tokens.min() < 0 or tokens.max() > self.config.vocab_size):
            raise ValueError(
                f"tokens must be in [0, {self.config.vocab_size}] (digits and padding), "
                f"got values in [{int(tokens.min())}, {int(tokens.max())}]"
            )
        positions = torch.arange(L, device=tokens.device)  # (L,)
        tokens = tokens.long()  # nn.Embedding takes int64 (uint8, int16, ... are fine too)
        return self.token_embedding(tokens) + self.position_embedding(positions)  # (B, L, D)

    def forward(
        self,
        tokens: Tensor,
        valid_lens: Tensor | None = None,
        *,
        head_mask: Tensor | None = None,
        need_weights: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Score the digits at every position.

        Returns:
            logits (B, L, V), or ``(logits, weights)`` with weights (B, H, L, L) when
            ``need_weights`` is true.
        """
        X = self.embed(tokens)  # (B, L, D)
        out = self.attention(X, X, X, valid_lens, head_mask=head_mask, need_weights=need_weights)
        if need_weights:
            out, weights = out
        logits = self.mlp(self.norm(X + out))  # (B, L, D) -> (B, L, V)
        return (logits, weights) if need_weights else logits


def checkpoint(model: DigitAttentionModel, **extra: Any) -> dict:
    """A ``torch.load(..., weights_only=True)``-safe dict: config, state_dict and ``extra``."""
    return {"config": asdict(model.config), "state_dict": model.state_dict(), **extra}


def from_checkpoint(ckpt: dict) -> DigitAttentionModel:
    """Rebuild a model from :func:`checkpoint`'s dict (in eval mode)."""
    if not isinstance(ckpt, dict) or not {"config", "state_dict"} <= ckpt.keys():
        raise ValueError(
            "ckpt must be a dict with 'config' and 'state_dict' (as checkpoint() makes), "
            f"got {type(ckpt).__name__}"
        )
    model = DigitAttentionModel(ModelConfig(**ckpt["config"]))
    model.load_state_dict(ckpt["state_dict"])
    return model.eval()


def pretrained_path() -> Path:
    """Where the shipped checkpoint lives (``mha_lib/data/previous_plus_last.pt``)."""
    return Path(str(resources.files("mha_lib") / "data" / PRETRAINED_FILE))


def load_checkpoint(path: str | Path | None = None) -> dict:
    """Load a checkpoint dict with ``weights_only=True`` (tensors and plain data only)."""
    return torch.load(path or pretrained_path(), map_location="cpu", weights_only=True)


def load_pretrained(path: str | Path | None = None) -> DigitAttentionModel:
    """The shipped model, trained on the previous-plus-last task, in eval mode.

    Its checkpoint also stores the training record (``load_checkpoint()["history"]``).
    """
    return from_checkpoint(load_checkpoint(path))
