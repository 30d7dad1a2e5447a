"""The capstone's grader (mha_lib.exercises.capstone) on the shipped story model and on planted mistakes.

Each planted mistake is a small subclass of StoryLM around the shipped weights: the grade of the
part that must catch it, and its message, are checked. One grade of each model per module.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
import torch

from mha_lib.block import TransformerBlock
from mha_lib.book import assignments
from mha_lib.exercises import capstone
from mha_lib.lm import Config, StoryLM, held_out_stories, load_pretrained, train
from mha_lib.lm_heads import find_heads
from mha_lib.multihead import MultiHeadAttention
from mha_lib.positions import rotary
from mha_lib.stories import Tokenizer

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def shipped():
    model, _ = load_pretrained()
    roles = {r: (f.layer, f.head) for r, f in find_heads(model, held_out_stories(300)).items()}
    return model, roles


def _planted(cls):
    """The shipped weights in a model of class ``cls`` (a StoryLM with a planted mistake)."""
    model, _ = load_pretrained()
    planted = cls(model.config)
    planted.load_state_dict(model.state_dict())
    return planted.eval()


class _CacheOffset(StoryLM):
    """The cached step puts every new token one position too early (a rotary offset mistake): it
    rotates by the wrong angle and overwrites the previous token's keys and values."""

    def forward(self, ids, valid_lens=None, *, cache=None, positions=None, **kwargs):
        if cache is not None and positions is not None:
            positions = positions - 1
        return super().forward(ids, valid_lens, cache=cache, positions=positions, **kwargs)


class _LeftPadded(StoryLM):
    """Generation pads the prompts on the left and lets the padding be read as tokens."""

    @torch.no_grad()
    def generate(self, prompts, max_new_tokens, temperature=0.0, top_k=None, use_cache=True, seed=None):
        rows = [list(p) for p in prompts]
        for _ in range(max_new_tokens):
            longest = max(len(r) for r in rows)
            ids = torch.tensor([[Tokenizer.pad_id] * (longest - len(r)) + r for r in rows])  # (B, L)
            next_ids = self(ids)[:, -1].argmax(-1)  # (B,)
            rows = [r + [int(t)] for r, t in zip(rows, next_ids)]
        return [r[len(p):] for r, p in zip(rows, prompts)]


class _DeafToHeadMask(StoryLM):
    """``head_mask`` is accepted and ignored."""

    def forward(self, ids, valid_lens=None, *, head_mask=None, **kwargs):
        return super().forward(ids, valid_lens, **kwargs)


class _LyingWeights(StoryLM):
    """``need_weights`` reports each head's weights under its neighbour's index."""

    def forward(self, ids, valid_lens=None, *, need_weights=False, **kwargs):
        out = super().forward(ids, valid_lens, need_weights=need_weights, **kwargs)
        if need_weights:
            logits, weights = out
            return logits, weights.roll(1, dims=2)  # (B, N, H, L, L): head h reports head h - 1's
        return out


@pytest.fixture(scope="module")
def report(shipped):
    return capstone.grade(*shipped)


def test_shipped_model_earns_full_marks_on_heads_quality_and_decoding(report):
    for part in ("heads", "quality", "decoding"):
        points, most, message = report.parts[part]
        assert points == most, message
    assert list(report.parts) == list(capstone.POINTS)
    assert report.max_points == sum(capstone.POINTS.values())
    text = str(report)
    assert text.startswith(f"Capstone: {report.points:g}/{report.max_points:g} points")
    assert "no parts given" in text  # no components: those points need the student's parts


def test_two_roles_swapped_lose_their_head_points_and_name_the_relation(shipped, report):
    model, roles = shipped
    swapped = {**roles, "antecedent": roles["recall"], "recall": roles["antecedent"]}
    graded = capstone.grade(model, swapped)
    points, most, message = graded.parts["heads"]
    assert points == most / 3  # possession keeps its 4 points; antecedent and recall lose theirs
    lines = message.splitlines()
    for relation in ("antecedent", "recall"):
        line = next(line for line in lines if line.startswith(relation))
        assert "below" in line and f"is that the {relation} head?" in line
    assert graded.parts["quality"] == report.parts["quality"]


