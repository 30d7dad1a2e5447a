"""mha_lib.bench on tiny sizes: well-formed results, never timings.

Where a result depends on the clock, the test passes a fake ``timer`` whose readings it
controls, and asserts the exact numbers that clock implies (never a wall-clock time).
"""

import math
import subprocess
import sys

import pytest
import torch

from mha_lib import bench
from mha_lib.bench import Sizes

TINY = Sizes(2, 3, 5, 8, 2)
TICK = 1e-6  # a min_time so small that every block is one call


class FakeClock:
    """A clock that only moves when told to: ``advance(seconds)``, or ``step`` per reading."""

    def __init__(self, step: float = 0.0):
        self.now = 0.0
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def test_sizes_are_checked_and_printed():
    assert TINY.d == 4 and str(TINY) == "(2, 3, 5, 8, 2)"
    with pytest.raises(ValueError, match="divisible"):
        Sizes(1, 2, 2, 6, 4)
    with pytest.raises(ValueError, match="Lk"):
        Sizes(1, 2, 0, 8, 2)
    with pytest.raises(ValueError, match="B"):
        Sizes(True, 2, 2, 8, 2)
    with pytest.raises(ValueError, match="H"):
        Sizes(1, 2, 2, 8, 0)


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


def _costly(clock, log, costs):
    """Functions that advance ``clock`` by their cost and log their names."""

    def make(name, cost):
        def fn():
            log.append(name)
            clock.advance(cost)

        return fn

    return {name: make(name, cost) for name, cost in costs.items()}


def test_time_paired_reports_seconds_per_call_of_the_clock_it_is_given():
    clock, log = FakeClock(), []
    fns = _costly(clock, log, {"x": 1.0, "y": 3.0})
    times = bench.time_paired(fns, repeats=4, min_time=TICK, blocks=2, timer=clock)
    assert times == {"x": [1.0] * 4, "y": [3.0] * 4}
    # warmup, calibration, repeats x blocks:
    assert log.count("x") == log.count("y") == 1 + 1 + 4 * 2
    # Repetition r starts with contender r mod 2: x y x y | y x y x | x y x y | y x y x
    assert log[4:] == ["x", "y"] * 2 + ["y", "x"] * 2 + ["x", "y"] * 2 + ["y", "x"] * 2


def test_time_paired_calls_enough_times_per_block_and_keeps_the_fastest_block():
    clock, log = FakeClock(), []
    fns = _costly(clock, log, {"x": 1.0, "y": 3.0})
    # The slowest call takes 3 s; a block should take min_time / blocks = 6 s: 2 calls.
    times = bench.time_paired(fns, repeats=1, min_time=12.0, blocks=2, warmup=0, timer=clock)
    assert log.count("x") == log.count("y") == 1 + 1 * 2 * 2  # calibration, blocks x number
    assert times == {"x": [1.0], "y": [3.0]}

    # A burst of load makes one block of y slow: the repetition keeps y's faster block.
    clock, calls = FakeClock(), []

    def y():
        calls.append("y")
        clock.advance(12.0 if len(calls) == 2 else 2.0)  # the 1st timed call is slow

    times = bench.time_paired({"y": y}, repeats=1, min_time=TICK, blocks=2, warmup=0, timer=clock)
    assert len(calls) == 3 and times == {"y": [2.0]}


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(fns={}), "fns"),
        (dict(fns=[lambda: None]), "fns"),
        (dict(fns={"x": 3}), r"fns\['x'\]"),
        (dict(repeats=0), "repeats"),
        (dict(repeats=2.5), "repeats"),
        (dict(blocks=0), "blocks"),
        (dict(warmup=-1), "warmup"),
        (dict(min_time=0.0), "min_time"),
        (dict(min_time=-1.0), "min_time"),
        (dict(min_time=math.inf), "min_time"),
        (dict(min_time=math.nan), "min_time"),
        (dict(min_time="1"), "min_time"),
        (dict(timer=1.0), "timer"),
    ],
)
def test_time_paired_rejects_bad_arguments(kwargs, match):
    kwargs = {"fns": {"x": lambda: None}, **kwargs}
    with pytest.raises(ValueError, match=match):
        bench.time_paired(**kwargs)


