"""The token-table figure: one panel per table, one scale centred on 0, clear errors."""

import math

import pytest
import torch

from mha_lib.viz.circuits import token_tables_figure


def test_panels_show_the_tables_on_one_scale():
    torch.manual_seed(0)
    tables = torch.randn(2, 5, 5)
    fig = token_tables_figure(tables, ["head 0", "head 1"], x_title="key", y_title="query", title="t")
    assert len(fig.data) == 2
    top = float(tables.abs().max())
    for table, trace in zip(tables, fig.data):
        torch.testing.assert_close(torch.tensor(trace.z, dtype=torch.float64), table.double())
        assert math.isclose(trace.zmax, top) and trace.zmin == -trace.zmax
    assert [t.showscale for t in fig.data] == [True, False]  # one colour bar
    assert fig.layout.yaxis.autorange == "reversed"  # token 0 at the top
    assert fig.layout.width is None  # no fixed width: it fits a phone


def test_a_zero_table_still_has_a_scale():
    fig = token_tables_figure(torch.zeros(1, 3, 3), ["h"], x_title="x", y_title="y")
    assert fig.data[0].zmax == 1.0


def test_bad_input():
    with pytest.raises(ValueError, match="tables"):
        token_tables_figure(torch.randn(5, 5), ["a"], x_title="x", y_title="y")
    with pytest.raises(ValueError, match="tables"):
        token_tables_figure(torch.randn(5, 3, 3), list("abcde"), x_title="x", y_title="y")
    with pytest.raises(ValueError, match="finite"):
        token_tables_figure(torch.full((1, 2, 2), math.nan), ["a"], x_title="x", y_title="y")
    with pytest.raises(ValueError, match="panel_titles"):
        token_tables_figure(torch.randn(2, 3, 3), ["a"], x_title="x", y_title="y")
    with pytest.raises(ValueError, match="panel_titles"):
        token_tables_figure(torch.randn(2, 3, 3), "ab", x_title="x", y_title="y")
