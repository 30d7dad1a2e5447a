"""Every public path runs on the device of its inputs, checked without a GPU.

On a GPU, a tensor the library makes on the CPU (``torch.arange(L)`` without ``device=``, a mask
built where a mask without data "lives") meets the CUDA inputs and PyTorch raises "Expected all
tensors to be on the same device". CI has no GPU, so this test puts the inputs on *another
device* that a CPU can run: :class:`Elsewhere` is a CPU tensor that reports ``device='lazy'``
(a device type PyTorch's CPU build knows but never uses here), and :class:`ElsewhereMode`
runs every operation on the CPU data, makes the tensors a factory creates with
``device='lazy'`` elsewhere too, and raises :class:`StrayTensor` where a tensor made on the CPU
meets one from elsewhere. Values stay real: checks that read them work, outputs are compared
with the CPU's, and every read back to the host is counted (a GPU would wait for each).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

from mha_lib import DotProductAttention, MultiHeadAttention, masked_softmax
from mha_lib.block import TransformerBlock
from mha_lib.decoding import KVCache
from mha_lib.flash import tiled_attention
from mha_lib.gqa import GroupedQueryAttention
from mha_lib.latent import LatentAttention, LatentCache
from mha_lib.lm import Config, StoryLM
from mha_lib.masks import causal, chunked, document, padding, prefix_lm, sinks, sliding_window
from mha_lib.scores import alibi, softcap

OTHER = torch.device("lazy")
#: Operations that bring a value back to the host (a GPU waits for the device to get there).
HOST_READS = {torch.ops.aten._local_scalar_dense.default, torch.ops.aten.is_nonzero.default,
              torch.ops.aten.equal.default}


class StrayTensor(AssertionError):
    """A tensor made on the CPU met the inputs' device."""


class Elsewhere(torch.Tensor):
    """A CPU tensor that reports another device (only :class:`ElsewhereMode` computes with it)."""

    @staticmethod
    def __new__(cls, inner: torch.Tensor):
        return torch.Tensor._make_wrapper_subclass(
            cls, inner.shape, strides=inner.stride(), storage_offset=inner.storage_offset(),
            dtype=inner.dtype, device=OTHER, requires_grad=inner.requires_grad)

    def __init__(self, inner: torch.Tensor):
        self.inner = inner

    def __repr__(self) -> str:
        return f"Elsewhere({self.inner!r})"

    def tolist(self):  # (PyTorch reads a subclass's values only through its operations)
        for mode in _ACTIVE:
            mode.reads.append("tolist")
        return self.inner.tolist()

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise AssertionError("an Elsewhere tensor is used only inside ElsewhereMode")


_ACTIVE: list["ElsewhereMode"] = []


class ElsewhereMode(TorchDispatchMode):
    """Run every operation on the CPU data; see the module docstring. ``reads`` lists the
    operations that read a value of a tensor from elsewhere back to the host."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []
        self.moves: list[str] = []  # CPU tensors copied to the inputs' device

    def __enter__(self):
        _ACTIVE.append(self)
        self._factories = _Factories().__enter__()
        return super().__enter__()

    def __exit__(self, *exc):
        _ACTIVE.remove(self)
        self._factories.__exit__(*exc)
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        elsewhere, stray = False, []

        def unwrap(x):
            nonlocal elsewhere
            if isinstance(x, Elsewhere):
                elsewhere = True
                return x.inner
            if isinstance(x, torch.Tensor) and x.dim() > 0:  # (a 0-d CPU tensor may meet CUDA)
                stray.append(tuple(x.shape))
            if isinstance(x, torch.device) and x.type == OTHER.type:
                elsewhere = True
                return torch.device("cpu")
            return x

        args, kwargs = tree_map(unwrap, (args, kwargs or {}))
        if elsewhere and stray and func in (torch.ops.aten._to_copy.default, torch.ops.aten.copy_.default):
            self.moves.append(f"{func} {stray}")  # moved on purpose: allowed, and counted
            stray = []
        if elsewhere and stray:
            raise StrayTensor(f"{func}: tensors made on the CPU, shapes {stray}, meet tensors on the inputs' device")
        if elsewhere and func in HOST_READS:
            self.reads.append(str(func))
        out = func(*args, **kwargs)
        if not elsewhere or func in HOST_READS:
            return out
        return tree_map(lambda t: Elsewhere(t) if type(t) is torch.Tensor else t, out)


class _Factories(TorchFunctionMode):
    """``torch.tensor(data, device=...)`` and the like, asked for the other device: made on the
    CPU and reported there (PyTorch builds them without passing through a dispatch mode)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        device = kwargs.get("device")
        if device is not None and torch.device(device).type == OTHER.type:
            return tree_map(lambda t: Elsewhere(t) if type(t) is torch.Tensor else t,
                            func(*args, **{**kwargs, "device": "cpu"}))
        return func(*args, **kwargs)


