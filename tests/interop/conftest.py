"""Shared helpers of the interop tests: nothing is fetched (HF_HUB_OFFLINE), and the masks and
rotary embeddings Hugging Face's attention layers expect from their models."""

import os

os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers is imported: no hub, ever

import pytest
import torch

from mha_lib import keep_mask_from_valid_lens


@pytest.fixture(scope="session")
def additive_mask():
    """``additive_mask(valid_lens, Lq, Lk, dtype)``: (B, 1, Lq, Lk), 0 where a query may attend,
    the dtype's lowest number elsewhere (as ``transformers`` builds it)."""

    def make(valid_lens, Lq, Lk, dtype):
        keep = keep_mask_from_valid_lens(valid_lens, Lq, Lk)[:, None]  # (B, 1, Lq, Lk)
        return torch.zeros(keep.shape, dtype=dtype).masked_fill(~keep, torch.finfo(dtype).min)

    return make


@pytest.fixture(scope="session")
def rope_of():
    """``rope_of(config, L, dtype)``: the (cos, sin) a LlamaModel passes its layers."""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    def make(config, L, dtype):
        x = torch.zeros(1, L, 1, dtype=dtype)
        return LlamaRotaryEmbedding(config)(x, torch.arange(L)[None])

    return make
