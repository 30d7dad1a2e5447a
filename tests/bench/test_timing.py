"""mha_lib.timing: paired timings with a fake clock, ratios, slopes, peak memory, kernels.

Where a result depends on the clock, the test passes a fake ``timer`` whose readings it
controls, and asserts the exact numbers that clock implies (never a wall-clock time).
"""

import math

import pytest
import torch

from mha_lib import timing
from mha_lib.timing import Ratio

TICK = 1e-6  # a min_time so small that every block is one call


def test_time_paired_reports_seconds_per_call_of_the_clock_it_is_given(make_clock, costly):
    clock, log = make_clock(), []
    fns = costly(clock, log, {"x": 1.0, "y": 3.0})
    times = timing.time_paired(fns, repeats=4, min_time=TICK, blocks=2, timer=clock)
    assert times == {"x": [1.0] * 4, "y": [3.0] * 4}
    # warmup, calibration, repeats x blocks:
    assert log.count("x") == log.count("y") == 1 + 1 + 4 * 2
    # Repetition r starts with contender r mod 2: x y x y | y x y x | x y x y | y x y x
    assert log[4:] == ["x", "y"] * 2 + ["y", "x"] * 2 + ["x", "y"] * 2 + ["y", "x"] * 2


def test_time_paired_calls_enough_times_per_block_and_keeps_the_fastest_block(make_clock, costly):
    clock, log = make_clock(), []
    fns = costly(clock, log, {"x": 1.0, "y": 3.0})
    # The slowest call takes 3 s; a block should take min_time / blocks = 6 s: 2 calls.
    times = timing.time_paired(fns, repeats=1, min_time=12.0, blocks=2, warmup=0, timer=clock)
    assert log.count("x") == log.count("y") == 1 + 1 * 2 * 2  # calibration, blocks x number
    assert times == {"x": [1.0], "y": [3.0]}

    # A burst of load makes one block of y slow: the repetition keeps y's faster block.
    clock, calls = make_clock(), []

    def y():
        calls.append("y")
        clock.advance(12.0 if len(calls) == 2 else 2.0)  # the 1st timed call is slow

    times = timing.time_paired({"y": y}, repeats=1, min_time=TICK, blocks=2, warmup=0, timer=clock)
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
        (dict(warmup=True), "warmup"),
        (dict(min_time=0.0), "min_time"),
        (dict(min_time=-1.0), "min_time"),
        (dict(min_time=math.inf), "min_time"),
        (dict(min_time=math.nan), "min_time"),
        (dict(min_time="1"), "min_time"),
        (dict(timer=1.0), "timer"),
    ],
)
def test_time_paired_rejects_bad_arguments_before_calling_anything(kwargs, match):
    calls = []
    kwargs = {"fns": {"x": lambda: calls.append(1)}, **kwargs}
    with pytest.raises(ValueError, match=match):
        timing.time_paired(**kwargs)
    assert calls == []


def test_time_paired_refuses_a_timer_that_never_advances_instead_of_hanging():
    calls = []
    with pytest.raises(ValueError, match="timer did not advance"):
        timing.time_paired({"a": lambda: calls.append(1)}, timer=lambda: 1.0)
    assert len(calls) < 2**18  # it gave up after a bounded number of calls
    clock = iter(range(100, 0, -1))
    with pytest.raises(ValueError, match="timer must return increasing"):
        timing.time_paired({"a": lambda: None}, timer=lambda: next(clock))
    with pytest.raises(ValueError, match="timer must return increasing"):
        timing.time_paired({"a": lambda: None}, timer=lambda: "now")
    with pytest.raises(ValueError, match="timer must return increasing"):
        timing.time_paired({"a": lambda: None}, timer=lambda: math.nan)


def test_paired_ratio_is_computed_per_repetition():
    r = timing.paired_ratio({"a": [2.0, 3.0, 8.0], "b": [1.0, 1.0, 2.0]}, "a", "b")
    assert r == Ratio(3.0, 2.0, 4.0)
    assert str(r) == "3.00 [2.00-4.00]"
    # what time_paired returns goes straight in
    assert timing.paired_ratio({"a": (0.0, 1), "b": [1, 1]}, "a", "b") == Ratio(0.5, 0.0, 1.0)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (({}, "a", "b"), "num"),
        (([1.0, 2.0], "a", "b"), "times must be a mapping"),
        (({"a": [1.0], "b": [1.0]}, "c", "b"), "num must be one of"),
        (({"a": [1.0], "b": [1.0]}, "a", "fast"), "den must be one of"),
        (({"a": [1.0], "b": [1.0]}, ["a"], "b"), "num"),
        (({"a": [1.0, 2.0], "b": [1.0]}, "a", "b"), "one length"),
        (({"a": [], "b": []}, "a", "b"), r"times\['a'\]"),
        (({"a": [1.0], "b": [0.0]}, "a", "b"), r"times\['b'\]\[0\] must be a finite number > 0"),
        (({"a": [-1.0], "b": [1.0]}, "a", "b"), r"times\['a'\]\[0\]"),
        (({"a": [math.nan], "b": [1.0]}, "a", "b"), r"times\['a'\]\[0\]"),
        (({"a": ["1"], "b": [1.0]}, "a", "b"), r"times\['a'\]\[0\]"),
        (({"a": 1.0, "b": [1.0]}, "a", "b"), r"times\['a'\] must be a sequence"),
        (({"a": [1.0], "b": [math.inf]}, "a", "b"), r"times\['b'\]\[0\]"),
    ],
)
def test_paired_ratio_rejects_bad_arguments(args, match):
    with pytest.raises(ValueError, match=match):
        timing.paired_ratio(*args)


