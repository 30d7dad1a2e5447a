"""The story language model: shapes, masks, generation with and without the KV cache, export,
checkpoints, training, and bad input."""

from __future__ import annotations

import dataclasses
import io
import json

import pytest
import torch

from mha_lib.lm import KIND, PRETRAINED_PATH, Config, StoryLM, load_pretrained, main, save, tokens_per_second, train
from mha_lib.lm_eval import _HELD_OUT_SEED, encode_stories, evaluate, next_token_losses
from mha_lib.lm_export import _from_export, export
from mha_lib.stories import RELATIONS, Tokenizer
from mha_lib.checkpoints import load_checkpoint

PROMPTS = ["Mia has a red kite.", "Leo", "One day, Ada and Tom go to the park. Ada has a blue ball. Tom",
           "Kim sees a gold duck. Kim sings because"]


def _ids(tokenizer, texts):
    return [tokenizer.encode(t) for t in texts]


# --- the forward pass ----------------------------------------------------------------------------

def test_shapes_and_causal_weights(small_model, tokenizer, stories):
    ids, lens = encode_stories(tokenizer, stories[:3])
    logits, weights = small_model(ids, lens, need_weights=True)
    B, L = ids.shape
    cfg = small_model.config
    assert logits.shape == (B, L, cfg.vocab_size)
    assert weights.shape == (B, cfg.num_layers, cfg.num_heads, L, L)
    future = torch.ones(L, L, dtype=torch.bool).triu(1)
    assert (weights[..., future] == 0).all()  # no query sees a later key
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, cfg.num_layers, cfg.num_heads, L))
    torch.testing.assert_close(small_model(ids, lens), logits)  # the fast path agrees


def test_padding_changes_nothing_at_real_positions(small_model, tokenizer, stories):
    ids, lens = encode_stories(tokenizer, stories[:4])
    batched = small_model(ids, lens)
    for b in range(4):
        alone = small_model(ids[b : b + 1, : lens[b]])
        torch.testing.assert_close(batched[b, : lens[b]], alone[0], atol=1e-5, rtol=1e-5)


def test_head_mask_gates_heads(small_model, tokenizer):
    ids = torch.tensor(_ids(tokenizer, ["Mia has a red kite. Her kite is red."]))
    ones = torch.ones(2, 4)
    torch.testing.assert_close(small_model(ids, head_mask=ones), small_model(ids))
    off = ones.clone()
    off[1, 2] = 0
    assert not torch.allclose(small_model(ids, head_mask=off), small_model(ids))


def test_next_token_losses_and_evaluate(small_model, tokenizer, stories):
    ids, lens = encode_stories(tokenizer, stories[:3])
    losses = next_token_losses(small_model, ids, lens)
    assert losses.shape == ids.shape and losses[:, 0].isnan().all()
    assert not losses[1, 1 : lens[1]].isnan().any() and losses[1, lens[1]:].isnan().all()
    scores = evaluate(small_model, stories)
    assert set(scores) == {"loss", *RELATIONS}
    assert 0 < scores["loss"] < 10 and all(0 <= scores[r] <= 1 for r in RELATIONS)


# --- generation ----------------------------------------------------------------------------------

def test_greedy_with_cache_equals_without(each_model, tokenizer):
    model = each_model
    prompts = _ids(tokenizer, PROMPTS)
    cached = model.generate(prompts, 12)
    assert cached == model.generate(prompts, 12, use_cache=False)
    assert [len(c) for c in cached] == [12] * len(prompts)


def test_batched_equals_one_at_a_time(each_model, tokenizer):
    model = each_model
    prompts = _ids(tokenizer, PROMPTS)
    together = model.generate(prompts, 10)
    assert together == [model.generate([p], 10)[0] for p in prompts]
    assert together == [model.generate([p], 10, use_cache=False)[0] for p in prompts]