def test_paired_ratio_is_computed_per_repetition():
    r = bench.paired_ratio({"a": [2.0, 3.0, 8.0], "b": [1.0, 1.0, 2.0]}, "a", "b")
    assert (r.median, r.min, r.max) == (3.0, 2.0, 4.0)
    assert str(r) == "3.00 [2.00-4.00]"
    with pytest.raises(ValueError, match="num"):
        bench.paired_ratio({"a": [1.0], "b": [1.0]}, "c", "b")
    with pytest.raises(ValueError, match="den"):
        bench.paired_ratio({"a": [1.0], "b": [1.0]}, "a", "fast")
    with pytest.raises(ValueError, match="one length"):
        bench.paired_ratio({"a": [1.0, 2.0], "b": [1.0]}, "a", "b")
    with pytest.raises(ValueError, match="positive"):
        bench.paired_ratio({"a": [1.0], "b": [0.0]}, "a", "b")
    with pytest.raises(ValueError, match="times"):
        bench.paired_ratio([1.0, 2.0], "a", "b")


def test_benchmark_rows_and_table():
    messages = []
    # Every reading of this clock is one second after the last: every block of every
    # contender "takes" one second, so every time is 1.0 and every ratio exactly 1.
    rows = bench.benchmark([TINY], repeats=2, min_time=TICK, progress=messages.append,
                           timer=FakeClock(step=1.0))
    assert len(rows) == 2 and [r.masked for r in rows] == [False, True]
    assert len(messages) == 2 and messages[0].startswith("[1/2]")
    for row in rows:
        assert row.sizes == TINY
        assert set(row.ratios) == {(a, b) for a, b, _ in bench.TARGETS}
        assert all(r == bench.Ratio(1.0, 1.0, 1.0) for r in row.ratios.values())
        assert row.seconds == dict.fromkeys(bench.CONTENDER_LABELS, 1.0)
        assert row.times == {name: [1.0, 1.0] for name in bench.CONTENDER_LABELS}
    plain = bench.format_table(rows)  # the chapter's table: ratios only
    assert "<=" not in plain and " ok" not in plain and "MISS" not in plain
    table = bench.format_table(rows, targets=True)  # the command line's
    lines = table.splitlines()
    assert len(lines) == 4 and "fast/limit <= 1.10" in lines[0] and "random" in lines[3]
    assert "1.00 [1.00-1.00] ok" in lines[2]  # 1.00 meets fast/limit <= 1.10
    assert "1.00 [1.00-1.00] MISS" in lines[2]  # but not fast/torch <= 0.60


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(sizes=TINY), "sizes"),
        (dict(sizes=[]), "sizes"),
        (dict(sizes=[(2, 3, 5, 8, 2)]), r"sizes\[0\]"),
        (dict(masked=True), "masked"),
        (dict(masked=[]), "masked"),
        (dict(masked=[1]), "masked"),
        (dict(repeats=0), "repeats"),
        (dict(min_time=0), "min_time"),
        (dict(contenders=["fast", "flash"]), r"contenders\[1\]"),
        (dict(contenders="fast"), "contenders"),
        (dict(contenders=[]), "contenders"),
        (dict(progress="print"), "progress"),
        (dict(seed=-1), "seed"),
        (dict(seed=1.5), "seed"),
        (dict(timer=None), "timer"),
    ],
)
def test_benchmark_rejects_bad_arguments_before_running(kwargs, match):
    kwargs = {"sizes": [TINY], **kwargs}
    with pytest.raises(ValueError, match=match):
        bench.benchmark(**kwargs)


def test_benchmark_with_a_subset_of_contenders_reports_only_its_ratios():
    rows = bench.benchmark([TINY], masked=[True], repeats=1, min_time=TICK,
                           contenders=["fast", "limit"], timer=FakeClock(step=1.0))
    assert list(rows[0].ratios) == [("fast", "limit")]
    assert set(rows[0].times) == {"fast", "limit"}
    assert "weights/" not in bench.format_table(rows)
    with pytest.raises(ValueError, match="rows"):
        bench.format_table([])
    with pytest.raises(ValueError, match=r"rows\[0\]"):
        bench.format_table(["a row"])


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
    with pytest.raises(ValueError, match="sizes"):
        bench.flop_count((2, 3, 5, 8, 2))


