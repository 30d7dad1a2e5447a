"""Chapter 8's experiment (mha_lib.induction): the task, the scores, the shipped model, ablation, training."""

import io
from dataclasses import asdict, replace

import pytest
import torch

from mha_lib.importance import head_gates
from mha_lib.induction import (
    KIND,
    PRETRAINED_PATH,
    AttentionOnlyTransformer,
    Config,
    attention_scores,
    half_losses,
    head_scores,
    held_out_tokens,
    induction_targets,
    load_pretrained,
    main,
    make_repeated_batch,
    save,
    train,
)
from mha_lib.checkpoints import load_checkpoint
from mha_lib.training import TrainResult

THRESHOLD = 0.8
SHORT = Config(steps=6, batch_size=4, eval_every=3, min_half_len=3, max_half_len=5,
               vocab_size=10, max_len=10, d_model=8, num_heads=2)


@pytest.fixture(scope="module")
def model():
    return load_pretrained()


@pytest.fixture(scope="module")
def tokens():
    return held_out_tokens()


# --- the task ---------------------------------------------------------------------------------

@pytest.mark.parametrize("B, half, V", [(1, 1, 1), (3, 5, 5), (7, 8, 32)])
def test_repeated_batch_shape_and_repeat(B, half, V):
    x = make_repeated_batch(B, half, V, torch.Generator().manual_seed(0))
    assert x.shape == (B, 2 * half) and x.dtype == torch.long
    assert torch.equal(x[:, half:], x[:, :half])
    assert x.min() >= 0 and x.max() < V
    for row in x[:, :half]:  # the first half holds different tokens
        assert len(set(row.tolist())) == half


def test_repeated_batch_is_seeded_and_uses_the_generator():
    a = make_repeated_batch(4, 6, 20, torch.Generator().manual_seed(1))
    b = make_repeated_batch(4, 6, 20, torch.Generator().manual_seed(1))
    c = make_repeated_batch(4, 6, 20, torch.Generator().manual_seed(2))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_repeated_batch_covers_the_vocabulary():
    x = make_repeated_batch(200, 3, 10, torch.Generator().manual_seed(0))
    assert set(x.flatten().tolist()) == set(range(10))


@pytest.mark.parametrize("args, match", [
    ((0, 4, 8), "batch_size"),
    ((2, 0, 8), "half_len"),
    ((2, 4, 2.0), "vocab_size"),
    ((2, 9, 8), "half_len must be <= vocab_size"),
    ((2, True, 8), "half_len"),
])
def test_repeated_batch_rejects_bad_sizes(args, match):
    with pytest.raises(ValueError, match=match):
        make_repeated_batch(*args)


def test_repeated_batch_rejects_a_bad_generator():
    with pytest.raises(ValueError, match="generator"):
        make_repeated_batch(2, 3, 8, generator=0)


# --- scores on hand-made attention patterns ----------------------------------------------------

def _pattern(L, target):
    """(L, L) weights: query i puts all its weight on key target(i) (clamped into 0..i)."""
    w = torch.zeros(L, L)
    for i in range(L):
        w[i, min(max(target(i), 0), i)] = 1.0
    return w


def test_induction_targets_on_a_hand_made_sequence():
    tokens = torch.tensor([[5, 1, 7, 5, 1, 7, 7]])
    # 5 at 3 -> after 0 is 1; 1 at 4 -> 2; 7 at 5 -> 3; 7 at 6: latest earlier 7 is at 5 -> 6
    assert induction_targets(tokens).tolist() == [[-1, -1, -1, 1, 2, 3, 6]]


def test_scores_of_perfect_previous_token_and_induction_heads():
    half, B = 5, 3
    tokens = make_repeated_batch(B, half, 9, torch.Generator().manual_seed(0))
    L = 2 * half
    previous = _pattern(L, lambda i: i - 1)
    induction = _pattern(L, lambda i: i - half + 1 if i >= half else i)
    first = _pattern(L, lambda i: 0)
    uniform = torch.ones(L, L).tril() / torch.arange(1, L + 1)[:, None]
    heads = torch.stack([torch.stack([previous, first]), torch.stack([induction, uniform])])
    weights = heads.expand(B, 2, 2, L, L)  # (N, H, L, L) -> (B, N, H, L, L)
    scores = attention_scores(weights, tokens)
    assert scores.previous_token.shape == scores.induction.shape == (2, 2)
    torch.testing.assert_close(scores.previous_token[0, 0], torch.tensor(1.0))
    torch.testing.assert_close(scores.induction[1, 0], torch.tensor(1.0))
    # with half > 2 the key after the earlier occurrence is never the previous key
    assert scores.induction[0, 0] == 0 and scores.previous_token[1, 0] == 0
    # first-token head: key 0 is the previous key of query 1 only
    torch.testing.assert_close(scores.previous_token[0, 1], torch.tensor(1 / (L - 1)))
    # uniform head: query i gives 1 / (i + 1) to each key
    expected_prev = torch.tensor([1 / (i + 1) for i in range(1, L)]).mean()
    expected_ind = torch.tensor([1 / (i + 1) for i in range(half, L)]).mean()
    torch.testing.assert_close(scores.previous_token[1, 1], expected_prev)
    torch.testing.assert_close(scores.induction[1, 1], expected_ind)


