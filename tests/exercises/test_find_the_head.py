"""Find the head: the grader's full-score answer agrees with an ablation written here, from the
public library, and a permuted answer scores under half."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor, nn

from mha_lib import digits, induction, lm, lm_eval
from mha_lib.exercises import find_the_head as fth
from mha_lib.exercises._find_the_head_build import _permute_heads, main
from mha_lib.importance import head_gates
from mha_lib.lm_heads import link_weights
from mha_lib.stories import RELATIONS, Tokenizer, link_mask, sample_stories

NAMES = sorted(fth.CHALLENGES)


def _digit_heads(model: digits.DigitAttentionModel) -> tuple[dict, Tensor]:
    batch = digits.held_out_set(1000)
    B, L = batch.tokens.shape
    labelled = batch.targets != -100  # (B, L): queries 1 .. len-1

    def loss(mask=None) -> float:  # mean over examples of each example's mean loss
        with torch.no_grad():
            logits = model(batch.tokens, batch.valid_lens, head_mask=mask)  # (B, L, V)
        per_token = nn.functional.cross_entropy(logits.transpose(1, 2), batch.targets, ignore_index=-100,
                                                reduction="none")  # (B, L)
        return float((per_token.sum(1) / labelled.sum(1)).mean())

    with torch.no_grad():
        _, w = model(batch.tokens, batch.valid_lens, need_weights=True)  # (B, H, L, L)
    b, i = labelled.nonzero(as_tuple=True)
    patterns = {"previous": w[b, :, i, i - 1].mean(0), "last": w[b, :, i, batch.valid_lens[b] - 1].mean(0)}
    base = loss()
    rise = torch.tensor([loss(head_gates(model.num_heads, [h])) - base for h in range(model.num_heads)])
    return {role: p[None] for role, p in patterns.items()}, rise[None]  # (1, H)


def _induction_heads(model: induction.AttentionOnlyTransformer) -> tuple[dict, Tensor]:
    tokens = induction.held_out_tokens(256, 12, model.config.vocab_size)  # (B, 24)
    N, H = model.num_layers, model.num_heads

    def repeated(mask=None) -> float:
        with torch.no_grad():
            logits = model(tokens, head_mask=mask)
        per_token = nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none")
        return float(per_token[:, 12:].mean())

    with torch.no_grad():
        _, w = model(tokens, need_weights=True)  # (B, N, H, L, L)
    scores = induction.attention_scores(w, tokens)
    duplicate = torch.zeros(N, H)
    count = 0
    for b in range(len(tokens)):  # the earlier copy of the token at i (the second half)
        for i in range(12, 24):
            duplicate += w[b, :, :, i, i - 12]
            count += 1
    patterns = {"previous-token": scores.previous_token, "induction": scores.induction,
                "duplicate-token": duplicate / count}
    base = repeated()
    rise = torch.tensor([[repeated(head_gates((N, H), [(n, h)])) - base for h in range(H)] for n in range(N)])
    return patterns, rise


def _story_heads(model: lm.StoryLM) -> tuple[dict, dict]:
    stories = lm_eval.held_out_stories(300)  # the student's stories (seed 1), not the grader's
    ids, lens = lm_eval.encode_stories(Tokenizer(), stories)
    N, H = model.config.num_layers, model.config.num_heads
    masks = {r: link_mask(stories, r, tuple(ids.shape)) for r in RELATIONS}
    unlinked = ~(masks["antecedent"] | masks["recall"] | masks["possession"])

    def losses(mask=None) -> dict:
        per_token = lm_eval.next_token_losses(model, ids, lens, mask)  # (B, L), NaN where nothing is predicted
        out = {r: float(per_token[m].mean()) for r, m in masks.items()}
        return {**out, "rest": float(per_token[unlinked].nanmean())}

    with torch.no_grad():
        _, w = model(ids, lens, need_weights=True)
    base = losses()
    after = {(n, h): losses(head_gates((N, H), [(n, h)])) for n in range(N) for h in range(H)}
    patterns, rises = {}, {}
    for r in RELATIONS:
        patterns[r] = link_weights(w, stories, r).nan_to_num(0.0).amax(-1)
        rises[r] = torch.tensor([[(after[n, h][r] - base[r]) - (after[n, h]["rest"] - base["rest"])
                                  for h in range(H)] for n in range(N)])
    return patterns, rises


@pytest.fixture(scope="module")
def independent() -> dict:
    """name -> {role: (layer, head, rise)}: of the heads that look where the role looks, the one
    whose gating raises the role's loss the most."""
    torch.set_num_threads(1)
    out = {}
    for name in NAMES:
        model, experiment = fth.load(name), fth.CHALLENGES[name].experiment
        patterns, rise = {"digits": _digit_heads, "induction": _induction_heads, "lm": _story_heads}[experiment](model)
        answer = {}
        for role in fth.CHALLENGES[name].roles:
            r = rise[role] if isinstance(rise, dict) else rise
            looks = patterns[role] >= fth.MIN_PATTERN
            assert looks.any(), (name, role)
            flat = int(r.masked_fill(~looks, -math.inf).argmax())
            n, h = divmod(flat, r.shape[1])
            assert float(r[n, h]) >= fth.MIN_RISE, (name, role)
            answer[role] = (n, h, float(r[n, h]))
        out[name] = answer
    return out


