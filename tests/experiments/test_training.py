"""mha_lib.training: the one training loop, the schedule; and the one checkpoint format, mha_lib.checkpoints."""

import io
import os
import pickle
from dataclasses import dataclass

import pytest
import torch
from torch import nn

from mha_lib.checkpoints import load_checkpoint, save_checkpoint
from mha_lib.training import TrainResult, load_model, save_result, train_loop, warmup_cosine

# --- the schedule -----------------------------------------------------------------------------


def test_warmup_cosine_warms_up_then_decays_to_zero():
    factors = [warmup_cosine(s, warmup=4, steps=12) for s in range(13)]
    assert factors[:4] == [0.25, 0.5, 0.75, 1.0]
    assert factors[4] == 1.0 and factors[8] == pytest.approx(0.5) and factors[12] == pytest.approx(0.0)
    assert all(a >= b for a, b in zip(factors[3:], factors[4:]))
    assert warmup_cosine(0, warmup=0, steps=3) == 1.0  # no warm-up: the decay starts at once


@pytest.mark.parametrize("kwargs, match", [
    (dict(step=-1, warmup=2, steps=4), "step must be an integer >= 0"),
    (dict(step=1.5, warmup=2, steps=4), "step must be an integer >= 0"),
    (dict(step=0, warmup=-1, steps=4), "warmup must be an integer >= 0"),
    (dict(step=0, warmup=2, steps=0), "steps must be an integer >= 1"),
])
def test_warmup_cosine_rejects_bad_input(kwargs, match):
    step = kwargs.pop("step")
    with pytest.raises(ValueError, match=match):
        warmup_cosine(step, **kwargs)


# --- the loop ---------------------------------------------------------------------------------


def _regression(seed=0):
    """A linear model, a seeded endless stream of (x, y) batches, and an optimizer."""
    torch.manual_seed(seed)
    model = nn.Linear(3, 1)
    data = torch.Generator().manual_seed(seed + 1)
    w = torch.tensor([[1.0, -2.0, 0.5]])

    def batches():
        while True:
            x = torch.randn(8, 3, generator=data)
            yield x, x @ w.T

    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    return model, batches(), optimizer


def _mse(model, batch):
    x, y = batch
    return nn.functional.mse_loss(model(x), y)