def test_attention_scores_reject_bad_input():
    tokens = make_repeated_batch(2, 3, 5, torch.Generator().manual_seed(0))
    good = torch.full((2, 1, 1, 6, 6), 1 / 6)
    with pytest.raises(ValueError, match="weights must have 5 dimensions"):
        attention_scores(good[:, 0], tokens)
    with pytest.raises(ValueError, match="weights must have shape"):
        attention_scores(good[:, :, :, :5, :5], tokens)
    with pytest.raises(ValueError, match="tokens must be"):
        attention_scores(good, tokens.float())
    with pytest.raises(ValueError, match="tokens must repeat"):
        attention_scores(good, torch.arange(12).reshape(2, 6))


# --- the shipped model -------------------------------------------------------------------------

def _best_heads(scores):
    prev_head = int(scores.previous_token[0].argmax())
    ind_head = int(scores.induction[1].argmax())
    return prev_head, ind_head


def test_shipped_model_has_a_previous_token_and_an_induction_head(model, tokens):
    assert PRETRAINED_PATH.stat().st_size < 200_000
    scores = head_scores(model, tokens)
    prev_head, ind_head = _best_heads(scores)
    assert scores.previous_token[0, prev_head] >= THRESHOLD
    assert scores.induction[1, ind_head] >= THRESHOLD
    assert model.training is False


def test_ablating_the_induction_head_undoes_the_copying(model, tokens):
    scores = head_scores(model, tokens)
    prev_head, ind_head = _best_heads(scores)
    cfg = model.config
    gates = lambda removed: head_gates((cfg.num_layers, cfg.num_heads), removed)  # noqa: E731
    full = half_losses(model, tokens)
    assert full.repeated < 0.2 * full.random  # the model copies
    without = half_losses(model, tokens, gates([(1, ind_head)]))
    assert without.repeated > 0.7 * full.random  # back near the random half
    others = [(1, h) for h in range(cfg.num_heads) if h != ind_head]
    for other in others:
        assert half_losses(model, tokens, gates([other])).repeated < 0.3 * full.random
    without_prev = half_losses(model, tokens, gates([(0, prev_head)]))
    assert without_prev.repeated > 0.7 * full.random  # the circuit needs both heads


def test_shipped_history_has_the_phase_change():
    history = load_checkpoint(PRETRAINED_PATH, kind=KIND)["extra"]
    steps, repeated = history["eval_steps"], history["eval_repeated"]
    assert steps.shape == repeated.shape == history["eval_random"].shape
    assert repeated[0] > 3 and repeated[-1] < 0.3
    drop = repeated[:-4] - repeated[4:]  # change over 4 log intervals
    assert drop.max() > 1.0  # a sudden drop, not a slow slide


# --- the model's input checks ------------------------------------------------------------------

def test_model_shapes_and_weights():
    torch.manual_seed(0)
    m = AttentionOnlyTransformer(SHORT).eval()
    x = make_repeated_batch(3, 4, 10, torch.Generator().manual_seed(0))
    logits, weights = m(x, need_weights=True)
    assert logits.shape == (3, 8, 10) and weights.shape == (3, 2, 2, 8, 8)
    assert torch.all(weights.triu(1) == 0)  # causal: nothing from the future
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 2, 2, 8))
    torch.testing.assert_close(m(x), logits)  # the fast path agrees


def test_head_mask_removes_a_head():
    torch.manual_seed(0)
    m = AttentionOnlyTransformer(SHORT).eval()
    x = make_repeated_batch(2, 4, 10, torch.Generator().manual_seed(0))
    ones = head_gates((2, 2))
    torch.testing.assert_close(m(x, head_mask=ones), m(x))
    assert not torch.allclose(m(x, head_mask=head_gates((2, 2), [(1, 0)])), m(x))


@pytest.mark.parametrize("tokens, match", [
    (torch.zeros(2, 4), "integer tensor"),
    (torch.zeros(4, dtype=torch.long), r"shape \(B, L\)"),
    (torch.full((1, 4), 10), r"in \[0, 10\)"),
    (torch.zeros(1, 11, dtype=torch.long), "max_len"),
])
def test_model_rejects_bad_tokens(tokens, match):
    m = AttentionOnlyTransformer(SHORT)
    with pytest.raises(ValueError, match=match):
        m(tokens)


