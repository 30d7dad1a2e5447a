"""Fixtures of the viz tests.

* ``independent_weights``: ``independent_weights(num_heads, valid_lens, seed=0, d_model=8)``,
  the default explorer's weights (B, H, Lq, Lk) as a numpy array, recomputed from a
  MultiHeadAttention built here (``mha_factory``), not by the explorers' own code: the word
  vectors come from seed 0 (the explorer's initial seed); ``seed`` draws the projections, as
  the explorer's seed slider does.
"""

from __future__ import annotations

import pytest
import torch

from mha_lib.viz.scene import sentence_scene


@pytest.fixture
def independent_weights(mha_factory):
    def weights(num_heads, valid_lens, seed=0, d_model=8):
        scene = sentence_scene(seed=0, num_features=d_model)
        mha = mha_factory(d_model, num_heads, seed=seed)
        with torch.no_grad():
            _, w = mha(scene.queries, scene.keys, scene.values, torch.tensor(valid_lens),
                       need_weights=True)
        return w.numpy()

    return weights
