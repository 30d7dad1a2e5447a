"""Bad input to the figures (mha_lib.viz): a ValueError naming the argument, never a bare error.

Hypothesis puts junk (wrong types, zero/negative/huge sizes, NaN, meta tensors, bools where
integers go, empty sequences) in one argument at a time of the layout helpers, the language
model's figures, the scenes and the modern chapters' figures; the others stay valid.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mha_lib.stories import Story, sample_stories
from mha_lib.viz import layout, modern, scene, text

STORY = sample_stories(1, 0)[0]
L = len(STORY.tokens)
JUNK = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.sampled_from([0, -1, 2**31, 2**63, 2**64]),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=4), st.lists(st.integers(-2, 5), max_size=3),
    st.just([]), st.just({}), st.just(object()),
    st.sampled_from([torch.zeros(2, 2, device="meta"), torch.zeros(0), torch.tensor([float("nan")]),
                     torch.zeros(L, L, device="meta"), torch.zeros(L, L, dtype=torch.long),
                     torch.full((2, 2, 3, 4), float("nan"))]),
)
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))

TARGETS = {
    "layout.panels": (layout.panels, dict(num_examples=2, num_heads=2, max_cols=4, panel_px=170)),
    "layout.figure_height": (layout.figure_height, dict(num_examples=2, num_heads=2, max_cols=4, panel_px=170)),
    "layout.axis_names": (layout.axis_names, dict(slot=1)),
    "text.links_figure": (text.links_figure, dict(story=STORY)),
    "text.head_on_links_figure": (text.head_on_links_figure,
                                  dict(weights=torch.eye(L), story=STORY, relation="recall", offset=0, title=None)),
    "text.ablation_figure": (text.ablation_figure, dict(results={"recall": {"linked": (0.1, 2.0), "rest": (1.0, 1.1)}})),
    "scene.sentence_scene": (scene.sentence_scene, dict(sentences=("the cat sat",), num_features=8, seed=0, scale=3.0)),
    "scene.seeded_model": (scene.seeded_model, dict(scene=scene.sentence_scene(), num_heads=2, d_model=8, seed=0)),
    "modern.kv_sharing_figure": (modern.kv_sharing_figure, dict(num_heads=4, num_kv_heads=2)),
    "modern.step_cost_figure": (modern.step_cost_figure, dict(max_position=16, D=8)),
}
CASES = [(name, arg) for name, (_, valid) in TARGETS.items() for arg in valid]


@FUZZ
@given(case=st.sampled_from(CASES), junk=JUNK)
def test_junk_in_one_argument_is_a_value_error_or_works(case, junk):
    name, arg = case
    fn, valid = TARGETS[name]
    try:
        fn(**dict(valid, **{arg: junk}))
    except ValueError as err:
        assert str(err)


@pytest.mark.parametrize("call, match", [
    (lambda: layout.panels(2, 2, 0), "max_cols must be"),
    (lambda: layout.figure_height(2**40, 2, 4), "num_examples \\* num_heads must be at most"),
    (lambda: layout.axis_names("x"), "slot must be"),
    (lambda: text.head_on_links_figure(torch.eye(L), STORY, "recall", offset=torch.zeros(2)), "offset must be"),
    (lambda: text.head_on_links_figure(torch.eye(L), STORY, "recall", title=torch.zeros(2)), "title must be"),
    (lambda: text.head_on_links_figure(torch.zeros(L, L, device="meta"), STORY, "recall"), "weights"),
    (lambda: scene.sentence_scene(torch.zeros(2)), "sentences must be"),
    (lambda: scene.sentence_scene(num_features=2**63), "num_features must be at most"),
    (lambda: modern.kv_sharing_figure(2**63, 1), "num_heads must be at most"),
    (lambda: modern.step_cost_figure(2**63, 8), "max_position must be at most"),
])
def test_examples_found_by_the_fuzz(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_a_story_without_links_draws_empty_figures():
    story = Story("Mia runs.", ["mia", "runs", "."])
    assert len(text.links_figure(story).data) == 3
    assert text.head_on_links_figure(torch.eye(3), story, "recall").data[1].x == ()
