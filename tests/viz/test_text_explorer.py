"""The language model's explorers (mha_lib.viz.text_explorer), driven from code: no browser, no kernel.

The expected weights and continuations are computed here from the model itself
(``StoryLM(ids, need_weights=True)`` and ``StoryLM.generate``), not by the explorer's code.
Seeded untrained models keep the tests fast and cover grouped-query attention too; the
shipped model is what the browser tests run.
"""

from __future__ import annotations

import html
import json
import re

import ipywidgets as widgets
import numpy as np
import pytest
import torch

from mha_lib import lm, lm_export
from mha_lib.linear import GatedDeltaNet, nan_weights_without_softmax
from mha_lib.stories import Tokenizer
from mha_lib.viz import explore_text, text_explorer_html
from mha_lib.viz.heatmaps import colour_stops
from mha_lib.viz.text_explorer import _CONTINUATION_TOKENS, _DEFAULT_TEXT, _EXAMPLES, _MAX_TOKENS, _suggestions

TOKENIZER = Tokenizer()


def _model(num_kv_heads: int = 4, num_layers: int = 2, seed: int = 0) -> lm.StoryLM:
    torch.manual_seed(seed)
    return lm.StoryLM(lm.Config(num_kv_heads=num_kv_heads, num_layers=num_layers)).eval()


@pytest.fixture(scope="module")
def model() -> lm.StoryLM:
    return _model()


def _expected(model: lm.StoryLM, text: str) -> tuple[list[str], np.ndarray, list[int], str]:
    """Tokens, (N, H, L, L) weights, greedy continuation (up to the first ".") and its text."""
    tokens = TOKENIZER.tokenize(text)[:_MAX_TOKENS]
    ids = TOKENIZER.encode(text)[:_MAX_TOKENS]
    with torch.no_grad():
        _, weights = model(torch.tensor([ids]), need_weights=True)  # (1, N, H, L, L)
    new = model.generate([ids], _CONTINUATION_TOKENS)[0]
    dot = TOKENIZER.vocab.index(".")
    new = new[: new.index(dot) + 1] if dot in new else new
    added = TOKENIZER.decode(ids + new)[len(TOKENIZER.decode(ids)):]
    return tokens, weights[0].double().numpy(), new, added


def _assert_figure_shows(explorer, model: lm.StoryLM, text: str, layer: int = 0) -> None:
    tokens, weights, _, _ = _expected(model, text)
    N, H, L = model.config.num_layers, model.config.num_heads, len(tokens)
    fig = explorer.figure
    json.dumps(fig.to_plotly_json(), allow_nan=False)  # None, never NaN, in the widget's data
    heatmaps = [t for t in fig.data if t.type == "heatmap"]
    assert [t.meta for t in heatmaps] == [{"layer": n, "head": h} for n in range(N) for h in range(H)]
    for trace in heatmaps:
        n, h = trace.meta["layer"], trace.meta["head"]
        assert trace.visible is (n == layer)
        z = np.array([[np.nan if w is None else w for w in row] for row in trace.z], dtype=float)
        assert z.shape == (L, L)
        future = np.triu(np.ones((L, L), dtype=bool), k=1)  # key j > query i
        assert np.isnan(z[future]).all() and not np.isnan(z[~future]).any()
        np.testing.assert_allclose(z[~future], weights[n, h][~future], rtol=0, atol=1e-6)
        np.testing.assert_array_equal(weights[n, h][future], 0.0)  # the model gives them nothing
        xaxis = fig.layout["xaxis" + trace.xaxis[1:]]
        yaxis = fig.layout["yaxis" + trace.yaxis[1:]]
        assert list(xaxis.ticktext) == tokens and list(xaxis.tickvals) == list(range(L))
        assert list(yaxis.ticktext) == tokens
        assert tuple(yaxis.range) == (L - 0.5, -0.5)  # the first query on top
        assert xaxis.title.text == "key"
    titles = [a.text for a in fig.layout.annotations]
    assert titles == [f"layer {layer}, head {h}" for h in range(H)]


