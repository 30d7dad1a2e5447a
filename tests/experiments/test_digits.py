"""Chapter 7's experiment (mha_lib.digits): the task, the model, training, the shipped weights."""

import io
from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_lib.digits import (
    _IGNORE_INDEX as IGNORE_INDEX,
    _VOCAB_SIZE as VOCAB_SIZE,
    KIND,
    PRETRAINED_PATH,
    Config,
    DigitAttentionModel,
    _loss_fn,
    accuracy,
    example_losses,
    held_out_set,
    load_pretrained,
    main,
    make_batch,
    save,
    targets_for,
    token_labels,
    train,
)
from mha_lib.mask_conventions import padding_mask_from_valid_lens
from mha_lib.checkpoints import load_checkpoint
from mha_lib.training import TrainResult

PAD = VOCAB_SIZE
TARGET = 0.95
SMALL = Config(d_model=8, num_heads=2, mlp_hiddens=8)

# --- the task ---------------------------------------------------------------------------------


def test_targets_by_hand():
    # x = 3 1 4 1 5 (L = 5), last digit 5: y[i] = (x[i-1] + 5) % 10 for i = 1..4.
    # x = 9 2 6 (L = 3), last digit 6: y[1] = (9 + 6) % 10 = 5, y[2] = (2 + 6) % 10 = 8.
    tokens = torch.tensor([[3, 1, 4, 1, 5], [9, 2, 6, PAD, PAD]])
    valid_lens = torch.tensor([5, 3])
    I = IGNORE_INDEX
    expected = torch.tensor([[I, 8, 6, 9, 6], [I, 5, 8, I, I]])
    assert torch.equal(targets_for(tokens, valid_lens), expected)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31), batch=st.integers(1, 16), lo=st.integers(2, 6), extra=st.integers(0, 6))
def test_make_batch_is_consistent(seed, batch, lo, extra):
    hi = lo + extra
    b = make_batch(batch, generator=torch.Generator().manual_seed(seed), min_len=lo, max_len=hi)
    assert b.tokens.shape == b.targets.shape == (batch, hi) and b.valid_lens.shape == (batch,)
    assert len(b) == batch
    assert ((b.valid_lens >= lo) & (b.valid_lens <= hi)).all()
    padding = torch.arange(hi) >= b.valid_lens[:, None]
    assert (b.tokens[padding] == PAD).all() and (b.tokens[~padding] < VOCAB_SIZE).all()
    assert (b.targets[padding] == IGNORE_INDEX).all() and (b.targets[:, 0] == IGNORE_INDEX).all()
    # every other label follows the rule, checked with plain Python loops
    for r in range(batch):
        n = int(b.valid_lens[r])
        for i in range(1, n):
            assert b.targets[r, i] == (b.tokens[r, i - 1] + b.tokens[r, n - 1]) % VOCAB_SIZE


def test_make_batch_is_reproducible():
    a = make_batch(8, generator=torch.Generator().manual_seed(3))
    b = make_batch(8, generator=torch.Generator().manual_seed(3))
    c = make_batch(8, generator=torch.Generator().manual_seed(4))
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.valid_lens, b.valid_lens)
    assert not torch.equal(a.tokens, c.tokens)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(batch_size=0), "batch_size"),
        (dict(batch_size=4, min_len=1), "min_len"),
        (dict(batch_size=4, min_len=8, max_len=5), "min_len"),
        (dict(batch_size=4, vocab_size=0), "vocab_size"),
        (dict(batch_size=4, generator=3), "generator"),
    ],
)
def test_make_batch_rejects_bad_input(kwargs, match):
    kwargs.setdefault("generator", torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match=match):
        make_batch(**kwargs)


def test_token_labels():
    assert token_labels(torch.tensor([7, 2, PAD]), 2) == ["0:7", "1:2", "2:pad"]


def test_targets_for_checks_its_arguments_and_takes_any_integer_dtype():
    tokens, lens = torch.tensor([[1, 2, 3, 10]]), torch.tensor([3])
    want = targets_for(tokens, lens)
    torch.testing.assert_close(targets_for(tokens.to(torch.uint8), lens.int()), want)
    for args, message in [
        ((tokens.float(), lens), "tokens must be an integer tensor of shape \\(B, L\\)"),
        ((tokens, None), "valid_lens must be an integer tensor"),
        ((tokens, torch.tensor([5])), r"valid_lens must be in \[0, L = 4\]"),
        ((tokens, torch.tensor([1, 2])), r"valid_lens must have shape \(B,\) = \(1,\)"),
        ((tokens[:, :0], lens), "at least one position"),
        ((tokens, lens, 0), "vocab_size must be an integer >= 1"),
        ((tokens.to("meta"), lens), "not on meta"),
    ]:
        with pytest.raises(ValueError, match=message):
            targets_for(*args)
    assert targets_for(tokens[:0], lens[:0]).shape == (0, 4)


