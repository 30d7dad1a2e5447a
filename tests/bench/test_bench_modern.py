"""The measurements of mha_lib.bench.modern: structure and memory, never wall-clock times."""

import math

import pytest
import torch

from mha_lib.bench import modern as bm
from mha_lib.timing import Ratio


def test_decoding_flops_linear_with_cache_quadratic_without():
    D = 512
    cached = [bm.decoding_flops(L, D, cached=True) for L in (100, 200)]
    recompute = [bm.decoding_flops(L, D, cached=False) for L in (100, 200)]
    assert bm.decoding_flops(1, D, cached=True) == bm.decoding_flops(1, D, cached=False)
    assert cached[1] / cached[0] < 2.5  # about linear while 8 D^2 per step dominates
    assert recompute[1] / recompute[0] > 3.9  # quadratic (and cubic for L >> D)
    with pytest.raises(ValueError, match="L"):
        bm.decoding_flops(0, D, cached=True)


def test_decoding_contenders_agree_and_table_has_ratios():
    fns = bm.decoding_contenders(5, B=2, D=8, H=2)
    with torch.inference_mode():
        torch.testing.assert_close(fns["cached"](), fns["recompute"](), atol=1e-5, rtol=1e-4)
    rows = bm.decoding_table([3, 4], B=1, D=8, H=2, repeats=2, min_time=0.001)
    assert [r["L"] for r in rows] == [3, 4]
    assert all(isinstance(r["speedup"], Ratio) for r in rows)
    assert rows[1]["cache_bytes"] == 2 * 4 * 8 * 4  # 2 (K and V) * L * D * 4 bytes
    assert "speed-up" in bm.format_decoding_table(rows, B=1, D=8, H=2)


def test_cache_memory_shrinks_by_the_group_size():
    rows = bm.cache_memory_table([4, 8], B=1, D=16, H=8, kv_heads=[8, 2, 1], num_layers=2)
    for r in rows:
        assert r["bytes"][8] == 4 * r["bytes"][2] == 8 * r["bytes"][1]
        assert r["bytes"][8] == 2 * 2 * r["L"] * 16 * 4  # layers * (K, V) * L * D * 4 bytes
    text = bm.format_cache_memory_table(rows, B=1, D=16, H=8)
    assert "(8x)" in text and "KiB" in text and " 0.0 " not in text  # small caches in KiB
    big = [{"L": 1, "bytes": {8: 8 * 2**20, 1: 2**20}}]
    assert "(MiB;" in bm.format_cache_memory_table(big, B=1, D=16, H=8)


def test_tiled_memory_is_linear_and_materialised_quadratic():
    rows = bm.flash_memory_table([128, 256, 512], B=1, d=16, block_size=16)
    slopes = bm.memory_slopes(rows)
    assert slopes["tiled"] < 1.2 and slopes["materialised"] > 1.7
    assert rows[-1]["peak"]["materialised"] > 2 * rows[-1]["peak"]["tiled"]
    assert "slope" in bm.format_flash_memory_table(rows, B=1, d=16, block_size=16)


def test_flash_contenders_agree():
    fns = bm._flash_contenders(40, B=2, d=8, block_size=7)
    out = {name: fn() for name, fn in fns.items()}
    torch.testing.assert_close(out["tiled"], out["fused"], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out["materialised"], out["fused"], atol=1e-5, rtol=1e-5)
    rows = bm.flash_speed_table([16], B=1, d=8, block_size=8, repeats=2, min_time=0.001)
    assert set(rows[0]["ratios"]) == {"tiled/fused", "materialised/fused"}


def test_step_flops_sum_to_decoding_flops():
    D = 16
    for cached in (True, False):
        steps = [bm.step_flops(t, D, cached=cached) for t in range(5)]
        assert sum(steps) == bm.decoding_flops(5, D, cached=cached)
    assert bm.step_flops(0, D, cached=True) == 8 * D * D + 4 * D
    assert bm.step_flops(3, D, cached=False) == 8 * 4 * D * D + 4 * 16 * D


def test_format_tables_handle_one_length_and_zero_peaks():
    rows = [{"L": 8, "peak": {"tiled": 0, "materialised": 2**20, "fused": 0}}]
    text = bm.format_flash_memory_table(rows, B=1, d=4, block_size=4)
    assert "slope" not in text and len(text.splitlines()) == 3  # one length: no slope to fit
    with pytest.raises(ValueError, match="two different lengths"):
        bm.memory_slopes(rows)
    with pytest.raises(ValueError, match="'tiled' must be > 0"):
        bm.memory_slopes(rows + [{"L": 16, "peak": {"tiled": 0, "materialised": 1, "fused": 1}}])


ROWS = {
    "decoding": [{"L": 4, "seconds": {"cached": 1.0, "recompute": 2.0},
                  "tokens_per_s": {"cached": 4.0, "recompute": 2.0},
                  "speedup": Ratio(2.0, 2.0, 2.0), "cache_bytes": 128}],
    "cache": [{"L": 4, "bytes": {8: 256, 1: 32}}],
    "flash_memory": [{"L": 8, "peak": {"tiled": 10, "materialised": 40, "fused": 5}},
                     {"L": 16, "peak": {"tiled": 20, "materialised": 160, "fused": 10}}],
    "flash_speed": [{"L": 8, "ratios": {"tiled/fused": Ratio(2.0, 1.0, 3.0)}}],
}


