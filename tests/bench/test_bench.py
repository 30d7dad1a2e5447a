"""mha_lib.bench.cost on tiny sizes: well-formed results, never timings.

Where a result depends on the clock, the test passes a fake ``timer`` whose readings it
controls, and asserts the exact numbers that clock implies (never a wall-clock time).
"""

import math

import pytest
import torch

from mha_lib.bench import cost
from mha_lib.bench.cost import Sizes
from mha_lib.timing import Ratio, check_agreement

TINY = Sizes(2, 3, 5, 8, 2)
TICK = 1e-6  # a min_time so small that every block is one call


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
    for bad, match in [((-1, 2, 2, 8, 2), "B"), ((1, -2, 2, 8, 2), "Lq"), ((1, 2, 2, 8.0, 2), "D"),
                       ((1, 2, 2, 8, "2"), "H")]:
        with pytest.raises(ValueError, match=f"{match} must be an integer >= 1"):
            Sizes(*bad)


@pytest.mark.parametrize("masked", [False, True])
def test_contenders_agree_and_have_the_documented_outputs(masked):
    case = cost.make_case(TINY, masked=masked, seed=3)
    assert case.queries.shape == (2, 3, 8) and case.keys.shape == case.values.shape == (2, 5, 8)
    if masked:
        assert case.valid_lens.shape == (2,) and 1 <= case.valid_lens.min() <= case.valid_lens.max() <= 5
    else:
        assert case.valid_lens is None
    fns = cost.make_contenders(case)
    assert set(fns) == set(cost.CONTENDER_LABELS)
    with torch.inference_mode():
        out, weights = fns["weights"]()
    assert out.shape == (2, 3, 8) and weights.shape == (2, 2, 3, 5)
    check_agreement(fns, atol=1e-5, rtol=1e-4)


def test_benchmark_rows_and_table(make_clock):
    messages = []
    # Every reading of this clock is one second after the last: every block of every
    # contender "takes" one second, so every time is 1.0 and every ratio exactly 1.
    rows = cost.benchmark([TINY], repeats=2, min_time=TICK, progress=messages.append,
                           timer=make_clock(step=1.0))
    assert len(rows) == 2 and [r.masked for r in rows] == [False, True]
    assert len(messages) == 2 and messages[0].startswith("[1/2]")
    for row in rows:
        assert row.sizes == TINY
        assert set(row.ratios) == {(a, b) for a, b, _ in cost._TARGETS}
        assert all(r == Ratio(1.0, 1.0, 1.0) for r in row.ratios.values())
        assert row.seconds == dict.fromkeys(cost.CONTENDER_LABELS, 1.0)
        assert row.times == {name: [1.0, 1.0] for name in cost.CONTENDER_LABELS}
    plain = cost.format_table(rows)  # the chapter's table: ratios only
    assert "<=" not in plain and " ok" not in plain and "MISS" not in plain
    table = cost.format_table(rows, targets=True)  # the command line's
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
        cost.benchmark(**kwargs)


def test_benchmark_with_a_subset_of_contenders_reports_only_its_ratios(make_clock):
    rows = cost.benchmark([TINY], masked=[True], repeats=1, min_time=TICK,
                           contenders=["fast", "limit"], timer=make_clock(step=1.0))
    assert list(rows[0].ratios) == [("fast", "limit")]
    assert set(rows[0].times) == {"fast", "limit"}
    assert "weights/" not in cost.format_table(rows)
    with pytest.raises(ValueError, match="rows"):
        cost.format_table([])
    with pytest.raises(ValueError, match=r"rows\[0\]"):
        cost.format_table(["a row"])
    with pytest.raises(ValueError, match="targets"):
        cost.format_table(rows, targets=1)


def test_flop_count_formula():
    s = Sizes(2, 3, 5, 8, 2)
    flops = cost.flop_count(s)
    assert flops == {
        "projections": 2 * 2 * (2 * 3 + 2 * 5) * 8 * 8,
        "scores": 2 * 2 * 3 * 5 * 8,
        "weighted sum": 2 * 2 * 3 * 5 * 8,
    }
    # Doubling the sequence doubles the projections and quadruples the attention part.
    s2 = Sizes(2, 6, 10, 8, 2)
    assert cost.flop_count(s2)["projections"] == 2 * flops["projections"]
    assert cost.flop_count(s2)["scores"] == 4 * flops["scores"]
    with pytest.raises(ValueError, match="sizes"):
        cost.flop_count((2, 3, 5, 8, 2))


def test_split_contenders_run():
    fns = cost.split_contenders(cost.make_case(TINY, masked=True))
    assert set(fns) == {"projections", "attention"}
    with torch.inference_mode():
        assert fns["attention"]().shape == (2, 2, 3, 4)
        assert [t.shape[-1] for t in fns["projections"]()] == [8, 8, 8, 8]
    with pytest.raises(ValueError, match="case"):
        cost.split_contenders(TINY)
    with pytest.raises(ValueError, match="seed"):
        cost.split_contenders(cost.make_case(TINY, masked=False), seed="0")



