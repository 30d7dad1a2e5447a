"""Every module that is rebuilt keeps every option: the settings object (``module.settings``).

For each option of ``MultiHeadAttention``, ``GroupedQueryAttention`` and ``TransformerBlock``
(sizes, dropout, bias, output width, key/value heads, rotary positions, pre/post-LN, eps), a
module made by pruning, by ``gqa_from_mha``, by ``TransformerBlock.from_torch`` or by
``rebuild`` has the option, and its settings describe it: a module built from them holds
parameters of the same shapes and, given the same weights, computes the same output.
"""

import dataclasses
import inspect

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from mha_lib import MultiHeadAttention
from mha_lib._settings import build, rebuild
from mha_lib.block import TransformerBlock
from mha_lib.gqa import GroupedQueryAttention, gqa_from_mha
from mha_lib.importance import head_gates, prune_heads
from mha_lib.options import Options, RopeOptions
from mha_lib.positions import Rope
from mha_lib.scores import alibi, softcap

CLASSES = (MultiHeadAttention, GroupedQueryAttention, TransformerBlock)


@st.composite
def mha_settings(draw, self_attention=False):
    """Any ``MultiHeadAttention.Settings``: one strategy per option."""
    H, d = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    D = H * d
    size = st.just(D) if self_attention else st.integers(1, 5)
    options = dict(key_size=size, query_size=size, value_size=size, d_model=st.just(D),
                   num_heads=st.just(H), dropout=st.sampled_from([0.0, 0.25]),
                   bias=st.booleans(), output_size=st.none() if self_attention else st.none() | st.integers(1, 5),
                   score_mod=_score_mods(H), sink_logits=st.booleans(), gate=_gates(),
                   qk_norm=_qk_norms(), backend=_backends())
    assert set(options) == _fields(MultiHeadAttention)  # a new option needs a strategy here
    return MultiHeadAttention.Settings(**{name: draw(s) for name, s in options.items()})


@st.composite
def gqa_settings(draw):
    Hkv, g, half = draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(st.integers(1, 2))
    H, rope = Hkv * g, draw(_ropes(half))
    options = dict(d_model=st.just(H * 2 * half), num_heads=st.just(H), num_kv_heads=st.just(Hkv),
                   dropout=st.sampled_from([0.0, 0.25]), bias=st.booleans(), rope=st.just(rope),
                   score_mod=_score_mods(H), sink_logits=st.booleans(), gate=_gates(),
                   rope_scale=_rope_scales(rope is True), qk_norm=_qk_norms(), backend=_backends())
    assert set(options) == _fields(GroupedQueryAttention)
    return GroupedQueryAttention.Settings(**{name: draw(s) for name, s in options.items()})


@st.composite
def block_settings(draw):
    H, half = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    kv = draw(st.none() | st.sampled_from([h for h in (1, H) if H % h == 0]))
    rope = draw(_ropes(half))
    options = dict(d_model=st.just(H * 2 * half), num_heads=st.just(H), d_ff=st.integers(1, 6),
                   dropout=st.sampled_from([0.0, 0.25]), norm_first=st.booleans(),
                   layer_norm_eps=st.sampled_from([1e-5, 1e-3]), num_kv_heads=st.just(kv),
                   rope=st.just(rope), score_mod=_score_mods(H), sink_logits=st.booleans(),
                   gate=_gates(), rope_scale=_rope_scales(rope is True), qk_norm=_qk_norms(),
                   backend=_backends())
    assert set(options) == _fields(TransformerBlock)
    return TransformerBlock.Settings(**{name: draw(s) for name, s in options.items()})


def _score_mods(H: int):
    """None, or a score modification of every kind (one of H heads, one of none, both)."""
    return st.sampled_from([None, softcap(5.0), alibi(H), alibi(H) >> softcap(3.0)])


def _rope_scales(rope: bool):
    """Plain RoPE or position interpolation (a scale only with RoPE=True)."""
    return st.sampled_from([1.0, 0.5, 0.25]) if rope else st.just(1.0)


def _ropes(half: int):
    """No RoPE, RoPE=True (then with a scale, drawn by _rope_scales), or a position spec of
    each kind that fits a head of d = 2 * half features."""
    specs = [Rope(base=500.0), Rope(scale=0.5), Rope(yarn=2.0, original_length=8)]
    if half == 2:  # (d = 4: room for NTK and a partial rotation)
        specs += [Rope(ntk=2.0), Rope(partial=0.5)]
    return st.sampled_from([False, True, *specs])


def _backends():
    """The default paths only: the FlexAttention route compiles per shape (its numbers and its
    setting kept by conversions: tests/core/test_flex.py)."""
    return st.just("auto")