def test_start_shifts_the_positions_and_plain_positions_work():
    torch.manual_seed(0)
    m = AttentionOnlyTransformer(SHORT).eval()
    x = make_repeated_batch(2, 3, 10, torch.Generator().manual_seed(0))  # (2, 6)
    shifted = m(x, start=4)
    assert not torch.allclose(shifted, m(x))
    with torch.no_grad():  # start = 4 is the same as position embeddings moved by 4
        m.position_embedding.weight[:6] = m.position_embedding.weight[4:10].clone()
    torch.testing.assert_close(m(x), shifted)
    plain = AttentionOnlyTransformer(replace(SHORT, position_infused=False))
    assert plain(x).shape == (2, 6, 10)


def test_model_rejects_bad_arguments():
    m = AttentionOnlyTransformer(SHORT)
    x = torch.zeros(1, 4, dtype=torch.long)
    for start in (-1, 7, 1.0, True):
        with pytest.raises(ValueError, match="start"):
            m(x, start=start)
    with pytest.raises(ValueError, match="config.position_infused must be True or False"):
        Config(position_infused=1)
    with pytest.raises(ValueError, match=r"head_mask must be a tensor of shape \(num_layers, H\)"):
        m(x, head_mask=torch.ones(2))
    with pytest.raises(ValueError, match=r"head_mask must be a tensor of shape \(num_layers, H\).*list"):
        m(x, head_mask=[[1.0, 1.0], [1.0, 1.0]])
    with pytest.raises(ValueError, match="need_weights must be True or False"):
        m(x, need_weights=1)
    with pytest.raises(ValueError, match="config must be a mha_lib.induction.Config"):
        AttentionOnlyTransformer({"vocab_size": 3})
    with pytest.raises(ValueError, match="not on meta"):
        m(x.to("meta"))


@pytest.mark.parametrize("fields, match", [
    (dict(num_heads=0), "config.num_heads must be an integer >= 1"),
    (dict(d_model=10, num_heads=4), r"config.d_model \(10\) must be divisible"),
    (dict(steps=0), "config.steps"),
    (dict(min_half_len=6, max_half_len=5), "min_half_len <= max_half_len"),
    (dict(min_half_len=1), "2 <= min_half_len"),
    (dict(lr=0.0), "config.lr"),
    (dict(weight_decay=float("inf")), "config.weight_decay"),
    (dict(seed=-1), "config.seed"),
    (dict(eval_every=0), "config.eval_every"),
])
def test_config_rejects_bad_fields(fields, match):
    with pytest.raises(ValueError, match=match):
        Config(**fields)


