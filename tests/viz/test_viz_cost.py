"""Figures of the chapter "What attention costs" (mha_lib.viz.cost): traces, axes, bad input.

The rows are typed by hand (no timing runs): the figures only draw what they are given.
"""

import math

import pytest

from mha_lib.bench.cost import CONTENDER_LABELS, Row, Sizes
from mha_lib.timing import paired_ratio
from mha_lib.viz import cost as figures

TINY = Sizes(2, 3, 5, 8, 2)
#: Times per repetition of every contender: the limit takes 1 s, the others more.
TIMES = {"weights": [3.0, 4.0, 5.0], "fast": [1.5, 1.0, 1.2], "limit": [1.0, 1.0, 1.0],
         "torch": [2.0, 2.0, 1.0], "torch_weights": [4.0, 4.0, 4.0]}
ROWS = [Row(TINY, masked, ratios={}, times=TIMES) for masked in (False, True)]
MEMORY = [{"L": 8, "weights_bytes": 2**10, "peak_weights": 2**12, "peak_fast": 2**11},
          {"L": 16, "weights_bytes": 2**12, "peak_weights": 2**14, "peak_fast": 2**12}]


def test_figures_have_labelled_axes_and_one_trace_per_series():
    drawn = {
        "flop": (figures.flop_figure([8, 16], D=8), 3),
        "scaling": (figures.scaling_figure([8, 16], [1e-3, 4e-3], slope=2.0), 3),
        "memory": (figures.memory_figure(MEMORY), 3),
        "ratio": (figures.ratio_figure(ROWS), len(CONTENDER_LABELS) - 1),
    }
    for name, (fig, traces) in drawn.items():
        assert len(fig.data) == traces, name
        assert fig.layout.xaxis.title.text and fig.layout.yaxis.title.text, name
    assert list(drawn["memory"][0].data[0].y) == [2**12 / 2**20, 2**14 / 2**20]
    ratio_bars = drawn["ratio"][0].data
    assert [bar.name for bar in ratio_bars] == [
        label for key, label in CONTENDER_LABELS.items() if key != "limit"
    ]
    # The bar heights are the medians of the paired ratios that the table reports.
    fast = next(bar for bar in ratio_bars if bar.name == CONTENDER_LABELS["fast"])
    assert list(fast.y) == [paired_ratio(TIMES, "fast", "limit").median] * 2 == [1.2, 1.2]
    assert list(fast.error_y.array) == pytest.approx([0.3, 0.3])  # max 1.5 - median 1.2


def test_ratio_figure_draws_only_the_contenders_that_ran():
    rows = [Row(TINY, True, ratios={}, times={"fast": [2.0], "limit": [1.0]})]
    fig = figures.ratio_figure(rows)
    assert [bar.name for bar in fig.data] == [CONTENDER_LABELS["fast"]]
    fig = figures.ratio_figure(rows, baseline="fast")
    assert list(fig.data[0].y) == [0.5]


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: figures.flop_figure([]), "lengths must hold at least one"),
        (lambda: figures.flop_figure([8, -16]), r"lengths\[1\] must be an integer >= 1"),
        (lambda: figures.flop_figure(8), "lengths must be a sequence"),
        (lambda: figures.flop_figure([8], D=8, H=3), "divisible"),
        (lambda: figures.flop_figure([8], B=0), "B must be an integer >= 1"),
        (lambda: figures.scaling_figure([8, 16], [1e-3], slope=2.0), "seconds must hold one time"),
        (lambda: figures.scaling_figure([8, 16], [1e-3, 0.0], slope=2.0), r"seconds\[1\]"),
        (lambda: figures.scaling_figure([8, 16], [1e-3, "2"], slope=2.0), r"seconds\[1\]"),
        (lambda: figures.scaling_figure([8, 16], 1e-3, slope=2.0), "seconds must be a sequence"),
        (lambda: figures.scaling_figure([8, 16], [1e-3, 2e-3], slope=math.nan), "slope"),
        (lambda: figures.scaling_figure([8, 16], [1e-3, 2e-3], slope="2"), "slope"),
        (lambda: figures.memory_figure([]), "rows"),
        (lambda: figures.memory_figure([{"L": 8}]), r"rows\[0\] must have the keys"),
        (lambda: figures.memory_figure([{**MEMORY[0], "peak_fast": -1}]), r"rows\[0\]\['peak_fast'\]"),
        (lambda: figures.ratio_figure([]), "rows"),
        (lambda: figures.ratio_figure(["row"]), r"rows\[0\] must be a Row"),
        (lambda: figures.ratio_figure(ROWS, baseline="flash"), "baseline must be a contender"),
        (lambda: figures.ratio_figure(ROWS, baseline=["limit"]), "baseline must be a contender"),
        (lambda: figures.ratio_figure(
            [Row(TINY, True, ratios={}, times={"fast": [2.0], "limit": [1.0]})], baseline="torch"),
         "baseline must be a contender that ran in every row"),
        (lambda: figures.ratio_figure(
            [Row(TINY, True, ratios={}, times={"fast": [2.0], "limit": [0.0]})]),
         r"times\['limit'\]\[0\]"),
    ],
)
def test_figures_reject_bad_arguments(call, match):
    with pytest.raises(ValueError, match=match):
        call()
