"""Attention without softmax: linear attention, the delta rule (DeltaNet) and Gated DeltaNet.

Shape legend
    B   batch size
    H   heads
    L   positions (Lq = Lk = L: these layers are causal self-attention)
    C   a chunk's positions (the chunked form)
    d   head size, D / H
    D   d_model

Softmax attention keeps every key and value (the KV cache grows with the text). Drop the
softmax and a head's whole past fits in one matrix ``S`` (d x d), its **state**:

* **linear attention** (Katharopoulos et al., 2020): a feature map ``phi(x) = elu(x) + 1``
  keeps the scores positive; ``S_t = S_{t-1} + phi(k_t)^T v_t`` (the running sum of K^T V),
  ``z_t = z_{t-1} + phi(k_t)``, and ``o_t = phi(q_t) S_t / (phi(q_t) . z_t)``;
* **the delta rule** (DeltaNet; Schlag et al., 2021, Yang et al., 2024): keys and queries of
  length 1, and each token *corrects* what the state returns for its key toward its value,
  by a step ``beta_t`` in (0, 1): ``S_t = S_{t-1} + beta_t k_t^T (v_t - k_t S_{t-1})``,
  ``o_t = q_t S_t``;
* **Gated DeltaNet** (Yang et al., 2025; Qwen3-Next, Kimi Linear): the state decays by a gate
  ``alpha_t`` in (0, 1) before each correction, ``S_t <- alpha_t S_{t-1}`` (forgetting).

Each layer computes one thing in two forms: the **recurrent** form, one token at a time (how a
model decodes: the state is all it keeps), and the **parallel** (linear attention) or
**chunked** (delta rule) form, all positions at once (how it trains). ``layer.form`` picks one;
the tests prove them equal in float64. The layers take :class:`~mha_lib.multihead.MultiHeadAttention`'s
call, are causal whatever the call says (a mask other than ``causal()`` is refused), and
decode with a :class:`StateCache` in place of a KV cache. Left out, as in the papers' simplest
forms: the short convolutions and the output norm and gate of the released models.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mha_lib._checks import check_bool, check_positive_int, check_size, check_tensor
from mha_lib.heads import merge_heads, split_heads
from mha_lib.masks import causal

__all__ = ["DeltaNet", "GatedDeltaNet", "LinearAttention", "StateCache", "delta_chunked", "delta_recurrent",
           "linear_parallel", "linear_recurrent", "nan_weights_without_softmax", "state_bytes"]


# --- linear attention: the running sums of K^T V --------------------------------------------------

def linear_recurrent(q: Tensor, k: Tensor, v: Tensor, state: tuple[Tensor, Tensor] | None = None):
    """Linear attention one token at a time. q, k: (B, H, L, d) already through the feature
    map (positive), v: (B, H, L, d); state ``(S, z)``: (B, H, d, d) and (B, H, d), zeros if None.
    Returns the outputs (B, H, L, d) and the state after the last token."""
    B, H, L, d = q.shape
    S, z = (q.new_zeros(B, H, d, d), q.new_zeros(B, H, d)) if state is None else state
    outs = []
    for t in range(L):
        S = S + k[:, :, t, :, None] * v[:, :, t, None, :]  # (B, H, d, 1) * (B, H, 1, d): + k_t^T v_t
        z = z + k[:, :, t]  # (B, H, d): the sum of the keys, the normaliser
        numerator = (q[:, :, t, None, :] @ S)[:, :, 0]  # (B, H, 1, d) @ (B, H, d, d) -> (B, H, d)
        outs.append(numerator / (q[:, :, t] * z).sum(-1, keepdim=True))  # (B, H, d)
    return torch.stack(outs, dim=2), (S, z)  # L x (B, H, d) -> (B, H, L, d)


def linear_parallel(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """Linear attention at all positions: ``A = tril(q k^T)``, each row divided by its sum
    (``phi(q_t) . z_t``), then ``A v``. Returns the outputs (B, H, L, d) and the weights A
    (B, H, L, L): attention weights without a softmax."""
    A = (q @ k.transpose(-1, -2)).tril()  # (B, H, L, d) @ (B, H, d, L) -> (B, H, L, L), causal
    A = A / A.sum(-1, keepdim=True)
    return A @ v, A  # (B, H, L, L) @ (B, H, L, d) -> (B, H, L, d)


# --- the delta rule, with or without a decay gate -------------------------------------------------

def delta_recurrent(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, log_alpha: Tensor, S: Tensor | None = None):
    """The (gated) delta rule one token at a time: ``S <- alpha_t S`` (decay), then
    ``S <- S + beta_t k_t^T (v_t - k_t S)`` (correct the value stored at ``k_t``), and
    ``o_t = q_t S``.

    q, k, v: (B, H, L, d); beta, log_alpha: (B, H, L) (``log_alpha = 0``: DeltaNet, no decay);
    S: (B, H, d, d), zeros if None. Returns the outputs (B, H, L, d) and the last state."""
    B, H, L, d = q.shape
    S = q.new_zeros(B, H, d, d) if S is None else S
    outs = []
    for t in range(L):
        k_t = k[:, :, t]  # (B, H, d)
        S = log_alpha[:, :, t, None, None].exp() * S  # (B, H, 1, 1) * (B, H, d, d): forget
        stored = (k_t[:, :, None, :] @ S)[:, :, 0]  # (B, H, 1, d) @ (B, H, d, d) -> (B, H, d): k_t S
        error = beta[:, :, t, None] * (v[:, :, t] - stored)  # (B, H, d)
        S = S + k_t[..., :, None] * error[..., None, :]  # (B, H, d, 1) * (B, H, 1, d): + k_t^T error
        outs.append((q[:, :, t, None, :] @ S)[:, :, 0])  # (B, H, 1, d) @ (B, H, d, d): q_t S
    return torch.stack(outs, dim=2), S  # L x (B, H, d) -> (B, H, L, d)


def delta_chunked(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, log_alpha: Tensor, S: Tensor | None = None,
                  chunk_size: int = 16):
    """:func:`delta_recurrent` a chunk of C tokens at a time (the WY/UT form of the papers).

    Inside a chunk that starts from state ``S``, let ``g_t`` be the decay since its start
    (``prod alpha``) and ``u_t = beta_t (v_t - k_t S_{t-1})`` the correction token t writes.
    Unrolling the recurrence, ``u_t = beta_t (v_t - g_t k_t S - sum_{j<t} (g_t/g_j)(k_t . k_j) u_j)``:
    a triangular system ``(I + tril_{-1}(beta Gamma K K^T)) U = beta (V - g K S)``, solved at once.
    Then ``O = g Q S + tril(Gamma Q K^T) U`` and the next state ``g_C S + K^T (g_C/g) U``.
    """
    B, H, L, d = q.shape
    S = q.new_zeros(B, H, d, d) if S is None else S
    outs = []
    for start in range(0, L, chunk_size):
        Q, K, V = (x[:, :, start:start + chunk_size] for x in (q, k, v))  # (B, H, C, d)
        b = beta[:, :, start:start + chunk_size, None]  # (B, H, C, 1)
        g = log_alpha[:, :, start:start + chunk_size].cumsum(-1)  # (B, H, C): log g_t
        C = Q.shape[2]
        later = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()  # (C, C): j <= t
        Gamma = (g[..., :, None] - g[..., None, :]).masked_fill(~later, -torch.inf).exp()  # (B, H, C, C): g_t / g_j
        system = torch.eye(C, dtype=q.dtype, device=q.device) + (b * Gamma * (K @ K.transpose(-1, -2))).tril(-1)
        U = torch.linalg.solve_triangular(system, b * (V - g.exp()[..., None] * (K @ S)), upper=False)  # (B, H, C, d)
        outs.append(g.exp()[..., None] * (Q @ S) + (Gamma * (Q @ K.transpose(-1, -2))) @ U)  # (B, H, C, d)
        to_end = (g[..., -1:] - g).exp()[..., None]  # (B, H, C, 1): g_C / g_t
        S = g[..., -1, None, None].exp() * S + (to_end * K).transpose(-1, -2) @ U  # (B, H, d, C) @ (B, H, C, d)
    return torch.cat(outs, dim=2), S  # chunks of (B, H, C, d) -> (B, H, L, d)


# --- the layers ------------------------------------------------------------------------------------

class StateCache:
    """What a linear layer keeps while decoding: its state (``None`` before the first token).
    Pass one per layer as ``cache``; unlike a KV cache it does not grow with the text."""

    def __init__(self) -> None:
        self.state = None


class _StateLayer(nn.Module):
    """What the three layers share: the projections, the checks, the heads, the cache."""

    forms: tuple[str, ...] = ("recurrent",)

    def __init__(self, d_model: int, num_heads: int, *, bias: bool = True, form: str | None = None,
                 chunk_size: int = 16) -> None:
        super().__init__()
        D, self.num_heads = check_positive_int(d_model, "d_model"), check_positive_int(num_heads, "num_heads")
        if D % num_heads:
            raise ValueError(f"d_model ({D}) must be divisible by num_heads ({num_heads})")
        self.head_size, self.chunk_size = D // num_heads, check_positive_int(chunk_size, "chunk_size")
        self.form = self.forms[-1] if form is None else form
        if self.form not in self.forms:
            raise ValueError(f"form must be one of {self.forms}, got {form!r}")
        self.W_q, self.W_k, self.W_v, self.W_o = (nn.Linear(D, D, bias=check_bool(bias, "bias")) for _ in range(4))

    def forward(self, queries: Tensor, keys: Tensor, values: Tensor, valid_lens=None, *, mask=None,
                need_weights: bool = False, head_mask: Tensor | None = None, cache: StateCache | None = None,
                positions: Tensor | None = None):
        """Causal self-attention through the state: output (B, L, D) (and, for linear
        attention in its parallel form, the weights (B, H, L, L) when asked).

        ``valid_lens``: None, (B,) lengths or the causal (B, L) lengths ``min(i + 1, n_b)`` of
        rows padded on the right (padded tokens do not touch the state). ``cache``: a
        :class:`StateCache`, the state before these tokens (updated in place).
        """
        real = self._check_call(queries, keys, values, valid_lens, mask, need_weights, head_mask, cache, positions)
        q = split_heads(self.W_q(queries), self.num_heads)  # (B, L, D) -> (B, H, L, d)
        k = split_heads(self.W_k(keys), self.num_heads)  # (B, L, D) -> (B, H, L, d)
        v = split_heads(self.W_v(values), self.num_heads)  # (B, L, D) -> (B, H, L, d)
        out, weights = self._mix(q, k, v, real[:, None, :], queries, cache)  # (B, H, L, d)
        if head_mask is not None:
            out = out * head_mask[:, None, None]  # (H, 1, 1): each head's output times its gate
        output = self.W_o(merge_heads(out))  # (B, H, L, d) -> (B, L, D)
        return (output, weights) if need_weights else output

    def _check_call(self, queries, keys, values, valid_lens, mask, need_weights, head_mask, cache, positions) -> Tensor:
        """The real tokens (B, L) bool; a ValueError naming whatever this layer cannot do."""
        name, D = type(self).__name__, self.W_q.in_features
        for arg, x in (("queries", queries), ("keys", keys), ("values", values)):
            check_tensor(x, arg, 3)
            if x.shape != queries.shape or x.shape[-1] != D or not x.is_floating_point():
                raise ValueError(f"{arg} must be floating point of shape (B, L, D) with D = d_model = {D} and the "
                                 f"queries' shape {tuple(queries.shape)} ({name} is self-attention), got "
                                 f"{x.dtype} of shape {tuple(x.shape)}")
            if x.dtype != self.W_q.weight.dtype or x.device != self.W_q.weight.device:
                raise ValueError(f"{arg} are {x.dtype} on {x.device} but the module's weights are "
                                 f"{self.W_q.weight.dtype} on {self.W_q.weight.device}: convert one with .to(...)")
        if mask is not None and type(mask) is not type(causal()):
            raise ValueError(f"mask must be None or causal(): {name} is causal only, got {mask!r}")
        if positions is not None:
            raise ValueError(f"positions must be None: {name} has no positions (the state reads the tokens in order)")
        if check_bool(need_weights, "need_weights") and not (self.form == "parallel" and cache is None):
            raise ValueError(f"need_weights must be False: {name} in its {self.form} form has no attention weights")
        if cache is not None and not isinstance(cache, StateCache):
            raise ValueError(f"cache must be a mha_lib.linear.StateCache, got {type(cache).__name__}")
        if head_mask is not None and (not isinstance(head_mask, Tensor) or head_mask.shape != (self.num_heads,)):
            raise ValueError(f"head_mask must be a tensor of shape (H,) = ({self.num_heads},), got {head_mask!r:.60}")
        return _real_tokens(valid_lens, cache, *queries.shape[:2], queries.device)

    def _run(self, cache: StateCache | None, parallel, recurrent, *inputs):
        """The parallel/chunked form for a whole call, the recurrent one with a cache or when chosen."""
        if cache is None and self.form != "recurrent":
            return parallel(*inputs)
        out, state = recurrent(*inputs, None if cache is None else cache.state)
        if cache is not None:
            cache.state = state
        return out, None


def _real_tokens(valid_lens, cache, B: int, L: int, device) -> Tensor:
    """(B, L) bool: True at the real tokens, from None, (B,) lengths or causal (B, L) lengths."""
    if valid_lens is None:
        return torch.ones(B, L, dtype=torch.bool, device=device)
    if cache is not None:
        raise ValueError("valid_lens must be None with a cache (decode the real tokens only)")
    lens = torch.as_tensor(valid_lens, device=device)
    expected = (f"valid_lens must be None, (B,) = ({B},) lengths in [1, {L}] or the causal (B, L) lengths "
                f"min(i + 1, n_b) (these layers are causal only), got ")
    if lens.shape not in ((B,), (B, L)) or lens.is_floating_point() or lens.is_complex() or lens.dtype == torch.bool:
        raise ValueError(expected + f"{lens.dtype} of shape {tuple(lens.shape)}")
    n = lens[:, -1] if lens.dim() == 2 else lens  # (B,): each row's real tokens
    causal_lens = torch.minimum(torch.arange(1, L + 1, device=device), n[:, None])  # (B, L)
    if bool((n < 1).any() | (n > L).any()) or (lens.dim() == 2 and not torch.equal(lens, causal_lens)):
        raise ValueError(expected + f"{lens.tolist()!s:.80}")
    return torch.arange(L, device=device) < n[:, None]  # (B, L)


class LinearAttention(_StateLayer):
    """Causal linear attention with ``phi(x) = elu(x) + 1``; ``form``: "recurrent" or "parallel".
    Its state per head: S (d, d) and z (d,)."""

    forms = ("recurrent", "parallel")

    def _mix(self, q, k, v, real, queries, cache):
        q, k = F.elu(q) + 1, (F.elu(k) + 1) * real[..., None]  # positive features; padding: k = 0
        return self._run(cache, linear_parallel, linear_recurrent, q, k, v)


class DeltaNet(_StateLayer):
    """Causal DeltaNet: L2-normalised queries and keys, a step ``beta = sigmoid(W_beta x)`` per
    token and head; ``form``: "recurrent" or "chunked". Its state per head: S (d, d)."""

    forms = ("recurrent", "chunked")

    def __init__(self, d_model: int, num_heads: int, **kwargs) -> None:
        super().__init__(d_model, num_heads, **kwargs)
        self.W_beta = nn.Linear(d_model, num_heads)  # (D -> H): how far each token corrects the state

    def _log_alpha(self, queries: Tensor) -> Tensor:  # no decay: (B, L, H) of zeros
        return queries.new_zeros(*queries.shape[:2], self.num_heads)

    def _mix(self, q, k, v, real, queries, cache):
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)  # unit queries and keys
        beta = torch.sigmoid(self.W_beta(queries)).transpose(1, 2) * real  # (B, L, H) -> (B, H, L); padding: 0
        log_alpha = self._log_alpha(queries).transpose(1, 2) * real  # (B, L, H) -> (B, H, L); padding: no decay
        chunked = lambda *x: delta_chunked(*x, chunk_size=self.chunk_size)  # noqa: E731
        return self._run(cache, chunked, delta_recurrent, q, k, v, beta, log_alpha)


class GatedDeltaNet(DeltaNet):
    """DeltaNet whose state decays by ``alpha = sigmoid(W_alpha x)`` per token and head before
    each correction; ``W_alpha``'s bias starts at ``gate_bias`` (4: alpha near 0.98, a memory
    of about 50 tokens, a story's length)."""

    def __init__(self, d_model: int, num_heads: int, *, gate_bias: float = 4.0, **kwargs) -> None:
        super().__init__(d_model, num_heads, **kwargs)
        self.W_alpha = nn.Linear(d_model, num_heads)  # (D -> H): how much of the state each token keeps
        with torch.no_grad():
            self.W_alpha.bias.fill_(gate_bias)

    def _log_alpha(self, queries: Tensor) -> Tensor:
        return F.logsigmoid(self.W_alpha(queries))  # (B, L, H): log alpha < 0


