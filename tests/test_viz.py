"""Tests of mha_lib.viz: heatmaps, the transposition picture, the live and static explorers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import mha_lib
from mha_lib.viz import attention_heatmaps, transposition_figure
from mha_lib.viz.transposition import decode_index


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
    for trace in fig.data:
        xaxis = fig.layout["xaxis" + trace.xaxis[1:]]
        yaxis = fig.layout["yaxis" + trace.yaxis[1:]]
        assert xaxis.title.text == "key" and yaxis.title.text == "query"
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
        ({"weights": torch.rand(3, 3)}, "weights must have shape"),
        ({"weights": torch.full((1, 2, 2), 2.0)}, r"weights must lie in \[0, 1\]"),
        ({"weights": torch.full((1, 2, 2), float("nan"))}, "finite"),
        ({"weights": "abc"}, "weights must"),
        ({"weights": torch.rand(1, 2, 2), "query_labels": ["a"]}, "query_labels must hold 2"),
        ({"weights": torch.rand(1, 2, 2), "key_labels": "ab"}, "key_labels must be a sequence"),
        ({"weights": torch.rand(1, 2, 2), "max_cols": 0}, "max_cols"),
        ({"weights": torch.rand(1, 2, 2), "valid_lens": [3]}, "valid_lens"),
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
    assert decode_index((1 * 3 + 2) * 4 + 3, 3, 4) == (1, 2, 3)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"num_heads": 0}, "num_heads"), ({"num_heads": 9}, "at most 8"),
     ({"seq_len": 2.5}, "seq_len"), ({"batch_size": 8, "seq_len": 8, "head_size": 8}, "too many")],
)
def test_transposition_figure_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        transposition_figure(**kwargs)