def test_guard_contenders_run_and_their_share_is_the_median_ratio():
    fns = cost._guard_contenders(cost.make_case(TINY, masked=False))
    assert set(fns) == {"guards", "forward"}
    assert fns["guards"]().shape == (2, 2, 3, 4) and fns["forward"]().shape == (2, 3, 8)
    ticks = iter(range(10**6))  # a clock that advances one second a reading: every ratio is 1
    rows = cost.guard_table([TINY], repeats=3, min_time=1e-9, timer=lambda: float(next(ticks)))
    assert [(s, r.median) for s, r in rows] == [(TINY, 1.0)]
    table = cost.format_guard_table(rows)
    assert "guards / fast-path forward" in table and "1.00 [1.00-1.00]" in table
    with pytest.raises(ValueError, match="case"):
        cost._guard_contenders(TINY)
    with pytest.raises(ValueError, match="sizes"):
        cost.guard_table([(2, 3)])

def test_weights_bytes():
    assert cost.weights_bytes(TINY) == 2 * 2 * 3 * 5 * 4
    assert cost.weights_bytes(TINY, torch.float64) == 2 * 2 * 3 * 5 * 8
    with pytest.raises(ValueError, match="sizes"):
        cost.weights_bytes([2, 3, 5, 8, 2])
    with pytest.raises(ValueError, match="dtype"):
        cost.weights_bytes(TINY, "float32")


def test_memory_table_weights_path_holds_more_than_the_fast_path():
    rows = cost.memory_table([32, 64], B=1, D=16, H=4)
    assert [r["L"] for r in rows] == [32, 64]
    for r in rows:
        assert r["weights_bytes"] == 1 * 4 * r["L"] ** 2 * 4
        assert r["peak_weights"] >= r["weights_bytes"] > 0
        assert 0 < r["peak_fast"] < r["peak_weights"]
    text = cost.format_memory_table(rows, B=1, D=16, H=4)
    assert len(text.splitlines()) == 4
    with pytest.raises(ValueError, match=r"lengths\[1\]"):
        cost.memory_table([32, 0], B=1, D=16, H=4)
    with pytest.raises(ValueError, match="divisible"):
        cost.memory_table([32], B=1, D=16, H=3)
    with pytest.raises(ValueError, match=r"rows\[0\].*peak_fast"):
        cost.format_memory_table([{"L": 8, "weights_bytes": 1, "peak_weights": 1}], B=1, D=4, H=2)
    with pytest.raises(ValueError, match="B"):
        cost.format_memory_table(rows, B=0, D=16, H=4)
    for bad, match in [
        ([], "rows must hold at least one"),
        ({"L": 8}, "rows must be a sequence"),
        (["row"], r"rows\[0\] must be a dict"),
        ([{**rows[0], "peak_fast": -1}], r"rows\[0\]\['peak_fast'\] must be an integer >= 0"),
        ([{**rows[0], "peak_fast": 1.5}], r"rows\[0\]\['peak_fast'\]"),
        ([{**rows[0], "L": 0}], r"rows\[0\]\['L'\] must be an integer >= 1"),
    ]:
        with pytest.raises(ValueError, match=match):
            cost.format_memory_table(bad, B=1, D=16, H=4)
    # a peak of 0 bytes (rows typed by hand) prints, no division by zero
    zero = [{**rows[0], "peak_fast": 0}]
    assert len(cost.format_memory_table(zero, B=1, D=16, H=4).splitlines()) == 3


def test_attention_share_is_the_median_share():
    times = {"attention": [1.0, 3.0, 1.0], "projections": [1.0, 1.0, 3.0]}
    assert cost.attention_share(times) == 0.5
    assert cost.attention_share({"attention": (1, 1), "projections": [3.0, 1.0]}) == 0.375


@pytest.mark.parametrize(
    ("times", "match"),
    [
        ({"projections": [1.0]}, "times must map 'attention' and 'projections'"),
        ([1.0, 2.0], "times must map"),
        ({"attention": [0.0], "projections": [0.0]}, r"times\['attention'\]\[0\]"),
        ({"attention": [1.0], "projections": [-1.0]}, r"times\['projections'\]\[0\]"),
        ({"attention": [1.0, 2.0], "projections": [1.0]}, "one length"),
        ({"attention": [], "projections": []}, r"times\['attention'\]"),
        ({"attention": ["1"], "projections": [1.0]}, r"times\['attention'\]\[0\]"),
        ({"attention": 1.0, "projections": [1.0]}, r"times\['attention'\] must be a sequence"),
    ],
)
def test_attention_share_rejects_bad_times(times, match):
    with pytest.raises(ValueError, match=match):
        cost.attention_share(times)


def test_scaling_times_one_number_per_length_from_the_given_clock(make_clock):
    seconds = cost.scaling_times([4, 8], B=1, D=8, H=2, repeats=2, min_time=TICK,
                                  timer=make_clock(step=1.0))
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
        cost.scaling_times(**kwargs)


def test_case_and_module_builders_reject_bad_arguments():
    case = cost.make_case(TINY, masked=False)
    for call, match in [
        (lambda: cost.make_case((2, 3, 5, 8, 2), masked=False), "sizes"),
        (lambda: cost.make_case(TINY, masked=1), "masked"),
        (lambda: cost.make_case(TINY, masked=False, seed=-1), "seed"),
        (lambda: cost.make_case(TINY, masked=False, dtype=torch.int64), "dtype"),
        (lambda: cost.make_modules("TINY"), "sizes"),
        (lambda: cost.make_modules(TINY, seed=True), "seed"),
        (lambda: cost.make_modules(TINY, dtype="float32"), "dtype"),
        (lambda: cost.make_contenders(TINY), "case"),
        (lambda: cost.make_contenders(case, seed=None), "seed"),
        (lambda: cost.split_contenders(case, seed=-1), "seed"),
    ]:
        with pytest.raises(ValueError, match=match):
            call()


