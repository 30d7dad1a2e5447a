"""``python -m mha_lib.bench gpu``: its tables, run on the CPU at tiny sizes (a GPU runs the
same code), and its message where the device asked for is not there."""

import pytest
import torch

from mha_lib.bench import gpu
from mha_lib.bench.__main__ import main


def test_the_layer_table_times_three_contenders_with_and_without_a_causal_mask():
    rows = gpu.layer_table("cpu", [(2, 16, 16, 2)], dtype=torch.float32, repeats=2, min_time=0.001)
    assert [(r["sizes"], r["causal"]) for r in rows] == [((2, 16, 16, 2), False), ((2, 16, 16, 2), True)]
    for r in rows:
        assert set(r["ms"]) == {"fast", "limit", "torch"} and all(ms > 0 for ms in r["ms"].values())
        assert set(r["ratios"]) == {"limit", "torch"} and r["kernels"]["fast"] is None  # (counted on CUDA)
    text = gpu.format_layer_table(rows)
    assert "(2, 16, 16, 2)" in text and "causal" in text and "fast/limit" in text


def test_the_window_table_compares_ours_with_sdpa_on_the_dense_mask():
    result = gpu.window_table("cpu", L=64, window=8, B=1, H=2, d=8, dtype=torch.float32,
                              repeats=2, min_time=0.001, flex=False)
    assert set(result["ms"]) == {"ours", "sdpa_dense"} and result["flex"] == "left out"
    assert "sliding window 8" in gpu.format_window_table(result)


def test_the_command_names_the_device_and_refuses_one_that_is_missing(capsys):
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit, match="not available"):
            main(["gpu"])
    with pytest.raises(SystemExit, match="device"):
        main(["gpu", "--device", "nonsense"])
    assert gpu.device_line("cpu").startswith("CPU (cpu), torch ")