def state_bytes(model: nn.Module, length: int, *, batch_size: int = 1, dtype: torch.dtype = torch.float32) -> dict:
    """The memory one model keeps while decoding ``length`` tokens of ``batch_size`` texts.

    ``model``: one attention layer, or a model with ``blocks`` (each with an ``attention``).
    Returns ``{"state": the linear layers' states, "kv_cache": the softmax layers' KV cache,
    "total", "all_softmax": the KV cache if every layer were softmax attention}``, in bytes.
    """
    length, B = check_size(length, "length"), check_positive_int(batch_size, "batch_size")
    layers = [b.attention for b in model.blocks] if hasattr(model, "blocks") else [model]
    size = dtype.itemsize
    state = kv = full = 0
    for layer in layers:
        H, d = layer.num_heads, layer.head_size
        kv_heads = getattr(layer, "num_kv_heads", H)
        full += 2 * B * H * d * length * size  # K and V of every token
        if isinstance(layer, _StateLayer):  # S (d x d), and linear attention's z (d)
            state += B * H * (d * d + (d if isinstance(layer, LinearAttention) else 0)) * size
        else:
            kv += 2 * B * kv_heads * d * length * size
    return {"state": state, "kv_cache": kv, "total": state + kv, "all_softmax": full}


@contextlib.contextmanager
def nan_weights_without_softmax(model: nn.Module):
    """While inside, every layer of ``model.blocks`` with a fixed state in place of attention (a
    hybrid's Gated DeltaNet layers) answers ``need_weights=True`` with NaN weights (B, H, L, L):
    it puts weight on no key, so a model's ``need_weights=True`` gives the softmax layers'
    weights and NaN for the others (:func:`mha_lib.lm_heads.find_heads` then finds no head
    there, :func:`mha_lib.lm_sinks.sink_mass` measures the softmax layers). Other layers are
    left as they are; the hooks go when the block ends."""
    asked: set[int] = set()

    def before(layer, args, kwargs):
        if kwargs.get("need_weights"):
            asked.add(id(layer))
            return args, {**kwargs, "need_weights": False}  # the layer computes its output alone
        return None

    def after(layer, args, output):
        if id(layer) not in asked:
            return None
        asked.discard(id(layer))
        B, L = args[0].shape[:2]  # the queries (B, L, D)
        return output, output.new_full((B, layer.num_heads, L, L), float("nan"))

    handles = []
    for block in getattr(model, "blocks", ()):
        if isinstance(block.attention, _StateLayer):
            handles += [block.attention.register_forward_pre_hook(before, with_kwargs=True),
                        block.attention.register_forward_hook(after)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
