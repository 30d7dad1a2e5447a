"""Training: the accuracy target from scratch, determinism, the shipped weights, the model."""

import io
from dataclasses import replace

import pytest
import torch

from mha_lib.masking import padding_mask_from_valid_lens
from mha_lib.models import (
    DigitAttentionModel,
    ModelConfig,
    checkpoint,
    from_checkpoint,
    load_checkpoint,
    load_pretrained,
    pretrained_path,
)
from mha_lib.tasks import IGNORE_INDEX, make_batch
from mha_lib.training import TrainConfig, accuracy, loss_fn, held_out_set, train

TARGET = 0.95


@pytest.fixture(scope="module")
def examples():
    return held_out_set()


def test_retraining_from_scratch_reaches_the_target(examples):
    threads = torch.get_num_threads()
    log = io.StringIO()
    result = train(TrainConfig(), progress=log)
    assert result.test_accuracy >= TARGET
    assert accuracy(result.model, examples) == result.test_accuracy
    assert len(result.losses) == TrainConfig().steps
    assert result.losses[-1] < result.losses[0] / 10
    assert "step  1000/1000" in log.getvalue()
    assert torch.get_num_threads() == threads  # train() restores the thread count


def test_training_is_deterministic():
    config = TrainConfig(steps=25, batch_size=16, warmup=5, model=ModelConfig(num_hiddens=16, num_heads=2, mlp_hiddens=16))
    a, b = train(config, progress=False), train(config, progress=False)
    assert a.losses == b.losses
    for (name, x), (_, y) in zip(a.model.state_dict().items(), b.model.state_dict().items()):
        assert torch.equal(x, y), name
    c = train(replace(config, seed=1), progress=False)
    assert c.losses != a.losses


def test_shipped_weights_reach_the_target(examples):
    assert pretrained_path().stat().st_size < 1_000_000
    model = load_pretrained()
    assert not model.training
    assert accuracy(model, examples) >= TARGET
    record = load_checkpoint()["history"]
    assert record["test_accuracy"] >= TARGET
    assert record["losses"].shape == (record["train_config"]["steps"],)


def test_checkpoint_round_trip(tmp_path):
    torch.manual_seed(0)
    model = DigitAttentionModel(ModelConfig(num_hiddens=8, num_heads=2, mlp_hiddens=8))
    torch.save(checkpoint(model, note="x"), tmp_path / "m.pt")
    ckpt = torch.load(tmp_path / "m.pt", weights_only=True)
    again = from_checkpoint(ckpt)
    assert ckpt["note"] == "x" and again.config == model.config
    batch = make_batch(4, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(again(batch.tokens, batch.valid_lens), model.eval()(batch.tokens, batch.valid_lens))


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


@pytest.mark.parametrize(
    "tokens, match",
    [
        (torch.zeros(2, 3), "integer tensor"),
        (torch.zeros(3, dtype=torch.long), "shape"),
        (torch.zeros(1, 13, dtype=torch.long), "max_len"),
        (torch.full((1, 3), 11), r"\[0, 10\]"),
        (torch.full((1, 3), -1), r"\[0, 10\]"),
    ],
)
def test_model_rejects_bad_tokens(tokens, match):
    with pytest.raises(ValueError, match=match):
        DigitAttentionModel()(tokens)


def test_model_rejects_bad_config():
    with pytest.raises(ValueError, match="config.num_heads"):
        DigitAttentionModel(ModelConfig(num_heads=0))


def test_loss_fn_per_example_and_mean():
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 4)
    targets = torch.tensor([[IGNORE_INDEX, 1, 2], [IGNORE_INDEX, 3, IGNORE_INDEX]])
    logp = logits.log_softmax(-1)
    ex0 = -(logp[0, 1, 1] + logp[0, 2, 2]) / 2
    ex1 = -logp[1, 1, 3]
    torch.testing.assert_close(loss_fn(logits, targets, "per_example"), torch.stack([ex0, ex1]))
    torch.testing.assert_close(loss_fn(logits, targets), (2 * ex0 + ex1) / 3)
    with pytest.raises(ValueError, match="reduction"):
        loss_fn(logits, targets, "sum")


def test_accuracy_counts_labelled_positions_only():
    class Fixed(torch.nn.Module):
        def forward(self, tokens, valid_lens, head_mask=None):
            # always predicts digit 1
            return torch.nn.functional.one_hot(torch.ones_like(tokens), 10).float()

    batch = make_batch(1, generator=torch.Generator().manual_seed(0), min_len=4, max_len=4)
    batch = replace(batch, targets=torch.tensor([[IGNORE_INDEX, 1, 1, 2]]))
    assert accuracy(Fixed(), batch) == pytest.approx(2 / 3)


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(steps=0), "steps must be an integer >= 1"),
        (dict(warmup=-5), "warmup must be an integer >= 0"),
        (dict(steps=10, warmup=20), "warmup must be <= steps = 10"),
        (dict(lr=0.0), "lr must be > 0"),
        (dict(lr=float("nan")), "lr must be a finite number"),
        (dict(weight_decay=-0.1), "weight_decay must be >= 0"),
        (dict(seed=-1), "seed must be an integer >= 0"),
        (dict(num_threads=0), "num_threads must be an integer >= 1"),
        (dict(model=None), "model must be a ModelConfig"),
    ],
)
def test_train_config_rejects_bad_fields_instead_of_clamping(fields, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**fields)


def test_train_rejects_what_is_not_a_config():
    with pytest.raises(ValueError, match="config must be a TrainConfig"):
        train({"steps": 3}, progress=False)


def test_save_pretrained_writes_only_where_asked_and_never_overwrites_silently(tmp_path, monkeypatch):
    from mha_lib import training

    with pytest.raises(ValueError, match="path must be a file name"):
        training.save_pretrained(None)
    existing = tmp_path / "model.pt"
    existing.write_bytes(b"keep me")
    with pytest.raises(ValueError, match="exists: pass overwrite=True"):
        training.save_pretrained(existing)  # refused before any training
    assert existing.read_bytes() == b"keep me"
    with pytest.raises(SystemExit):
        training.main([])  # the output path is required
    with pytest.raises(SystemExit):
        training.main([str(existing)])  # argparse error, not a traceback
    config = TrainConfig(steps=2, batch_size=4, warmup=1, model=ModelConfig(num_hiddens=8, num_heads=2, mlp_hiddens=8))
    monkeypatch.setattr(training, "held_out_set", lambda: training.make_batch(8, generator=torch.Generator().manual_seed(0)))
    training.save_pretrained(tmp_path / "new" / "model.pt", config)
    assert (tmp_path / "new" / "model.pt").stat().st_size > 0


def test_learning_rate_factor_warms_up_then_decays_to_zero():
    from mha_lib.training import learning_rate_factor

    factors = [learning_rate_factor(s, warmup=4, steps=12) for s in range(13)]
    assert factors[:4] == [0.25, 0.5, 0.75, 1.0]
    assert factors[4] == 1.0 and factors[8] == pytest.approx(0.5) and factors[12] == pytest.approx(0.0)
    assert all(a >= b for a, b in zip(factors[3:], factors[4:]))


def test_accuracy_needs_a_label():
    batch = make_batch(2, generator=torch.Generator().manual_seed(0))
    batch = replace(batch, targets=torch.full_like(batch.targets, IGNORE_INDEX))
    with pytest.raises(ValueError, match="at least one labelled position"):
        accuracy(DigitAttentionModel(), batch)


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