def test_train_loop_trains_logs_and_evaluates_on_schedule():
    model, batches, optimizer = _regression()
    fixed = torch.randn(16, 3, generator=torch.Generator().manual_seed(9))
    modes = []

    def evaluate(m):
        modes.append((m.training, torch.is_grad_enabled()))
        return {"norm": m(fixed).norm()}  # a one-element tensor is fine

    log = io.StringIO()
    threads = torch.get_num_threads()
    history = train_loop(model, _mse, batches, optimizer, steps=5, evaluate=evaluate, eval_every=2,
                         num_threads=1, progress=log)
    assert sorted(history) == ["cpu_capability", "cpu_seconds", "eval_norm", "eval_steps", "torch_version",
                               "train_loss"]
    losses = history["train_loss"]
    assert losses.shape == (5,) and losses[-1] < losses[0]
    assert history["eval_steps"].tolist() == [0, 2, 4, 5]  # before the first step, every 2, after the last
    assert history["eval_norm"].shape == (4,)
    assert modes == [(False, False)] * 4  # eval mode, no gradients
    assert not model.training  # eval mode at the end
    assert torch.get_num_threads() == threads
    assert history["cpu_seconds"] >= 0 and history["torch_version"] == str(torch.__version__)
    assert history["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    text = log.getvalue()
    assert "step     5/5" in text and "norm" in text and text.endswith("\n")


def test_train_loop_is_deterministic_and_applies_the_schedule():
    a_model, batches, optimizer = _regression()
    lrs = []

    def loss(model, batch):
        lrs.append(optimizer.param_groups[0]["lr"])
        return _mse(model, batch)

    a = train_loop(a_model, loss, batches, optimizer, steps=4, progress=False,
                   schedule=lambda s: warmup_cosine(s, warmup=2, steps=4))
    assert lrs == pytest.approx([0.1 * warmup_cosine(s, warmup=2, steps=4) for s in range(4)])
    b_model, batches, optimizer = _regression()
    lrs.clear()
    b = train_loop(b_model, loss, batches, optimizer, steps=4, progress=False,
                   schedule=lambda s: warmup_cosine(s, warmup=2, steps=4))
    assert torch.equal(a["train_loss"], b["train_loss"])
    assert torch.equal(a_model.weight, b_model.weight)
    assert sorted(a) == ["cpu_capability", "cpu_seconds", "torch_version", "train_loss"]  # no evaluate: no eval_*


def test_train_loop_clips_the_gradient_norm():
    model = nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(0.0)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    batch = (torch.ones(1, 1), torch.full((1, 1), 1000.0))  # gradient -2000
    train_loop(model, _mse, iter([batch]), optimizer, steps=1, max_grad_norm=0.5, progress=False)
    assert model.weight.item() == pytest.approx(0.5)  # the step is lr * 0.5, not lr * 2000


def _bad_loop_argument(name):
    model, batches, optimizer = _regression()
    kwargs = dict(model=model, loss=_mse, batches=batches, optimizer=optimizer, steps=2, progress=False)
    kwargs.update({
        "model": dict(model=lambda x: x),
        "loss": dict(loss="mse"),
        "batches": dict(batches=3),
        "optimizer": dict(optimizer=None),
        "steps": dict(steps=0),
        "schedule": dict(schedule=0.5),
        "evaluate": dict(evaluate={"a": 1}),
        "eval_every": dict(eval_every=2),  # without evaluate
        "max_grad_norm": dict(max_grad_norm=float("nan")),
        "num_threads": dict(num_threads=0),
        "progress": dict(progress="yes"),
    }[name])
    return kwargs


@pytest.mark.parametrize("name", ["model", "loss", "batches", "optimizer", "steps", "schedule",
                                  "evaluate", "eval_every", "max_grad_norm", "num_threads", "progress"])
def test_train_loop_names_a_bad_argument(name):
    kwargs = _bad_loop_argument(name)
    model, loss, batches, optimizer = (kwargs.pop(k) for k in ("model", "loss", "batches", "optimizer"))
    with pytest.raises(ValueError, match=name):
        train_loop(model, loss, batches, optimizer, **kwargs)


def test_train_loop_rejects_what_goes_wrong_inside():
    model, batches, optimizer = _regression()
    with pytest.raises(ValueError, match="batches must yield at least steps = 3 batches, it ran out after 1"):
        train_loop(model, _mse, [next(batches)], optimizer, steps=3, progress=False)
    with pytest.raises(ValueError, match=r"loss must return a scalar tensor.*shape \(8, 1\)"):
        train_loop(model, lambda m, b: m(b[0]), batches, optimizer, steps=1, progress=False)
    with pytest.raises(ValueError, match="loss must return a scalar tensor.*float"):
        train_loop(model, lambda m, b: 1.0, batches, optimizer, steps=1, progress=False)
    with pytest.raises(ValueError, match="loss must stay finite, got nan at step 1"):
        train_loop(model, lambda m, b: _mse(m, b) * float("nan"), batches, optimizer, steps=1, progress=False)
    with pytest.raises(ValueError, match="evaluate must return a mapping.*list"):
        train_loop(model, _mse, batches, optimizer, steps=1, evaluate=lambda m: [1.0], progress=False)
    with pytest.raises(ValueError, match="evaluate must return a mapping of names to numbers"):
        train_loop(model, _mse, batches, optimizer, steps=1, evaluate=lambda m: {"a": "high"}, progress=False)
    with pytest.raises(ValueError, match="evaluate must not name a metric 'steps'"):
        train_loop(model, _mse, batches, optimizer, steps=1, evaluate=lambda m: {"steps": 1}, progress=False)


# --- checkpoints ------------------------------------------------------------------------------


@pytest.fixture
def contents():
    torch.manual_seed(0)
    return dict(kind="toy", config={"width": 3, "name": "x", "rate": 0.5, "flag": True},
                state_dict=nn.Linear(3, 2).state_dict(),
                extra={"losses": torch.tensor([1.0, 0.5]), "notes": ["a", None], "n": 2})


def test_checkpoint_round_trip(tmp_path, contents):
    path = save_checkpoint(tmp_path / "sub" / "dir" / "a.pt", **contents)  # parents are made
    assert path == tmp_path / "sub" / "dir" / "a.pt" and path.is_file()
    assert sorted(os.listdir(path.parent)) == ["a.pt"]  # no temporary file left behind
    ckpt = load_checkpoint(str(path), kind="toy")
    assert set(ckpt) == {"kind", "config", "state_dict", "extra"} and ckpt["kind"] == "toy"
    assert ckpt["config"] == contents["config"]
    for name, tensor in contents["state_dict"].items():
        assert torch.equal(ckpt["state_dict"][name], tensor)
    assert torch.equal(ckpt["extra"]["losses"], contents["extra"]["losses"])
    assert ckpt["extra"]["notes"] == ["a", None] and ckpt["extra"]["n"] == 2
    assert load_checkpoint(save_checkpoint(tmp_path / "b.pt", **{**contents, "extra": None}),
                           kind="toy")["extra"] == {}


def test_save_checkpoint_never_overwrites_unless_asked(tmp_path, contents):
    path = tmp_path / "a.pt"
    path.write_bytes(b"keep me")
    with pytest.raises(ValueError, match="exists: pass overwrite=True"):
        save_checkpoint(path, **contents)
    assert path.read_bytes() == b"keep me"
    with pytest.raises(ValueError, match="overwrite must be True or False"):
        save_checkpoint(path, **contents, overwrite="yes")
    assert path.read_bytes() == b"keep me"
    save_checkpoint(path, **contents, overwrite=True)
    assert load_checkpoint(path, kind="toy")["config"] == contents["config"]
    assert sorted(os.listdir(tmp_path)) == ["a.pt"]


class _NotPlain:
    """Something torch.save writes but torch.load(weights_only=True) refuses."""


@dataclass
class _Sizes:
    width: int = 3


@pytest.mark.parametrize("change, match", [
    (dict(kind=""), "kind must be a non-empty string"),
    (dict(kind=3), "kind must be a non-empty string"),
    (dict(config=_Sizes()), r"config must be a dict \(dataclasses.asdict"),
    (dict(config={"width": _NotPlain()}), r"config\['width'\] must hold only tensors"),
    (dict(config={1: 2}), "config must have string keys"),
    (dict(state_dict={"w": [1.0]}), "state_dict must map parameter names to tensors"),
    (dict(state_dict=None), "state_dict must map parameter names to tensors"),
    (dict(extra=[1]), "extra must be a dict or None"),
    (dict(extra={"h": {"deep": [_NotPlain()]}}), r"extra\['h'\]\['deep'\]\[0\] must hold only"),
])
def test_save_checkpoint_rejects_what_weights_only_could_not_load(tmp_path, contents, change, match):
    with pytest.raises(ValueError, match=match):
        save_checkpoint(tmp_path / "a.pt", **{**contents, **change})
    assert not (tmp_path / "a.pt").exists()


@pytest.mark.parametrize("path, match", [(None, "path must be a file name"), ("", "path must be a file name"),
                                         (3, "path must be a file name")])
def test_checkpoint_paths_must_be_file_names(contents, path, match):
    with pytest.raises(ValueError, match=match):
        save_checkpoint(path, **contents)
    with pytest.raises(ValueError, match=match):
        load_checkpoint(path, kind="toy")


def test_checkpoint_path_must_not_be_a_directory(tmp_path, contents):
    with pytest.raises(ValueError, match="path must be a file, got the directory"):
        save_checkpoint(tmp_path, **contents)
    with pytest.raises(ValueError, match="path must be a file, got the directory"):
        load_checkpoint(tmp_path, kind="toy")


def test_load_checkpoint_of_a_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="path .*: no checkpoint at"):
        load_checkpoint(tmp_path / "missing.pt", kind="toy")


