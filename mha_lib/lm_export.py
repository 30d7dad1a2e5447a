"""The story language model in a web page: :func:`export`, the model and its tokenizer as JSON-able data.

The website's in-page forward pass (``_static/mha-lm.js``, run by :mod:`mha_lib.viz.text_explorer`)
reads this data and computes exactly what :class:`mha_lib.lm.StoryLM` computes (the module
docstring of :mod:`mha_lib.lm` writes the computation out); ``_from_export`` is the inverse,
which the tests use to check the round trip.
"""

from __future__ import annotations

import base64

import numpy as np
import torch

from mha_lib.lm import Config, StoryLM, check_plain_layers
from mha_lib.stories import GENDER, Tokenizer

__all__ = ["export"]

_EXPORT_FORMAT = "mha_lib.lm/1"
"""The format tag the page checks (it names the model, not this module: keep it)."""


def export(model: StoryLM, tokenizer: Tokenizer) -> dict:
    """The model and its tokenizer as JSON-able data, for a forward pass outside PyTorch.

    Returns:
        ``{"format": "mha_lib.lm/1", "config": {...}, "tokenizer": {...}, "weights": {...}}``:
        ``config`` holds ``vocab_size, d_model, num_heads, num_kv_heads, num_layers, d_ff,
        layer_norm_eps, rope_base``; ``tokenizer`` holds ``vocab`` (id -> token), ``pad_id``,
        ``unk_id``, ``pattern`` (the regular expression that finds tokens in lower-cased
        text, straight quotes for curly ones; a match ending in ``'s`` splits off ``'s``) and
        ``names`` (tokens written with a capital); ``weights`` maps every ``state_dict`` name
        to ``{"shape": [...], "data": base64 of little-endian float32, row-major}``.

    Raises:
        ValueError: not a StoryLM, a tokenizer of another vocabulary, or a model with a
            ``config.pattern`` of windows, chunks, other RoPE bases or NoPE (the page runs
            every layer global with RoPE at base 10000).
    """
    if not isinstance(model, StoryLM):
        raise ValueError(f"model must be a StoryLM, got {type(model).__name__}")
    check_plain_layers(model, "export (the page's forward pass, _static/mha-lm.js)")
    if not isinstance(tokenizer, Tokenizer) or tokenizer.vocab_size != model.config.vocab_size:
        raise ValueError(f"tokenizer must be a Tokenizer of vocab_size {model.config.vocab_size}, got {tokenizer!r}")
    cfg = model.config
    config = {name: getattr(cfg, name) for name in ("vocab_size", "d_model", "num_heads", "num_kv_heads", "num_layers", "d_ff")}
    config.update(layer_norm_eps=model.norm.eps, rope_base=10000.0)
    weights = {}
    for name, tensor in model.state_dict().items():
        data = tensor.detach().cpu().float().contiguous().numpy().astype("<f4").tobytes()
        weights[name] = {"shape": list(tensor.shape), "data": base64.b64encode(data).decode("ascii")}
    return {
        "format": _EXPORT_FORMAT, "config": config, "weights": weights,
        "tokenizer": {"vocab": list(tokenizer.vocab), "pad_id": tokenizer.pad_id, "unk_id": tokenizer.unk_id,
                      "pattern": Tokenizer.pattern, "names": sorted(GENDER)},
    }


def _from_export(data: dict) -> tuple[StoryLM, Tokenizer]:
    """The inverse of :func:`export` (tests check the round trip)."""
    if not isinstance(data, dict) or data.get("format") != _EXPORT_FORMAT:
        raise ValueError(f"data must be a dict of format {_EXPORT_FORMAT!r} (from export), got {str(data)[:80]}")
    sizes = {k: v for k, v in data["config"].items() if k not in ("layer_norm_eps", "rope_base")}
    model = StoryLM(Config(**sizes))
    state = {name: torch.from_numpy(np.frombuffer(base64.b64decode(w["data"]), dtype="<f4").copy()).reshape(w["shape"])
             for name, w in data["weights"].items()}
    model.load_state_dict(state)
    return model.eval(), Tokenizer(data["tokenizer"]["vocab"])
