"""mha_lib.viz.why: the figures of the shipped results, kernel-free (plotly sliders), and bad input."""

import pytest

from mha_lib.viz import why as figures
from mha_lib.why import EXPERIMENTS, load_results


@pytest.fixture(scope="module")
def results():
    return load_results()


def test_metric_figure_has_a_mean_and_a_marker_per_seed(results):
    for name in EXPERIMENTS.keys() & results["experiments"].keys():  # (issue 48's runs ship later)
        fig = figures.metric_figure(name, results=results)
        seeds = results["experiments"][name]["seeds"]
        assert len(fig.data) == 1 + len(seeds)
        assert list(fig.data[0].x) == list(EXPERIMENTS[name].variants)
        assert fig.layout.width is None and fig.layout.meta["description"]


def test_split_weights_keys_on_x_queries_on_y_and_a_seed_slider(results):
    fig = figures.split_weights_figure(0, results)
    seeds = results["experiments"]["heads"]["seeds"]
    assert len(fig.data) == 3 * len(seeds)
    assert [t.visible for t in fig.data[:3]] == [True] * 3 and not any(t.visible for t in fig.data[3:])
    assert fig.layout.yaxis.autorange == "reversed" and fig.layout.xaxis.title.text == "key"
    assert all(t.colorscale[0][1] == "#440154" for t in fig.data)  # viridis
    steps = fig.layout.sliders[0].steps
    assert len(steps) == len(seeds) and steps[1].args[0]["visible"][3:6] == [True] * 3


def test_curves_and_the_other_figures(results):
    fig = figures.curves_figure("norm", results)
    assert len(fig.data) == 4 * len(results["experiments"]["norm"]["seeds"])
    assert fig.layout.sliders and fig.layout.xaxis.title.text == "training step"
    assert len(figures.scale_figure(results).data) == 3 * len(results["experiments"]["scale"]["seeds"])
    assert len(figures.positions_figure(results).data) == 2
    assert len(figures.kv_figure(results).data) == 3


def test_length_figure_has_a_line_per_variant_and_length_and_a_seed_slider(results):
    fig = figures.length_figure(results)
    seeds = results["experiments"]["rope_length"]["seeds"]
    per_seed = 2 * len(EXPERIMENTS["rope_length"].variants)
    assert len(fig.data) == per_seed * len(seeds) and len(fig.layout.sliders[0].steps) == len(seeds)
    assert sum(bool(t.visible) for t in fig.data) == per_seed
    assert list(fig.data[0].x) == list(range(4, 16)) and list(fig.data[per_seed // 2].x) == list(range(4, 32))
    assert fig.layout.width is None and fig.layout.meta["description"]


@pytest.mark.parametrize("call, word", [
    (lambda r: figures.metric_figure("nope", results=r), "name"),
    (lambda r: figures.metric_figure("heads", "nope", r), "metric"),
    (lambda r: figures.curves_figure("heads", {"experiments": {}}), "results"),
    (lambda r: figures.split_weights_figure(99, r), "seed"),
    (lambda r: figures.kv_figure([1]), "results"),
    (lambda r: figures.length_figure({"experiments": {}}), "results"),
])
def test_bad_input_is_a_value_error_naming_the_argument(results, call, word):
    with pytest.raises(ValueError, match=word):
        call(results)
