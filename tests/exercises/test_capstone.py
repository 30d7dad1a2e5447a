"""The capstone's grader (mha_lib.exercises.capstone) on the shipped story model and on planted mistakes.

Each planted mistake is a small subclass around the shipped weights, of StoryLM or of the chapter's
own solution (its cells run here as a student's code): the grade of the part that must catch it,
and its message, are checked. One grade of each model per module; a part alone where that is enough.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import nbformat
import pytest
import torch

from mha_lib.block import TransformerBlock
from mha_lib.book import assignments
from mha_lib.exercises import capstone
from mha_lib.lm import Config, StoryLM, load_pretrained, train
from mha_lib.lm_eval import encode_stories, held_out_stories
from mha_lib.lm_heads import ablate, find_heads, link_weights
from mha_lib.multihead import MultiHeadAttention
from mha_lib.positions import rotary
from mha_lib.stories import RELATIONS, Tokenizer, sample_stories

ROOT = Path(__file__).resolve().parents[2]


def _evidence(model, heads, stories):
    """Per relation, the head and the evidence a student measures on ``stories`` (two decimals)."""
    ids, lens = encode_stories(Tokenizer(), stories)
    with torch.no_grad():
        _, weights = model.eval()(ids, lens, need_weights=True)  # (B, N, H, L, L)
    rises = ablate(model, stories, heads)
    out = {}
    for relation, head in heads.items():
        r = rises[relation]
        out[relation] = {"head": head,
                         "weight": round(float(link_weights(weights, stories, relation).nan_to_num(0).amax(-1)[head]), 2),
                         "rise": round((r["linked"][1] - r["linked"][0]) - (r["rest"][1] - r["rest"][0]), 2)}
    return out


@pytest.fixture(scope="module")
def shipped():
    model, _ = load_pretrained()
    stories = held_out_stories(300)  # the student's stories: seed 1, not the grader's
    heads = {r: (f.layer, f.head) for r, f in find_heads(model, stories).items()}
    return model, _evidence(model, heads, stories)


@pytest.fixture(scope="module")
def student():
    """The chapter's solution cells (its parts and MyStoryLM), run as a student's code."""
    nb = nbformat.read(ROOT / "chapters" / "12b_capstone.ipynb", as_version=4)
    namespace: dict = {}
    exec(nb.cells[1].source, namespace)  # the chapter's imports
    for cell in nb.cells:
        if "solution" in cell.metadata.get("tags", []) and re.search(r"^(class My|def my_)", cell.source, re.M):
            exec(cell.source, namespace)
    return namespace


def _student_model(student, attention=None):
    """MyStoryLM with the shipped weights, its attention class ``attention`` (default the solution's)."""
    attention = attention or student["MyMultiHeadAttention"]

    class Block(student["MyBlock"]):
        def __init__(self, d_model, num_heads, d_ff, rotary=student["my_rotary"]):
            super().__init__(d_model, num_heads, d_ff, rotary)
            self.attention = attention(d_model, d_model, d_model, d_model, num_heads, bias=True, rotary=rotary)

    class Model(student["MyStoryLM"]):
        def __init__(self, config):
            super().__init__(config)
            self.blocks = torch.nn.ModuleList(Block(config.d_model, config.num_heads, config.d_ff)
                                              for _ in range(config.num_layers))

    shipped_model, _ = load_pretrained()
    model = Model(shipped_model.config)
    model.load_state_dict(shipped_model.state_dict())
    return model.eval(), {"attention": attention, "rotary": student["my_rotary"], "block": Block}


def _planted(cls):
    """The shipped weights in a model of class ``cls`` (a StoryLM with a planted mistake)."""
    model, _ = load_pretrained()
    planted = cls(model.config)
    planted.load_state_dict(model.state_dict())
    return planted.eval()


def _stories():
    return sample_stories(capstone.NUM_STORIES, capstone.GRADE_SEED)


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


@pytest.fixture(autouse=True)
def _one_thread():
    """One torch thread, as grade() uses: the tests call its parts on their own."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def report(shipped):
    return capstone.grade(*shipped)


_MEASURE = capstone._measured


@functools.lru_cache(maxsize=2)
def _measured(model, stories_seed):
    """What the heads part measures of ``model`` (the same for every roles), once per model."""
    return _MEASURE(model, sample_stories(capstone.NUM_STORIES, stories_seed),
                              (model.config.num_layers, model.config.num_heads))


def _heads(model, roles, monkeypatch):
    """The heads part of ``grade(model, roles)``, its measurements shared by the calls of one test."""
    monkeypatch.setattr(capstone, "_measured", lambda m, stories, shape: _measured(m, capstone.GRADE_SEED))
    return capstone._heads(model, _stories(), capstone._check_roles(roles), (2, 4))


def test_shipped_model_earns_full_marks_on_heads_quality_and_decoding(report):
    for part in ("heads", "quality", "decoding"):
        points, most, message = report.parts[part]
        assert points == most, message
    assert list(report.parts) == list(capstone.POINTS)
    assert report.max_points == sum(capstone.POINTS.values())
    text = str(report)
    assert text.startswith(f"Capstone: {report.points:g}/{report.max_points:g} points")
    assert "no parts given" in text  # no components: those points need the student's parts


def test_the_solutions_hand_in_scores_full(student, shipped):
    model, parts = _student_model(student)
    graded = capstone.grade(model, shipped[1], parts=parts)
    assert graded.points == graded.max_points, str(graded)


def test_two_roles_swapped_lose_their_head_points_and_name_no_other_head(shipped, monkeypatch):
    model, roles = shipped
    swapped = {**roles, "antecedent": roles["recall"], "recall": roles["antecedent"]}
    points, message = _heads(model, swapped, monkeypatch)
    assert points == capstone.POINTS["heads"] / 3  # possession keeps its 4 points; antecedent and recall lose theirs
    for relation in ("antecedent", "recall"):
        line = next(line for line in message.splitlines() if line.startswith(relation))
        assert "does not hold" in line
    named = {f"layer {r['head'][0]} head {r['head'][1]}" for r in swapped.values()}
    assert set(re.findall(r"layer \d head \d", message)) <= named


def test_evidence_is_checked_as_a_whole_and_then_the_head_is_graded(shipped, monkeypatch):
    model, _ = shipped
    honest = _evidence(model, {"antecedent": (1, 3), "possession": (1, 2)}, held_out_stories(300))  # wrong heads
    points, message = _heads(model, honest, monkeypatch)
    lines = dict(line.split(" (", 1) for line in message.splitlines())
    assert "by your own evidence this is not the antecedent head" in lines["antecedent"]
    assert "holds; the weight passes; but the rise is below" in lines["possession"]  # (1, 1) is missed more
    assert points == 3


def test_a_loop_over_every_head_recovers_no_role(shipped, monkeypatch):
    """grade() with every head in turn and the same evidence: every head gets the same report."""
    model, roles = shipped
    guesses = [(capstone.MIN_LINK_WEIGHT, capstone.MIN_SELECTIVE_RISE), (0.8, 1.0), (1.0, 3.0), (0.0, 0.0)]
    for relation in RELATIONS:
        for weight, rise in guesses:
            reports = set()
            for n in range(2):
                for h in range(4):
                    graded = _heads(model, {relation: {"head": (n, h), "weight": weight, "rise": rise}}, monkeypatch)
                    reports.add((graded[0], graded[1].replace(f"layer {n} head {h}", "HEAD")))
            assert len(reports) == 1 and next(iter(reports))[0] == 0, (relation, weight, rise, reports)


def test_an_untrained_model_fails_quality():
    torch.manual_seed(0)
    points, message = capstone._quality(StoryLM(Config()).eval(), _stories())
    assert points == 0
    assert f"above {capstone.MAX_LOSS}" in message and "does not yet look back at the recall links" in message


def test_a_model_trained_without_its_causal_mask_loses_quality_naming_causality(student):
    """MyStoryLM that hands valid_lens (B,) to the blocks: causal only without valid lengths, and
    training reads padded batches, so it learns to read the token it predicts."""
    class SeesTheFuture(student["MyStoryLM"]):
        def forward(self, ids, valid_lens=None, *, need_weights=False, head_mask=None, caches=None, positions=None):
            x = self.token_embedding(ids)
            lens = None if valid_lens is None else torch.as_tensor(valid_lens)  # (B,): padding only
            for n, block in enumerate(self.blocks):
                x = block(x, lens, positions=positions, cache=None if caches is None else caches[n],
                          head_mask=None if head_mask is None else head_mask[n])
            return self.unembedding(self.norm(x))

    config = Config(steps=60, warmup=10, eval_every=60, eval_stories=16)
    torch.manual_seed(config.seed)
    model = train(config, model=SeesTheFuture(config), progress=False).model
    points, message = capstone._quality(model, _stories())
    assert points == 0
    assert message.startswith("not causal: changing the tokens from position") and "with valid_lens" in message


def test_a_loss_below_the_floor_is_a_finding_of_its_own(shipped, monkeypatch):
    monkeypatch.setattr(capstone, "LOSS_FLOOR", 1.1)  # the shipped model's 1.01, as if it were too low
    points, message = capstone._quality(shipped[0], _stories())
    assert points == 0 and "lower than a model that reads only earlier tokens can go" in message


class _FirstKeysOnly:
    """A cached step that keeps only the first 24 keys and values: positions past 24 are dropped."""

    @staticmethod
    def make(base):
        class FirstKeys(base):
            def forward(self, *args, cache=None, **kwargs):
                out = super().forward(*args, cache=cache, **kwargs)
                if cache is not None:
                    cache["k"], cache["v"] = cache["k"][:, :, :24], cache["v"][:, :, :24]
                return out
        return FirstKeys


def test_a_cache_that_drops_keys_past_24_loses_decoding_and_components_points(student):
    attention = _FirstKeysOnly.make(student["MyMultiHeadAttention"])
    model, parts = _student_model(student, attention)
    points, message = capstone._decoding(model, _stories())
    assert points == capstone.POINTS["decoding"] * 2 / 3
    assert "differently with the cache than without" in message and "keeps every key and value" in message
    assert int(re.search(r"prompts of (\d+) to", message).group(1)) + capstone.NEW_TOKENS > 24
    points, message = capstone._components(parts)
    assert points == capstone.POINTS["components"] - 1
    assert "attention cached step: after a cached prefix of 24" in message


def _gated_queries(base):
    class QueriesGated(base):
        """head_mask multiplies each head's queries: a gated-off head attends evenly."""

        def forward(self, queries, keys, values, valid_lens=None, *, head_mask=None, **kwargs):
            if head_mask is None:
                return super().forward(queries, keys, values, valid_lens, **kwargs)
            W_q = self.W_q
            H = head_mask.shape[0]
            gated = lambda x: (W_q(x).unflatten(-1, (H, -1)) * head_mask[:, None]).flatten(-2)  # noqa: E731
            del self._modules["W_q"]
            self.W_q = gated
            try:
                return super().forward(queries, keys, values, valid_lens, **kwargs)
            finally:
                del self.W_q
                self.W_q = W_q
    return QueriesGated


def test_a_head_mask_on_the_queries_loses_components_points(student):
    points, message = capstone._components({"attention": _gated_queries(student["MyMultiHeadAttention"])})
    assert points == capstone.POINTS["components"] - 4 - 1  # rotary and block not given; head_mask wrong
    assert "attention head_mask: with every gate 0 the output still depends on the input" in message
    assert "not the queries" in message


def test_check_capstone_attention_prints_each_check(student, capsys):
    assert capstone.check_capstone_attention(student["MyMultiHeadAttention"])
    assert "4/4 checks pass" in capsys.readouterr().out
    assert not capstone.check_capstone_attention(_gated_queries(student["MyMultiHeadAttention"]))
    assert "- head_mask: with every gate 0" in capsys.readouterr().out


def test_a_head_mask_that_does_nothing_fails_heads(shipped):
    points, message = capstone._heads(_planted(_DeafToHeadMask), _stories(), shipped[1], (2, 4))
    assert points == 0
    assert message.startswith("head_mask does nothing")


def test_weights_reported_under_the_wrong_head_fail_heads_with_a_message(shipped):
    points, message = capstone._heads(_planted(_LyingWeights), _stories(), shipped[1], (2, 4))
    assert points <= capstone.POINTS["heads"] / 2
    assert "does not hold" in message and "need_weights" in message


def test_a_cache_offset_shows_in_decoding():
    points, message = capstone._decoding(_planted(_CacheOffset), _stories())
    assert points <= capstone.POINTS["decoding"] * 2 / 3 and message.startswith("padding: a story scores the same")
    assert "differently with the cache than without" in message and "rotary angle" in message


def test_left_padding_shows_in_decoding():
    points, message = capstone._decoding(_planted(_LeftPadded), _stories())
    assert points == capstone.POINTS["decoding"] * 2 / 3
    assert "differently in a batch than alone" in message and "padded on" in message


def test_a_model_without_storylms_interface_gets_a_message_not_an_exception():
    graded = capstone.grade(torch.nn.Linear(2, 2), {"recall": {"head": (0, 0), "weight": 0.5, "rise": 0.2}})
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

    most = capstone._COMPONENT_POINTS  # rotary and block: 2 each
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


@pytest.mark.parametrize("bad", [{"heads": (0, 0)}, {"recall": (1, 3)}, {"recall": {"head": (1, 3)}},
                                 {"recall": {"head": [1, 3], "weight": 0.9, "rise": 2.0}},
                                 {"recall": {"head": (1, 3), "weight": "high", "rise": 2.0}},
                                 [("recall", (1, 3))]])
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
    assert len(result.history["train_loss"]) == 3
    assert len(result.history["eval_held_out_loss"]) >= 3 and "eval_recall" in result.history  # measured for it too
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_the_capstone_assignment_grades_the_hand_in_file_once_on_hidden_stories():
    from nbgrader.preprocessors import ClearHiddenTests

    nb = nbformat.read(ROOT / "chapters" / "12b_capstone.ipynb", as_version=4)
    total = sum(capstone.POINTS.values())
    hand_in = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "ex-12b-roles-test"]
    assert len(hand_in) == 1 and "save_hand_in(my_model, my_roles, HAND_IN)" in hand_in[0].source
    source = assignments.source_notebook(nb, capstone_seed=11)
    graded = [c.metadata["nbgrader"] for c in source.cells if c.metadata.get("nbgrader", {}).get("grade")]
    assert sum(g["points"] for g in graded) == total  # each rubric part once: the hidden grade's
    hidden = [c for c in source.cells if "hidden_grade(" in c.source]
    assert len(hidden) == 1 and "seed=11)" in hidden[0].source and "hidden_load(HAND_IN" in hidden[0].source
    assert hidden[0].metadata["nbgrader"]["points"] == total
    assert not any("remove-cell" in c.metadata.get("tags", []) for c in source.cells)
    released, _ = ClearHiddenTests().preprocess(source, {})
    assert not any("hidden_grade" in c.source or "seed=11" in c.source for c in released.cells)
    asserting = [c for c in released.cells if c.cell_type == "code" and re.search(r"^\s*assert\b", c.source, re.M)]
    assert asserting and all(c.metadata["nbgrader"]["grade_id"].endswith("-test") for c in asserting)  # self-checks
    assert sum("assert check_" in c.source for c in asserting) == 3  # rotary, attention, block
    with pytest.raises(ValueError, match="capstone_seed: expected an odd integer"):
        assignments.source_notebook(nb, capstone_seed=12)