@pytest.mark.parametrize("num_kv_heads", [4, 2, 1], ids=["mha", "gqa", "mqa"])
def test_typing_shows_every_head_of_every_layer(num_kv_heads):
    model = _model(num_kv_heads)
    explorer = explore_text(model, TOKENIZER, text="Mia helps Leo because she")
    _assert_figure_shows(explorer, model, "Mia helps Leo because she")
    text = "Leo has a red kite. Mia's ball is blue, and Leo likes"
    explorer.text.value = text
    _assert_figure_shows(explorer, model, text)
    assert explorer.reading.tokens == TOKENIZER.tokenize(text)


def test_the_layer_choice_shows_that_layers_heads(model):
    _assert_figure_shows(explore_text(model, TOKENIZER, layer=1), model, _DEFAULT_TEXT, layer=1)
    explorer = explore_text(model, TOKENIZER)
    assert explorer.layer.options == (("layer 0", 0), ("layer 1", 1))
    explorer.layer.value = 1
    _assert_figure_shows(explorer, model, _DEFAULT_TEXT, layer=1)
    explorer.text.value = "Zoe sings"  # a new text keeps the chosen layer
    _assert_figure_shows(explorer, model, "Zoe sings", layer=1)


def test_the_continuation_is_the_greedy_one(model):
    explorer = explore_text(model, TOKENIZER, text="Ivy and Omar walk to the beach. Omar brings a drum. His")
    _, _, new, added = _expected(model, explorer.text.value)
    assert explorer.reading.continuation == new and explorer.reading.continuation_text == added
    assert 1 <= len(new) <= _CONTINUATION_TOKENS
    assert html.escape(added) in explorer.continuation.value


def test_unknown_words_are_marked_with_known_ones_to_try(model):
    explorer = explore_text(model, TOKENIZER, text="The dragon eats a pizza because he")
    assert [u[0] for u in explorer.reading.unknown] == ["dragon", "pizza"]
    for token, position, tries in explorer.reading.unknown:
        assert explorer.reading.ids[position] == TOKENIZER.unk_id
        assert 1 <= len(tries) <= 3 and all(t in TOKENIZER.vocab for t in tries)
    hint = explorer.tokens.value
    assert "does not know “dragon”, “pizza”" in hint and "&lt;unk&gt;" in hint
    assert hint.count("dashed") == 2  # the two unknown tokens' chips
    explorer.text.value = "The dog eats a pear because he"
    assert explorer.reading.unknown == [] and "does not know" not in explorer.tokens.value


def test_words_of_any_script_are_whole_unknown_words_with_words_to_try(model):
    explorer = explore_text(model, TOKENIZER, text="Zoe\u0308's caf\u00e9 \u2014 \u6771\u4eac Mia")  # "ë" as e + a mark
    reading = explorer.reading
    assert reading.tokens == ["zo\u00eb", "'s", "caf\u00e9", "\u2014", "\u6771\u4eac", "mia"]
    assert [u[0] for u in reading.unknown] == ["zo\u00eb", "caf\u00e9", "\u2014", "\u6771\u4eac"]
    punctuation = {".", ",", "!", "?", ":", "'s"}
    tries = {token: tries for token, _, tries in reading.unknown}
    assert tries["zo\u00eb"] and not set(tries["zo\u00eb"] + tries["caf\u00e9"]) & punctuation  # words for words
    assert tries["zo\u00eb"][0] == "zoe"  # the closest spelling first
    assert set(tries["\u2014"]) <= punctuation and tries["\u6771\u4eac"] == []  # a sign; past 3 rows


