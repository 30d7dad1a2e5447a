"""mha_lib.bench on tiny sizes: well-formed results, never timings."""

import math
import subprocess
import sys

import pytest
import torch

from mha_lib import bench
from mha_lib.bench import Sizes

TINY = Sizes(2, 3, 5, 8, 2)


def test_sizes_are_checked_and_printed():
    assert TINY.d == 4 and str(TINY) == "(2, 3, 5, 8, 2)"
    with pytest.raises(ValueError, match="divisible"):
        Sizes(1, 2, 2, 6, 4)
    with pytest.raises(ValueError, match="Lk"):
        Sizes(1, 2, 0, 8, 2)


@pytest.mark.parametrize("masked", [False, True])
def test_contenders_agree_and_have_the_documented_outputs(masked):
    case = bench.make_case(TINY, masked=masked, seed=3)
    assert case.queries.shape == (2, 3, 8) and case.keys.shape == case.values.shape == (2, 5, 8)
    if masked:
        assert case.valid_lens.shape == (2,) and 1 <= case.valid_lens.min() <= case.valid_lens.max() <= 5
    else:
        assert case.valid_lens is None
    fns = bench.make_contenders(case)
    assert set(fns) == set(bench.CONTENDER_LABELS)
    with torch.inference_mode():
        out, weights = fns["weights"]()
    assert out.shape == (2, 3, 8) and weights.shape == (2, 2, 3, 5)
    bench.check_agreement(fns, atol=1e-5, rtol=1e-4)


def test_check_agreement_names_the_contender_that_differs():
    fns = {"a": lambda: torch.zeros(2), "b": lambda: torch.ones(2)}
    with pytest.raises(AssertionError, match="b"):
        bench.check_agreement(fns)


def test_time_paired_gives_one_positive_time_per_repetition():
    calls = {"x": 0, "y": 0}

    def count(name):
        calls[name] += 1

    times = bench.time_paired({"x": lambda: count("x"), "y": lambda: count("y")},
                              repeats=4, min_time=0.0, blocks=2)
    assert set(times) == {"x", "y"}
    assert all(len(t) == 4 and all(s > 0 for s in t) for t in times.values())
    assert calls["x"] == calls["y"] == 1 + 1 + 4 * 2  # warmup, calibration, repeats x blocks
    with pytest.raises(ValueError, match="repeats"):
        bench.time_paired({"x": lambda: None}, repeats=0)
    with pytest.raises(ValueError, match="fns"):
        bench.time_paired({})


def test_paired_ratio_is_computed_per_repetition():
    r = bench.paired_ratio({"a": [2.0, 3.0, 8.0], "b": [1.0, 1.0, 2.0]}, "a", "b")
    assert (r.median, r.min, r.max) == (3.0, 2.0, 4.0)
    assert str(r) == "3.00 [2.00-4.00]"


def test_benchmark_rows_and_table():
    messages = []
    rows = bench.benchmark([TINY], repeats=2, min_time=0.0, progress=messages.append)
    assert len(rows) == 2 and [r.masked for r in rows] == [False, True]
    assert len(messages) == 2 and messages[0].startswith("[1/2]")
    for row in rows:
        assert set(row.ratios) == {(a, b) for a, b, _ in bench.TARGETS}
        assert all(0 < r.min <= r.median <= r.max for r in row.ratios.values())
        assert set(row.seconds) == set(bench.CONTENDER_LABELS)
    table = bench.format_table(rows)
    lines = table.splitlines()
    assert len(lines) == 4 and "fast/limit <= 1.10" in lines[0] and "random" in lines[3]


def test_benchmark_with_a_subset_of_contenders_reports_only_its_ratios():
    rows = bench.benchmark([TINY], masked=[True], repeats=1, min_time=0.0,
                           contenders=["fast", "limit"])
    assert list(rows[0].ratios) == [("fast", "limit")]
    assert "weights/" not in bench.format_table(rows)


def test_flop_count_formula():
    s = Sizes(2, 3, 5, 8, 2)
    flops = bench.flop_count(s)
    assert flops == {
        "projections": 2 * 2 * (2 * 3 + 2 * 5) * 8 * 8,
        "scores": 2 * 2 * 3 * 5 * 8,
        "weighted sum": 2 * 2 * 3 * 5 * 8,
    }
    # Doubling the sequence doubles the projections and quadruples the attention part.
    s2 = Sizes(2, 6, 10, 8, 2)
    assert bench.flop_count(s2)["projections"] == 2 * flops["projections"]
    assert bench.flop_count(s2)["scores"] == 4 * flops["scores"]