def test_a_hand_in_file_loads_with_weights_only_and_grades_as_the_model(student, shipped, tmp_path):
    model, _ = _student_model(student)
    path = capstone.save_hand_in(model, shipped[1], tmp_path / capstone.HAND_IN)
    again, roles = capstone.load_hand_in(path, student["MyStoryLM"])
    assert roles == shipped[1] and not again.training
    ids, lens = encode_stories(Tokenizer(), held_out_stories(4))
    assert torch.equal(again(ids, lens), model(ids, lens))
    with pytest.raises(ValueError, match="roles must map relations"):
        capstone.save_hand_in(model, {"recall": (1, 3)}, tmp_path / "bad.pt")
    torch.save({"format": "other"}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="is not a capstone hand-in"):
        capstone.load_hand_in(tmp_path / "other.pt", student["MyStoryLM"])


class _NoGates(torch.nn.Module):
    """The shipped model behind a forward without head_mask or need_weights (a partial model)."""

    def __init__(self, model):
        super().__init__()
        self.config, self.inner = model.config, model

    def forward(self, ids, valid_lens=None):
        return self.inner(ids, valid_lens)

    def generate(self, prompts, max_new_tokens, use_cache=True):
        return self.inner.generate(prompts, max_new_tokens, use_cache=use_cache)


def test_a_partial_model_earns_partial_credit():
    model = _NoGates(load_pretrained()[0])
    assert capstone._quality(model, _stories())[0] == capstone.POINTS["quality"]
    points, message = capstone._heads(model, _stories(), {}, (2, 4))
    assert points == 0 and "model(ids, valid_lens, head_mask=...) raised TypeError" in message


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


def test_padding_on_the_wrong_side_shows_in_decoding():
    points, message = capstone._decoding(_planted(_PadsOnTheLeft), _stories())
    assert points < capstone.POINTS["decoding"]
    assert message.startswith("padding: a story's scores change when it is padded in a batch")
    assert "is padding on the right?" in message
