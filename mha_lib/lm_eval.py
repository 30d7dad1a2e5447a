"""Measuring the story language model on held-out stories: its loss, and its accuracy at the links.

Every number of chapter 12 (and of the experiments on the story model, :mod:`mha_lib.why`) is
measured on :func:`held_out_stories`, stories that training never reads:

* :func:`held_out_stories`   the stories of seed 1 (training reads even seeds only)
* :func:`encode_stories`     their token ids padded on the right, and their lengths
* :func:`next_token_losses`  the loss of every token given the ones before it
* :func:`evaluate`           the mean loss and, per relation, the accuracy at the linked tokens
* :func:`check_story_model`  a model with :class:`~mha_lib.lm.StoryLM`'s interface, or a ValueError

The model itself, its training and its shipped weights are :mod:`mha_lib.lm`'s.

Shape legend
    B   batch size
    L   sequence length (padded)
    N   number of layers
    H   heads per layer
    V   vocabulary size
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor, nn

from mha_lib._checks import check_not_meta
from mha_lib._modes import eval_mode
from mha_lib.stories import RELATIONS, Story, Tokenizer, check_stories, link_mask, sample_stories
from mha_lib.training import model_device, to_device

__all__ = [
    "check_story_model",
    "encode_stories",
    "evaluate",
    "held_out_stories",
    "next_token_losses",
]

_HELD_OUT_SEED = 1
"""Seed of the held-out stories. Training step s of a run with seed c reads
``sample_stories(batch_size, 2 * (c * 10**6 + s))``: even seeds only, so no odd seed is seen."""


def held_out_stories(n: int = 500) -> list[Story]:
    """Stories from seed 1 (odd: training reads even seeds only), never trained on: every number is measured on these."""
    return sample_stories(n, _HELD_OUT_SEED)


def encode_stories(tokenizer: Tokenizer, stories: Sequence[Story]) -> tuple[Tensor, Tensor]:
    """The stories' token ids padded on the right, and their lengths.

    Returns:
        ids (B, L) long (``tokenizer.pad_id`` after each story) and valid_lens (B,) long.
    """
    if not isinstance(tokenizer, Tokenizer):
        raise ValueError(f"tokenizer must be a mha_lib.stories.Tokenizer, got {type(tokenizer).__name__}")
    stories = check_stories(stories)
    encoded = [tokenizer.encode(s.text) for s in stories]
    lens = torch.tensor([len(e) for e in encoded])  # (B,)
    ids = torch.full((len(encoded), int(lens.max())), tokenizer.pad_id, dtype=torch.long)  # (B, L)
    for b, e in enumerate(encoded):
        ids[b, : len(e)] = torch.tensor(e)
    return ids, lens


def check_story_model(model: object, cls: type = nn.Module) -> nn.Module:
    """``model`` if it is a ``cls`` that reads the stories' vocabulary, else a ValueError.

    By default any nn.Module with :class:`~mha_lib.lm.StoryLM`'s interface (config's num_layers,
    num_heads, vocab_size, as chapter 12b's); :func:`mha_lib.lm.check_model` asks for a StoryLM.
    """
    interface = cls is nn.Module
    V, sizes = Tokenizer().vocab_size, [getattr(getattr(model, "config", None), n, None) for n in ("num_layers", "num_heads", "vocab_size")]
    if not isinstance(model, cls) or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in sizes) or sizes[2] != V:
        raise ValueError(f"model must be a StoryLM{', or a module with its interface,' if interface else ''} of the stories' vocab_size {V} (config sizes num_layers, num_heads, vocab_size), got {type(model).__name__} with {sizes}")
    return model


@torch.no_grad()
def next_token_losses(model: nn.Module, ids: Tensor, valid_lens: Tensor, head_mask: Tensor | None = None) -> Tensor:
    """Cross-entropy of every token given the tokens before it (eval mode).

    Shapes:
        ids: (B, L); valid_lens: (B,); head_mask: None or (N, H)
        returns: (B, L) float, entry ``[b, i]`` the loss of token i (nats); NaN at i = 0 and
        at padding, where nothing is predicted.
    """
    device = model_device(check_story_model(model))  # (the data goes where the model is)
    ids, valid_lens = (check_not_meta(x, n).to(device) if isinstance(x, Tensor) else x for x, n in ((ids, "ids"), (valid_lens, "valid_lens")))
    with eval_mode(model):
        logits = model(ids, valid_lens, head_mask=head_mask)  # (B, L, V)
    valid_lens = ids.shape[1] if valid_lens is None else torch.as_tensor(valid_lens, device=device)[:, None]
    losses = nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none")
    # (B, V, L-1) vs (B, L-1) -> (B, L-1): entry i-1 is the loss of token i
    out = torch.cat([losses.new_full((ids.shape[0], 1), float("nan")), losses], dim=1)  # (B, L)
    padding = torch.arange(ids.shape[1], device=device) >= valid_lens  # (B, L)
    return out.masked_fill(padding, float("nan"))


@torch.no_grad()
def evaluate(model: nn.Module, stories: Sequence[Story], head_mask: Tensor | None = None) -> dict[str, float]:
    """Mean loss (nats per predicted token) and, per relation, the accuracy at its linked tokens.

    Returns:
        ``{"loss": ..., "antecedent": ..., "recall": ..., "possession": ...}``: the accuracy is
        the fraction of linked tokens ``i`` that are the model's most likely token after ``0 .. i-1``.
    """
    stories = check_stories(stories, predict=True)
    ids, lens = to_device(encode_stories(Tokenizer(), stories), model_device(check_story_model(model)))
    with eval_mode(model):
        logits = model(ids, lens, head_mask=head_mask)  # (B, L, V)
    losses = next_token_losses(model, ids, lens, head_mask)  # (B, L)
    right = torch.zeros_like(ids, dtype=torch.bool)
    right[:, 1:] = logits[:, :-1].argmax(-1) == ids[:, 1:]  # (B, L): token i predicted from i-1
    result = {"loss": float(losses.nanmean())}
    for relation in RELATIONS:
        mask = link_mask(stories, relation, tuple(ids.shape)).to(ids.device)
        result[relation] = float(right[mask].float().mean()) if mask.any() else float("nan")
    return result
