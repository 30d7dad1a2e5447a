"""The FlexAttention benchmark (``python -m mha_lib.bench flex``) on a tiny length: its rows and
table, never its timings."""

from __future__ import annotations

import pytest

from mha_lib.bench.__main__ import main
from mha_lib.bench.flex import flex_table, format_flex_table
from mha_lib.flex import FlexUnavailable

pytestmark = pytest.mark.compiled  # (see tests/core/test_flex.py)


def test_a_tiny_table_has_the_ratios_and_the_compile_cost():
    try:
        rows = flex_table([256], cases=["window(256) | sinks(4)", "causal + softcap(30)"], repeats=1,
                          min_time=0.001)
    except FlexUnavailable as err:
        pytest.skip(str(err))
    assert [r["case"] for r in rows] == ["window(256) | sinks(4)", "causal + softcap(30)"]
    assert set(rows[0]["ratios"]) == {"flex/sdpa", "flex/tiled"}
    assert set(rows[1]["ratios"]) == {"flex/tiled"}  # (SDPA takes no soft-capping)
    assert all(r["max_diff"] < 1e-5 for r in rows)
    text = format_flex_table(rows, d=64)
    assert "compile" in text and "flex/tiled" in text


def test_unknown_cases_are_refused():
    with pytest.raises(ValueError, match="cases must be names"):
        flex_table([256], cases=["causal"])


def test_the_command_line_knows_flex(capsys):
    with pytest.raises(SystemExit):
        main(["flex", "--help"])
    assert "--route-alone" in capsys.readouterr().out