def test_split_contenders_run():
    fns = bench.split_contenders(bench.make_case(TINY, masked=True))
    assert set(fns) == {"projections", "attention"}
    with torch.inference_mode():
        assert fns["attention"]().shape == (2, 2, 3, 4)
        assert [t.shape[-1] for t in fns["projections"]()] == [8, 8, 8, 8]


def test_loglog_slope_recovers_the_exponent():
    x = [1.0, 2.0, 4.0, 8.0]
    assert math.isclose(bench.loglog_slope(x, [3 * v**2 for v in x]), 2.0)
    assert math.isclose(bench.loglog_slope(x, [5.0] * 4), 0.0, abs_tol=1e-12)
    with pytest.raises(ValueError, match="same length"):
        bench.loglog_slope([1.0], [1.0])
    with pytest.raises(ValueError, match="positive"):
        bench.loglog_slope([1.0, 2.0], [0.0, 1.0])
    with pytest.raises(ValueError, match="different"):
        bench.loglog_slope([2.0, 2.0], [1.0, 3.0])


def test_weights_bytes():
    assert bench.weights_bytes(TINY) == 2 * 2 * 3 * 5 * 4
    assert bench.weights_bytes(TINY, torch.float64) == 2 * 2 * 3 * 5 * 8


def test_peak_memory_sees_an_allocation():
    n = 1 << 20
    peak = bench.peak_memory(lambda: torch.ones(n))  # 4 MiB, alive when the call returns
    assert 4 * n <= peak < 8 * n


def test_memory_table_weights_path_holds_more_than_the_fast_path():
    rows = bench.memory_table([32, 64], B=1, D=16, H=4)
    assert [r["L"] for r in rows] == [32, 64]
    for r in rows:
        assert r["weights_bytes"] == 1 * 4 * r["L"] ** 2 * 4
        assert r["peak_weights"] >= r["weights_bytes"] > 0
        assert 0 < r["peak_fast"] < r["peak_weights"]
    text = bench.format_memory_table(rows, B=1, D=16, H=4)
    assert len(text.splitlines()) == 4


def test_main_tiny_run(capsys):
    assert bench.main(["--size", "1,2,3,4,2", "--repeats", "1", "--min-time", "0",
                       "--memory-lengths", "8"]) == 0
    out = capsys.readouterr().out
    assert "(1, 2, 3, 4, 2)" in out and "Peak memory" in out


def test_cli_rejects_a_bad_size(capsys):
    with pytest.raises(SystemExit):
        bench.main(["--size", "1,2,3"])
    assert "B,Lq,Lk,D,H" in capsys.readouterr().err


def test_module_runs_as_a_script():
    result = subprocess.run(
        [sys.executable, "-m", "mha_lib.bench", "--size", "1,2,2,4,1", "--repeats", "1",
         "--min-time", "0", "--memory-lengths"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "fast/limit" in result.stdout


def test_attention_share_is_the_median_share():
    times = {"attention": [1.0, 3.0, 1.0], "projections": [1.0, 1.0, 3.0]}
    assert bench.attention_share(times) == 0.5


def test_scaling_times_one_positive_number_per_length():
    seconds = bench.scaling_times([4, 8], B=1, D=8, H=2, repeats=1, min_time=0.0)
    assert len(seconds) == 2 and all(s > 0 for s in seconds)


def test_figures_have_labelled_axes_and_one_trace_per_series():
    rows = bench.benchmark([TINY], masked=[True], repeats=2, min_time=0.0)
    memory = bench.memory_table([8, 16], B=1, D=8, H=2)
    figures = {
        "flop": (bench.flop_figure([8, 16], D=8), 3),
        "scaling": (bench.scaling_figure([8, 16], [1e-3, 4e-3], slope=2.0), 3),
        "memory": (bench.memory_figure(memory), 3),
        "ratio": (bench.ratio_figure(rows), len(bench.CONTENDER_LABELS) - 1),
    }
    for name, (fig, traces) in figures.items():
        assert len(fig.data) == traces, name
        assert fig.layout.xaxis.title.text and fig.layout.yaxis.title.text, name
    ratio_bars = figures["ratio"][0].data
    assert {bar.name for bar in ratio_bars} == {
        label for key, label in bench.CONTENDER_LABELS.items() if key != "limit"
    }
    # The bar heights are the medians of the paired ratios that the table reports.
    fast = next(bar for bar in ratio_bars if bar.name == bench.CONTENDER_LABELS["fast"])
    assert fast.y[0] == rows[0].ratios[("fast", "limit")].median