def test_split_contenders_run():
    fns = bench.split_contenders(bench.make_case(TINY, masked=True))
    assert set(fns) == {"projections", "attention"}
    with torch.inference_mode():
        assert fns["attention"]().shape == (2, 2, 3, 4)
        assert [t.shape[-1] for t in fns["projections"]()] == [8, 8, 8, 8]
    with pytest.raises(ValueError, match="case"):
        bench.split_contenders(TINY)
    with pytest.raises(ValueError, match="seed"):
        bench.split_contenders(bench.make_case(TINY, masked=False), seed="0")


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
    with pytest.raises(ValueError, match="sizes"):
        bench.weights_bytes([2, 3, 5, 8, 2])
    with pytest.raises(ValueError, match="dtype"):
        bench.weights_bytes(TINY, "float32")


def test_peak_memory_sees_an_allocation():
    n = 1 << 20
    peak = bench.peak_memory(lambda: torch.ones(n))  # 4 MiB, alive when the call returns
    assert 4 * n <= peak < 8 * n
    with pytest.raises(ValueError, match="fn"):
        bench.peak_memory(torch.ones(3))


def test_memory_table_weights_path_holds_more_than_the_fast_path():
    rows = bench.memory_table([32, 64], B=1, D=16, H=4)
    assert [r["L"] for r in rows] == [32, 64]
    for r in rows:
        assert r["weights_bytes"] == 1 * 4 * r["L"] ** 2 * 4
        assert r["peak_weights"] >= r["weights_bytes"] > 0
        assert 0 < r["peak_fast"] < r["peak_weights"]
    text = bench.format_memory_table(rows, B=1, D=16, H=4)
    assert len(text.splitlines()) == 4
    with pytest.raises(ValueError, match=r"lengths\[1\]"):
        bench.memory_table([32, 0], B=1, D=16, H=4)
    with pytest.raises(ValueError, match="divisible"):
        bench.memory_table([32], B=1, D=16, H=3)
    with pytest.raises(ValueError, match=r"rows\[0\].*peak_fast"):
        bench.format_memory_table([{"L": 8, "weights_bytes": 1, "peak_weights": 1}], B=1, D=4, H=2)
    with pytest.raises(ValueError, match="B"):
        bench.format_memory_table(rows, B=0, D=16, H=4)


def test_main_tiny_run(capsys):
    assert bench.main(["--size", "1,2,3,4,2", "--repeats", "1", "--min-time", "1e-6",
                       "--memory-lengths", "8"]) == 0
    out = capsys.readouterr().out
    assert "(1, 2, 3, 4, 2)" in out and "Peak memory" in out


def test_cli_rejects_a_bad_size(capsys):
    with pytest.raises(SystemExit):
        bench.main(["--size", "1,2,3"])
    assert "B,Lq,Lk,D,H" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.main(["--min-time", "0"])
    assert "min_time" in capsys.readouterr().err


def test_module_runs_as_a_script():
    result = subprocess.run(
        [sys.executable, "-m", "mha_lib.bench", "--size", "1,2,2,4,1", "--repeats", "1",
         "--min-time", "1e-6", "--memory-lengths"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "fast/limit" in result.stdout


def test_attention_share_is_the_median_share():
    times = {"attention": [1.0, 3.0, 1.0], "projections": [1.0, 1.0, 3.0]}
    assert bench.attention_share(times) == 0.5
    with pytest.raises(ValueError, match="attention"):
        bench.attention_share({"projections": [1.0]})


def test_scaling_times_one_number_per_length_from_the_given_clock():
    seconds = bench.scaling_times([4, 8], B=1, D=8, H=2, repeats=2, min_time=TICK,
                                  timer=FakeClock(step=1.0))
    assert seconds == [1.0, 1.0]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(lengths=[]), "lengths"),
        (dict(lengths=[4, -8]), r"lengths\[1\]"),
        (dict(lengths=8), "lengths"),
        (dict(B=0), "B"),
        (dict(H=3), "divisible"),
        (dict(path="flash"), "path"),
        (dict(repeats=0), "repeats"),
        (dict(min_time=math.inf), "min_time"),
    ],
)
def test_scaling_times_rejects_bad_arguments(kwargs, match):
    kwargs = {"lengths": [4], "B": 1, "D": 8, "H": 2, **kwargs}
    with pytest.raises(ValueError, match=match):
        bench.scaling_times(**kwargs)


