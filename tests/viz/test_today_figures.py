"""mha_lib.viz.today: chapter 12c's figures work without a kernel (their controls rewrite the
traces' data), show the numbers they are given, and refuse bad input."""

import math

import pytest
import torch

from mha_lib.lm import load_pretrained
from mha_lib.lm_eval import encode_stories, held_out_stories
from mha_lib.lm_sinks import streaming_losses
from mha_lib.stories import RELATIONS, Tokenizer
from mha_lib.viz import today
from mha_lib.why.results import load_results, shipped_metrics


@pytest.fixture(scope="module")
def results():
    return load_results()


@pytest.fixture(scope="module")
def story_model():
    return load_pretrained()[0]


@pytest.fixture(scope="module")
def long_stories():
    stories = held_out_stories(40)
    return [s for s in stories if len(encode_stories(Tokenizer(), [s])[0][0]) >= 20][:6]


@pytest.fixture(scope="module")
def runs(story_model, long_stories):
    return today.streaming_runs(story_model, long_stories, length=20, windows=(8, 4), num_sinks=(4, 0))


def _mass():
    return {"first": torch.tensor([[0.01, 0.02, 0.03], [0.04, 0.05, 0.30]]),
            "punctuation": torch.tensor([[0.2, 0.1, 0.3], [0.1, 0.1, 0.1]]),
            "first_even": torch.tensor(0.05), "punctuation_even": torch.tensor(0.15)}


def test_sink_figure_heads_on_x_layers_on_y_an_even_column_and_two_buttons():
    fig = today.sink_figure(_mass())
    (heatmap,) = fig.data
    assert list(heatmap.x) == ["0", "1", "2", "even"] and list(heatmap.y) == ["0", "1"]
    assert fig.layout.xaxis.title.text.startswith("head h") and fig.layout.yaxis.title.text == "layer"
    assert [row[-1] for row in heatmap.z] == [0.05, 0.05]  # the even spread beside the heads
    assert heatmap.zmax == pytest.approx(0.30)  # above twice the even spread: the largest weight
    assert heatmap.colorscale[0][1] == "#00224e"  # cividis
    first, punctuation = fig.layout.updatemenus[0].buttons
    assert first.args[0]["z"][0] == [list(row) for row in heatmap.z]
    assert punctuation.args[0]["z"][0] == [[0.2, 0.1, 0.3, 0.15], [0.1, 0.1, 0.1, 0.15]]  # rounded
    assert punctuation.args[0]["zmax"] == [pytest.approx(0.3)]  # twice the even spread
    assert punctuation.args[0]["hovertext"][0][0][0].endswith("0.200 on punctuation, 1.33 × an even spread")
    assert "punctuation" in punctuation.args[1]["title.text"]
    assert fig.layout.width is None and fig.layout.meta["description"]


def test_streaming_runs_recompute_one_cell(runs, story_model, long_stories):
    assert runs["positions"] == list(range(1, 20)) and runs["stories"] == len(long_stories)
    assert sorted(runs["caches"]) == sorted(["full cache", "window 4", "window 4 + first 4", "window 8",
                                             "window 8 + first 4"])
    losses, nbytes = streaming_losses(story_model, long_stories, length=20, window=4, num_sinks=4)
    cell = runs["caches"]["window 4 + first 4"]
    assert cell["loss"] == pytest.approx(losses.mean(0).tolist(), abs=1e-4)
    assert cell["bytes_per_story"] == nbytes / len(long_stories)
    full = runs["caches"]["full cache"]["loss"]
    for w in (4, 8):  # up to position w the window shows every key: the curves agree
        assert runs["caches"][f"window {w}"]["loss"][:w] == pytest.approx(full[:w], abs=1e-4)
    assert runs["caches"]["window 4"]["loss"][4:] != pytest.approx(full[4:], abs=1e-2)
    sizes = [runs["caches"][n]["bytes_per_story"] for n in ("window 4", "window 4 + first 4", "full cache")]
    assert sizes == sorted(sizes) and sizes[0] < sizes[1]


