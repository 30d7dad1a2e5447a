"""Tests of the positions chapter's figures (mha_lib.viz.positions)."""

import pytest
import torch

from mha_lib.positions import sinusoidal
from mha_lib.viz.positions import depth_lines_figure, position_scores_figure, position_table_figure


def test_position_table_figure():
    fig = position_table_figure(sinusoidal(10, 4), title="t")
    heatmap = fig.data[0]
    assert heatmap.type == "heatmap" and len(heatmap.z) == 10 and len(heatmap.z[0]) == 4
    assert (heatmap.zmin, heatmap.zmax) == (-1.0, 1.0)
    assert fig.layout.xaxis.title.text == "dimension" and fig.layout.yaxis.title.text == "position"
    assert fig.layout.yaxis.autorange == "reversed" and fig.layout.width is None


def test_position_scores_figure_keys_on_x_queries_on_y():
    fig = position_scores_figure(torch.arange(6.0).reshape(2, 3))
    assert [list(row) for row in fig.data[0].z] == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert fig.layout.xaxis.title.text.startswith("key")
    assert fig.layout.yaxis.title.text.startswith("query")


def test_depth_lines_figure():
    fig = depth_lines_figure({"pre-LN": [1, 2, 3], "post-LN": [1, 1, 1]}, "norm", log_y=True)
    assert [t.name for t in fig.data] == ["pre-LN", "post-LN"]
    assert fig.data[0].line.color != fig.data[1].line.color
    assert fig.layout.yaxis.type == "log" and fig.layout.yaxis.title.text == "norm"


def test_bad_input():
    with pytest.raises(ValueError, match="table must be a 2-D"):
        position_table_figure(torch.zeros(2, 3, 4))
    with pytest.raises(ValueError, match="scores must be a 2-D"):
        position_scores_figure([1.0, 2.0])
    with pytest.raises(ValueError, match="lines must"):
        depth_lines_figure({}, "norm")


@pytest.mark.parametrize(("call", "match"), [
    (lambda: position_table_figure(torch.zeros(0, 3)), "table must be a 2-D table, not empty"),
    (lambda: position_table_figure(torch.full((2, 2), float("nan"))), "table must be finite"),
    (lambda: position_table_figure(torch.zeros(2, 2, device="meta")), "table must hold numbers"),
    (lambda: position_table_figure(torch.zeros(2, 2), title=3), "title must be a string"),
    (lambda: position_scores_figure([["a", "b"]]), "scores must be a tensor or array of numbers"),
    (lambda: depth_lines_figure([1, 2], "norm"), "lines must map at least one name"),
    (lambda: depth_lines_figure({"a": [1, None]}, "norm"), r"lines\['a'\] must be finite"),
    (lambda: depth_lines_figure({"a": [1, 0]}, "norm", log_y=True), r"> 0: log_y"),
    (lambda: depth_lines_figure({"a": [1, 2]}, 5), "y_title must be a string"),
    (lambda: depth_lines_figure({"a": [1, 2]}, "norm", log_y="yes"), "log_y must be True or False"),
])
def test_bad_input_names_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()
