"""Figures of the modern chapters: traces, titles and axes."""

import pytest
import torch

from mha_lib.flash import tiled_attention_steps
from mha_lib.gqa import GroupedQueryAttention
from mha_lib.viz import modern as vm


def test_gqa_heatmaps_name_the_shared_head():
    torch.manual_seed(0)
    gqa = GroupedQueryAttention(16, 4, 2, 0.0).eval()
    x = torch.randn(1, 3, 16)
    _, w = gqa(x, x, x, need_weights=True)
    fig = vm.gqa_heatmaps(w, 2)
    titles = [a.text for a in fig.layout.annotations if "head" in (a.text or "")]
    assert titles == ["head 0 · K/V 0", "head 1 · K/V 0", "head 2 · K/V 1", "head 3 · K/V 1"]


def test_sharing_and_cost_figures():
    fig = vm.kv_sharing_figure(4, 2)
    assert [list(row) for row in fig.data[0].z] == [[1, 0], [1, 0], [0, 1], [0, 1]]
    fig = vm.step_cost_figure(10, 8)
    cached, recompute = (list(t.y) for t in fig.data)
    assert cached[0] == recompute[0] and recompute[-1] > cached[-1]
    fig = vm.decoding_time_figure([1, 2], {"a": [1.0, 2.0], "b": [1.0, 4.0]})
    assert fig.layout.xaxis.type == "log" and len(fig.data) == 2


def test_online_softmax_and_memory_figures():
    steps = tiled_attention_steps(torch.randn(1, 2, 4), torch.randn(1, 9, 4), torch.randn(1, 9, 4),
                                  block_size=3)
    fig = vm.online_softmax_figure(steps, query=1)
    assert [list(t.x) for t in fig.data] == [[3, 6, 9]] * 3
    rows = [{"L": 8, "peak": {"a": 2**20, "b": 2**21}}, {"L": 16, "peak": {"a": 2**21, "b": 2**23}}]
    fig = vm.peak_memory_figure(rows)
    assert list(fig.data[1].y) == [2.0, 8.0]


def test_step_cost_figure_draws_the_step_flops_of_the_benchmark():
    from mha_lib.bench.modern import step_flops

    fig = vm.step_cost_figure(4, 8)
    cached, recompute = (list(t.y) for t in fig.data)
    assert cached == [step_flops(t, 8, cached=True) for t in range(4)]
    assert recompute == [step_flops(t, 8, cached=False) for t in range(4)]


def _steps():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, n, 4, generator=g) for n in (2, 9, 9))
    return tiled_attention_steps(q, k, v, block_size=3)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: vm.step_cost_figure(0, 8), "max_position must be an integer >= 1"),
        (lambda: vm.step_cost_figure(4, -8), "D must be an integer >= 1"),
        (lambda: vm.decoding_time_figure([], {"a": []}), "lengths"),
        (lambda: vm.decoding_time_figure([1, 2], [1.0, 2.0]), "seconds must be a non-empty mapping"),
        (lambda: vm.decoding_time_figure([1, 2], {}), "seconds must be a non-empty mapping"),
        (lambda: vm.decoding_time_figure([1, 2], {"a": [1.0]}), r"seconds\['a'\] must hold one time"),
        (lambda: vm.decoding_time_figure([1, 2], {"a": [1.0, 0.0]}), r"seconds\['a'\]\[1\]"),
        (lambda: vm.kv_sharing_figure(4, 3), "num_kv_heads"),
        (lambda: vm.kv_sharing_figure(0, 1), "num_heads"),
        (lambda: vm.gqa_heatmaps(torch.rand(4, 3, 3), 3), "num_kv_heads"),
        (lambda: vm.gqa_heatmaps(torch.rand(4, 3, 3), 0), "num_kv_heads"),
        (lambda: vm.online_softmax_figure([]), "steps must hold at least one"),
        (lambda: vm.online_softmax_figure(["state"]), r"steps\[0\] must be a state"),
        (lambda: vm.online_softmax_figure(_steps(), query=2), "query must be below 2"),
        (lambda: vm.online_softmax_figure(_steps(), query=-1), "query must be an integer >= 0"),
        (lambda: vm.online_softmax_figure(_steps(), feature=4), "feature must be below 4"),
        (lambda: vm.peak_memory_figure([]), "rows"),
        (lambda: vm.peak_memory_figure([{"L": 8}]), r"rows\[0\] must have the keys"),
        (lambda: vm.peak_memory_figure([{"L": 8, "peak": {"a": -1}}]), r"rows\[0\]\['peak'\]\['a'\]"),
    ],
)
def test_figures_reject_bad_arguments(call, match):
    with pytest.raises(ValueError, match=match):
        call()