def test_suggestions_follow_the_spelling_and_the_model(model):
    logits = np.zeros((3, TOKENIZER.vocab_size))
    logits[1, TOKENIZER.vocab.index("ball")] = 5.0  # what the "model" expects at position 2
    logits[1, TOKENIZER.vocab.index(",")] = 4.0
    assert _suggestions(TOKENIZER, "kitte", 2, logits)[:2] == ["kite", "ball"]  # a typo, then the model
    assert _suggestions(TOKENIZER, "xqzw", 2, logits)[0] == "ball"  # nothing close: the model
    assert _suggestions(TOKENIZER, "!", 2, logits) == [",", "."]  # a sign: the punctuation it knows
    assert _suggestions(TOKENIZER, "zorro", 0, logits)[0] == "zoo"  # first word: spelling only


def test_example_buttons_put_their_text_in_the_box(model):
    explorer = explore_text(model, TOKENIZER)
    assert [b.description for b in explorer.examples] == [label for label, _ in _EXAMPLES]
    explorer.examples[1].click()
    assert explorer.text.value == _EXAMPLES[1][1]
    _assert_figure_shows(explorer, model, _EXAMPLES[1][1])


def test_empty_and_long_texts(model):
    explorer = explore_text(model, TOKENIZER, text="")
    assert explorer.reading.tokens == [] and "at least one word" in explorer.tokens.value
    assert all(len(t.z) == 0 for t in explorer.figure.data)
    long = "Mia has a red kite. " * 30  # 180 tokens
    explorer.text.value = long
    assert len(explorer.reading.tokens) == _MAX_TOKENS and explorer.reading.truncated
    assert f"only the first {_MAX_TOKENS}" in explorer.tokens.value
    assert len(explorer.figure.data[0].z) == _MAX_TOKENS


def test_defaults_are_the_shipped_model(model, monkeypatch):
    calls = []
    monkeypatch.setattr(lm, "load_pretrained", lambda: calls.append(1) or (model, TOKENIZER))
    explorer = explore_text()
    assert explorer.text.value == _DEFAULT_TEXT and explorer.model is model and calls == [1]
    assert json.loads(_page_model(text_explorer_html())) == _exported(model)
    assert calls == [1, 1]


def _exported(model: lm.StoryLM, kinds: tuple[str, ...] = ("softmax", "softmax")) -> dict:
    """lm_export.export's data, with the kind of each layer that the page runs."""
    data = lm_export.export(model, TOKENIZER)
    data["config"]["layers"] = list(kinds)
    return data


def _page_model(fragment: str) -> str:
    match = re.search(r'<script type="application/json" id="mha-lm-model">(.*?)</script>', fragment, re.S)
    assert match, "the fragment embeds the model"
    return match.group(1)


def test_the_website_fragment_embeds_the_model_and_its_controls(model):
    fragment = text_explorer_html(model, TOKENIZER, text='Mia says "hi" </script>')
    assert json.loads(_page_model(fragment)) == _exported(model)
    assert fragment.count("</script>") == 1  # the text and the JSON cannot close the script early
    assert 'id="lm-input"' in fragment and 'value="Mia says &quot;hi&quot; &lt;/script&gt;"' in fragment
    assert re.search(r'<label for="lm-input">', fragment)
    assert fragment.count('class="mha-lm-example"') == len(_EXAMPLES)
    assert fragment.count('name="lm-layer"') == model.config.num_layers
    assert fragment.count(" checked") == 1 and 'value="0" checked' in fragment
    assert 'value="1" checked' in text_explorer_html(model, TOKENIZER, layer=1)
    assert 'class="plotly-graph-div' in fragment  # the book's extension then loads plotly.js
    assert "https://" not in fragment and "http://" not in fragment
    settings = json.loads(html.unescape(re.search(r'data-settings="([^"]*)"', fragment).group(1)))
    assert settings == {"max_tokens": _MAX_TOKENS, "continuation_tokens": _CONTINUATION_TOKENS, "stop": ".",
                        "colorscale": colour_stops("Viridis")}  # the page colours its pictures of weights