def test_loglog_slope_recovers_the_exponent():
    x = [1.0, 2.0, 4.0, 8.0]
    assert math.isclose(timing.loglog_slope(x, [3 * v**2 for v in x]), 2.0)
    assert math.isclose(timing.loglog_slope(x, [5.0] * 4), 0.0, abs_tol=1e-12)
    assert math.isclose(timing.loglog_slope((1, 10), (2, 20)), 1.0)  # integers and tuples


@pytest.mark.parametrize(
    ("x", "y", "match"),
    [
        ([1], [2], "same length >= 2"),
        ([1.0, 2.0], [1.0], "same length"),
        ([1.0, 2.0], [0.0, 1.0], r"y\[0\] must be a finite number > 0"),
        ([-1.0, 2.0], [1.0, 1.0], r"x\[0\]"),
        ([1.0, math.inf], [1.0, 1.0], r"x\[1\]"),
        ([1.0, 2.0], [1.0, math.nan], r"y\[1\]"),
        ([1.0, True], [1.0, 1.0], r"x\[1\]"),
        ("12", [1.0, 1.0], "x must be a sequence"),
        (3.0, [1.0, 1.0], "x must be a sequence"),
        ([], [], "x must hold at least one"),
        ([2.0, 2.0], [1.0, 3.0], "x must hold at least two different values"),
    ],
)
def test_loglog_slope_rejects_bad_input(x, y, match):
    with pytest.raises(ValueError, match=match):
        timing.loglog_slope(x, y)


def test_check_agreement_passes_equal_contenders_and_names_the_one_that_differs():
    same = {"a": lambda: torch.zeros(2), "b": lambda: (torch.zeros(2), torch.ones(3)),
            "c": lambda: (torch.zeros(2) + 1e-7, torch.ones(3))}
    assert timing.check_agreement(same, atol=1e-6, rtol=0.0) is None
    with pytest.raises(AssertionError, match="c"):
        timing.check_agreement(same, atol=0.0, rtol=0.0)
    with pytest.raises(AssertionError, match="b"):
        timing.check_agreement({"a": lambda: torch.zeros(2), "b": lambda: torch.ones(2)})
    with pytest.raises(AssertionError, match="b"):  # the weights are compared too
        timing.check_agreement({"a": lambda: (torch.zeros(2), torch.zeros(3)),
                                "b": lambda: (torch.zeros(2), torch.ones(3))})


@pytest.mark.parametrize(
    ("contenders", "kwargs", "match"),
    [
        ({}, {}, "contenders must hold at least one"),
        ([lambda: torch.zeros(1)], {}, "contenders must be a mapping"),
        ({"a": torch.zeros(2)}, {}, r"contenders\['a'\] must be callable"),
        ({"a": "fast"}, {}, r"contenders\['a'\] must be callable"),
        ({"a": lambda: 3.0}, {}, r"contenders\['a'\] must return a tensor"),
        ({"a": lambda: (torch.zeros(1),)}, {}, r"contenders\['a'\] must return a tensor"),
        ({"a": lambda: torch.zeros(1)}, {"atol": 1e-5}, "atol and rtol must be given together"),
        ({"a": lambda: torch.zeros(1)}, {"atol": -1.0, "rtol": 0.0}, "atol must be a finite"),
        ({"a": lambda: torch.zeros(1)}, {"atol": 0.0, "rtol": "0"}, "rtol must be a finite"),
    ],
)
def test_check_agreement_rejects_bad_arguments(contenders, kwargs, match):
    with pytest.raises(ValueError, match=match):
        timing.check_agreement(contenders, **kwargs)


def test_peak_memory_sees_an_allocation():
    n = 1 << 20
    peak = timing.peak_memory(lambda: torch.ones(n))  # 4 MiB, alive when the call returns
    assert 4 * n <= peak < 8 * n
    assert timing.peak_memory(lambda: None) < n  # nothing allocated worth counting


def test_kernels_called_names_the_fused_cpu_kernel():
    q = torch.randn(1, 1, 16, 8)  # (B, H, L, d)
    names = timing.kernels_called(lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q))
    assert "aten::scaled_dot_product_attention" in names
    assert any("flash_attention" in n for n in names)


@pytest.mark.parametrize("measure", [timing.peak_memory, timing.kernels_called])
@pytest.mark.parametrize("fn", [torch.ones(3), None, "fn"])
def test_profiler_measures_reject_a_non_callable(measure, fn):
    with pytest.raises(ValueError, match="fn must be callable"):
        measure(fn)