def test_sampling_is_seeded_and_top_k_one_is_greedy(pretrained, tokenizer):
    model, _ = pretrained
    prompts = _ids(tokenizer, PROMPTS)
    a = model.generate(prompts, 8, temperature=1.0, seed=3)
    assert a == model.generate(prompts, 8, temperature=1.0, seed=3)
    assert a == model.generate(prompts, 8, temperature=1.0, seed=3, use_cache=False)
    assert model.generate(prompts, 8, temperature=0.7, top_k=1, seed=5) == model.generate(prompts, 8)
    assert model.generate(prompts, 0) == [[], [], [], []]


def test_the_shipped_model_writes_the_grammar(pretrained):
    model, tokenizer = pretrained
    prompt = tokenizer.encode("Mia and Leo go to the park. Leo")
    text = tokenizer.decode(prompt + model.generate([prompt], 25)[0])
    assert text.startswith("Mia and Leo go to the park. Leo ") and tokenizer.unk_id not in tokenizer.encode(text)
    because = tokenizer.encode("Leo sings because")
    assert tokenizer.vocab[model.generate([because], 1)[0][0]] == "he"


# --- export ------------------------------------------------------------------------------------

@pytest.mark.parametrize("which", ["gqa_model", "pretrained"])
def test_export_round_trips_through_json(which, request, tokenizer, stories):
    model = request.getfixturevalue(which)
    model = model[0] if isinstance(model, tuple) else model
    data = json.loads(json.dumps(export(model, tokenizer)))
    assert data["format"] == "mha_lib.lm/1"
    assert data["config"]["rope_base"] == 10000.0 and data["config"]["layer_norm_eps"] == 1e-5
    assert data["tokenizer"]["vocab"] == tokenizer.vocab and "mia" in data["tokenizer"]["names"]
    assert set(data["weights"]) == set(model.state_dict())
    again, vocab = _from_export(data)
    for name, tensor in model.state_dict().items():
        assert torch.equal(again.state_dict()[name], tensor), name
    assert vocab.vocab == tokenizer.vocab
    ids, lens = encode_stories(tokenizer, stories[:2])
    torch.testing.assert_close(again(ids, lens), model(ids, lens), rtol=0, atol=0)


def test_export_rejects_bad_arguments(small_model, tokenizer):
    with pytest.raises(ValueError, match="model must be a StoryLM"):
        export(torch.nn.Linear(2, 2), tokenizer)
    with pytest.raises(ValueError, match="tokenizer must be"):
        export(small_model, "vocab")
    with pytest.raises(ValueError, match="data must be a dict"):
        _from_export({"format": "other"})


# --- checkpoints and training ---------------------------------------------------------------------

def test_shipped_checkpoint_is_small_and_loads_offline(pretrained):
    model, tokenizer = pretrained
    assert PRETRAINED_PATH.stat().st_size < 1_000_000
    ckpt = load_checkpoint(PRETRAINED_PATH, kind=KIND)
    # the defaults are the shipped run's (its file predates Config.pattern, None by default)
    assert {**ckpt["config"], "pattern": ckpt["config"].get("pattern")} == dataclasses.asdict(Config())
    assert ckpt["extra"]["vocab"] == Tokenizer().vocab == tokenizer.vocab
    assert isinstance(model, StoryLM) and not model.training
    assert len(ckpt["extra"]["train_loss"]) == Config().steps


def test_training_is_reproducible(small_config):
    threads, state = torch.get_num_threads(), torch.random.get_rng_state()
    log = io.StringIO()
    a = train(small_config, progress=log)
    b = train(small_config, progress=False)
    for (name, p), q in zip(a.model.state_dict().items(), b.model.state_dict().values()):
        assert torch.equal(p, q), name
    assert a.history["eval_steps"].tolist() == [0, 2, 4]
    assert set(a.history) >= {"train_loss", "eval_held_out_loss", *(f"eval_{r}" for r in RELATIONS), "vocab"}
    assert "step     4/4" in log.getvalue()
    assert torch.get_num_threads() == threads and torch.equal(torch.random.get_rng_state(), state)
    c = train(dataclasses.replace(small_config, seed=1), progress=False)
    assert not torch.equal(c.model.unembedding.weight, a.model.unembedding.weight)