def _write_random_bytes(path):
    path.write_bytes(torch.randint(0, 256, (4096,), generator=torch.Generator().manual_seed(0),
                                   dtype=torch.uint8).numpy().tobytes())


def _write_pickled_list(path):
    with open(path, "wb") as f:
        pickle.dump([1, 2, 3], f)


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")  # torch's, on the pickle.dump file
@pytest.mark.parametrize("write, match", [
    (_write_random_bytes, r"is not a mha_lib checkpoint: torch.load failed \(UnpicklingError"),
    (lambda p: p.write_bytes(b""), "is not a mha_lib checkpoint: torch.load failed"),
    (lambda p: p.write_text("kind: toy\n"), "is not a mha_lib checkpoint: torch.load failed"),
    (_write_pickled_list, "is not a mha_lib checkpoint: torch.load failed"),
    (lambda p: torch.save([1, 2, 3], p), "is not a mha_lib checkpoint: it holds a list, not a dict"),
    (lambda p: torch.save(torch.zeros(3), p), "is not a mha_lib checkpoint: it holds a Tensor, not a dict"),
    (lambda p: torch.save(_NotPlain(), p), "torch.load failed .*Unsupported global.*_NotPlain"),
    (lambda p: torch.save({"config": {}, "state_dict": {}}, p), "expected the keys"),
    (lambda p: torch.save({"kind": "toy", "config": {}, "state_dict": {}, "extra": {}, "x": 1}, p),
     "expected the keys"),
    (lambda p: torch.save({"kind": "toy", "config": 3, "state_dict": {}, "extra": {}}, p),
     "config, state_dict or extra has the wrong type"),
    (lambda p: torch.save({"kind": "toy", "config": {}, "state_dict": {"w": 1}, "extra": {}}, p),
     "config, state_dict or extra has the wrong type"),
    (lambda p: torch.save({"kind": "other", "config": {}, "state_dict": {}, "extra": {}}, p),
     "is a checkpoint of kind 'other', not 'toy'"),
])
def test_load_checkpoint_says_when_a_file_is_not_one_of_ours(tmp_path, write, match):
    path = tmp_path / "f.pt"
    write(path)
    with pytest.raises(ValueError, match=match):
        load_checkpoint(path, kind="toy")


