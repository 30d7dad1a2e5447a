"""Where the weight goes (sink_mass) and decoding past a window (streaming_losses)."""

import copy

import pytest
import torch

from mha_lib.lm_eval import encode_stories, held_out_stories
from mha_lib.lm_sinks import sink_mass, streaming_losses
from mha_lib.stories import Tokenizer


def _even_attention(model):
    """A copy of ``model`` whose heads spread their weight evenly over the keys they see."""
    even = copy.deepcopy(model)
    with torch.no_grad():
        for block in even.blocks:
            block.attention.W_q.weight.zero_()
            if block.attention.W_q.bias is not None:
                block.attention.W_q.bias.zero_()
    return even


def test_a_model_that_spreads_its_weight_evenly_has_exactly_the_even_masses(small_model):
    mass = sink_mass(_even_attention(small_model), held_out_stories(12))
    torch.testing.assert_close(mass["first"], mass["first_even"].expand(2, 4).float(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(mass["punctuation"], mass["punctuation_even"].expand(2, 4).float(),
                               rtol=1e-5, atol=1e-6)
    assert 0 < mass["first_even"] < 0.25 and 0 < mass["punctuation_even"] < 0.5


def test_a_hybrid_has_masses_in_its_softmax_layer_only(small_model):
    # issue 48: Gated DeltaNet below softmax; the layer with a state has no weights (NaN)
    from mha_lib.linear import GatedDeltaNet
    hybrid = copy.deepcopy(small_model)
    torch.manual_seed(0)
    hybrid.blocks[0].attention = GatedDeltaNet(hybrid.config.d_model, hybrid.config.num_heads)
    even = _even_attention(hybrid)
    mass = sink_mass(even, held_out_stories(12))
    assert mass["first"][0].isnan().all() and mass["punctuation"][0].isnan().all()
    torch.testing.assert_close(mass["first"][1], mass["first_even"].expand(4).float(), rtol=1e-5, atol=1e-6)
    assert not mass["punctuation"][1].isnan().any()
    with pytest.raises(ValueError, match="no attention weights"):  # the hooks are gone
        even(torch.zeros(1, 4, dtype=torch.long), need_weights=True)


def test_the_shipped_model_has_no_sink(pretrained):
    mass = sink_mass(pretrained[0], held_out_stories(64))
    assert mass["first"].max() < 1.25 * mass["first_even"]


def test_a_window_as_long_as_the_text_is_the_full_cache(small_model):
    stories = held_out_stories(6)
    full, full_bytes = streaming_losses(small_model, stories, length=20)
    windowed, windowed_bytes = streaming_losses(small_model, stories, length=20, window=20)
    with_sinks, _ = streaming_losses(small_model, stories, length=20, window=19, num_sinks=1)
    torch.testing.assert_close(windowed, full, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(with_sinks, full, rtol=1e-5, atol=1e-5)
    assert full.shape == (6, 19) and windowed_bytes < full_bytes


def test_a_short_window_forgets_and_the_first_keys_bring_some_back(pretrained):
    pretrained_model = pretrained[0]
    stories = [s for s in held_out_stories(80)
               if len(encode_stories(Tokenizer(), [s])[0][0]) >= 40][:24]
    full, _ = streaming_losses(pretrained_model, stories, length=40)
    window, _ = streaming_losses(pretrained_model, stories, length=40, window=8)
    sinks, _ = streaming_losses(pretrained_model, stories, length=40, window=8, num_sinks=4)
    assert full.mean() < sinks.mean() < window.mean()


@pytest.mark.parametrize("kwargs, name", [
    ({"length": 1}, "length"), ({"length": 10_000}, "length"), ({"length": 10, "window": 0}, "window"),
])
def test_bad_arguments_are_named(small_model, kwargs, name):
    with pytest.raises(ValueError, match=name):
        streaming_losses(small_model, held_out_stories(2), **kwargs)
    with pytest.raises(ValueError, match="skip"):
        sink_mass(small_model, held_out_stories(2), skip=10_000)