def elsewhere(x):
    """A tensor (or every tensor of a nested structure) moved to the other device."""
    return tree_map(lambda t: Elsewhere(t) if isinstance(t, torch.Tensor) else t, x)


def move_module(module: nn.Module) -> nn.Module:
    """The module's parameters and buffers, in place, moved to the other device."""
    for sub in module.modules():
        for store in (sub._parameters, sub._buffers):
            for name, t in store.items():
                if t is not None:
                    store[name] = Elsewhere(t.detach())
    return module


def back(x):
    """The CPU data of an output (or of every tensor of a nested structure)."""
    return tree_map(lambda t: t.inner if isinstance(t, Elsewhere) else t, x)


def run_elsewhere(fn, *args, **kwargs):
    """fn on the other device: (its output's CPU data, the host reads and the CPU tensors
    copied to the device)."""
    with ElsewhereMode() as mode, torch.no_grad():
        out = fn(*elsewhere(args), **elsewhere(kwargs))
    return back(out), mode.reads + mode.moves


# --- the guard guards ----------------------------------------------------------------------------


def test_the_guard_catches_a_tensor_made_on_the_cpu():
    x = Elsewhere(torch.ones(3))
    with ElsewhereMode(), pytest.raises(StrayTensor):
        x + torch.arange(3)  # made without device=
    with ElsewhereMode():
        y = x + torch.arange(3, device=x.device)  # made where the inputs are
    assert y.device == OTHER and torch.equal(back(y), torch.tensor([1.0, 2.0, 3.0]))


def test_the_guard_counts_host_reads():
    with ElsewhereMode() as mode:
        x = Elsewhere(torch.arange(4.0))
        int(x.argmax())
        bool((x > 1).any())
    assert len(mode.reads) == 2, mode.reads


# --- every path, every mask kind ---------------------------------------------------------------

B, L, D, H = 2, 6, 8, 2
DOC_IDS = torch.tensor([[0, 0, 0, 1, 1, 1], [0, 1, 1, 1, 2, 2]])
#: Each mask kind, its data put where ``put`` puts it (the CPU for the reference run).
MASKS = {
    "none": lambda put: None,
    "causal": lambda put: causal(),
    "sliding_window": lambda put: sliding_window(3),
    "window_or_sinks": lambda put: sliding_window(2) | sinks(1),
    "causal_and_document": lambda put: causal() & document(put(DOC_IDS)),
    "prefix_lm": lambda put: prefix_lm(3),
    "prefix_lm_per_example": lambda put: prefix_lm(put(torch.tensor([2, 4]))),
    "chunked": lambda put: chunked(2),
    "padding": lambda put: padding(put(torch.tensor([3, 6]))),
    "document_on_the_cpu": lambda put: causal() & document(DOC_IDS),  # the reader's data, moved
}
MASKS_WITHOUT_DATA = ("none", "causal", "sliding_window", "window_or_sinks", "prefix_lm", "chunked")


#: Score modifications and sink logits (the layers' arguments); each reaches every path.
SCORES = {
    "plain": {},
    "alibi_sinks": {"score_mod": alibi(H), "sink_logits": True},  # the fused kernel: a float mask, a key more
    "softcap": {"score_mod": softcap(2.0)},  # the weights path
    "alibi_softcap_sinks": {"score_mod": alibi(H) >> softcap(2.0), "sink_logits": True},
}


def _layers(scores=SCORES["plain"]):
    torch.manual_seed(0)
    layers = {
        "mha": MultiHeadAttention(D, D, D, D, H, 0.0, **scores).eval(),
        "gqa": GroupedQueryAttention(D, H, 1, 0.0, rope=True, **scores).eval(),
        "block": TransformerBlock(D, H, 16, 0.0, **scores).eval(),
    }
    with torch.no_grad():
        for layer in layers.values():
            for p in (m.sink_logits for m in layer.modules() if getattr(m, "sink_logits", None) is not None):
                p.normal_()
    return layers


