"""Figures of the modern chapters: traces, titles and axes."""

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
