"""The one command line of the benchmarks, ``python -m mha_lib.bench [cost|modern]``, on tiny
sizes: what it prints and what it refuses (never a timing)."""

import subprocess
import sys

import pytest
import torch

from mha_lib.bench import cost, modern
from mha_lib.bench.__main__ import main

TINY_COST = ["--size", "1,2,3,4,2", "--repeats", "1", "--min-time", "1e-6"]


@pytest.fixture(autouse=True)
def _keep_threads():
    """``--threads`` sets torch's thread count for the process: restore it after each test."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_cost_is_the_default_command_and_prints_both_tables(capsys):
    assert main([*TINY_COST, "--memory-lengths", "8"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("torch ") and "median [min-max] of 1 paired time ratios" in out
    assert "(1, 2, 3, 4, 2)" in out and "Peak memory" in out
    assert "without guards  device policy  CPU policy" in out  # the operations per forward
    # the ratios of the fast path to the fused-kernel limit and to nn.MultiheadAttention,
    # and of the weights path, with their targets
    for column in ("fast/limit <= 1.10", "fast/torch <= 0.60", "weights/torch_weights <= 1.00",
                   "weights/fast"):
        assert column in out
    assert main(["cost", *TINY_COST, "--memory-lengths"]) == 0  # the same, named
    out = capsys.readouterr().out
    assert "fast/limit" in out and "Peak memory" not in out


def test_modern_prints_the_tables_of_chapters_9_to_11(capsys):
    assert main(["modern", "--quick", "--decode-lengths", "4", "8", "--memory-lengths", "32", "64",
                 "--repeats", "1", "--min-time", "1e-6", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    for heading in ("Decoding L tokens", "log-log slope", "KV cache after", "Peak memory",
                    "Time relative"):
        assert heading in out
    assert torch.get_num_threads() == 1
    assert main(["modern", "--decode-lengths", "--memory-lengths"]) == 0  # nothing to run
    assert "Decoding" not in capsys.readouterr().out


def test_help_names_both_commands(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "cost" in out and "modern" in out and "--quick" in out
    for command, option in (("cost", "--size"), ("modern", "--decode-lengths")):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        assert option in capsys.readouterr().out


def test_cli_rejects_a_bad_size(capsys):
    with pytest.raises(SystemExit):
        main(["--size", "1,2,3"])
    assert "B,Lq,Lk,D,H" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--min-time", "0"])
    assert "min_time" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [["--repeats", "-3"], ["--threads", "0"], ["--memory-lengths", "0"], ["--repeats", "x"],
     ["cost", "--repeats", "0"], ["modern", "--decode-lengths", "0"], ["modern", "--repeats", "x"],
     ["modern", "--min-time", "-1"], ["--bogus"], ["modern", "--size", "1,2,2,4,1"]],
)
def test_command_line_rejects_bad_arguments_before_running(argv, capsys, monkeypatch):
    ran = lambda *a, **k: pytest.fail("a benchmark ran")  # noqa: E731
    for module, name in ((cost, "benchmark"), (modern, "decoding_table"),
                         (modern, "flash_memory_table")):
        monkeypatch.setattr(module, name, ran)
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2  # argparse's usage error, not a traceback
    assert "error:" in capsys.readouterr().err


def test_module_runs_as_a_script():
    result = subprocess.run(
        [sys.executable, "-m", "mha_lib.bench", "--size", "1,2,2,4,1", "--repeats", "1",
         "--min-time", "1e-6", "--memory-lengths"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "fast/limit" in result.stdout