def _x():
    return torch.randn(B, L, D, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("scores", list(SCORES))
@pytest.mark.parametrize("mask_name", list(MASKS))
@pytest.mark.parametrize("layer_name", ["mha", "gqa", "block"])
@pytest.mark.parametrize("need_weights", [False, True])
def test_layers_run_on_the_inputs_device(layer_name, mask_name, need_weights, scores):
    layer, x, mask = _layers(SCORES[scores])[layer_name], _x(), MASKS[mask_name]

    def call(x, put):
        args = (x,) if layer_name == "block" else (x, x, x)
        return layer(*args, mask=mask(put), need_weights=need_weights)

    with torch.no_grad():
        expected = call(x, lambda t: t)
    move_module(layer)
    out, reads = run_elsewhere(lambda x: call(x, Elsewhere), x)
    torch.testing.assert_close(out, expected)
    if mask_name in MASKS_WITHOUT_DATA:
        assert reads == [], reads


@pytest.mark.parametrize("mask_name", list(MASKS))
def test_attention_functions_run_on_the_inputs_device(mask_name):
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(B, L, 4, generator=g) for _ in range(3))
    mask = MASKS[mask_name]
    tiled = lambda q, k, v, mask: tiled_attention(q, k, v, mask=mask, block_size=4)
    tiled_alibi = lambda q, k, v, mask: tiled_attention(q, k, v, mask=mask, block_size=4,
                                                        score_mod=alibi(B) >> softcap(2.0))
    for fn in (DotProductAttention(0.0), tiled, tiled_alibi):
        expected = fn(q, k, v, mask=mask(lambda t: t))
        out, _ = run_elsewhere(lambda q, k, v: fn(q, k, v, mask=mask(Elsewhere)), q, k, v)
        torch.testing.assert_close(out, expected)


def test_valid_lengths_and_head_gates_on_the_inputs_device():
    mha, x = _layers()["mha"], _x()
    lens, gates = torch.tensor([[1, 2, 3, 4, 5, 6], [6, 5, 0, 3, 2, 1]]), torch.tensor([1.0, 0.5])
    with torch.no_grad():
        expected = [mha(x, x, x, lens, head_mask=gates, need_weights=w) for w in (False, True)]
    move_module(mha)
    for need_weights, expected in zip((False, True), expected):
        out, reads = run_elsewhere(
            lambda x, lens, gates: mha(x, x, x, lens, head_mask=gates, need_weights=need_weights),
            x, lens, gates)
        torch.testing.assert_close(out, expected)
        assert len(reads) == 1, reads  # the lengths, the gates and the inputs' finiteness at once
    scores = torch.randn(B, 3, 5)
    out, _ = run_elsewhere(masked_softmax, scores, torch.tensor([2, 0]))
    torch.testing.assert_close(out, masked_softmax(scores, torch.tensor([2, 0])))


@pytest.mark.parametrize("scores", list(SCORES))
@pytest.mark.parametrize("window", [None, 3])
@pytest.mark.parametrize("layer_name", ["mha", "gqa"])
def test_decoding_with_a_cache_on_the_inputs_device(layer_name, window, scores):
    layer, x = _layers(SCORES[scores])[layer_name], _x()

    def decode(x):
        cache, outs = KVCache(1, window=window), []
        outs.append(layer(x[:, :3], x[:, :3], x[:, :3], cache=cache[0]))
        for t in range(3, L):  # one token at a time
            outs.append(layer(x[:, t:t + 1], x[:, t:t + 1], x[:, t:t + 1], cache=cache[0]))
        if window is None:  # each example at its own positions (a rolling cache only appends)
            outs.append(layer(x[:, :2], x[:, :2], x[:, :2], cache=cache[0],
                              positions=torch.tensor([[L - 1, L], [L, L + 1]], device=x.device)))
        return torch.cat(outs, dim=1)

    with torch.no_grad():
        expected = decode(x)
    move_module(layer)
    out, _ = run_elsewhere(decode, x)
    torch.testing.assert_close(out, expected)


def _today_layers():
    """Gated attention and multi-head latent attention (chapter 12c), seeded."""
    torch.manual_seed(0)
    return {
        "mha_head_gate": MultiHeadAttention(D, D, D, D, H, 0.0, gate="head").eval(),
        "gqa_element_gate": GroupedQueryAttention(D, H, 1, 0.0, rope=True, gate="element").eval(),
        "block_head_gate": TransformerBlock(D, H, 16, 0.0, gate="head").eval(),
        "mla": LatentAttention(D, D, D, D, H, 0.0, True, rank=4).eval(),
        "mla_rope": LatentAttention(D, D, D, D, H, 0.0, True, rank=4, rope=True).eval(),
    }


