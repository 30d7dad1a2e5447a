"""The head analysis of the story model (mha_lib.lm_heads) and the chapter's figures (mha_lib.viz.text)."""

from __future__ import annotations

import math

import plotly.graph_objects as go
import pytest
import torch

from mha_lib.lm_eval import encode_stories, evaluate, held_out_stories
from mha_lib.lm_heads import (
    _HeadFinding,
    ablate,
    bigram_loss,
    bigram_table,
    find_heads,
    _link_losses,
    link_weights,
)
from mha_lib.stories import RELATIONS, sample_stories
from mha_lib.why.linear_runs import _with_layers
from mha_lib.why.modern_runs import story_config, story_run
from mha_lib.viz.text import _NARROW_PLOT_PX, _TICK_PX, _WIDE_PLOT_PX, ablation_figure, head_on_links_figure, links_figure


@pytest.fixture(scope="module")
def held_out():
    return held_out_stories(200)


def _perfect_weights(stories, relation, tokenizer, layer=1, head=2, offset=0):
    """Weights (B, 2, 4, L, L) where one head puts all its weight on the relation's keys."""
    ids, _ = encode_stories(tokenizer, stories)
    B, L = ids.shape
    weights = torch.zeros(B, 2, 4, L, L)
    weights[..., 0] = 1.0  # everyone else looks at the first word
    for b, story in enumerate(stories):
        for i, j in story.links[relation]:
            weights[b, layer, head, i - 1] = 0.0
            weights[b, layer, head, i - 1, j + offset] = 1.0
    return weights


@pytest.mark.parametrize("relation", RELATIONS)
@pytest.mark.parametrize("offset", [0, 1])
def test_link_weights_find_a_perfect_head(relation, offset, stories, tokenizer):
    weights = _perfect_weights(stories, relation, tokenizer, offset=offset)
    scores = link_weights(weights, stories, relation)
    assert scores.shape == (2, 4, 2)
    assert scores[1, 2, offset] == 1.0
    others = scores.clone()
    others[1, 2, offset] = 0.0
    assert others.nan_to_num(0.0).max() < 1.0


def test_link_weights_reject_bad_input(stories, tokenizer):
    weights = _perfect_weights(stories, "recall", tokenizer)
    with pytest.raises(ValueError, match="relation must be one of"):
        link_weights(weights, stories, "colour")
    with pytest.raises(ValueError, match="weights must hold one story per row"):
        link_weights(weights[:2], stories, "recall")
    with pytest.raises(ValueError, match="weights must have 5 dimensions"):
        link_weights(weights[0], stories, "recall")
    with pytest.raises(ValueError, match="stories must be"):
        link_weights(weights, [], "recall")


def test_shipped_heads_read_their_links_and_ablation_hurts_them_most(pretrained, held_out):
    model, _ = pretrained
    heads = find_heads(model, held_out)
    assert set(heads) == set(RELATIONS)
    assert all(isinstance(h, _HeadFinding) and h.weight > 0.5 for h in heads.values())
    assert len({(h.layer, h.head) for h in heads.values()}) == 3  # three different heads
    results = ablate(model, held_out, heads)
    for relation, r in results.items():
        (on, off), (rest_on, rest_off) = r["linked"], r["rest"]
        assert off - on > 3 * (rest_off - rest_on) > 0, relation


def test_link_losses_are_low_where_the_model_is_right(pretrained, held_out):
    model, _ = pretrained
    losses = _link_losses(model, held_out)
    assert set(losses) == {*RELATIONS, "rest"}
    assert losses["recall"] < 0.05 and losses["antecedent"] < 0.2 < losses["possession"]
    scores = evaluate(model, held_out)
    assert scores["recall"] == 1.0 and scores["antecedent"] > 0.9


def test_the_model_beats_the_bigram_baseline(pretrained, held_out):
    table = bigram_table(sample_stories(1000, 0))
    V = table.shape[0]
    torch.testing.assert_close(table.exp().sum(dim=1), torch.ones(V))
    baseline = bigram_loss(table, held_out)
    assert 1.5 < baseline < math.log(V)
    assert evaluate(pretrained[0], held_out)["loss"] < 0.6 * baseline