def test_case_and_module_builders_reject_bad_arguments():
    case = bench.make_case(TINY, masked=False)
    for call, match in [
        (lambda: bench.make_case((2, 3, 5, 8, 2), masked=False), "sizes"),
        (lambda: bench.make_case(TINY, masked=1), "masked"),
        (lambda: bench.make_case(TINY, masked=False, seed=-1), "seed"),
        (lambda: bench.make_case(TINY, masked=False, dtype=torch.int64), "dtype"),
        (lambda: bench.make_modules("TINY"), "sizes"),
        (lambda: bench.make_modules(TINY, seed=True), "seed"),
        (lambda: bench.make_modules(TINY, dtype="float32"), "dtype"),
        (lambda: bench.make_contenders(TINY), "case"),
        (lambda: bench.make_contenders(case, seed=None), "seed"),
        (lambda: bench.check_agreement({}), "contenders"),
        (lambda: bench.check_agreement({"a": torch.zeros(2)}), r"contenders\['a'\]"),
    ]:
        with pytest.raises(ValueError, match=match):
            call()


def test_figures_have_labelled_axes_and_one_trace_per_series():
    rows = bench.benchmark([TINY], masked=[True], repeats=2, min_time=TICK,
                           timer=FakeClock(step=1.0))
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


def test_figures_reject_bad_arguments():
    rows = bench.benchmark([TINY], masked=[True], repeats=1, min_time=TICK,
                           contenders=["fast", "limit"], timer=FakeClock(step=1.0))
    for call, match in [
        (lambda: bench.flop_figure([]), "lengths"),
        (lambda: bench.flop_figure([8], D=8, H=3), "divisible"),
        (lambda: bench.scaling_figure([8, 16], [1e-3], slope=2.0), "seconds"),
        (lambda: bench.scaling_figure([8, 16], [1e-3, 0.0], slope=2.0), "seconds"),
        (lambda: bench.scaling_figure([8, 16], [1e-3, 2e-3], slope=math.nan), "slope"),
        (lambda: bench.memory_figure([]), "rows"),
        (lambda: bench.memory_figure([{"L": 8}]), r"rows\[0\]"),
        (lambda: bench.ratio_figure([]), "rows"),
        (lambda: bench.ratio_figure(rows, baseline="flash"), "baseline"),
        (lambda: bench.ratio_figure(rows, baseline="torch"), "baseline"),
    ]:
        with pytest.raises(ValueError, match=match):
            call()


def test_time_paired_refuses_a_timer_that_never_advances_instead_of_hanging():
    calls = []
    with pytest.raises(ValueError, match="timer did not advance"):
        bench.time_paired({"a": lambda: calls.append(1)}, timer=lambda: 1.0)
    assert len(calls) < 2**18  # it gave up after a bounded number of calls
    clock = iter(range(100, 0, -1))
    with pytest.raises(ValueError, match="timer must return increasing"):
        bench.time_paired({"a": lambda: None}, timer=lambda: next(clock))


@pytest.mark.parametrize(
    "argv", [["--repeats", "-3"], ["--threads", "0"], ["--memory-lengths", "0"], ["--repeats", "x"]]
)
def test_command_line_rejects_bad_numbers_before_running(argv, capsys, monkeypatch):
    monkeypatch.setattr(bench, "benchmark", lambda *a, **k: pytest.fail("the benchmark ran"))
    with pytest.raises(SystemExit) as exit_info:
        bench.main(argv)
    assert exit_info.value.code == 2  # argparse's usage error, not a traceback
    assert "must be an integer >= 1" in capsys.readouterr().err or "x" in argv
