"""Where the story model's attention weight goes, and decoding past a window (StreamingLLM).

Shapes in the book's notation (:mod:`mha_lib`); N the model's layers.

Large language models put a large share of their weight on the first token, whatever it is:
an *attention sink* (Xiao et al., 2023), where the softmax parks weight that no key needs.
StreamingLLM keeps those first keys in the cache beside a sliding window. Two measurements on
the book's own model (chapter 12) test both ideas:

* :func:`sink_mass`: per layer and head, the mean weight on the first token and on the
  punctuation, beside what a head that spreads its weight evenly over the visible keys would
  put there;
* :func:`streaming_losses`: the loss at each position when the model decodes with the full
  cache, with a rolling window of the last ``window`` keys, or with the window and the first
  ``num_sinks`` keys (:class:`mha_lib.decoding.KVCache` with ``window=`` and ``num_sinks=``),
  and the bytes each cache holds at the end.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from mha_lib._checks import check_positive_int, check_size
from mha_lib._modes import eval_mode
from mha_lib.decoding import KVCache
from mha_lib.linear import nan_weights_without_softmax
from mha_lib.lm import StoryLM, check_model
from mha_lib.lm_eval import encode_stories
from mha_lib.stories import Story, Tokenizer, check_stories
from mha_lib.training import model_device, to_device

__all__ = ["sink_mass", "streaming_losses"]

#: The tokens counted as punctuation.
_PUNCTUATION = (".", ",")


def sink_mass(model: StoryLM, stories: Sequence[Story], *, skip: int = 4) -> dict[str, Tensor]:
    """The mean weight each head puts on the first token and on punctuation.

    Averaged over the real queries at positions ``skip`` and later (the first queries see only
    a few keys, where every head weighs the first one heavily), over every story. Of a hybrid
    (:mod:`mha_lib.linear`'s layers below softmax), the softmax layers' heads: the layers with a
    fixed state have no weights, their rows are NaN.

    Returns:
        ``{"first": (N, H), "punctuation": (N, H), "first_even": scalar, "punctuation_even": scalar}``:
        ``*_even`` is the same mean for weights spread evenly over the visible keys (1 / (i + 1)
        on the first token; the share of punctuation among keys 0 .. i).
    """
    model = check_model(model)
    stories = check_stories(stories)
    skip = check_size(skip, "skip")
    tokenizer = Tokenizer()
    ids, lens = to_device(encode_stories(tokenizer, stories), model_device(model))  # (B, L), (B,)
    with eval_mode(model), torch.no_grad(), nan_weights_without_softmax(model):
        _, weights = model(ids, lens, need_weights=True)  # (B, N, H, L, L), NaN in layers with a state
    L = ids.shape[1]
    positions = torch.arange(L, device=ids.device)
    queries = (positions[None] < lens[:, None]) & (positions[None] >= skip)  # (B, L)
    if not queries.any():
        raise ValueError(f"skip must leave some queries: every story is at most {L} tokens, got {skip}")
    punct_ids = torch.tensor([tokenizer.vocab.index(t) for t in _PUNCTUATION], device=ids.device)
    is_punct = torch.isin(ids, punct_ids) & (positions[None] < lens[:, None])  # (B, L) keys

    def per_head(per_query: Tensor) -> Tensor:  # (B, N, H, L) -> (N, H), mean over queries
        return (per_query * queries[:, None, None]).sum((0, 3)) / queries.sum()

    punct_seen = is_punct.float().cumsum(1) / (positions + 1)  # (B, L): share among keys 0 .. i
    return {
        "first": per_head(weights[..., 0]),
        "punctuation": per_head((weights * is_punct[:, None, None, None, :]).sum(-1)),
        "first_even": (queries / (positions + 1)).sum() / queries.sum(),
        "punctuation_even": (punct_seen * queries).sum() / queries.sum(),
    }


def streaming_losses(
    model: StoryLM, stories: Sequence[Story], *, length: int, window: int | None = None,
    num_sinks: int = 0,
) -> tuple[Tensor, int]:
    """Decode the first ``length`` tokens of each story one at a time; the loss of each.

    Args:
        model: the story model.
        stories: stories of at least ``length`` tokens (decoded as one batch).
        length: the tokens decoded.
        window: None, the model's own cache (:meth:`~mha_lib.lm.StoryLM.new_cache`: every
            key, or of a ``config.pattern`` only what each layer reads); else a rolling cache
            of the last ``window`` positions in every layer.
        num_sinks: with ``window``, the first positions kept as well (StreamingLLM).

    Returns:
        the losses (B, length - 1), entry ``[b, i]`` the loss of token i + 1 given the tokens the
        cache shows, and the bytes the cache holds after the last token.
    """
    model = check_model(model)
    length = check_positive_int(length, "length")
    encoded = encode_stories(Tokenizer(), check_stories(stories))
    ids, lens = to_device(encoded, model_device(model))  # (B, L), (B,) where the model is
    if length < 2 or int(lens.min()) < length:
        raise ValueError(f"length must be in [2, {int(lens.min())}] (the shortest story's tokens), "
                         f"got {length}")
    ids = ids[:, :length]  # (B, L) -> (B, length)
    cache = model.new_cache() if window is None else KVCache(
        model.config.num_layers, window=window, num_sinks=num_sinks)
    with eval_mode(model), torch.no_grad():
        logits = torch.cat([model(ids[:, t:t + 1], cache=cache) for t in range(length)], 1)  # (B, length, V)
    losses = F.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none")  # (B, length - 1)
    return losses, cache.nbytes
