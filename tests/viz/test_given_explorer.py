"""The explorers of given weights (mha_lib.viz.given_explorer): causal masks, layers, bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mha_lib.induction import AttentionOnlyTransformer, Config, make_repeated_batch
from mha_lib.masking import causal_valid_lens
from mha_lib.viz.given_explorer import (
    explore_given,
    given_explorer,
    given_explorer_html,
    _given_weights,
)

L = 6


@pytest.fixture(scope="module")
def sequence_and_weights():
    """A small untrained two-layer causal model's weights on one sequence: (N, H, L, L)."""
    torch.manual_seed(0)
    model = AttentionOnlyTransformer(Config(vocab_size=8, d_model=8, max_len=L,
                                            num_heads=2, num_layers=2)).eval()
    tokens = make_repeated_batch(1, L // 2, 8, torch.Generator().manual_seed(1))  # (1, L)
    with torch.no_grad():
        _, weights = model(tokens, need_weights=True)  # (1, N, H, L, L)
    return tokens[0], weights[0]


def _causal_masked():
    return np.triu(np.ones((L, L), dtype=bool), k=1)  # key j > query i


def test_static_explorer_greys_exactly_the_future_keys(sequence_and_weights):
    tokens, weights = sequence_and_weights
    fig = given_explorer(weights, tokens=tokens, valid_lens=causal_valid_lens(1, L)[0])
    ex = fig.layout.meta["explorer"]
    assert ex["names"] == ["layer 0", "layer 1"] and len(ex["weights"]) == 2
    for n in range(2):
        for h in range(2):
            z = np.array(ex["weights"][n][h], dtype=float)  # None (masked) -> NaN
            np.testing.assert_array_equal(np.isnan(z), _causal_masked())
            np.testing.assert_allclose(np.nan_to_num(z), weights[n, h].numpy(), atol=6e-5)
    shown = [np.array(t.z, dtype=float) for t in fig.data]  # the initial figure: layer 0
    np.testing.assert_allclose(np.nan_to_num(shown[1]), np.nan_to_num(
        np.array(ex["weights"][0][1], dtype=float)))
    page = given_explorer_html(fig)
    assert 'id="mha-given-explorer-layer"' in page and "cdn" not in page.lower()


def test_live_explorer_switches_layers_in_place(sequence_and_weights):
    tokens, weights = sequence_and_weights
    explorer = explore_given(weights, tokens=tokens, valid_lens=causal_valid_lens(1, L)[0],
                             layer_names=["first", "second"])
    figure = explorer.figure
    explorer.layer.value = 1
    assert explorer.figure is figure
    for h, z in explorer.shown().items():
        np.testing.assert_array_equal(np.isnan(z), _causal_masked())
        np.testing.assert_allclose(np.nan_to_num(z), weights[1, h].numpy(), atol=1e-6)
    assert "second" in figure.layout.annotations[0].text


def test_no_mask_and_one_valid_length(sequence_and_weights):
    tokens, weights = sequence_and_weights
    full = np.ones((2, 2, L, L)) / L
    assert not _given_weights(full, tokens=tokens).masked.any()
    given = _given_weights(full * 0 + np.eye(L)[0], tokens=tokens, valid_lens=1)  # only key 0
    assert given.masked[:, 1:].all() and not given.masked[:, 0].any()


@pytest.mark.parametrize("kwargs, match", [
    ({"weights": torch.zeros(2, L, L)}, "weights must have shape"),
    ({"weights": torch.zeros(1, 1, L, L, device="meta")}, "weights must hold numbers"),
    ({"tokens": torch.zeros(L, device="meta")}, "tokens must hold numbers"),
    ({"layer_names": 5}, "layer_names must be 2 strings"),
    ({"title": 3}, "title must be a string"),
    ({"weights": torch.full((1, 1, L, L), 2.0)}, r"\[0, 1\]"),
    ({"tokens": ["a"] * (L - 1)}, "tokens"),
    ({"valid_lens": [1, 2]}, "valid_lens"),
    ({"valid_lens": L + 1}, "valid_lens"),
    ({"layer_names": ["only one"]}, "layer_names"),
    ({"layer": 2}, "layer"),
    ({"decimals": 0}, "decimals"),
])
def test_bad_input_raises_value_error(sequence_and_weights, kwargs, match):
    tokens, weights = sequence_and_weights
    args = {"weights": weights, "tokens": tokens, "valid_lens": causal_valid_lens(1, L)[0], **kwargs}
    with pytest.raises(ValueError, match=match):
        given_explorer(args.pop("weights"), **args)


def test_a_mask_the_model_did_not_use_is_refused(sequence_and_weights):
    tokens, _ = sequence_and_weights
    uniform = torch.full((1, 1, L, L), 1.0 / L)  # attends to the future too
    with pytest.raises(ValueError, match="0 on the cells"):
        _given_weights(uniform, tokens=tokens, valid_lens=causal_valid_lens(1, L)[0])
    with pytest.raises(ValueError, match="from given_explorer"):
        given_explorer_html(torch.zeros(1))
