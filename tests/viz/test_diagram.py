"""The multi-head attention diagram: shapes traced from the library, highlights, bad input."""

from __future__ import annotations

import pytest

from mha_lib.viz.diagram import _STAGES, _traced_shapes, mha_diagram


def test_traced_shapes_are_the_books_notation():
    shapes = _traced_shapes()
    assert shapes["queries"] == "(B, Lq, query_size)"
    assert shapes["k_projected"] == "(B, Lk, D)"
    assert shapes["q_heads"] == "(B*H, Lq, d)" and shapes["v_heads"] == "(B*H, Lk, d)"
    assert shapes["weights"] == "(B*H, Lq, Lk)"
    assert shapes["heads_out"] == "(B*H, Lq, d)"
    assert shapes["concat"] == shapes["output"] == "(B, Lq, D)"


def _texts(fig):
    return [a.text for a in fig.layout.annotations]


def test_every_arrow_carries_a_shape():
    fig = mha_diagram()
    arrows = [a for a in fig.layout.annotations if a.showarrow]
    labels = [t for t in _texts(fig) if t.startswith("(")]
    assert len(arrows) == len(labels) == 3 * 3 + 3  # three lanes of three arrows, then three
    assert set(labels) >= set(_traced_shapes().values()) - {_traced_shapes()["weights"]}
    assert not fig.data  # shapes and annotations only


def _fills(fig):
    return [s.fillcolor for s in fig.layout.shapes]


def test_highlight_colours_only_the_chosen_stages():
    plain, split = mha_diagram(), mha_diagram(highlight=("split", "concat"))
    changed = [i for i, (a, b) in enumerate(zip(_fills(plain), _fills(split))) if a != b]
    assert len(changed) == 3 + 1  # the three split boxes and the concatenation
    assert mha_diagram(highlight="split").layout.shapes != plain.layout.shapes


def test_show_code_names_the_library_pieces():
    text = " ".join(_texts(mha_diagram(show_code=True)))
    for name in ("transpose_qkv", "transpose_output", "DotProductAttention"):
        assert name in text
    assert "transpose_qkv" not in " ".join(_texts(mha_diagram()))


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"highlight": ("reshape",)}, "highlight must name stages"),
    ({"highlight": 5}, "highlight must name stages"),
    ({"highlight": [None]}, "highlight must name stages"),
    ({"show_code": "yes"}, "show_code must be True or False"),
])
def test_bad_input_is_a_value_error_naming_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        mha_diagram(**kwargs)
    assert set(_STAGES) == {"inputs", "project", "split", "attend", "concat", "output"}


def test_drawing_leaves_the_global_random_state_alone():
    import torch

    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    mha_diagram()
    torch.testing.assert_close(torch.rand(3), expected)
