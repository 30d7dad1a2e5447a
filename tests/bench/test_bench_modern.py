"""The measurements of mha_lib.bench_modern: structure and memory, never wall-clock times."""

import pytest
import torch

from mha_lib import bench_modern as bm
from mha_lib.bench import Ratio


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
    fns = bm.flash_contenders(40, B=2, d=8, block_size=7)
    out = {name: fn() for name, fn in fns.items()}
    torch.testing.assert_close(out["tiled"], out["fused"], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out["materialised"], out["fused"], atol=1e-5, rtol=1e-5)
    rows = bm.flash_speed_table([16], B=1, d=8, block_size=8, repeats=2, min_time=0.001)
    assert set(rows[0]["ratios"]) == {"tiled/fused", "materialised/fused"}


def test_bad_arguments():
    with pytest.raises(ValueError, match="lengths"):
        bm.decoding_table([], B=1, D=8, H=2)
    with pytest.raises(ValueError, match="divisible"):
        bm.decoding_contenders(4, D=10, H=4)
    with pytest.raises(ValueError, match="kv_heads"):
        bm.cache_memory_table([4], kv_heads=[0])
    with pytest.raises(SystemExit):
        bm.main(["--decode-lengths", "0"])
    with pytest.raises(SystemExit):
        bm.main(["--repeats", "x"])


def test_main_prints_the_tables(capsys):
    assert bm.main(["--quick", "--decode-lengths", "4", "8", "--memory-lengths", "32", "64",
                    "--repeats", "1", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    for heading in ("Decoding L tokens", "KV cache after", "Peak memory", "Time relative"):
        assert heading in out


def test_kernels_called_names_the_fused_cpu_kernel():
    q = torch.randn(1, 1, 16, 8)  # (B, H, L, d)
    names = bm.kernels_called(lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q))
    assert "aten::scaled_dot_product_attention" in names
    assert any("flash_attention" in n for n in names)
    with pytest.raises(ValueError, match="fn must be callable"):
        bm.kernels_called(3)