def test_retraining_from_the_seed_follows_the_shipped_run(retraining):
    """The warm-up's learning rates do not depend on the run's length, so its ``warmup`` steps
    are the start of the shipped run: deterministic on this machine, and on any machine the
    shipped run's losses over them and its held-out scores after them, within bands measured
    across kernel settings (floats differ across CPUs). The whole run (1500 steps, a minute of
    CPU) is not repeated here: ``python -m mha_lib.lm`` does it."""
    config = Config()
    start = train(dataclasses.replace(config, steps=config.warmup, eval_every=config.warmup), progress=False).history
    again = train(dataclasses.replace(config, steps=10, eval_every=10), progress=False).history
    retraining.deterministic(start["train_loss"], again["train_loss"])
    record = load_checkpoint(PRETRAINED_PATH, kind=KIND)["extra"]
    assert int(record["eval_steps"][1]) == config.warmup
    # Within bands. Measured on a second AVX512 machine against the shipped record (made on
    # another AVX512 machine); the first step whose loss differs, then relative drifts:
    #   setting                       differs at  warm-up loss  held-out loss  antecedent (abs.)
    #   native                        step 2      1.7e-05       3.6e-04        0
    #   ATEN_CPU_CAPABILITY=default   step 0      1.5e-05       2.6e-04        0.0032
    #   ATEN_CPU_CAPABILITY=avx2      step 16     1.5e-05       2.7e-04        0.0048
    # (the whole run natively: final held-out loss 0.8 %, recall 1.0 as shipped).
    # Bands, about ten times the drift: 2e-4, 4e-3 and 0.03.
    retraining.near(start["train_loss"].mean(), record["train_loss"][: config.warmup].mean(),
                    "mean loss of the warm-up", rtol=2e-4)
    retraining.near(start["eval_held_out_loss"][-1], record["eval_held_out_loss"][1],
                    "held-out loss after the warm-up", rtol=4e-3)
    retraining.near(start["eval_antecedent"][-1], record["eval_antecedent"][1],
                    "antecedent accuracy after the warm-up", atol=0.03)


