"""The Llama family in the book's layers: RMSNorm, SwiGLU, and a decoder-only model around them.

Llama, Mistral, Qwen2 and most language models of today differ from the blocks of chapter 4 in
three places, and each is a few lines:

* :class:`RMSNorm` instead of LayerNorm: divide by the root mean square of the features (no
  mean subtracted, no bias), then scale by a learned weight;
* :class:`SwiGLU` instead of the ReLU feed-forward net: ``W_down (silu(W_gate x) * W_up x)``,
  a gated unit (Shazeer, 2020, "GLU Variants Improve Transformer");
* the attention is :class:`mha_lib.gqa.GroupedQueryAttention` with rotary positions.

:class:`LlamaLM` is the whole model: embedding, N pre-norm blocks, RMSNorm, output layer. Its
config may give each layer a kind of its own (``pattern``, one
:class:`mha_lib.patterns.LayerKind` per layer: a window, a chunk or every key; a RoPE base or
none), as Gemma 3 and Llama 4 do; :meth:`LlamaLM.new_cache` then keeps, per layer, only what
that layer reads, and decoding token by token with it gives the logits of the whole sequence.
:func:`mha_lib.interop.from_hf_llama` fills one with the weights of a Hugging Face
``LlamaForCausalLM`` (or ``MistralForCausalLM``), and both give the same logits.

Shape legend
    B   batch size
    L   sequence length
    H   query heads; Hkv key/value heads
    D   d_model
    F   the hidden width of the feed-forward net
    V   vocabulary size
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mha_lib._checks import as_tensor, check_bool, check_positive_int, check_tensor
from mha_lib.gqa import GroupedQueryAttention
from mha_lib.decoding import KVCache
from mha_lib.masks import Mask
from mha_lib.patterns import LayerKind, check_pattern, pattern_cache
from mha_lib.qk import RMSNorm, _check_eps  # (RMSNorm: also QK-norm's, below the attention layers)

__all__ = ["LlamaConfig", "LlamaLM", "RMSNorm", "SwiGLU"]


class SwiGLU(nn.Module):
    """The gated feed-forward net of Llama: ``W_down(silu(W_gate x) * W_up x)``.

    Shapes:
        x: (..., D); returns: (..., D)

    Args:
        d_model: D.
        d_ff: F, the hidden width.
        bias: whether the three projections have a bias.
    """

    def __init__(self, d_model: int, d_ff: int, bias: bool = False) -> None:
        super().__init__()
        D, Fw = check_positive_int(d_model, "d_model"), check_positive_int(d_ff, "d_ff")
        check_bool(bias, "bias")
        self.W_gate = nn.Linear(D, Fw, bias=bias)
        self.W_up = nn.Linear(D, Fw, bias=bias)
        self.W_down = nn.Linear(Fw, D, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        check_tensor(x, "x", tuple(range(1, 9)))
        if x.shape[-1] != self.W_gate.in_features:
            raise ValueError(f"x must have feature size {self.W_gate.in_features}, got shape {tuple(x.shape)}")
        return self.W_down(F.silu(self.W_gate(x)) * self.W_up(x))  # (..., F) -> (..., D)


@dataclass(frozen=True)
class LlamaConfig:
    """The sizes of a :class:`LlamaLM` (the names of Hugging Face's ``LlamaConfig`` in brackets)."""

    vocab_size: int  # V (vocab_size)
    d_model: int  # D (hidden_size)
    num_heads: int  # H (num_attention_heads)
    num_kv_heads: int  # Hkv (num_key_value_heads)
    num_layers: int  # N (num_hidden_layers)
    d_ff: int  # F (intermediate_size)
    eps: float = 1e-6  # of every RMSNorm (rms_norm_eps)
    attention_bias: bool = False  # (attention_bias)
    mlp_bias: bool = False  # (mlp_bias)
    sliding_window: int | None = None  # Mistral: a query sees the last this many keys
    pattern: tuple[LayerKind, ...] | None = None  # one kind per layer (None: every layer alike)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "num_heads", "num_kv_heads", "num_layers", "d_ff"):
            check_positive_int(getattr(self, name), f"config.{name}")
        _check_eps(self.eps, "config.eps")
        check_bool(self.attention_bias, "config.attention_bias")
        check_bool(self.mlp_bias, "config.mlp_bias")
        if self.sliding_window is not None:
            check_positive_int(self.sliding_window, "config.sliding_window")
        if self.pattern is not None:
            object.__setattr__(self, "pattern", check_pattern(self.pattern, self.num_layers, "config.pattern"))
            if self.sliding_window is not None:
                raise ValueError("config.sliding_window must be None with a config.pattern (give the "
                                 f"window in the pattern), got {self.sliding_window}")

    @property
    def kinds(self) -> tuple[LayerKind, ...]:
        """Each layer's :class:`~mha_lib.patterns.LayerKind`: the ``pattern``, or every layer
        global (a window of ``sliding_window``, Mistral's), RoPE at base 10000."""
        if self.pattern is not None:
            return self.pattern
        kind = LayerKind() if self.sliding_window is None else LayerKind("window", self.sliding_window)
        return (kind,) * self.num_layers


class _LlamaBlock(nn.Module):
    """``x + attention(RMSNorm(x))``, then ``x + SwiGLU(RMSNorm(x))`` (pre-norm, causal)."""

    def __init__(self, config: LlamaConfig, kind: LayerKind) -> None:
        super().__init__()
        D = config.d_model
        self.norm1 = RMSNorm(D, config.eps)
        self.attention = GroupedQueryAttention(D, config.num_heads, config.num_kv_heads, 0.0,
                                               bias=config.attention_bias, rope=kind.rope)
        self.norm2 = RMSNorm(D, config.eps)
        self.feed_forward = SwiGLU(D, config.d_ff, bias=config.mlp_bias)

    def forward(self, x: Tensor, mask: Mask, cache=None) -> Tensor:
        h = self.norm1(x)
        x = x + self.attention(h, h, h, mask=mask, cache=cache)
        return x + self.feed_forward(self.norm2(x))


class LlamaLM(nn.Module):
    """A decoder-only language model of the Llama family, made of the book's layers.

    Shapes:
        ids: (B, L) integers in [0, V)
        returns: logits (B, L, V)

    Args:
        config: the sizes (:class:`LlamaConfig`).
    """

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        if not isinstance(config, LlamaConfig):
            raise ValueError(f"config must be an mha_lib.llama.LlamaConfig, got {type(config).__name__}")
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.d_model)
        self.blocks = nn.ModuleList(_LlamaBlock(config, kind) for kind in config.kinds)
        self.norm = RMSNorm(config.d_model, config.eps)
        self.unembedding = nn.Linear(config.d_model, config.vocab_size, bias=False)

    def new_cache(self) -> KVCache:
        """An empty cache for :meth:`forward`: layer i keeps only what its kind reads
        (:func:`mha_lib.patterns.pattern_cache`)."""
        return pattern_cache(self.config.kinds)

    def forward(self, ids: Tensor, *, cache: KVCache | None = None) -> Tensor:
        """Next-token scores at every position (causal self-attention, positions from 0; each
        layer with the mask of its kind). With ``cache`` (:meth:`new_cache`), ``ids`` are the
        next positions after those cached: prompt, then one token at a time."""
        ids = as_tensor(ids, "ids", "a (B, L) tensor of token ids")
        V = self.config.vocab_size
        if ids.dim() != 2 or ids.dtype.is_floating_point or ids.dtype == torch.bool or ids.is_complex():
            raise ValueError(f"ids must be a (B, L) integer tensor, got {ids.dtype} {tuple(ids.shape)}")
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= V):
            raise ValueError(f"ids must lie in [0, {V}), got values in [{int(ids.min())}, {int(ids.max())}]")
        if cache is not None and (not isinstance(cache, KVCache) or len(cache.layers) != len(self.blocks)):
            raise ValueError(f"cache must be a KVCache of {len(self.blocks)} layers (model.new_cache()), "
                             f"got {type(cache).__name__}")
        # query i sees keys 0 .. i; a window layer only the last `window` of them
        # (i - window < j <= i), a chunk layer those of its chunk (j // c == i // c)
        x = self.token_embedding(ids)  # (B, L) -> (B, L, D)
        for i, (block, kind) in enumerate(zip(self.blocks, self.config.kinds)):
            x = block(x, kind.attention_mask, None if cache is None else cache[i])
        return self.unembedding(self.norm(x))  # (B, L, D) -> (B, L, V)