def test_streaming_figure_a_slider_over_windows_rewrites_the_window_lines(runs):
    fig = today.streaming_figure(runs, window=8)
    assert [t.name.split(" · ")[0] for t in fig.data] == ["full cache", "window 8", "window 8 + first 4"]
    assert all("KiB" in t.name for t in fig.data)
    assert [t.line.dash for t in fig.data] == ["solid", "dash", "dot"]
    slider = fig.layout.sliders[0]
    assert [s.label for s in slider.steps] == ["4", "8"] and slider.active == 1
    for step in slider.steps:
        data, layout, traces = step.args
        assert list(traces) == [1, 2]  # the full cache's line stays
        w = int(step.label)
        caches = runs["caches"]
        assert [list(y) for y in data["y"]] == [caches[f"window {w}"]["loss"], caches[f"window {w} + first 4"]["loss"]]
        assert all(f"window {w}" in name for name in data["name"])
        assert layout["shapes"][0]["x0"] == w + 0.5
    assert list(fig.data[1].y) == runs["caches"]["window 8"]["loss"]
    assert fig.layout.width is None and fig.layout.title.text and fig.layout.meta["description"]


@pytest.mark.parametrize("name, metrics", [("mla", ("loss", *RELATIONS)),
                                           ("gated", ("loss", "first_token_weight_max", *RELATIONS))])
def test_cost_figure_a_dot_per_seed_the_mean_and_a_metric_dropdown(results, name, metrics):
    fig = today.cost_figure(name, results)
    runs = shipped_metrics(name, results)
    seeds, variants = sorted(runs, key=int), list(runs["0"])
    assert len(fig.data) == 2 * len(variants)
    assert [t.name for t in fig.data if t.showlegend is not False] == variants  # the legend hides a variant
    (menu,) = fig.layout.updatemenus
    assert menu.type == "dropdown" and len(menu.buttons) == len(metrics)
    for button, metric in zip(menu.buttons, metrics):
        ys = button.args[0]["y"]
        for i, variant in enumerate(variants):
            per_seed = [runs[s][variant][metric] for s in seeds]
            assert ys[2 * i] == per_seed and ys[2 * i + 1] == [pytest.approx(sum(per_seed) / len(seeds))]
        assert (button.args[1]["yaxis.range"] == [0, 1.05]) == (metric in RELATIONS)
    assert list(fig.data[1].y) == menu.buttons[0].args[0]["y"][1]  # drawn first: the first metric
    assert fig.layout.width is None and fig.layout.title.text and fig.layout.meta["description"]


def test_mla_variants_stand_at_their_cache_size(results):
    fig = today.cost_figure("mla", results)
    means = {t.name: t.x[0] for t in fig.data[1::2]}
    assert means["MHA (Hkv=4)"] == 128 and means["GQA (Hkv=2)"] == 64
    mqa, mla = means["MQA (Hkv=1)"], means["MLA (r=32)"]  # both keep 32: side by side around it
    assert mqa < 32 < mla and math.isclose(math.sqrt(mqa * mla), 32, rel_tol=1e-4)
    assert fig.layout.xaxis.type == "log" and "32 numbers" in fig.data[-1].hovertemplate


@pytest.mark.parametrize("call, word", [
    (lambda runs, r: today.sink_figure({"first": torch.ones(2, 2)}), "mass"),
    (lambda runs, r: today.sink_figure({**_mass(), "first": torch.ones(4)}), "mass"),
    (lambda runs, r: today.sink_figure({**_mass(), "first": "weights"}), "mass"),
    (lambda runs, r: today.streaming_figure({"caches": {}}), "runs"),
    (lambda runs, r: today.streaming_figure(runs, window=16), "window"),
    (lambda runs, r: today.streaming_runs(None, [], windows=(0,)), "windows"),
    (lambda runs, r: today.streaming_runs(None, [], num_sinks=[-1]), "num_sinks"),
    (lambda runs, r: today.cost_figure("heads", r), "name"),
    (lambda runs, r: today.cost_figure("mla", {"experiments": {}}), "results"),
])
def test_bad_input_is_a_value_error_naming_the_argument(runs, results, call, word):
    with pytest.raises(ValueError, match=word):
        call(runs, results)