@pytest.mark.parametrize("call", [explore_text, text_explorer_html])
def test_bad_arguments_name_what_is_wrong(model, call):
    with pytest.raises(ValueError, match="model must be a mha_lib.lm.StoryLM"):
        call(torch.nn.Linear(2, 2), TOKENIZER)
    with pytest.raises(ValueError, match="model must be"):
        call(None, TOKENIZER)
    with pytest.raises(ValueError, match="tokenizer must be the model's Tokenizer"):
        call(model, None)
    with pytest.raises(ValueError, match=rf"tokenizer must be the model's Tokenizer \(vocab_size {TOKENIZER.vocab_size}\), got vocab_size 4"):
        call(model, Tokenizer(["<pad>", "<unk>", "a", "b"]))
    with pytest.raises(ValueError, match="text must be a str, got int"):
        call(model, TOKENIZER, text=3)
    with pytest.raises(ValueError, match=r"layer must be one of the model's softmax layers \[0, 1\] \(the others "
                                         r"have no attention weights\), got 2"):
        call(model, TOKENIZER, layer=2)
    with pytest.raises(ValueError, match="layer must be one of"):
        call(model, TOKENIZER, layer=True)
    with torch.device("meta"):
        ghost = lm.StoryLM(lm.Config())
    with pytest.raises(ValueError, match="model must hold real weights, got a StoryLM on the meta device"):
        call(ghost, TOKENIZER)


def _hybrid() -> lm.StoryLM:
    """A seeded untrained hybrid: Gated DeltaNet in layer 0, softmax in layer 1 (issue 48)."""
    hybrid = _model(seed=1)
    hybrid.blocks[0].attention = GatedDeltaNet(hybrid.config.d_model, hybrid.config.num_heads).eval()
    return hybrid


def test_a_hybrid_shows_its_softmax_layer_and_says_why(model):
    hybrid, text = _hybrid(), "Leo has a red kite. Zoe has a ball. Later, Leo's kite is"
    explorer = explore_text(hybrid, TOKENIZER, text=text)
    assert explorer.layer.options == (("layer 1", 1),) and explorer.layer.value == 1
    notes = [w.value for w in explorer.children if isinstance(w, widgets.HTML) and "Gated DeltaNet" in w.value]
    assert len(notes) == 1 and "Layer 0 is a Gated DeltaNet layer" in notes[0] and "no attention weights" in notes[0]
    weights = explorer.reading.weights  # (N, H, L, L)
    assert np.isnan(weights[0]).all()
    sent = [v for trace in explorer.figure.data for row in trace.z for v in row if v is not None]
    assert not np.isnan(sent).any()  # a NaN would make the widget's messages fail to serialise
    with torch.no_grad(), nan_weights_without_softmax(hybrid):
        _, expected = hybrid(torch.tensor([TOKENIZER.encode(text)]), need_weights=True)
    np.testing.assert_allclose(weights[1], expected[0, 1].double().numpy())
    ids = TOKENIZER.encode(text)
    new = hybrid.generate([ids], _CONTINUATION_TOKENS, use_cache=False)[0]
    dot = TOKENIZER.vocab.index(".")
    assert explorer.reading.continuation == (new[: new.index(dot) + 1] if dot in new else new)
    fragment = text_explorer_html(hybrid, TOKENIZER)
    data = json.loads(_page_model(fragment))
    assert data == _exported(hybrid, ("gated_deltanet", "softmax"))
    assert "blocks.0.attention.W_alpha.weight" in data["weights"]
    assert fragment.count('name="lm-layer"') == 1 and 'value="1" checked' in fragment
    assert 'class="mha-lm-note"' in fragment and "no attention weights" in fragment
    assert 'class="mha-lm-note"' not in text_explorer_html(model, TOKENIZER)
    for call in (explore_text, text_explorer_html):
        with pytest.raises(ValueError, match=r"layer must be one of the model's softmax layers \[1\]"):
            call(hybrid, TOKENIZER, layer=0)