def _qk_norms():
    """No QK-norm, per head, over the width, or per head without a weight."""
    return st.sampled_from([None, "head", "width", "l2"])


def _perturbed(module: nn.Module) -> nn.Module:
    """``module`` with every weight moved off its initial value (a fresh norm's weights are all
    ones: a copy that forgot them would pass)."""
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.rand(p.shape, generator=gen, dtype=p.dtype) - 0.5)
    return module


def _gates():
    """No output gate, one per head, or one per feature."""
    return st.sampled_from([None, "head", "element"])


def _fields(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls.Settings)}


def _call(module, x, **kwargs):
    """The module on self-attention inputs (the sizes of its settings)."""
    if isinstance(module, TransformerBlock):
        return module(x)
    s = module.settings
    if isinstance(module, MultiHeadAttention):
        B, L = x.shape[:2]
        gen = torch.Generator().manual_seed(3)
        keys = torch.randn(B, L + 1, s.key_size, generator=gen, dtype=x.dtype)
        values = torch.randn(B, L + 1, s.value_size, generator=gen, dtype=x.dtype)
        return module(x, keys, values, **kwargs)
    return module(x, x, x, **kwargs)


def _input(module, dtype=torch.float32):
    s = module.settings
    width = s.query_size if isinstance(module, MultiHeadAttention) else s.d_model
    return torch.randn(2, 4, width, generator=torch.Generator().manual_seed(1), dtype=dtype)


def assert_described(module: nn.Module) -> None:
    """``module.settings`` is the whole truth: a module built from them has parameters of the
    same shapes and the same dropout rates, and with ``module``'s weights the same output."""
    fresh = build(type(module), module.settings, like=module)
    shapes = {k: v.shape for k, v in module.state_dict().items()}
    assert {k: v.shape for k, v in fresh.state_dict().items()} == shapes
    rates = [m.p for m in module.modules() if isinstance(m, nn.Dropout)]
    assert [m.p for m in fresh.modules() if isinstance(m, nn.Dropout)] == rates
    fresh.load_state_dict(module.state_dict())
    x = _input(module, next(module.parameters()).dtype)
    with torch.no_grad():
        torch.testing.assert_close(_call(fresh.eval(), x), _call(module.eval(), x))


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_settings_are_the_constructor_arguments(cls):
    params = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
    assert [f.name for f in dataclasses.fields(cls.Settings)] == params
    defaults = {p.name: p.default for p in inspect.signature(cls.__init__).parameters.values()
                if p.default is not inspect.Parameter.empty}
    assert {f.name: f.default for f in dataclasses.fields(cls.Settings)
            if f.default is not dataclasses.MISSING} == defaults


@pytest.mark.parametrize("cls, record", [(MultiHeadAttention, Options), (GroupedQueryAttention, RopeOptions),
                                         (TransformerBlock, RopeOptions)], ids=lambda c: c.__name__)
def test_the_options_are_declared_once_in_their_record(cls, record):
    """Each Settings is the sizes plus one options record; the constructor takes those options by
    name (and refuses another name, as Python refuses an unknown keyword)."""
    assert issubclass(cls.Settings, record)
    names = [f.name for f in dataclasses.fields(record)]
    assert [f.name for f in dataclasses.fields(cls.Settings)][-len(names):] == names
    if cls is not TransformerBlock:
        assert cls.Options is record and cls.OPTIONS == {f.name: f.default for f in dataclasses.fields(record)}
    sizes = {MultiHeadAttention: (4, 4, 4, 4, 2, 0.0), GroupedQueryAttention: (4, 2, 1, 0.0),
             TransformerBlock: (4, 2, 8, 0.0)}[cls]
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        cls(*sizes, colour="red")


@settings(max_examples=40, deadline=None)
@given(s=st.one_of(mha_settings(), gqa_settings(), block_settings()), training=st.booleans(),
       double=st.booleans())
def test_a_module_keeps_its_settings_and_rebuild_keeps_every_other_option(s, training, double):
    cls = {MultiHeadAttention.Settings: MultiHeadAttention,
           GroupedQueryAttention.Settings: GroupedQueryAttention,
           TransformerBlock.Settings: TransformerBlock}[type(s)]
    module = build(cls, s)
    module = module.to(torch.float64 if double else torch.float32).train(training)
    assert module.settings == s
    assert_described(module)
    module.train(training)
    state = torch.random.get_rng_state()
    same = rebuild(module)
    assert torch.equal(torch.random.get_rng_state(), state)  # no draw from the global generator
    assert type(same) is cls and same.settings == s and same.training == training
    assert next(same.parameters()).dtype == next(module.parameters()).dtype
    changed = rebuild(module, dropout=0.5)
    assert changed.settings == dataclasses.replace(s, dropout=0.5)
    assert {m.p for m in changed.modules() if isinstance(m, nn.Dropout)} == {0.5}


