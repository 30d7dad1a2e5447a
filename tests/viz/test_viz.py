"""Tests of mha_lib.viz: heatmaps, the transposition picture, the live and static explorers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import mha_lib
from mha_lib.viz import attention_heatmaps, transposition_figure
from mha_lib.viz.transposition import _decode_index


def _weights(B=2, H=4, Lq=3, Lk=5, valid_lens=None, seed=0):
    torch.manual_seed(seed)
    mha = mha_lib.MultiHeadAttention(4, 4, 4, 8, H, 0.0).eval()
    q, kv = torch.randn(B, Lq, 4), torch.randn(B, Lk, 4)
    with torch.no_grad():
        _, w = mha(q, kv, kv, valid_lens, need_weights=True)
    return w  # (B, H, Lq, Lk)


def _z(trace) -> np.ndarray:
    return np.array(trace.z, dtype=float)


# ---------------------------------------------------------------- attention_heatmaps


def test_heatmaps_one_panel_per_example_and_head_with_meta():
    w = _weights(B=2, H=4)
    fig = attention_heatmaps(w)
    assert len(fig.data) == 8
    metas = [(t.meta["example"], t.meta["head"]) for t in fig.data]
    assert metas == [(b, h) for b in range(2) for h in range(4)]
    for trace in fig.data:
        b, h = trace.meta["example"], trace.meta["head"]
        np.testing.assert_allclose(_z(trace), w[b, h].numpy(), rtol=0, atol=1e-7)
    titles = [a.text for a in fig.layout.annotations]
    assert titles == [f"example {b}, head {h}" for b in range(2) for h in range(4)]


def test_heatmaps_single_example_titles_and_axes():
    w = _weights(B=1, H=2)[0]  # (H, Lq, Lk)
    fig = attention_heatmaps(w, query_labels=["a", "b", "c"], key_labels=list("vwxyz"), title="T")
    assert [a.text for a in fig.layout.annotations] == ["head 0", "head 1"]
    assert fig.layout.title.text == "T"
    for h, trace in enumerate(fig.data):
        xaxis = fig.layout["xaxis" + trace.xaxis[1:]]
        yaxis = fig.layout["yaxis" + trace.yaxis[1:]]
        assert xaxis.title.text == "key"
        assert yaxis.title.text == ("query" if h == 0 else "")  # once per row of panels
        assert list(xaxis.ticktext) == list("vwxyz") and list(yaxis.ticktext) == ["a", "b", "c"]
        assert yaxis.autorange == "reversed"  # first query at the top
        assert list(trace.x) == ["0: v", "1: w", "2: x", "3: y", "4: z"]  # unique categories


def test_heatmaps_share_one_colour_scale():
    fig = attention_heatmaps(_weights(B=2, H=2))
    assert {t.coloraxis for t in fig.data} == {"coloraxis"}
    assert fig.layout.coloraxis.cmin == 0 and fig.layout.coloraxis.cmax == 1
    assert fig.layout.coloraxis.colorscale[0][1].lower() == "#440154"  # viridis


def test_heatmaps_masked_keys_are_gaps_with_masked_hover():
    valid = torch.tensor([2, 5])
    w = _weights(B=2, H=2, valid_lens=valid)
    fig = attention_heatmaps(w, valid_lens=valid)
    for trace in fig.data:
        b = trace.meta["example"]
        z = _z(trace)
        assert np.isnan(z[:, valid[b]:]).all()
        assert not np.isnan(z[:, : valid[b]]).any()
        assert all(row[j] == "masked" for row in trace.text for j in range(valid[b], 5))
        assert trace.text[0][0].startswith("weight ")
    assert any("masked" in a.text for a in fig.layout.annotations)


def test_heatmaps_wrap_after_max_cols():
    fig = attention_heatmaps(_weights(B=1, H=4), max_cols=2)
    domains = [tuple(fig.layout["xaxis" + t.xaxis[1:]].domain) for t in fig.data]
    assert domains[0] == domains[2] and domains[1] == domains[3] and domains[0] != domains[1]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"weights": torch.full((3, 3), 0.5)}, "weights must have shape"),
        ({"weights": torch.full((1, 2, 2), 2.0)}, r"weights must lie in \[0, 1\]"),
        ({"weights": torch.full((1, 2, 2), float("nan"))}, "finite"),
        ({"weights": "abc"}, "weights must"),
        ({"weights": torch.full((1, 2, 2), 0.5), "query_labels": ["a"]}, "query_labels must hold 2"),
        ({"weights": torch.full((1, 2, 2), 0.5), "key_labels": "ab"}, "key_labels must be a sequence"),
        ({"weights": torch.full((1, 2, 2), 0.5), "max_cols": 0}, "max_cols"),
        ({"weights": torch.full((1, 2, 2), 0.5), "valid_lens": [3]}, "valid_lens"),
        ({"weights": torch.full((1, 2, 2), 0.5), "title": 3}, "title must be a string or None"),
        ({"weights": torch.zeros(1, 2, 2, device="meta")}, "weights must hold numbers"),
        ({"weights": torch.full((1, 2, 2), 0.5), "valid_lens": torch.ones(1, device="meta")},
         "valid_lens must hold numbers"),
        ({"weights": torch.full((1, 2, 2), 0.5), "keep": torch.ones(2, dtype=torch.bool,
                                                                      device="meta")},
         "keep must hold booleans"),
        ({"weights": torch.full((1, 2, 2), 0.5), "valid_lens": 1}, "must be 0 on the keys"),
    ],
)
def test_heatmaps_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        attention_heatmaps(**kwargs)


# ---------------------------------------------------------------- transposition_figure


def test_transposition_figure_follows_transpose_qkv():
    B, L, H, d = 2, 3, 2, 2
    fig = transposition_figure(B, L, H, d)
    left, right = fig.data
    # Right panel: rows r*(L+1) + t hold transpose_qkv's output block r = b*H + h.
    for r in range(B * H):
        b, h = divmod(r, H)
        for t in range(L):
            for j in range(d):
                label = right.text[r * (L + 1) + t][j]
                assert label == f"b{b} t{t} f{h * d + j}"
                assert right.z[r * (L + 1) + t][j] == h
    # Left panel: the input in place, coloured by head f // d.
    assert left.text[L + 1][3] == "b1 t0 f3" and left.z[L + 1][3] == 1
    assert np.isnan(np.array(left.z, dtype=float)[L]).all()  # blank row between examples


def test_decode_index_roundtrip():
    assert _decode_index((1 * 3 + 2) * 4 + 3, 3, 4) == (1, 2, 3)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"num_heads": 0}, "num_heads"), ({"num_heads": 9}, "at most 8"),
     ({"seq_len": 2.5}, "seq_len"), ({"batch_size": 8, "seq_len": 8, "head_size": 8}, "too many")],
)
def test_transposition_figure_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        transposition_figure(**kwargs)


# ---------------------------------------------------------------- explorers

from mha_lib.viz import explore, static_explorer, static_explorer_html  # noqa: E402
from mha_lib.viz.scene import make_source, seeded_model, sentence_scene  # noqa: E402
from mha_lib.viz.static_explorer import CONTROLS_ID, DIV_ID  # noqa: E402


def _shown(fig):
    """{(example, head): z} of the visible heatmaps."""
    return {(t.meta["example"], t.meta["head"]): _z(t) for t in fig.data if t.visible}


def _assert_figure_shows(fig, weights, valid_lens, atol=1e-6):
    B, H = weights.shape[:2]
    shown = _shown(fig)
    assert sorted(shown) == [(b, h) for b in range(B) for h in range(H)]  # H heatmaps per example
    for (b, h), z in shown.items():
        v = valid_lens[b]
        assert np.isnan(z[:, v:]).all(), "masked key columns must be masked"
        np.testing.assert_allclose(np.nan_to_num(z), weights[b, h], rtol=0, atol=atol)
        np.testing.assert_array_equal(weights[b, h][:, v:], 0.0)  # masked is exactly 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mha": "model"}, "mha must be a mha_lib.MultiHeadAttention"),
        ({"mha": mha_lib.MultiHeadAttention(2, 2, 2, 4, 2, 0.0)}, "pass its inputs"),
        ({"keys": torch.zeros(1, 2, 3)}, "need queries"),
        ({"num_heads": 3}, "num_heads must be one of"),
        ({"d_model": 0}, "d_model"),
        ({"foo": 1}, "unexpected argument 'foo'"),
        ({"valid_lens": [7, 1]}, "valid_lens must be 2 integers in"),
        ({"queries": torch.zeros(1, 2, 3), "tokens": ["a"]}, "must hold 2 labels"),
        ({"queries": torch.zeros(2, 3)}, "queries must have 3 dimensions"),
        ({"mha": mha_lib.MultiHeadAttention(2, 2, 2, 4, 2, 0.0), "queries": torch.zeros(1, 2, 3)},
         "feature size"),
        ({"sentences": []}, "sentences"),
    ],
)
def test_explore_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        explore(**kwargs)


def test_seeded_model_keeps_global_rng_and_projections_across_head_counts():
    scene = sentence_scene()
    state = torch.random.get_rng_state()
    a, b = seeded_model(scene, 2, 8, seed=5), seeded_model(scene, 8, 8, seed=5)
    assert torch.equal(torch.random.get_rng_state(), state)
    torch.testing.assert_close(a.W_q.weight, b.W_q.weight)  # same projections, split differently


def _padded(state: list, num_keys: int) -> np.ndarray:
    """A stored (H, Lq, v) state (the visible keys) -> (H, Lq, Lk), masked keys NaN."""
    return np.array([[row + [None] * (num_keys - len(row)) for row in head] for head in state],
                    dtype=float)


def test_static_explorer_states_are_mha_weights(independent_weights):
    fig = static_explorer()
    ex = fig.layout.meta["explorer"]
    assert ex["heads"] == [1, 2, 4, 8] and ex["batch_size"] == 2
    assert [len(t) for t in ex["traces"]] == [2, 4, 8, 16]  # B*H panels per head count
    assert all("z" not in t for ts in ex["traces"] for t in ts)  # weights only in the states
    assert len(fig.data) == 4  # the initial head count, no hidden panels
    assert not fig.layout.sliders  # the controls are native HTML inputs (static_explorer_html)
    assert ex["heads_index"] == 1 and ex["valid_lens"] == [6, 4] and ex["num_keys"] == 6
    assert len(ex["narrow_layouts"]) == 4 and fig.layout.meta["description"]
    for wide, narrow in zip(ex["layouts"], ex["narrow_layouts"]):
        assert narrow["margin"]["l"] < wide["margin"]["l"]  # a phone layout per head count
    for i, H in enumerate(ex["heads"]):
        for lens in ([6, 4], [0, 6], [3, 1]):
            expected = independent_weights(H, lens)
            for b in range(2):
                state = _padded(ex["weights"][i][b][lens[b]], 6)  # (H, Lq, Lk)
                assert state.shape == (H, 6, 6)
                assert np.isnan(state[..., lens[b]:]).all()
                np.testing.assert_allclose(np.nan_to_num(state), expected[b], rtol=0, atol=6e-5)
    # The initial picture is the stored state for the initial sliders (H = 2, lengths 6 and 4).
    _assert_figure_shows(fig, independent_weights(2, [6, 4]), [6, 4], atol=6e-5)


def test_static_explorer_single_example_and_html():
    x = torch.randn(1, 3, 4, generator=torch.Generator().manual_seed(0))
    fig = static_explorer(queries=x, d_model=4, tokens=["a", "b", "c"], decimals=3)
    html = static_explorer_html(fig)
    assert f'id="{DIV_ID}"' in html and "plotly-graph-div" in html
    assert html.count('type="range"') == 2 and html.count("<label for=") == 2
    assert ">Heads: <output" in html and ">Valid length: <output" in html
    assert 'role="img" aria-label="Attention weights' in html
    assert "Plotly.react" in html and "cdn" not in html.lower()
    assert "<script src" not in html  # plotly.js comes from the site, not embedded or fetched
    assert static_explorer_html(fig) == html  # deterministic
    with pytest.raises(ValueError, match="decimals"):
        static_explorer(decimals=0)
    source = make_source(queries=x, d_model=4)
    assert source.head_choices == (1, 2, 4)


def test_static_explorer_of_a_given_module_moves_only_the_valid_lengths():
    x = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(1))
    mha = seeded_model(sentence_scene(), 4, 8, seed=3)
    fig = static_explorer(mha=mha, queries=x, tokens=[list("abcde")] * 2, valid_lens=[3, 5])
    explorer = fig.layout.meta["explorer"]
    assert explorer["heads"] == [4] and explorer["heads_index"] == 0
    html = static_explorer_html(fig)
    assert html.count('type="range"') == 2 and f'id="{CONTROLS_ID}-heads"' not in html  # no slider for H
    assert "Heads: 4 (the model's)" in html and "Valid length of example 1: <output" in html
    assert "given MultiHeadAttention (4 heads) on 2 examples" in explorer["description"]
    assert "number of heads" not in explorer["description"]
    with torch.no_grad():
        _, expected = mha(x, x, x, torch.tensor([2, 2]), need_weights=True)  # (B, H, Lq, Lk)
    stored = _padded(explorer["weights"][0][1][2], 5)  # example 1, valid length 2
    np.testing.assert_allclose(np.nan_to_num(stored), expected[1].numpy(), atol=6e-5)


def test_attention_weights_restores_mode_and_threads():
    from mha_lib.viz.scene import attention_weights

    scene = sentence_scene()
    mha = seeded_model(scene, 2, 8, seed=0).train()
    threads = torch.get_num_threads()
    w = attention_weights(mha, scene, [6, 4])
    assert mha.training and torch.get_num_threads() == threads
    assert w.shape == (2, 2, 6, 6) and not w.requires_grad


# ---------------------------------------------------------------- properties

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from mha_lib.viz.layout import panels  # noqa: E402


@settings(max_examples=25, deadline=None)
@given(B=st.integers(1, 3), H=st.integers(1, 9), cols=st.integers(1, 5))
def test_panels_tile_without_overlap(B, H, cols):
    ps = panels(B, H, cols)
    assert [(p.example, p.head) for p in ps] == [(b, h) for b in range(B) for h in range(H)]
    for p in ps:
        assert 0 <= p.x_domain[0] < p.x_domain[1] <= 1 and 0 <= p.y_domain[0] < p.y_domain[1] <= 1
    for i, p in enumerate(ps):
        for q in ps[i + 1:]:
            apart_x = p.x_domain[1] <= q.x_domain[0] or q.x_domain[1] <= p.x_domain[0]
            apart_y = p.y_domain[1] <= q.y_domain[0] or q.y_domain[1] <= p.y_domain[0]
            assert apart_x or apart_y


@settings(max_examples=25, deadline=None)
@given(data=st.data(), B=st.integers(1, 3), H=st.sampled_from([1, 2, 4]), Lq=st.integers(1, 4),
       Lk=st.integers(1, 5))
def test_heatmaps_mask_exactly_the_keys_past_each_valid_length(data, B, H, Lq, Lk):
    lens = data.draw(st.lists(st.integers(0, Lk), min_size=B, max_size=B))
    w = _weights(B=B, H=H, Lq=Lq, Lk=Lk, valid_lens=torch.tensor(lens))
    fig = attention_heatmaps(w, valid_lens=lens)
    assert len(fig.data) == B * H
    for trace in fig.data:
        b, h = trace.meta["example"], trace.meta["head"]
        z = _z(trace)
        keep = np.arange(Lk) < lens[b]
        assert np.isnan(z[:, ~keep]).all() and not np.isnan(z[:, keep]).any()
        np.testing.assert_allclose(z[:, keep], w[b, h][:, keep].numpy(), atol=1e-7)


# ---------------------------------------------------------------- review fixes

import subprocess  # noqa: E402
import sys  # noqa: E402


def test_heatmaps_keep_mask_greys_exactly_the_hidden_cells():
    torch.manual_seed(0)
    keep = torch.rand(2, 1, 1, 5) > 0.5  # (B, 1, 1, Lk): one random key mask per example
    keep[..., 0] = True
    scores = torch.randn(2, 3, 4, 5)
    w = mha_lib.softmax_over_kept(scores, keep.expand(2, 3, 4, 5))  # (B, H, Lq, Lk)
    fig = attention_heatmaps(w, keep=keep)
    for trace in fig.data:
        b, h = trace.meta["example"], trace.meta["head"]
        z, k = _z(trace), keep[b, 0, 0].numpy()
        assert np.isnan(z[:, ~k]).all() and not np.isnan(z[:, k]).any()
        assert all(row[j] == "masked" for row in trace.text for j in np.flatnonzero(~k))
        np.testing.assert_allclose(z[:, k], w[b, h][:, k].numpy(), atol=1e-7)
    assert any("masked" in a.text for a in fig.layout.annotations)
    # one example given as (H, Lq, Lk) with a per-head mask
    per_head = torch.ones(3, 4, 5, dtype=torch.bool)
    per_head[1, :, 2] = False
    fig = attention_heatmaps(mha_lib.softmax_over_kept(scores[0], per_head), keep=per_head)
    assert np.isnan(_z(fig.data[1])[:, 2]).all() and not np.isnan(_z(fig.data[0])).any()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"keep": torch.ones(1, 2, 2)}, "keep must be a boolean"),
        ({"keep": [[True, False]]}, "keep must be a boolean tensor or array"),
        ({"keep": torch.ones(3, 2, dtype=torch.bool)}, "keep must be broadcastable"),
        ({"keep": torch.tensor([True, False])}, "must be 0 on the keys that keep masks out"),
        ({"keep": torch.ones(2, dtype=torch.bool), "valid_lens": 2}, "valid_lens or keep"),
        ({"example_titles": ["a", "b"]}, "example_titles must be 1 strings"),
        ({"example_titles": "a"}, "example_titles must be 1 strings"),
    ],
)
def test_heatmaps_bad_keep_and_titles(kwargs, match):
    with pytest.raises(ValueError, match=match):
        attention_heatmaps(torch.full((1, 1, 2, 2), 0.5), **kwargs)


def test_heatmaps_example_titles_name_the_rows():
    fig = attention_heatmaps(_weights(B=2, H=2), example_titles=["teacher", "student"])
    titles = [a.text for a in fig.layout.annotations]
    assert titles == ["teacher, head 0", "teacher, head 1", "student, head 0", "student, head 1"]
    assert fig.data[2].hovertemplate.startswith("student, head 0")
    one = attention_heatmaps(_weights(B=1, H=2), example_titles=["mine"])
    assert [a.text for a in one.layout.annotations] == ["mine, head 0", "mine, head 1"]


@pytest.mark.parametrize("seed", ["a", 1.5, -1, True, None])
def test_explorers_reject_bad_seeds(seed):
    with pytest.raises(ValueError, match="seed must be an integer >= 0"):
        explore(seed=seed)
    with pytest.raises(ValueError, match="seed must be an integer >= 0"):
        static_explorer(seed=seed)


def test_explorers_reject_non_finite_inputs_and_weights(generator):
    x = torch.randn(1, 3, 4, generator=generator)
    x[0, 1, 2] = float("nan")
    with pytest.raises(ValueError, match="queries must be finite"):
        explore(queries=x)
    with pytest.raises(ValueError, match="keys must be finite"):
        static_explorer(queries=torch.randn(1, 3, 4, generator=generator), keys=x)
    source = make_source()
    w = source.weights(2, [6, 4])
    w[0, 0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="weights must be finite"):
        source.parts(w, [6, 4], max_cols=4)


@pytest.mark.parametrize("num_heads", [True, 2.0, "2"])
def test_explorers_reject_non_integer_head_counts(num_heads):
    with pytest.raises(ValueError, match="num_heads must be one of"):
        explore(num_heads=num_heads)
    with pytest.raises(ValueError, match="num_heads must be one of"):
        static_explorer(num_heads=num_heads)


def test_static_explorer_accepts_numpy_integers():
    fig = static_explorer(decimals=np.int64(3), max_cols=np.int64(2), num_heads=np.int64(4))
    assert fig.layout.meta["explorer"]["heads_index"] == 2  # heads (1, 2, 4, 8): 4 is the third


def test_explorers_check_dtype_against_the_model():
    scene = sentence_scene()
    mha = seeded_model(scene, 2, 8, seed=0).double()
    with pytest.raises(ValueError, match=r"queries .*float32.*float64"):
        explore(mha=mha, queries=scene.queries)
    with pytest.raises(ValueError, match=r"queries .*float32.*float64"):
        static_explorer(mha=mha, queries=scene.queries)
    e = explore(mha=mha, queries=scene.queries.double())  # matching dtypes: fine
    assert len(e.figure.data) == 4
    with pytest.raises(ValueError, match="keys must have the dtype and device of the queries"):
        explore(queries=scene.queries, keys=scene.keys.double())
    fresh = explore(queries=scene.queries.double())  # fresh models follow the inputs' dtype
    assert fresh.source.model(2, 0).W_q.weight.dtype == torch.float64


def test_static_explorer_and_heatmaps_work_without_ipywidgets():
    code = (
        "import sys; sys.modules['ipywidgets'] = None\n"
        "from mha_lib.viz import attention_heatmaps, static_explorer_html\n"
        "assert 'type=\"range\"' in static_explorer_html()\n"
        "try:\n"
        "    from mha_lib.viz import explore\n"
        "except ImportError:\n"
        "    print('live explorer needs ipywidgets')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "live explorer needs ipywidgets"


# ---------------------------------------------------------------- bad input names the argument

import plotly.graph_objects as go  # noqa: E402

from mha_lib.viz.scene import attention_weights  # noqa: E402


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"seed": 1.5}, "seed must be an integer >= 0, got 1.5"),
    ({"scale": 0}, "scale must be a finite number > 0"),
    ({"scale": "big"}, "scale must be a finite number > 0"),
    ({"scale": float("inf")}, "scale must be a finite number > 0"),
    ({"num_features": 0}, "num_features"),
    ({"sentences": "the cat"}, "sentences"),
])
def test_sentence_scene_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        sentence_scene(**kwargs)


@pytest.mark.parametrize(("args", "match"), [
    (("scene", 2, 8, 0), "scene must come from sentence_scene"),
    ((None, 3, 8, 0), "num_heads must divide d_model = 8, got 3"),
    ((None, 0, 8, 0), "num_heads must be an integer >= 1"),
    ((None, 2, 2.0, 0), "d_model must be an integer >= 1"),
    ((None, 2, 8, -1), "seed must be an integer >= 0"),
])
def test_seeded_model_bad_input(args, match):
    scene = sentence_scene()
    with pytest.raises(ValueError, match=match):
        seeded_model(*(scene if a is None else a for a in args[:1]), *args[1:])


def test_attention_weights_bad_input():
    scene = sentence_scene()
    model = seeded_model(scene, 2, 8, 0)
    with pytest.raises(ValueError, match="mha must be a mha_lib.MultiHeadAttention"):
        attention_weights("model", scene, [6, 4])
    with pytest.raises(ValueError, match="scene must come from sentence_scene"):
        attention_weights(model, scene.queries, [6, 4])
    for lens in ([7, 4], [6], 5, "66", torch.ones(2, device="meta")):
        with pytest.raises(ValueError, match="valid_lens"):
            attention_weights(model, scene, lens)


def test_static_explorer_rejects_unknown_arguments_and_foreign_figures():
    with pytest.raises(ValueError, match="unexpected argument 'foo'"):
        static_explorer(foo=1)
    with pytest.raises(ValueError, match="unexpected argument 'foo'"):
        static_explorer_html(foo=1)
    with pytest.raises(ValueError, match="fig must be a figure from static_explorer"):
        static_explorer_html(go.Figure())
    with pytest.raises(ValueError, match="fig must be a figure from static_explorer"):
        static_explorer_html("figure")
    fig = static_explorer(d_model=4)
    with pytest.raises(ValueError, match="not both"):
        static_explorer_html(fig, seed=1)
    with pytest.raises(ValueError, match="max_cols"):
        make_source().parts(make_source().weights(2, [6, 4]), [6, 4], max_cols=0)
