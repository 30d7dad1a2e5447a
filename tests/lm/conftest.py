"""Fixtures of the language model's tests: a small untrained model, the shipped one, stories."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from mha_lib.lm import Config, StoryLM, load_pretrained
from mha_lib.lm_eval import held_out_stories
from mha_lib.stories import Tokenizer

SMALL = Config(d_model=16, num_heads=4, num_kv_heads=4, num_layers=2, d_ff=32, steps=4,
               batch_size=2, warmup=2, eval_every=2, eval_stories=4)
"""A model small enough to train in a test (four steps)."""


def _seeded(config: Config, seed: int = 0) -> StoryLM:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return StoryLM(config).eval()


@pytest.fixture(scope="session")
def small_config() -> Config:
    return SMALL


@pytest.fixture(scope="session")
def small_model() -> StoryLM:
    """An untrained small model with seeded weights (eval mode); tests must not change it."""
    return _seeded(SMALL)


@pytest.fixture(scope="session")
def gqa_model() -> StoryLM:
    """An untrained small model with grouped-query attention (4 query heads, 2 key/value heads)."""
    return _seeded(dataclasses.replace(SMALL, num_kv_heads=2), seed=1)


@pytest.fixture(scope="session")
def pretrained():
    """``(model, tokenizer)``: the shipped weights."""
    return load_pretrained()


@pytest.fixture(scope="session")
def tokenizer() -> Tokenizer:
    return Tokenizer()


@pytest.fixture(scope="session")
def stories():
    """A few held-out stories."""
    return held_out_stories(24)


@pytest.fixture(params=["small", "gqa", "pretrained"])
def each_model(request) -> StoryLM:
    """The small, the grouped-query and the shipped model in turn."""
    if request.param == "pretrained":
        return request.getfixturevalue("pretrained")[0]
    return request.getfixturevalue(f"{request.param}_model")
