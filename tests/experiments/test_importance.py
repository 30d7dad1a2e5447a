"""mha_lib.importance: entropy, gates, ablation, gradient importance, Spearman, pruning."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_lib._modes import eval_mode
from mha_lib.digits import Config, DigitAttentionModel, TaskBatch, _loss_fn, accuracy, example_losses, make_batch
from mha_lib.importance import (
    ablation,
    attention_entropy,
    gradient_importance,
    head_gates,
    prune_heads,
    prune_model,
    pruned_speedups,
    pruning_curve,
    ranks,
    spearman,
)
from mha_lib.multihead import MultiHeadAttention


@pytest.fixture(scope="module")
def small():
    torch.manual_seed(0)
    model = DigitAttentionModel(Config(d_model=12, num_heads=3, mlp_hiddens=16)).eval()
    batch = make_batch(24, generator=torch.Generator().manual_seed(1))
    return model, batch


def _importance(model, batch):
    return gradient_importance(lambda g: example_losses(model, batch, g), len(batch), model.num_heads)


# --- entropy -----------------------------------------------------------------------------


def test_entropy_of_known_distributions():
    w = torch.zeros(1, 2, 2, 4)
    w[0, 0, :, 0] = 1.0  # head 0: one-hot rows -> entropy 0
    w[0, 1, :, :] = 0.25  # head 1: uniform over 4 keys -> log 4
    torch.testing.assert_close(attention_entropy(w), torch.tensor([0.0, math.log(4)]))


def test_entropy_ignores_padded_queries():
    w = torch.zeros(1, 1, 3, 3)
    w[0, 0, 0] = torch.tensor([0.5, 0.5, 0.0])  # real query: log 2
    w[0, 0, 1] = torch.tensor([0.5, 0.5, 0.0])  # real query: log 2
    w[0, 0, 2] = torch.tensor([1 / 3, 1 / 3, 1 / 3])  # padded query: must not count
    torch.testing.assert_close(attention_entropy(w, torch.tensor([2])), torch.tensor([math.log(2)]))


def test_entropy_rejects_bad_input():
    with pytest.raises(ValueError, match="weights"):
        attention_entropy(torch.zeros(2, 3, 3))
    with pytest.raises(ValueError, match="valid_lens"):
        attention_entropy(torch.zeros(1, 1, 3, 3), torch.tensor([4]))


def test_entropy_rejects_nan_and_negative_weights():
    w = torch.full((1, 1, 2, 2), 0.5)
    w[0, 0, 1, 0] = float("nan")
    with pytest.raises(ValueError, match="weights must be finite"):
        attention_entropy(w)
    w = torch.tensor([[[[1.5, -0.5]]]])  # sums to 1, but not a distribution
    with pytest.raises(ValueError, match="weights must be non-negative.*-0.5"):
        attention_entropy(w)


def test_entropy_valid_lens_needs_self_attention():
    # valid_lens (B,) counts keys; it marks real queries only when queries are those keys
    with pytest.raises(ValueError, match="Lq == Lk.*Lq = 2 queries and Lk = 3 keys"):
        attention_entropy(torch.full((1, 1, 2, 3), 1 / 3), torch.tensor([3]))
    with pytest.raises(ValueError, match=r"valid_lens must have shape \(B,\)"):
        attention_entropy(torch.full((1, 1, 3, 3), 1 / 3), torch.tensor([[3, 3, 3]]))
    # without valid_lens, cross-attention weights are fine
    torch.testing.assert_close(attention_entropy(torch.full((1, 1, 2, 3), 1 / 3)), torch.tensor([math.log(3)]))


# --- gates, ablation, gradient importance ---------------------------------------------------


def test_head_gates():
    assert torch.equal(head_gates(4, [1, 3]), torch.tensor([1.0, 0.0, 1.0, 0.0]))
    assert torch.equal(head_gates(2), torch.ones(2))
    assert torch.equal(head_gates(2, [0, 1]), torch.zeros(2))  # gates may remove every head
    assert torch.equal(head_gates((2, 3), [(1, 0), (0, 2)]), torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0]]))
    assert torch.equal(head_gates((2, 2)), torch.ones(2, 2))


@pytest.mark.parametrize("args, match", [
    ((2, [2]), r"removed must be indices in \[0, 2\)"),
    ((2, [0, 0]), "removed must not repeat"),
    ((2, "0"), "removed must be an iterable of integer head indices"),
    ((0,), "heads must be an integer >= 1"),
    ((True,), "heads must be H"),
    (("2",), "heads must be H"),
    (((2, 0),), r"heads\[1\] \(H\) must be an integer >= 1"),
    (((2, 2, 2),), "heads must be H"),
    (((2, 2), [(2, 0)]), r"removed must hold \(layer, head\) pairs.*\(2, 0\)"),
    (((2, 2), [1]), r"removed must hold \(layer, head\) pairs"),
    (((2, 2), [(0, True)]), r"removed must hold \(layer, head\) pairs"),
    (((2, 2), [(0, 1), (0, 1)]), "removed must not repeat"),
    (((2, 2), torch.tensor([0])), r"removed must be an iterable of \(layer, head\) pairs"),
])
def test_head_gates_rejects_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        head_gates(*args)


def test_ablation_matches_gating(small):
    model, batch = small
    drops = ablation(lambda gates: accuracy(model, batch, gates), 3)
    assert drops.shape == (3,)
    for h in range(3):
        assert drops[h] == accuracy(model, batch, head_gates(3, [h]))


def test_ablation_of_layers_of_heads():
    seen = []

    def evaluate(gates):
        seen.append(gates.clone())
        return torch.tensor(float(gates.argmin()))  # a one-element tensor is fine

    result = ablation(evaluate, (2, 3))
    assert result.shape == (2, 3) and result.flatten().tolist() == list(range(6))
    assert [g.shape for g in seen] == [(2, 3)] * 6 and all(g.sum() == 5 for g in seen)


@pytest.mark.parametrize("args, match", [
    ((None, 3), "evaluate must be a function of the gates"),
    ((lambda g: "high", 3), "evaluate must return a real number, got 'high'"),
    ((lambda g: True, 3), "evaluate must return a real number"),
    ((lambda g: g, 3), "evaluate must return a real number"),
    ((lambda g: 1.0, 0), "heads must be an integer >= 1"),
])
def test_ablation_rejects_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        ablation(*args)


def test_gradient_importance_is_the_mean_absolute_per_example_gradient(small):
    model, batch = small
    expected = torch.zeros(3)
    for b in range(4):  # one example at a time, with (H,) gates
        gates = torch.ones(3, requires_grad=True)
        logits = model(batch.tokens[b : b + 1], batch.valid_lens[b : b + 1], head_mask=gates)
        (grad,) = torch.autograd.grad(_loss_fn(logits, batch.targets[b : b + 1]), gates)
        expected += grad.abs() / 4
    first4 = TaskBatch(batch.tokens[:4], batch.valid_lens[:4], batch.targets[:4])
    got = _importance(model, first4)
    torch.testing.assert_close(got, expected)
    assert (got > 0).all()


def test_gradient_importance_is_zero_for_a_head_that_cannot_matter(small):
    model, batch = small
    with torch.no_grad():
        dead = DigitAttentionModel(model.config).eval()
        dead.load_state_dict(model.state_dict())
        d = dead.attention.head_size
        dead.attention.W_o.weight[:, d : 2 * d] = 0  # head 1 never reaches the output
    imp = _importance(dead, batch)
    assert imp[1] == 0 and (imp[[0, 2]] > 0).all()


def test_gradient_importance_of_layers_of_heads():
    # loss_b = sum_{n,h} c[b, n, h] * gate[b, n, h]: the gradient is c, its mean |.| over b
    c = torch.tensor([[[1.0, -2.0]], [[3.0, 2.0]]])  # (B, N, H) = (2, 1, 2)
    got = gradient_importance(lambda gates: (gates * c).sum(dim=(1, 2)), 2, (1, 2))
    torch.testing.assert_close(got, torch.tensor([[2.0, 2.0]]))


@pytest.mark.parametrize("args, match", [
    ((None, 2, 3), "per_example_loss must be a function of the gates"),
    ((lambda g: g.sum(), 2, 3), r"per_example_loss must return \(B,\) = \(2,\) losses.*shape \(\)"),
    ((lambda g: torch.ones(2), 2, 3), r"per_example_loss must return \(B,\) = \(2,\) losses"),
    ((lambda g: [1.0, 2.0], 2, 3), r"per_example_loss must return.*got list"),
    ((lambda g: g.sum(1) * 0 + torch.ones(2, requires_grad=True), 2, 3), None),  # uses the gates: fine
    ((lambda g: g.sum(1), 0, 3), "batch_size must be an integer >= 1"),
    ((lambda g: g.sum(1), 2, "3"), "heads must be H"),
])
def test_gradient_importance_rejects_bad_input(args, match):
    if match is None:
        assert gradient_importance(*args).shape == (3,)
        return
    with pytest.raises(ValueError, match=match):
        gradient_importance(*args)


def test_gradient_importance_needs_the_gates_to_be_used():
    extra = torch.ones(2, requires_grad=True)
    with pytest.raises(ValueError, match="no gradient reached them"):
        gradient_importance(lambda g: extra * 2, 2, 3)


# --- ranks and Spearman ---------------------------------------------------------------------


def test_ranks_average_ties():
    assert ranks(torch.tensor([10.0, 30.0, 20.0, 20.0])).tolist() == [1.0, 4.0, 2.5, 2.5]


def test_spearman_by_hand():
    # ranks of a: [1, 2, 3, 4]; ranks of b: [2, 1, 4, 3]; d = [-1, 1, -1, 1], sum d^2 = 4
    # no ties: rho = 1 - 6 * 4 / (4 * (16 - 1)) = 1 - 24/60 = 0.6
    assert spearman([1.0, 2.0, 3.0, 4.0], [20.0, 10.0, 40.0, 30.0]) == pytest.approx(0.6)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    # with a tie: ranks a = [1, 2.5, 2.5], b = [1, 2, 3]; centred a = [-1, 0.5, 0.5],
    # centred b = [-1, 0, 1]; rho = (1 + 0 + 0.5) / (sqrt(1.5) * sqrt(2)) = 1.5 / sqrt(3)
    assert spearman([0, 5, 5], [1, 2, 3]) == pytest.approx(1.5 / math.sqrt(3.0))


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(-100, 100), min_size=2, max_size=8, unique=True))
def test_spearman_is_invariant_under_monotone_maps(xs):
    a = torch.tensor(xs, dtype=torch.float64)
    b = torch.arange(len(xs), dtype=torch.float64)
    assert spearman(a, b) == pytest.approx(spearman(torch.exp(a / 50), b * 3 + 1))
    assert spearman(a, a) == pytest.approx(1.0)


def test_spearman_rejects_bad_input():
    with pytest.raises(ValueError, match="same length"):
        spearman([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="constant"):
        spearman([1, 1, 1], [1, 2, 3])


# --- pruning ---------------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(
    H=st.integers(2, 5),
    d=st.integers(1, 4),
    bias=st.booleans(),
    data=st.data(),
)
def test_pruned_equals_gated(H, d, bias, data):
    torch.manual_seed(data.draw(st.integers(0, 1000), label="seed"))
    mha = MultiHeadAttention(5, 6, 7, H * d, H, dropout=0.0, bias=bias).eval()
    heads = data.draw(st.lists(st.integers(0, H - 1), unique=True, max_size=H - 1), label="heads")
    B, Lq, Lk = 2, 3, 4
    q, k, v = torch.randn(B, Lq, 6), torch.randn(B, Lk, 5), torch.randn(B, Lk, 7)
    valid_lens = data.draw(st.sampled_from([None, torch.tensor([4, 2]), torch.tensor([[1, 0, 4], [2, 3, 3]])]))
    pruned = prune_heads(mha, heads)
    kept = [h for h in range(H) if h not in heads]
    assert pruned.num_heads == len(kept) and pruned.head_size == d
    assert pruned.W_q.weight.shape == (len(kept) * d, 6) and pruned.W_o.weight.shape == (H * d, len(kept) * d)
    gated = mha(q, k, v, valid_lens, head_mask=head_gates(H, heads))
    torch.testing.assert_close(pruned(q, k, v, valid_lens), gated)
    out, weights = pruned(q, k, v, valid_lens, need_weights=True)  # the clear path too
    torch.testing.assert_close(out, gated)
    _, all_weights = mha(q, k, v, valid_lens, need_weights=True)
    torch.testing.assert_close(weights, all_weights[:, kept])


def test_pruning_twice_equals_pruning_once():
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 8, 8, 8, 4, dropout=0.0, bias=True).eval()
    x = torch.randn(2, 3, 8)
    twice = prune_heads(prune_heads(mha, [1]), [2])  # second call: old heads 0, 2, 3 -> drop 3
    torch.testing.assert_close(twice(x, x, x), prune_heads(mha, [1, 3])(x, x, x))
    assert twice.num_heads == 2 and twice.W_o.weight.shape == (8, 4)
    assert mha.num_heads == 4 and mha.W_o.weight.shape == (8, 8)  # original untouched


def test_pruned_module_keeps_training_mode_and_has_fewer_parameters():
    mha = MultiHeadAttention(8, 8, 8, 8, 4, dropout=0.1).train()
    pruned = prune_heads(mha, [0, 2])
    assert pruned.training and pruned.attention.dropout.p == 0.1
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    # 2 of 4 heads (d = 2) go: 2*2 rows of W_q, W_k, W_v (8 inputs each), 2*2 columns of W_o
    assert count(pruned) == count(mha) - 4 * (2 * 2) * 8 == 128


@pytest.mark.parametrize(
    "heads, match",
    [
        ([4], r"\[0, 4\)"),
        ([-1], r"\[0, 4\)"),
        ([1, 1], "repeat"),
        ([0, 1, 2, 3], "all 4 heads"),
        ("ab", "integer"),
        ("1", "iterable of integer head indices, got '1'"),  # int("1") would prune head 1
        ([0.7], r"integer head indices.*\[0\.7\]"),  # int(0.7) would prune head 0
        ([True], r"not bools.*\[True\]"),  # int(True) would prune head 1
        (torch.tensor([1.0]), "integer tensor.*float32"),
        (torch.tensor([True]), "integer tensor.*bool"),
        (torch.tensor([[1]]), r"0-D or 1-D.*\(1, 1\)"),
        (1, "iterable"),
    ],
)
def test_prune_heads_rejects_bad_heads(heads, match):
    mha = MultiHeadAttention(8, 8, 8, 8, 4, dropout=0.0)
    with pytest.raises(ValueError, match=match):
        prune_heads(mha, heads)


def test_prune_heads_accepts_integer_tensors_and_numpy_ints():
    import numpy as np

    mha = MultiHeadAttention(8, 8, 8, 8, 4, dropout=0.0)
    for heads in (torch.tensor([1, 3]), [np.int64(1), np.int64(3)], (3, 1)):
        assert prune_heads(mha, heads).num_heads == 2
    assert prune_heads(mha, torch.tensor(2)).num_heads == 3  # a 0-D tensor names one head
    assert torch.equal(head_gates(4, torch.tensor([0])), torch.tensor([0.0, 1.0, 1.0, 1.0]))


def test_prune_heads_leaves_the_global_rng_alone():
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 8, 8, 8, 4, dropout=0.0)
    state = torch.get_rng_state()
    prune_heads(mha, [1])
    assert torch.equal(torch.get_rng_state(), state)


def test_prune_heads_rejects_other_modules():
    with pytest.raises(ValueError, match="mha must be a MultiHeadAttention"):
        prune_heads(torch.nn.Linear(2, 2), [0])


def test_prune_model_and_pruning_curve(small):
    model, batch = small
    smaller = prune_model(model, [2])
    assert smaller.num_heads == 2 and model.num_heads == 3
    torch.testing.assert_close(
        smaller(batch.tokens, batch.valid_lens),
        model(batch.tokens, batch.valid_lens, head_mask=head_gates(3, [2])),
    )
    curve = pruning_curve(model, [2, 0, 1], lambda m: accuracy(m, batch))
    assert curve == [
        accuracy(model, batch),
        accuracy(model, batch, head_gates(3, [2])),
        accuracy(model, batch, head_gates(3, [2, 0])),
    ]


@pytest.mark.parametrize("args, match", [
    ((None, [0, 1, 2], len), "model must be a torch.nn.Module whose attention layer is a MultiHeadAttention"),
    ((torch.nn.Linear(2, 2), [0], len), "model must be a torch.nn.Module whose attention layer"),
    (("model", [2, 0], len), "order must list every one of the 3 heads once"),
    (("model", [2, 0, 0], len), "order must not repeat"),
    (("model", [2, 0, 3], len), r"order must be indices in \[0, 3\)"),
    (("model", [2, 0, 1], None), "evaluate must be a function of the model"),
])
def test_pruning_curve_rejects_bad_input(small, args, match):
    model, _ = small
    args = tuple(model if a == "model" else a for a in args)
    with pytest.raises(ValueError, match=match):
        pruning_curve(*args)


def test_prune_model_rejects_other_models():
    with pytest.raises(ValueError, match="model must be a torch.nn.Module whose attention layer"):
        prune_model(torch.nn.Linear(2, 2), [0])


def test_pruned_speedups_times_every_model_in_eval_mode_and_restores_modes(small, monkeypatch):
    model, batch = small
    other = prune_model(model, [0]).train()
    calls = []

    def fake_time_paired(fns, *, repeats):  # stands in for the clock: fixed, known times
        calls.append((list(fns), repeats, model.training, other.training))
        for fn in fns.values():
            assert fn().shape == (len(batch), batch.tokens.shape[1], 10)  # each partial runs the model
        return {"model 0": [2.0, 4.0, 6.0], "model 1": [1.0, 1.0, 2.0], "model 2": [2.0, 4.0, 6.0]}

    monkeypatch.setattr("mha_lib.importance.time_paired", fake_time_paired)
    ratios = pruned_speedups(model, [other, model], (batch.tokens, batch.valid_lens), repeats=3)
    assert calls == [(["model 0", "model 1", "model 2"], 3, False, False)]  # one call, all in eval
    assert [(r.median, r.min, r.max) for r in ratios] == [(3.0, 2.0, 4.0), (1.0, 1.0, 1.0)]
    assert other.training and not model.training  # modes restored


def test_pruned_speedups_restores_modes_when_timing_fails(small, monkeypatch):
    model, batch = small
    other = prune_model(model, [0]).train()

    def broken(fns, *, repeats):
        raise RuntimeError("interrupted")

    monkeypatch.setattr("mha_lib.importance.time_paired", broken)
    with pytest.raises(RuntimeError, match="interrupted"):
        pruned_speedups(model, [other], (batch.tokens, batch.valid_lens))
    assert other.training


@pytest.mark.parametrize("args, match", [
    (("model", "model", "inputs"), "others must be a sequence of models"),
    (("model", ["model", 3], "inputs"), r"others\[1\] must be a torch.nn.Module, got int"),
    ((None, ["model"], "inputs"), "reference must be a torch.nn.Module"),
    (("model", ["model"], "tokens"), "inputs must be a tuple of the models' positional arguments"),
])
def test_pruned_speedups_rejects_bad_input(small, args, match):
    model, batch = small
    sub = {"model": model, "inputs": (batch.tokens, batch.valid_lens), "tokens": batch.tokens}

    def resolve(a):
        if isinstance(a, list):
            return [resolve(x) for x in a]
        return sub.get(a, a) if isinstance(a, str) else a

    with pytest.raises(ValueError, match=match):
        pruned_speedups(*[resolve(a) for a in args])


def test_gradient_importance_runs_in_eval_mode_and_restores_the_mode(small):
    model, batch = small
    trained = DigitAttentionModel(model.config)
    trained.load_state_dict(model.state_dict())
    trained.train()
    torch.testing.assert_close(_importance(trained, batch), _importance(model, batch))
    assert trained.training


# --- eval_mode (mha_lib._modes) --------------------------------------------------------------


def test_eval_mode_sets_eval_and_restores_mixed_modes():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.5)).train()
    model[1].eval()  # mixed modes: the container trains, the dropout does not
    with eval_mode(model) as m:
        assert m is model
        assert not any(sub.training for sub in model.modules())
    assert [sub.training for sub in model.modules()] == [True, True, False]


def test_eval_mode_restores_the_mode_after_an_exception():
    model = torch.nn.Linear(2, 2).train()
    with pytest.raises(KeyError):
        with eval_mode(model):
            raise KeyError("boom")
    assert model.training


def test_eval_mode_rejects_non_modules():
    with pytest.raises(ValueError, match="module must be a torch.nn.Module, got int"):
        with eval_mode(3):
            pass


def test_meta_tensors_get_a_clear_error():
    with pytest.raises(ValueError, match="weights is on the meta device"):
        attention_entropy(torch.zeros(1, 1, 2, 2, device="meta"))
    with pytest.raises(ValueError, match="x must hold values.*meta"):
        ranks(torch.zeros(3, device="meta"))
    with pytest.raises(ValueError, match="mha must hold weights.*meta"):
        prune_heads(MultiHeadAttention(4, 4, 4, 4, 2, 0.0).to("meta"), [0])