def test_rebuild_names_an_unknown_setting():
    mha = MultiHeadAttention(4, 4, 4, 4, 2, 0.0)
    with pytest.raises(ValueError, match="no setting 'rope'"):
        rebuild(mha, rope=True)
    with pytest.raises(ValueError, match="settings must be a GroupedQueryAttention.Settings"):
        build(GroupedQueryAttention, mha.settings)


@settings(max_examples=40, deadline=None)
@given(s=mha_settings(), training=st.booleans(), data=st.data())
def test_pruning_keeps_every_option(s, training, data):
    mha = _perturbed(build(MultiHeadAttention, s)).train(training)
    H, d, out = s.num_heads, s.d_model // s.num_heads, s.output_size or s.d_model
    removed = data.draw(st.lists(st.integers(0, H - 1), unique=True, max_size=H - 1))
    if s.qk_norm == "width":  # (a norm over every head: no head can leave it)
        with pytest.raises(ValueError, match="qk_norm"):
            prune_heads(mha, removed)
        return
    pruned = prune_heads(mha, removed)
    width = (H - len(removed)) * d
    kept = [h for h in range(H) if h not in removed]  # (ALiBi keeps the slopes of these heads)
    score_mod = None if s.score_mod is None else s.score_mod.for_heads(kept)
    assert pruned.settings == dataclasses.replace(
        s, d_model=width, num_heads=H - len(removed), output_size=out, score_mod=score_mod)
    assert pruned.settings.output_size == (None if width == out else out)  # (None: the default)
    assert pruned.training == training and pruned.W_o.out_features == out
    assert_described(pruned)
    x = _input(mha)
    with torch.no_grad():  # the same output as the gated original
        torch.testing.assert_close(_call(pruned.eval(), x),
                                   _call(mha.eval(), x, head_mask=head_gates(H, removed)))
    if H - len(removed) > 1:  # pruned again: its settings are still the whole truth
        assert_described(prune_heads(pruned, [0]))


@settings(max_examples=30, deadline=None)
@given(s=mha_settings(self_attention=True), training=st.booleans())
def test_gqa_from_mha_keeps_every_option(s, training):
    mha = _perturbed(build(MultiHeadAttention, s)).train(training)
    gqa = gqa_from_mha(mha, s.num_heads)
    # each option of mha: carried over by name, or a size that must equal D
    carried = {f.name: getattr(s, f.name) for f in dataclasses.fields(s)
               if f.name in _fields(GroupedQueryAttention)}
    assert carried == {n: getattr(gqa.settings, n) for n in carried}
    assert set(_fields(MultiHeadAttention)) - set(carried) == {"key_size", "query_size",
                                                              "value_size", "output_size"}
    assert gqa.training == training
    assert_described(gqa)
    x = _input(mha)
    with torch.no_grad():
        torch.testing.assert_close(gqa.eval()(x, x, x), mha.eval()(x, x, x), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("size", ["query_size", "output_size"])
def test_gqa_from_mha_refuses_an_option_it_cannot_keep(size):
    mha = MultiHeadAttention(4, 4, 4, 4, 2, 0.0, **{"output_size": 3} if size == "output_size" else {})
    if size == "query_size":
        mha = rebuild(mha, query_size=5)
    with pytest.raises(ValueError, match=size):
        gqa_from_mha(mha, 1)


@settings(max_examples=20, deadline=None)
@given(D_per_head=st.integers(1, 3), H=st.integers(1, 3), d_ff=st.integers(1, 6),
       dropout=st.sampled_from([0.0, 0.25]), norm_first=st.booleans(),
       eps=st.sampled_from([1e-5, 1e-3]), training=st.booleans())
def test_block_from_torch_keeps_every_option(D_per_head, H, d_ff, dropout, norm_first, eps, training):
    D = D_per_head * H
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(D, H, d_ff, dropout, batch_first=True, norm_first=norm_first,
                                       layer_norm_eps=eps).train(training)
    block = TransformerBlock.from_torch(layer)
    assert block.settings == TransformerBlock.Settings(D, H, d_ff, dropout, norm_first, eps)
    assert block.training == training
    assert_described(block)
    x = torch.randn(2, 3, D)
    with torch.no_grad():
        torch.testing.assert_close(block.eval()(x), layer.eval()(x), atol=1e-5, rtol=1e-5)