def test_load_checkpoint_needs_a_kind(tmp_path, contents):
    path = save_checkpoint(tmp_path / "a.pt", **contents)
    with pytest.raises(ValueError, match="kind must be a non-empty string"):
        load_checkpoint(path, kind=None)


@dataclass(frozen=True)
class _Config:
    width: int = 3


class _Model(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.linear = nn.Linear(config.width, 2)


def test_save_result_and_load_model(tmp_path):
    torch.manual_seed(0)
    model = _Model(_Config(4))
    result = TrainResult(model, _Config(4), {"train_loss": torch.tensor([1.0])})
    path = save_result(result, tmp_path / "m.pt", kind="toy", model_class=_Model)
    ckpt = load_checkpoint(path, kind="toy")
    assert ckpt["config"] == {"width": 4} and torch.equal(ckpt["extra"]["train_loss"], torch.tensor([1.0]))
    again = load_model(path, kind="toy", config_class=_Config, model_class=_Model)
    assert not again.training and torch.equal(again.linear.weight, model.linear.weight)
    with pytest.raises(ValueError, match="exists: pass overwrite=True"):
        save_result(result, path, kind="toy", model_class=_Model)
    with pytest.raises(ValueError, match="result must be a TrainResult of a Linear"):
        save_result(result, tmp_path / "x.pt", kind="toy", model_class=nn.Linear)
    with pytest.raises(ValueError, match="result must be a TrainResult"):
        save_result(TrainResult(model, {"width": 4}, {}), tmp_path / "x.pt", kind="toy", model_class=_Model)
    with pytest.raises(ValueError, match="model_class must be a class"):
        save_result(result, tmp_path / "x.pt", kind="toy", model_class=None)
    with pytest.raises(ValueError, match="is a checkpoint of kind 'toy', not 'other'"):
        load_model(path, kind="other", config_class=_Config, model_class=_Model)


def test_load_model_says_what_does_not_fit(tmp_path):
    torch.manual_seed(0)
    weights = _Model(_Config(4)).state_dict()
    path = save_checkpoint(tmp_path / "a.pt", kind="toy", config={"depth": 2}, state_dict=weights)
    with pytest.raises(ValueError, match="the config of .* does not fit _Config"):
        load_model(path, kind="toy", config_class=_Config, model_class=_Model)
    path = save_checkpoint(tmp_path / "b.pt", kind="toy", config={"width": 5}, state_dict=weights)
    with pytest.raises(ValueError, match="the weights of .* do not fit _Model"):
        load_model(path, kind="toy", config_class=_Config, model_class=_Model)
    with pytest.raises(ValueError, match="config_class must be a dataclass"):
        load_model(path, kind="toy", config_class=dict, model_class=_Model)
    with pytest.raises(ValueError, match="model_class must be a function"):
        load_model(path, kind="toy", config_class=_Config, model_class=None)
    with pytest.raises(FileNotFoundError):
        load_model(tmp_path / "missing.pt", kind="toy", config_class=_Config, model_class=_Model)