def test_token_labels_rejects_bad_input():
    with pytest.raises(ValueError, match="tokens must be a 1-D tensor"):
        token_labels(None, 3)
    with pytest.raises(ValueError, match="valid_len must be an integer >= 0"):
        token_labels(torch.tensor([1, 2]), -1)


# --- the model --------------------------------------------------------------------------------


def test_model_shapes_and_weights():
    torch.manual_seed(0)
    model = DigitAttentionModel().eval()
    batch = make_batch(5, generator=torch.Generator().manual_seed(1))
    logits, weights = model(batch.tokens, batch.valid_lens, need_weights=True)
    assert logits.shape == (5, 12, 10) and weights.shape == (5, 4, 12, 12)
    torch.testing.assert_close(logits, model(batch.tokens, batch.valid_lens))
    # padding keys get no attention
    padding = padding_mask_from_valid_lens(batch.valid_lens, 12)  # (B, Lk), True = padding
    assert (weights.masked_select(padding[:, None, None, :]) == 0).all()
    tokens = torch.tensor([[1, 2, 3, 10]])  # any integer dtype, and an empty batch
    torch.testing.assert_close(model(tokens.int(), torch.tensor([3])), model(tokens, torch.tensor([3])))
    assert model(tokens[:0], torch.zeros(0, dtype=torch.long)).shape == (0, 4, 10)


@pytest.mark.parametrize(
    "tokens, match",
    [
        (torch.zeros(2, 3), "integer tensor"),
        (torch.zeros(1, 3, dtype=torch.bool), "integer tensor"),
        (torch.zeros(3, dtype=torch.long), "shape"),
        (torch.zeros(1, 3, dtype=torch.long, device="meta"), "not on meta"),
        (torch.zeros(1, 13, dtype=torch.long), "max_len"),
        (torch.full((1, 3), 11), r"\[0, 10\]"),
        (torch.full((1, 3), -1), r"\[0, 10\]"),
    ],
)
def test_model_rejects_bad_tokens(tokens, match):
    with pytest.raises(ValueError, match=match):
        DigitAttentionModel()(tokens)


def test_model_rejects_what_is_not_a_config():
    with pytest.raises(ValueError, match="config must be a mha_lib.digits.Config"):
        DigitAttentionModel({"d_model": 8})


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(steps=0), "config.steps must be an integer >= 1"),
        (dict(num_heads=0), "config.num_heads must be an integer >= 1"),
        (dict(d_model=10, num_heads=4), r"config.d_model \(10\) must be divisible by config.num_heads \(4\)"),
        (dict(max_len=1), "config.max_len must be >= 2"),
        (dict(warmup=-5), "config.warmup must be an integer >= 0"),
        (dict(steps=10, warmup=20), "config.warmup must be <= steps = 10"),
        (dict(lr=0.0), "config.lr must be a finite number > 0"),
        (dict(lr=float("nan")), "config.lr must be a finite number"),
        (dict(lr="0.1"), "config.lr must be a finite number"),
        (dict(weight_decay=-0.1), "config.weight_decay must be a finite number >= 0"),
        (dict(seed=-1), "config.seed must be an integer >= 0"),
        (dict(num_threads=0), "config.num_threads must be an integer >= 1"),
        (dict(batch_size=True), "config.batch_size must be an integer >= 1"),
    ],
)
def test_config_rejects_bad_fields_instead_of_clamping(fields, message):
    with pytest.raises(ValueError, match=message):
        Config(**fields)


# --- measuring it -----------------------------------------------------------------------------


def test_loss_fn_per_example_and_mean():
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 4)
    targets = torch.tensor([[IGNORE_INDEX, 1, 2], [IGNORE_INDEX, 3, IGNORE_INDEX]])
    logp = logits.log_softmax(-1)
    ex0 = -(logp[0, 1, 1] + logp[0, 2, 2]) / 2
    ex1 = -logp[1, 1, 3]
    torch.testing.assert_close(_loss_fn(logits, targets, "per_example"), torch.stack([ex0, ex1]))
    torch.testing.assert_close(_loss_fn(logits, targets), (2 * ex0 + ex1) / 3)


@pytest.mark.parametrize("args, match", [
    ((None, None), "logits must be a torch.Tensor"),
    ((torch.randn(1, 2), torch.zeros(1, 2, dtype=torch.long)), "logits must have 3 dimensions"),
    ((torch.zeros(1, 2, 3, dtype=torch.long), torch.zeros(1, 2, dtype=torch.long)), "logits must be a floating-point"),
    ((torch.randn(1, 2, 3), torch.zeros(1, 2)), "targets must be int64"),
    ((torch.randn(1, 2, 3), torch.zeros(1, 3, dtype=torch.long)), r"targets must be int64 of shape \(B, L\) = \(1, 2\)"),
    ((torch.randn(1, 2, 3), torch.zeros(1, 2, dtype=torch.long), "sum"), "reduction"),
])
def test_loss_fn_rejects_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        _loss_fn(*args)