def test_bigram_rejects_bad_input(stories):
    with pytest.raises(ValueError, match="smoothing"):
        bigram_table(stories, smoothing=0)
    with pytest.raises(ValueError, match="stories must be"):
        bigram_table("a story")
    with pytest.raises(ValueError, match="table must have 2 dimensions"):
        bigram_loss(torch.zeros(3), stories)


def test_figures(stories, tokenizer):
    story = stories[0]
    fig = links_figure(story)
    assert isinstance(fig, go.Figure) and [t.name for t in fig.data] == list(RELATIONS)
    i, j = story.links["recall"][0]
    recall = fig.data[RELATIONS.index("recall")]
    assert (recall.x[0], recall.y[0]) == (j, i - 1)  # key on x, query on y
    weights = _perfect_weights([story], "recall", tokenizer)[0, 1, 2]
    fig = head_on_links_figure(weights, story, "recall")
    z = fig.data[0].z
    assert math.isnan(z[0][1]) and z[i - 1][j] == 1.0  # future keys are gaps
    results = {"recall": {"linked": (0.1, 2.0), "rest": (1.0, 1.1)}}
    fig = ablation_figure(results)
    assert [list(t.y) for t in fig.data] == [[0.1], [2.0], [1.0], [1.1]]


def test_figures_label_as_many_keys_as_fit(stories, tokenizer):
    """Key labels (vertical) stand far enough apart not to overlap, on a desktop page and in the
    phone layout (layout.meta.narrow_axes, read by mha-figures.js); every label names its word."""
    story = max(stories, key=lambda s: len(s.tokens))
    L = len(story.tokens)
    for fig, bar in [(links_figure(story), 0), (head_on_links_figure(torch.eye(L), story, "recall"), 70)]:
        span = fig.layout.xaxis.range[1] - fig.layout.xaxis.range[0]
        wide, phone = fig.layout.xaxis.tickvals, fig.layout.meta["narrow_axes"]["xaxis"]["tickvals"]
        for ticks, px in [(wide, _WIDE_PLOT_PX - bar), (phone, _NARROW_PLOT_PX - bar)]:
            assert all((b - a) * px / span >= _TICK_PX for a, b in zip(ticks, ticks[1:]))
        assert phone[0] == wide[0] and len(phone) < len(wide)
        assert fig.layout.meta["narrow_axes"]["xaxis"]["ticktext"] == [f"{story.tokens[k]} {k}" for k in phone]
    fig = head_on_links_figure(torch.eye(L), story, "recall")
    assert len(fig.layout.xaxis.tickvals) >= L // 3  # a desktop page labels at least every third word


@pytest.mark.parametrize("call, match", [
    (lambda s: links_figure("story"), "story must be"),
    (lambda s: links_figure(s, ["colour"]), "relations must be"),
    (lambda s: head_on_links_figure(torch.zeros(3, 3), s, "recall"), "weights must be a"),
    (lambda s: head_on_links_figure(torch.zeros(len(s.tokens), len(s.tokens)), s, "who"), "relation must be"),
    (lambda s: head_on_links_figure(torch.zeros(len(s.tokens), len(s.tokens)), s, "recall", offset=2), "offset"),
    (lambda s: ablation_figure({"recall": {"linked": (1.0,)}}), "results must map"),
    (lambda s: ablation_figure({}), "results must map"),
])
def test_figures_reject_bad_input(stories, call, match):
    with pytest.raises(ValueError, match=match):
        call(stories[0])


def test_find_heads_and_ablate_read_only_the_softmax_layers_of_a_hybrid():
    # issue 48: the hybrid of linear_runs (Gated DeltaNet below, softmax above), a few steps
    config = story_config(0, 3)
    model = story_run(config, "layers: Gated DeltaNet, softmax", _with_layers(config, ("Gated DeltaNet", "softmax")))[0].model
    stories = held_out_stories(16)
    found = find_heads(model, stories)
    assert set(found) == set(RELATIONS)
    assert all(f.layer == 1 and 0 <= f.head < 4 and math.isfinite(f.weight) for f in found.values())
    result = ablate(model, stories, found)
    assert set(result) == set(RELATIONS)
    assert all(math.isfinite(x) for r in result.values() for pair in r.values() for x in pair)
    # the hooks are gone: the Gated DeltaNet layer still refuses to give weights it does not have
    with pytest.raises(ValueError, match="no attention weights"):
        model(torch.zeros(1, 4, dtype=torch.long), need_weights=True)