def test_save_main_and_load(tmp_path, small_config, capsys):
    result = train(small_config, progress=False)
    path = save(result, tmp_path / "lm.pt")
    model, tokenizer = load_pretrained(path)
    for name, tensor in result.model.state_dict().items():
        assert torch.equal(model.state_dict()[name], tensor), name
    with pytest.raises(ValueError, match="exists"):
        save(result, path)
    with pytest.raises(FileNotFoundError):
        load_pretrained(tmp_path / "missing.pt")
    torch.save({"a": 1}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not a mha_lib checkpoint"):
        load_pretrained(tmp_path / "other.pt")
    assert main(["--out", str(tmp_path / "cli.pt"), "--steps", "2"]) == 0
    assert "trained in" in capsys.readouterr().out and (tmp_path / "cli.pt").exists()


def test_held_out_seed_is_never_a_training_seed():
    assert _HELD_OUT_SEED % 2 == 1  # training reads even seeds only


# --- bad input ----------------------------------------------------------------------------------

@pytest.mark.parametrize("call, match", [
    (lambda m: m(torch.zeros(2, 3)), "ids must be a non-empty integer tensor"),
    (lambda m: m(torch.zeros(3, dtype=torch.long)), "ids must be"),
    (lambda m: m(torch.full((1, 3), 10**5)), r"ids must hold token ids in \[0, "),
    (lambda m: m(torch.full((1, 3), -1)), "ids must hold token ids"),
    (lambda m: m(torch.zeros(2, 3, dtype=torch.long, device="meta")), "ids must hold values, but ids is on the meta"),
    (lambda m: m(torch.zeros(2, 3, dtype=torch.long), [3, 4]), "valid_lens must be"),
    (lambda m: m(torch.zeros(2, 3, dtype=torch.long), [0, 3]), "valid_lens must be"),
    (lambda m: m(torch.zeros(2, 3, dtype=torch.long), [1.5, 3]), "valid_lens must be"),
    (lambda m: m(torch.zeros(2, 3, dtype=torch.long), head_mask=torch.ones(4)), "head_mask must have shape"),
    (lambda m: m(torch.zeros(2, 3, dtype=torch.long), head_mask=torch.ones(2, 4, dtype=torch.bool)), "head_mask must"),
    (lambda m: m(torch.zeros(2, 3, dtype=torch.long), head_mask="all"), "head_mask must be a tensor"),
    (lambda m: m(torch.zeros(2, 3, dtype=torch.long), valid_lens="ab"), "valid_lens must be"),
    (lambda m: m(torch.zeros(2, 3, dtype=torch.long), torch.ones(2, dtype=torch.long, device="meta")),
     "valid_lens must hold values"),
    (lambda m: m(torch.zeros(2, 3, dtype=torch.long), need_weights=1), "need_weights"),
    (lambda m: m(torch.zeros(2, 3, dtype=torch.long), cache="cache"), "cache must be"),
    (lambda m: m.generate([], 3), "prompts must be"),
    (lambda m: m.generate([[]], 3), "prompts must be"),
    (lambda m: m.generate("Mia", 3), "prompts must be"),
    (lambda m: m.generate([[5, 10**6]], 3), "prompts must be"),
    (lambda m: m.generate([[5, 2.0]], 3), "prompts must be"),
    (lambda m: m.generate([[5]], -1), "max_new_tokens"),
    (lambda m: m.generate([[5]], 2, temperature=-1.0), "temperature"),
    (lambda m: m.generate([[5]], 2, temperature=float("nan")), "temperature"),
    (lambda m: m.generate([[5]], 2, top_k=0), "top_k"),
    (lambda m: m.generate([[5]], 2, use_cache="yes"), "use_cache"),
    (lambda m: m.generate([[5]], 2, temperature=1.0, seed=-3), "seed"),
])
def test_bad_input_raises_value_error_naming_it(small_model, call, match):
    with pytest.raises(ValueError, match=match):
        call(small_model)


@pytest.mark.parametrize("fields, match", [
    ({"num_kv_heads": 3}, "num_kv_heads"), ({"d_model": 12, "num_heads": 4}, "even head size"),
    ({"steps": 10**6}, "steps"), ({"warmup": -1}, "warmup"), ({"d_ff": 0}, "d_ff"),
    ({"lr": -1.0}, "lr"), ({"num_layers": 0}, "num_layers"),
])
def test_config_rejects_bad_fields(fields, match):
    with pytest.raises(ValueError, match=match):
        Config(**fields)


def test_train_and_encode_reject_bad_arguments(tokenizer):
    with pytest.raises(ValueError, match="config must be"):
        train({"steps": 3})
    with pytest.raises(ValueError, match="vocab_size"):
        train(Config(vocab_size=10, steps=2, warmup=1), progress=False)
    with pytest.raises(ValueError, match="stories must be"):
        encode_stories(tokenizer, [])
    with pytest.raises(ValueError, match="tokenizer must be"):
        encode_stories("tok", [])


def test_generation_with_a_head_mask_and_the_speed_report(small_model, tokenizer):
    prompts = _ids(tokenizer, PROMPTS)
    gates = torch.ones(2, 4)
    gates[1, 0] = 0
    assert small_model.generate(prompts, 6, head_mask=gates) == small_model.generate(prompts, 6, head_mask=gates,
                                                                                   use_cache=False)
    speed = tokens_per_second(small_model, prompts, 4, repeats=1)
    assert set(speed) == {"cache", "no cache"} and all(v > 0 for v in speed.values())  # never timed
    with pytest.raises(ValueError, match="repeats"):
        tokens_per_second(small_model, prompts, 4, repeats=0)