def test_accuracy_counts_labelled_positions_only():
    class Fixed(torch.nn.Module):
        def forward(self, tokens, valid_lens, head_mask=None):
            # always predicts digit 1
            return torch.nn.functional.one_hot(torch.ones_like(tokens), 10).float()

    batch = make_batch(1, generator=torch.Generator().manual_seed(0), min_len=4, max_len=4)
    batch = replace(batch, targets=torch.tensor([[IGNORE_INDEX, 1, 1, 2]]))
    assert accuracy(Fixed(), batch) == pytest.approx(2 / 3)


def test_accuracy_and_example_losses_reject_bad_input():
    batch = make_batch(2, generator=torch.Generator().manual_seed(0))
    for fn in (accuracy, example_losses):
        with pytest.raises(ValueError, match="model must be a torch.nn.Module"):
            fn(None, batch)
        with pytest.raises(ValueError, match="batch must be a mha_lib.digits.TaskBatch"):
            fn(DigitAttentionModel(), None)
    unlabelled = replace(batch, targets=torch.full_like(batch.targets, IGNORE_INDEX))
    with pytest.raises(ValueError, match="at least one labelled position"):
        accuracy(DigitAttentionModel(), unlabelled)


def test_accuracy_runs_in_eval_mode_and_restores_the_mode_even_on_error():
    class Spy(torch.nn.Module):
        def forward(self, tokens, valid_lens, head_mask=None):
            seen.append(self.training)
            if head_mask is not None:
                raise ValueError("head_mask rejected")
            return torch.zeros(*tokens.shape, 10)

    seen = []
    spy = Spy().train()
    batch = make_batch(2, generator=torch.Generator().manual_seed(0))
    accuracy(spy, batch)
    with pytest.raises(ValueError, match="head_mask rejected"):
        accuracy(spy, batch, head_mask=torch.ones(2))
    assert seen == [False, False] and spy.training


def test_example_losses_are_per_example_and_differentiable_in_the_gates():
    torch.manual_seed(0)
    model = DigitAttentionModel(SMALL).train()
    batch = make_batch(3, generator=torch.Generator().manual_seed(0))
    gates = torch.ones(3, 2, requires_grad=True)
    losses = example_losses(model, batch, gates)
    assert losses.shape == (3,) and losses.requires_grad and model.training  # mode restored
    with torch.no_grad():
        logits = model.eval()(batch.tokens, batch.valid_lens)
    torch.testing.assert_close(losses.detach(), _loss_fn(logits, batch.targets, "per_example"))


def test_held_out_set_is_fixed_and_follows_the_sizes():
    a, b = held_out_set(), held_out_set()
    assert len(a) == 2000 and torch.equal(a.tokens, b.tokens)
    small = held_out_set(10, vocab_size=5, max_len=3)
    assert small.tokens.shape == (10, 3) and small.tokens.max() <= 5
    with pytest.raises(ValueError, match="max_len must be an integer >= 1"):
        held_out_set(max_len=0)
    with pytest.raises(ValueError, match="size must be an integer >= 1"):
        held_out_set(0)


# --- the experiment ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def examples():
    return held_out_set()


def _falls_at(losses: torch.Tensor, window: int = 50, below: float = 0.1) -> int:
    """The first step whose next ``window`` losses average below ``below``: where the model learns the rule."""
    return int((losses.unfold(0, window, 1).mean(1) < below).nonzero()[0])