@pytest.mark.parametrize("mask_name", ["none", "causal", "window_or_sinks", "padding", "document_on_the_cpu"])
@pytest.mark.parametrize("layer_name", list(_today_layers()))
def test_gated_and_latent_layers_run_on_the_inputs_device(layer_name, mask_name):
    layer, x, mask = _today_layers()[layer_name], _x(), MASKS[mask_name]
    calls = {"plain": lambda x, put: layer(*(x,) * (1 if layer_name.startswith("block") else 3),
                                           mask=mask(put))}
    if layer_name.startswith("m"):
        calls["weights"] = lambda x, put: layer(x, x, x, mask=mask(put), need_weights=True)
    if layer_name == "mla":
        calls["absorbed"] = lambda x, put: layer(x, x, x, mask=mask(put), absorbed=True)
    with torch.no_grad():
        expected = {name: call(x, lambda t: t) for name, call in calls.items()}
    move_module(layer)
    for name, call in calls.items():
        out, reads = run_elsewhere(lambda x: call(x, Elsewhere), x)
        torch.testing.assert_close(out, expected[name], msg=lambda m: f"{name}: {m}")
        if mask_name in MASKS_WITHOUT_DATA:
            assert reads == [], (name, reads)


@pytest.mark.parametrize("absorbed", [False, True])
def test_latent_attention_decodes_on_the_inputs_device(absorbed):
    layer, x = _today_layers()["mla"], _x()

    def decode(x):
        cache, outs = LatentCache(), []
        for new in (x[:, :3], *x[:, 3:].split(1, dim=1)):  # a prompt of 3, then one token at a time
            outs.append(layer(new, new, new, cache=cache, absorbed=absorbed))
        return torch.cat(outs, dim=1)

    with torch.no_grad():
        expected = decode(x)
    move_module(layer)
    out, _ = run_elsewhere(decode, x)
    torch.testing.assert_close(out, expected)


def test_the_language_model_generates_on_the_inputs_device():
    torch.manual_seed(0)
    lm = StoryLM(Config(d_model=16, num_heads=2, num_kv_heads=1, num_layers=2, d_ff=32)).eval()
    prompts = [[5, 6, 7], [8, 9]]
    expected = [lm.generate(prompts, 4, use_cache=use) for use in (True, False)]
    ids = torch.tensor([[5, 6, 7], [8, 9, 1]])
    with torch.no_grad():
        logits = lm(ids, [3, 2])
    move_module(lm)
    for use, want in zip((True, False), expected):
        tokens, _ = run_elsewhere(lambda: lm.generate(prompts, 4, use_cache=use))
        assert tokens == want
    out, _ = run_elsewhere(lambda ids: lm(ids, torch.tensor([3, 2], device=ids.device)), ids)
    torch.testing.assert_close(out, logits)


# --- the experiments' models and their measurements -------------------------------------------


def test_the_experiments_measure_on_the_models_device():
    from mha_lib import digits, induction, lm_eval, lm_heads, lm_sinks
    from mha_lib.stories import sample_stories

    torch.manual_seed(0)
    digit_model = digits.DigitAttentionModel(digits.Config()).eval()
    batch = digits.held_out_set(vocab_size=digits.Config().vocab_size, max_len=digits.Config().max_len)
    induction_model = induction.AttentionOnlyTransformer(induction.Config()).eval()
    tokens = induction.held_out_tokens(8, 6)
    story_model = StoryLM(Config(d_model=16, num_heads=2, num_kv_heads=1, num_layers=2, d_ff=32)).eval()
    stories = sample_stories(4, 1234)
    measures = {  # each on the CPU (the data stays there: the functions move it to the model)
        "digits": lambda: (digits.accuracy(digit_model, batch), digits.example_losses(digit_model, batch)),
        "induction": lambda: (induction.half_losses(induction_model, tokens),
                              induction.head_scores(induction_model, tokens)),
        "lm": lambda: lm_eval.evaluate(story_model, stories),
        "lm_heads": lambda: (lm_heads.find_heads(story_model, stories), lm_heads.ablate(story_model, stories)),
        "lm_sinks": lambda: (lm_sinks.sink_mass(story_model, stories),
                             lm_sinks.streaming_losses(story_model, stories, length=12, window=4, num_sinks=1)),
    }
    with torch.no_grad():
        expected = {name: measure() for name, measure in measures.items()}
    for model in (digit_model, induction_model, story_model):
        move_module(model)
    for name, measure in measures.items():
        got, _ = run_elsewhere(measure)
        torch.testing.assert_close(got, expected[name], equal_nan=True, rtol=1e-5, atol=1e-6,
                                   msg=lambda m: f"{name}: {m}")