def test_format_tables_of_rows_typed_by_hand():
    assert "2.00 [2.00-2.00]" in bm.format_decoding_table(ROWS["decoding"], B=1, D=8, H=2)
    assert "(8x)" in bm.format_cache_memory_table(ROWS["cache"], B=1, D=8, H=8)
    text = bm.format_flash_memory_table(ROWS["flash_memory"], B=1, d=4, block_size=4)
    assert text.splitlines()[-1].split()[:3] == ["slope", "1.00", "2.00"]
    assert bm.memory_slopes(ROWS["flash_memory"])["materialised"] == pytest.approx(2.0)
    assert "2.00 [1.00-3.00]" in bm.format_flash_speed_table(ROWS["flash_speed"], B=1, d=4,
                                                              block_size=4)


def _with(rows, **changes):
    return [{**rows[0], **changes}, *rows[1:]]


@pytest.mark.parametrize(
    ("call", "match"),
    [
        # builders and tables: sizes, lengths, seeds, timing options
        (lambda: bm.decoding_table([], B=1, D=8, H=2), "lengths must hold at least one"),
        (lambda: bm.decoding_table([4, -1], B=1, D=8, H=2), r"lengths\[1\]"),
        (lambda: bm.decoding_table(8, B=1, D=8, H=2), "lengths must be a sequence"),
        (lambda: bm.decoding_table([4], B=1, D=8, H=2, repeats=0), "repeats"),
        (lambda: bm.decoding_table([4], B=1, D=8, H=2, min_time=math.nan), "min_time"),
        (lambda: bm.decoding_contenders(4, D=10, H=4), "divisible"),
        (lambda: bm.decoding_contenders(0), "L must be an integer >= 1"),
        (lambda: bm.decoding_contenders(4, B=-1), "B must be an integer >= 1"),
        (lambda: bm.decoding_contenders(4, seed=-1), "seed must be an integer >= 0"),
        (lambda: bm.decoding_flops(0, 8, cached=True), "L must be"),
        (lambda: bm.decoding_flops(4, 0, cached=True), "D must be"),
        (lambda: bm.decoding_flops(4, 8, cached=1), "cached must be True or False"),
        (lambda: bm.step_flops(-1, 8, cached=True), "t must be an integer >= 0"),
        (lambda: bm.cache_memory_table([4], kv_heads=[0]), r"kv_heads\[0\]"),
        (lambda: bm.cache_memory_table([4], num_layers=0), "num_layers"),
        (lambda: bm.cache_memory_table([-4]), r"lengths\[0\]"),
        (lambda: bm.flash_memory_table([8], B=0), "B must be"),
        (lambda: bm.flash_memory_table([8], block_size=-2), "block_size"),
        (lambda: bm.flash_speed_table([8], d=0), "d must be"),
        (lambda: bm.flash_speed_table([8], repeats=-1), "repeats"),
        (lambda: bm._flash_contenders(8, seed="0"), "seed"),
        # formatters: rows of the wrong shape
        (lambda: bm.format_decoding_table([], B=1, D=8, H=2), "rows must hold at least one"),
        (lambda: bm.format_decoding_table(ROWS["decoding"], B=1, D=8, H=3), "divisible"),
        (lambda: bm.format_decoding_table(_with(ROWS["decoding"], speedup=2.0), B=1, D=8, H=2),
         r"rows\[0\]\['speedup'\] must be a mha_lib.timing.Ratio"),
        (lambda: bm.format_decoding_table(_with(ROWS["decoding"], tokens_per_s={"cached": 1.0}),
                                          B=1, D=8, H=2), "lacks \\['recompute'\\]"),
        (lambda: bm.format_cache_memory_table([{"L": 4}], B=1, D=8, H=8),
         r"rows\[0\] must have the keys \['L', 'bytes'\].*lacks \['bytes'\]"),
        (lambda: bm.format_cache_memory_table(_with(ROWS["cache"], bytes={8: 0}), B=1, D=8, H=8),
         r"rows\[0\]\['bytes'\]\[8\] must be an integer >= 1"),
        (lambda: bm.format_cache_memory_table(ROWS["cache"] + [{"L": 8, "bytes": {8: 1}}],
                                              B=1, D=8, H=8), r"rows\[1\]\['bytes'\]"),
        (lambda: bm.format_flash_memory_table(["row"], B=1, d=4, block_size=4),
         r"rows\[0\] must be a dict"),
        (lambda: bm.format_flash_memory_table([{"L": 8, "peak": {"fused": 1}}], B=1, d=4,
                                              block_size=4), "lacks \\['tiled', 'materialised'\\]"),
        (lambda: bm.format_flash_memory_table(ROWS["flash_memory"], B=1, d=4, block_size=0),
         "block_size"),
        (lambda: bm.memory_slopes(_with(ROWS["flash_memory"], peak={"tiled": 1})),
         r"rows\[1\]\['peak'\] must have the contenders of rows\[0\]"),
        (lambda: bm.memory_slopes({"L": 8}), "rows must be a sequence"),
        (lambda: bm.format_flash_speed_table([{"L": 8, "ratios": {"tiled/fused": 2.0}}], B=1, d=4,
                                             block_size=4), r"\['ratios'\]\['tiled/fused'\]"),
    ],
)
def test_bad_arguments(call, match):
    with pytest.raises(ValueError, match=match):
        call()