def test_retraining_from_the_seed_reaches_what_the_shipped_run_reached(tmp_path, examples, capsys, retraining):
    """``python -m mha_lib.digits --out PATH`` retrains the shipped model: deterministic on this
    machine, and on any machine the shipped run's accuracy, the step where its loss falls and
    its final loss, within bands measured across kernel settings (floats differ across CPUs)."""
    threads = torch.get_num_threads()
    state = torch.random.get_rng_state()
    assert main(["--out", str(tmp_path / "again.pt")]) == 0
    assert "test accuracy" in capsys.readouterr().out
    assert torch.get_num_threads() == threads
    assert torch.equal(torch.random.get_rng_state(), state)  # the caller's random state is untouched
    again = load_checkpoint(tmp_path / "again.pt", kind=KIND)
    shipped = load_checkpoint(PRETRAINED_PATH, kind=KIND)
    assert again["config"] == shipped["config"]
    assert again["state_dict"].keys() == shipped["state_dict"].keys()
    run, record = again["extra"], shipped["extra"]
    assert run["train_loss"].shape == record["train_loss"].shape
    # Deterministic here: the warm-up's learning rates do not depend on the run's length, so a
    # run of the warm-up alone repeats the first steps, bit for bit.
    warmup = train(replace(Config(), steps=Config().warmup), progress=False)
    retraining.deterministic(run["train_loss"], warmup.history["train_loss"])
    # What the shipped run reached, within bands. Measured on a second AVX512 machine against
    # the shipped record (made on another AVX512 machine); the first step whose loss differs:
    #   setting                       differs at  accuracy  loss falls at (332)  last 100 steps
    #   native                        step 4      1.0       332                  2.6 %
    #   MKL_CBWR=COMPATIBLE           step 10     1.0       332                  0.23 %
    #   ATEN_CPU_CAPABILITY=default   step 3      1.0       327                  1.0 %
    #   ATEN_CPU_CAPABILITY=avx2      step 22     1.0       332                  4.3 %
    # Bands, with a margin: accuracy 0.01, the fall 30 steps, the last 100 steps' loss 15 %.
    assert run["test_accuracy"] >= TARGET
    retraining.near(run["test_accuracy"], record["test_accuracy"], "held-out accuracy", atol=0.01)
    retraining.near(_falls_at(run["train_loss"]), _falls_at(record["train_loss"]),
                    "the step where the loss falls", atol=30)
    retraining.near(run["train_loss"][-100:].mean(), record["train_loss"][-100:].mean(),
                    "mean loss of the last 100 steps", rtol=0.15)
    assert accuracy(load_pretrained(tmp_path / "again.pt"), examples) == run["test_accuracy"]


def test_shipped_weights_reach_the_target(examples):
    assert PRETRAINED_PATH.stat().st_size < 1_000_000
    model = load_pretrained()
    assert not model.training and model.config == Config()
    assert accuracy(model, examples) >= TARGET
    record = load_checkpoint(PRETRAINED_PATH, kind=KIND)["extra"]
    assert record["test_accuracy"] >= TARGET
    assert record["train_loss"].shape == (Config().steps,)


def test_training_is_deterministic_and_logs_progress():
    config = replace(SMALL, steps=25, batch_size=16, warmup=5)
    log = io.StringIO()
    a, b = train(config, progress=log), train(config, progress=False)
    assert isinstance(a, TrainResult) and a.config == config and not a.model.training
    assert torch.equal(a.history["train_loss"], b.history["train_loss"])
    for (name, x), (_, y) in zip(a.model.state_dict().items(), b.model.state_dict().items()):
        assert torch.equal(x, y), name
    assert "step    25/25" in log.getvalue()
    c = train(replace(config, seed=1), progress=False)
    assert not torch.equal(c.history["train_loss"], a.history["train_loss"])


def test_train_rejects_bad_arguments():
    with pytest.raises(ValueError, match="config must be a mha_lib.digits.Config"):
        train({"steps": 3}, progress=False)
    with pytest.raises(ValueError, match="progress must be True, False or a text stream"):
        train(replace(SMALL, steps=1, warmup=0), progress="loud")


def test_save_load_and_main_never_overwrite_silently(tmp_path, capsys):
    result = train(replace(SMALL, steps=2, batch_size=4, warmup=1), progress=False)
    path = save(result, tmp_path / "new" / "model.pt")
    reloaded = load_pretrained(path)
    assert reloaded.config == result.config
    for p, q in zip(reloaded.state_dict().values(), result.model.state_dict().values()):
        assert torch.equal(p, q)
    with pytest.raises(ValueError, match="exists: pass overwrite=True"):
        save(result, path)
    save(result, path, overwrite=True)
    with pytest.raises(ValueError, match="result must be a TrainResult of a DigitAttentionModel"):
        save(None, tmp_path / "x.pt")
    with pytest.raises(SystemExit):
        main([])  # --out is required: nothing is written into the package by default
    with pytest.raises(SystemExit):
        main(["--out", str(path)])  # exists: an argparse error before any training
    assert "--overwrite" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path / "y.pt"), "--steps", "10"])  # warmup 50 > 10 steps
    assert "config.warmup must be <= steps = 10" in capsys.readouterr().err
    assert not (tmp_path / "y.pt").exists()


def test_load_pretrained_rejects_other_files(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_pretrained(tmp_path / "missing.pt")
    from mha_lib.induction import PRETRAINED_PATH as INDUCTION

    with pytest.raises(ValueError, match="is a checkpoint of kind 'induction', not 'digits'"):
        load_pretrained(INDUCTION)
    (tmp_path / "junk.pt").write_bytes(b"junk")
    with pytest.raises(ValueError, match="is not a mha_lib checkpoint"):
        load_pretrained(tmp_path / "junk.pt")