def test_an_untrained_model_fails_quality(shipped):
    torch.manual_seed(0)
    untrained = StoryLM(Config()).eval()
    points, _, message = capstone.grade(untrained, shipped[1]).parts["quality"]
    assert points == 0
    assert f"above {capstone.MAX_LOSS}" in message and "does not yet look back at the recall links" in message


def test_a_head_mask_that_does_nothing_fails_heads(shipped):
    points, _, message = capstone.grade(_planted(_DeafToHeadMask), shipped[1]).parts["heads"]
    assert points == 0
    assert message.startswith("head_mask does nothing")


def test_weights_reported_under_the_wrong_head_fail_heads_with_a_message(shipped):
    graded = capstone.grade(_planted(_LyingWeights), shipped[1])
    points, most, message = graded.parts["heads"]
    assert points <= most / 2
    assert "does need_weights report the weights the forward pass uses?" in message
    assert graded.parts["quality"][0] == graded.parts["quality"][1]


def test_a_cache_offset_shows_in_decoding(shipped):
    points, most, message = capstone.grade(_planted(_CacheOffset), shipped[1]).parts["decoding"]
    assert points <= most * 2 / 3 and message.startswith("padding: a story scores the same")
    assert "differently with the cache than without" in message and "rotary angle" in message


def test_left_padding_shows_in_decoding(shipped):
    points, most, message = capstone.grade(_planted(_LeftPadded), shipped[1]).parts["decoding"]
    assert points == most * 2 / 3
    assert "differently in a batch than alone" in message and "padded on" in message


def test_a_model_without_storylms_interface_gets_a_message_not_an_exception():
    graded = capstone.grade(torch.nn.Linear(2, 2), {"recall": (0, 0)})
    assert graded.points == 0
    assert "model.config needs" in graded.parts["quality"][2]


class _Block(torch.nn.Module):
    """The book's pre-LN block behind the capstone's block interface, ``block(x)``, causal."""

    norm_first = True

    def __init__(self, d_model, num_heads, d_ff):
        super().__init__()
        self.inner = TransformerBlock(d_model, num_heads, d_ff, 0.0, norm_first=self.norm_first, rope=True)

    def forward(self, x):
        lens = torch.arange(1, x.shape[1] + 1).expand(x.shape[:2])  # (B, L): query i sees keys 0..i
        return self.inner(x, lens)


class _PostLNBlock(_Block):
    norm_first = False


def _my_rotary(x, positions):
    return rotary(x, positions)


def _halves_rotary(x, positions):
    return rotary(x, positions, pairs="halves")


def test_components_go_through_the_books_checkers_and_the_books_classes_earn_nothing():
    def components(parts):
        return capstone._components(parts)

    most = capstone.POINTS["components"] / 3
    points, message = components({"rotary": _my_rotary, "block": _Block})
    assert points == 2 * most, message
    points, message = components({"rotary": _halves_rotary, "block": _PostLNBlock})
    assert points < 2 * most and "rotation pairs" in message and "not pre-LN" in message
    points, message = components({"attention": MultiHeadAttention, "rotary": rotary, "block": TransformerBlock})
    assert points == 0 and message.count("the book's own code") == 3

    class Renamed(MultiHeadAttention):  # the book's class under another name
        pass

    points, message = components({"attention": Renamed})
    assert points == 0 and "the book's own code" in message


def test_check_block_prints_its_verdict(capsys):
    assert capstone.check_block(_Block)
    assert "both checks pass" in capsys.readouterr().out
    assert not capstone.check_block(_PostLNBlock)
    assert "not pre-LN" in capsys.readouterr().out
    assert not capstone.check_block(lambda d_model, num_heads, d_ff: None)
    assert "is not an nn.Module" in capsys.readouterr().out


@pytest.mark.parametrize("bad", [{"heads": (0, 0)}, {"recall": [1, 3]}, {"recall": (1,)}, [("recall", (1, 3))]])
def test_malformed_roles_are_a_value_error_naming_roles(shipped, bad):
    with pytest.raises(ValueError, match="roles must map relations"):
        capstone.grade(shipped[0], bad)


