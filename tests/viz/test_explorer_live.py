"""The live explorer (mha_lib.viz.explorer), driven from code: no browser, no kernel."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import mha_lib
from mha_lib.viz import explore, static_explorer
from mha_lib.viz.explorer import _MASKED_Z, _Canvas, _canvas_z
from mha_lib.viz.scene import make_source


def _assert_shows(explorer, weights, valid_lens, atol=1e-6):
    B, H = weights.shape[:2]
    shown = explorer.shown()
    assert sorted(shown) == [(b, h) for b in range(B) for h in range(H)]
    for (b, h), z in shown.items():
        v = valid_lens[b]
        assert np.isnan(z[:, v:]).all(), "masked key columns must be masked"
        np.testing.assert_allclose(np.nan_to_num(z), weights[b, h], rtol=0, atol=atol)
        np.testing.assert_array_equal(weights[b, h][:, v:], 0.0)  # masked is exactly 0
    names = [list(explorer.figure.layout[f"xaxis{B + b + 1}"].ticktext) for b in range(B)]
    assert names == [[f"head {h}" for h in range(H)]] * B  # the head names follow H


def _json_safe(figure) -> None:
    """The widget's data must be valid JSON: no NaN anywhere (None marks the gaps)."""
    json.dumps(figure.to_plotly_json(), allow_nan=False)


def test_explore_default_shows_mha_weights(independent_weights):
    e = explore()
    assert e.heads.options == (1, 2, 4, 8)  # only divisors of d_model = 8
    assert len(e.valid_lens) == 2 and [s.max for s in e.valid_lens] == [6, 6]
    lens = e.current_valid_lens()
    _assert_shows(e, independent_weights(e.heads.value, lens), lens)
    _json_safe(e.figure)


def test_sliders_update_one_trace_per_example_in_place(independent_weights):
    e = explore()
    fig = e.figure
    layout_before = fig.layout.height, fig.layout.yaxis.domain
    for H, lens in [(8, [3, 4]), (1, [6, 0]), (4, [2, 5]), (2, [6, 4])]:
        e.heads.value = H
        for slider, v in zip(e.valid_lens, lens):
            slider.value = v
        assert e.figure is fig and [t.type for t in fig.data] == ["heatmap"] * 2 + ["scatter"] * 2
        assert np.shape(fig.data[0].z) == _Canvas(H, 6, 6).shape
        _assert_shows(e, independent_weights(H, lens), lens)
        _json_safe(fig)
        assert (fig.layout.height, fig.layout.yaxis.domain) == layout_before  # size fixed
    e.seed.value = 3
    _assert_shows(e, independent_weights(2, [6, 4], seed=3), [6, 4])


def test_canvas_puts_heads_side_by_side_with_gaps():
    canvas = _Canvas(num_heads=2, num_queries=1, num_keys=3)
    z = _canvas_z(np.array([[[0.5, 0.5, 0.0]], [[0.25, 0.75, 0.0]]]), 2, canvas)
    assert z == [[0.5, 0.5, _MASKED_Z, None, 0.25, 0.75, _MASKED_Z]]


def test_explore_given_model_fixes_heads():
    torch.manual_seed(1)
    mha = mha_lib.MultiHeadAttention(3, 5, 4, 6, 3, 0.1)  # training mode, dropout on
    q, k, v = torch.randn(1, 2, 5), torch.randn(1, 4, 3), torch.randn(1, 4, 4)
    e = explore(mha=mha, queries=q, keys=k, values=v, query_tokens=["a", "b"],
                key_tokens=list("wxyz"), valid_lens=[3])
    assert e.heads.options == (3,) and e.heads.disabled and e.seed is None
    assert mha.training  # the explorer restores the mode
    e.valid_lens[0].value = 2
    mha.eval()
    with torch.no_grad():
        _, w = mha(q, k, v, torch.tensor([2]), need_weights=True)
    _assert_shows(e, w.numpy(), [2])
    assert list(e.figure.layout.xaxis.ticktext) == list("wxyz") * 3
    assert list(e.figure.layout.yaxis.ticktext) == ["a", "b"]


def test_sliders_are_wide_enough_to_place_every_valid_length(generator):
    e = explore(queries=torch.randn(2, 12, 8, generator=generator), valid_lens=[12, 7])
    for slider in (e.heads, *e.valid_lens, e.seed):
        assert slider.layout.width == e.valid_lens[0].layout.width  # one width, aligned
        assert slider.style.description_width  # labels are not cut to the default


def test_explore_large_seed_agrees_with_static_explorer():
    e = explore(seed=50)
    assert e.seed.value == 50 and e.seed.max >= 50  # not clamped to the default range
    lens = e.current_valid_lens()
    expected = make_source(seed=50).weights(2, lens).numpy()
    _assert_shows(e, expected, lens)
    states = static_explorer(seed=50).layout.meta["explorer"]["weights"]
    for b in range(2):
        stored = np.array(states[1][b][lens[b]], dtype=float)  # (H, Lq, v): the visible keys
        np.testing.assert_allclose(stored, expected[b][..., :lens[b]], atol=6e-5)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"num_heads": 3}, "num_heads must be one of"),
    ({"valid_lens": [7, 1]}, "valid_lens must be 2 integers in"),
])
def test_explore_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        explore(**kwargs)