@pytest.mark.parametrize("name", NAMES)
def test_the_independent_answer_earns_full_points(independent, name):
    report = fth.grade(name, independent[name])
    assert report.points == report.max_points == 3 * len(fth.CHALLENGES[name].roles), str(report)
    heads = [a[:2] for a in independent[name].values()]
    assert len(set(heads)) == len(heads)  # each role has its own head


@pytest.mark.parametrize("name", NAMES)
def test_a_permuted_answer_scores_under_half(independent, name):
    answer = independent[name]
    roles = list(answer)
    rotated = {role: answer[roles[(k + 1) % len(roles)]] for k, role in enumerate(roles)}
    report = fth.grade(name, rotated)
    assert report.points < report.max_points / 2, str(report)
    without_predictions = fth.grade(name, {role: a[:2] for role, a in answer.items()})
    assert without_predictions.points == 2 * len(roles)


def test_the_grader_measures_on_its_own_data_and_rejects_a_training_seed(independent):
    name = "digits-h4"
    assert not torch.equal(fth._measured(name, 3)[1]["last"], fth._measured(name)[1]["last"])
    assert fth.grade(name, {r: a[:2] for r, a in independent[name].items()}, seed=3).points == 4
    for seed in (2, -1, True):
        with pytest.raises(ValueError, match="seed must be an odd integer"):
            fth.grade(name, {}, seed=seed)


def test_the_roles_sit_in_different_places(independent):
    places = {tuple(a[:2] for a in independent[name].values()) for name in NAMES}
    assert len(places) >= 6
    assert len(NAMES) >= 8
    for experiment in ("digits", "induction", "lm"):
        assert sum(fth.CHALLENGES[n].experiment == experiment for n in NAMES) >= 2


def test_bad_answers_raise():
    with pytest.raises(ValueError, match="name"):
        fth.grade("nope", {})
    with pytest.raises(ValueError, match="roles"):
        fth.grade("digits-h4", {"induction": (0, 0)})
    with pytest.raises(ValueError, match="heads 0-3"):
        fth.grade("digits-h4", {"last": (0, 4)})
    with pytest.raises(ValueError, match="layers 0-0"):
        fth.grade("digits-h4", {"last": (1, 0)})
    with pytest.raises(ValueError, match="layer, head"):
        fth.grade("digits-h4", {"last": [0, 1]})
    with pytest.raises(ValueError, match="layer, head"):
        fth.grade("digits-h4", {"last": (0, True)})
    with pytest.raises(ValueError, match="dict"):
        fth.grade("digits-h4", [("last", (0, 1))])
    empty = fth.grade("digits-h4", {})
    assert empty.points == 0 and "no head named" in str(empty)


def test_checkpoints_load_with_weights_only_and_hold_no_answer(monkeypatch):
    seen = []
    original = torch.load

    def spy(*args, **kwargs):
        seen.append(kwargs.get("weights_only"))
        return original(*args, **kwargs)

    monkeypatch.setattr(torch, "load", spy)
    sizes = 0
    for name in NAMES:
        fth.load(name)
        ckpt = original(fth.DATA_DIR / f"{name}.pt", weights_only=True)
        assert set(ckpt["extra"]) <= {"cpu_seconds", "torch_version", "vocab", "test_accuracy"}
        size = (fth.DATA_DIR / f"{name}.pt").stat().st_size
        assert size < 700_000
        sizes += size
    assert seen and all(w is True for w in seen)
    assert sizes < 3_000_000


def _with_layer_axis(out):
    return out[0], out[1][:, None]  # weights (B, H, L, L) -> (B, 1, H, L, L)


def _small_models():
    torch.manual_seed(0)
    story = lm.StoryLM(lm.Config(d_model=16, num_heads=4, num_kv_heads=2, d_ff=32)).eval()
    ids = torch.randint(0, story.config.vocab_size, (2, 9))
    digit = digits.DigitAttentionModel(digits.Config(num_heads=4)).eval()
    batch = digits.held_out_set(3)
    copier = induction.AttentionOnlyTransformer(induction.Config(num_heads=2, num_layers=3)).eval()
    tokens = induction.held_out_tokens(2, 6)
    return [(story, lambda m: m(ids, need_weights=True)),
            (digit, lambda m: _with_layer_axis(m(batch.tokens, batch.valid_lens, need_weights=True))),
            (copier, lambda m: m(tokens, need_weights=True))]


@pytest.mark.parametrize("index", range(3))
def test_permuting_heads_is_exact(index):
    model, run = _small_models()[index]
    with torch.no_grad():
        logits, w = run(model)  # w: (B, N, H, L, L)
        orders = _permute_heads(model, 5)
        logits2, w2 = run(model)
    torch.testing.assert_close(logits2, logits, atol=1e-5, rtol=1e-5)
    assert any(order != sorted(order) for order in orders)
    for n, order in enumerate(orders):
        assert sorted(order) == list(range(len(order)))
        torch.testing.assert_close(w2[:, n], w[:, n, order])
    if index == 0:  # grouped-query: the two query heads of a key/value head stay together
        assert all(order[0] // 2 == order[1] // 2 for order in orders)


def test_the_build_never_overwrites_without_asking(tmp_path):
    (tmp_path / "digits-h4.pt").write_bytes(b"mine")
    with pytest.raises(SystemExit):
        main([str(tmp_path), "--only", "digits-h4"])
    assert (tmp_path / "digits-h4.pt").read_bytes() == b"mine"