@pytest.mark.parametrize("seed", [2, -1, 1.5, True])
def test_an_even_or_bad_seed_is_a_value_error(shipped, seed):
    with pytest.raises(ValueError, match="seed must be an odd integer"):
        capstone.grade(*shipped, seed=seed)


class _Wrapped(torch.nn.Module):
    """A model with StoryLM's interface that is not a StoryLM (a student's own class)."""

    def __init__(self, config):
        super().__init__()
        self.config, self.inner = config, StoryLM(config)

    def forward(self, ids, valid_lens=None, **kwargs):
        return self.inner(ids, valid_lens, **kwargs)


def test_lm_train_trains_any_model_with_storylms_interface():
    config = Config(steps=3, warmup=1, eval_every=1)
    torch.manual_seed(0)
    model = _Wrapped(config)
    before = [p.detach().clone() for p in model.parameters()]
    result = train(config, model=model, progress=False)
    assert result.model is model and not model.training
    assert len(result.history["train_loss"]) == 3 and "eval_held_out_loss" not in result.history
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_the_capstone_assignment_grades_the_hand_in_again_on_hidden_stories():
    from nbgrader.preprocessors import ClearHiddenTests

    nb = nbformat.read(ROOT / "chapters" / "12b_capstone.ipynb", as_version=4)
    total = sum(capstone.POINTS.values())
    hand_in = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "ex-12b-roles-test"]
    assert len(hand_in) == 1 and hand_in[0].metadata["nbgrader"]["points"] == total
    source = assignments.source_notebook(nb, capstone_seed=11)
    hidden = [c for c in source.cells if "hidden_grade(" in c.source]
    assert len(hidden) == 1 and "seed=11)" in hidden[0].source
    assert hidden[0].metadata["nbgrader"] == {**hidden[0].metadata["nbgrader"], "grade": True, "points": total}
    released, _ = ClearHiddenTests().preprocess(source, {})
    assert not any("hidden_grade" in c.source or "seed=11" in c.source for c in released.cells)
    with pytest.raises(ValueError, match="capstone_seed: expected an odd integer"):
        assignments.source_notebook(nb, capstone_seed=12)


class _NoGates(torch.nn.Module):
    """The shipped model behind a forward without head_mask or need_weights (a partial model)."""

    def __init__(self, model):
        super().__init__()
        self.config, self.inner = model.config, model

    def forward(self, ids, valid_lens=None):
        return self.inner(ids, valid_lens)

    def generate(self, prompts, max_new_tokens, use_cache=True):
        return self.inner.generate(prompts, max_new_tokens, use_cache=use_cache)


def test_a_partial_model_earns_partial_credit(shipped):
    graded = capstone.grade(_NoGates(shipped[0]), shipped[1])
    assert [graded.parts[p][0] for p in ("decoding", "quality", "heads")] == [6, 6, 0]
    assert "model(ids, valid_lens, head_mask=...) raised TypeError" in graded.parts["heads"][2]


class _PadsOnTheLeft(StoryLM):
    """Scores a padded batch with the padding moved to the left, read as tokens (the padding side)."""

    def forward(self, ids, valid_lens=None, **kwargs):
        if valid_lens is None:
            return super().forward(ids, **kwargs)
        shifts = [ids.shape[1] - int(n) for n in valid_lens]  # each row's padding, moved to its front
        left = torch.stack([row.roll(s) for row, s in zip(ids, shifts)])  # (B, L)
        out = super().forward(left, **kwargs)
        logits = out[0] if isinstance(out, tuple) else out
        logits = torch.stack([row.roll(-s, dims=0) for row, s in zip(logits, shifts)])  # (B, L, V), back in place
        return (logits, out[1]) if isinstance(out, tuple) else logits


def test_padding_on_the_wrong_side_shows_in_decoding(shipped):
    points, most, message = capstone.grade(_planted(_PadsOnTheLeft), shipped[1]).parts["decoding"]
    assert points < most
    assert message.startswith("padding: a story's scores change when it is padded in a batch")
    assert "is padding on the right?" in message