def test_measures_reject_bad_arguments():
    m = AttentionOnlyTransformer(SHORT)
    x = make_repeated_batch(2, 3, 10, torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="even length"):
        half_losses(m, torch.zeros(1, 5, dtype=torch.long))
    for fn in (half_losses, head_scores):
        with pytest.raises(ValueError, match="model must be an AttentionOnlyTransformer, got Linear"):
            fn(torch.nn.Linear(2, 2), x)
    with pytest.raises(ValueError, match="tokens must be a non-empty integer tensor"):
        induction_targets(torch.zeros(0, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="weights is on the meta device"):
        attention_scores(torch.zeros(2, 1, 1, 6, 6, device="meta"), x)
    with pytest.raises(ValueError, match="batch_size"):
        held_out_tokens(0)


# --- training ----------------------------------------------------------------------------------

def test_training_is_reproducible():
    threads = torch.get_num_threads()
    state = torch.random.get_rng_state()
    log = io.StringIO()
    a = train(SHORT, progress=log)
    b = train(SHORT, progress=False)
    assert isinstance(a, TrainResult) and a.config == SHORT and not a.model.training
    for (name, p), q in zip(a.model.state_dict().items(), b.model.state_dict().values()):
        assert torch.equal(p, q), name
    assert torch.equal(a.history["train_loss"], b.history["train_loss"])
    assert a.history["eval_steps"].tolist() == [0, 3, 6]
    assert a.history["eval_random"].shape == a.history["eval_repeated"].shape == (3,)
    text = log.getvalue()
    assert "step     6/6" in text and "repeated" in text
    assert torch.get_num_threads() == threads
    assert torch.equal(torch.random.get_rng_state(), state)  # the global generator is untouched
    c = train(replace(SHORT, seed=1), progress=False)
    assert not torch.equal(c.model.unembedding.weight, a.model.unembedding.weight)


def _phase_change(history: dict) -> int:
    """The first logged step at which the loss on the repeated half is below 1 (from 3.6)."""
    return int(history["eval_steps"][int((history["eval_repeated"] < 1.0).nonzero()[0])])


def test_retraining_from_the_seed_reaches_what_the_shipped_run_reached(model, tokens, retraining):
    """``train(Config())`` retrains the shipped model: deterministic on this machine, and on any
    machine the shipped run's phase change, its final losses and its two heads, within bands
    measured across kernel settings (floats differ across CPUs)."""
    shipped = load_checkpoint(PRETRAINED_PATH, kind=KIND)
    assert shipped["config"] == asdict(Config())  # the defaults are the shipped run's
    result = train(Config(), progress=False)
    run, record = result.history, shipped["extra"]
    assert torch.equal(run["eval_steps"], record["eval_steps"])
    # Deterministic here: at a constant learning rate a shorter run is the start of a longer one.
    again = train(Config(steps=25), progress=False).history
    for name in ("train_loss", "eval_repeated", "eval_random"):
        retraining.deterministic(run[name], again[name])
    # What the shipped run reached, within bands. Measured on a second AVX512 machine against
    # the shipped record (made on another AVX512 machine); the runs leave it within 10 steps
    # but stay close (the same phase change, heads and final losses):
    #   setting                       differs at  phase change (2250)  final repeated  last 500 steps
    #   native                        step 7      2250                 6.7e-08         6e-08 (relative)
    #   MKL_CBWR=COMPATIBLE           step 0      2250                 6.0e-08         0
    #   ATEN_CPU_CAPABILITY=default   step 4      2250                 1.5e-08         6e-08
    #   ATEN_CPU_CAPABILITY=avx2      AVX2_INDUCTION
    # Bands, with a wide margin (another processor may drift further): the phase change 100
    # steps (4 logs), the final loss on the repeated half 0.02 (of 0.076), the last 500 steps' 0.5 %.
    retraining.near(_phase_change(run), _phase_change(record), "the phase change's step", atol=100)
    retraining.near(run["eval_repeated"][-1], record["eval_repeated"][-1], "final loss on the repeated half",
                    atol=0.02)
    retraining.near(run["train_loss"][-500:].mean(), record["train_loss"][-500:].mean(),
                    "mean loss of the last 500 steps", rtol=5e-3)
    scores = head_scores(result.model, tokens)
    prev_head, ind_head = _best_heads(scores)
    assert (prev_head, ind_head) == _best_heads(head_scores(model, tokens))  # the shipped model's heads
    assert scores.previous_token[0, prev_head] >= THRESHOLD and scores.induction[1, ind_head] >= THRESHOLD


@pytest.mark.parametrize("change, match", [
    ({"max_half_len": 6}, "max_half_len = 6 needs max_len >= 12"),
    ({"max_half_len": 11, "max_len": 30}, "vocab_size >= 11"),
])
def test_train_rejects_a_config_it_cannot_train(change, match):
    with pytest.raises(ValueError, match=match):
        train(replace(SHORT, **change), progress=False)
    with pytest.raises(ValueError, match="config must be a mha_lib.induction.Config"):
        train(None, progress=False)


def test_save_and_main_never_overwrite_silently(tmp_path, capsys):
    result = train(SHORT, progress=False)
    path = save(result, tmp_path / "a.pt")
    reloaded = load_pretrained(path)
    assert reloaded.config == SHORT
    for p, q in zip(reloaded.state_dict().values(), result.model.state_dict().values()):
        assert torch.equal(p, q)
    ckpt = load_checkpoint(path, kind=KIND)
    assert torch.equal(ckpt["extra"]["train_loss"], result.history["train_loss"])
    with pytest.raises(ValueError, match="exists"):
        save(result, path)
    with pytest.raises(ValueError, match="result must be a TrainResult of a AttentionOnlyTransformer"):
        save(TrainResult(torch.nn.Linear(1, 1), SHORT, {}), tmp_path / "b.pt")
    with pytest.raises(SystemExit):
        main(["--out", str(path)])
    assert "--overwrite" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([])  # --out is required: nothing is written into the package by default


def test_main_trains_and_reports_the_scores(tmp_path, capsys):
    assert main(["--out", str(tmp_path / "m.pt"), "--steps", "3", "--seed", "2"]) == 0
    out = capsys.readouterr().out
    assert "induction scores" in out and str(tmp_path / "m.pt") in out
    assert load_pretrained(tmp_path / "m.pt").config == replace(Config(), steps=3, seed=2)


def test_load_pretrained_rejects_other_files(tmp_path):
    from mha_lib.digits import PRETRAINED_PATH as DIGITS

    with pytest.raises(ValueError, match="is a checkpoint of kind 'digits', not 'induction'"):
        load_pretrained(DIGITS)
    with pytest.raises(FileNotFoundError):
        load_pretrained(tmp_path / "missing.pt")
