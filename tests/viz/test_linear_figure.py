"""mha_lib.viz.linear: chapter 12d's figure works without a kernel (its buttons rewrite the
traces' data), shows the numbers it is given, a dot per seed, and refuses bad input."""

import pytest

from mha_lib.stories import RELATIONS
from mha_lib.viz.linear import distance_figure
from mha_lib.viz.today import _COLOURS
from mha_lib.why.results import load_results


def _results():
    """Two seeds of two variants; seed 1 of "state" has no recall 32-79 bin (too few links)."""
    def metrics(base, far=True):
        m = {"loss": 1.0 + base, "antecedent": 0.9 + base, "recall": 0.8 + base, "possession": 0.1 + base,
             "antecedent 1-15": 0.9 + base, "recall 16-31": 0.7 + base, "possession 1-15": 0.2 + base,
             "possession 16-31": 0.1 + base, "possession 32-79": 0.05 + base, "decode_bytes_per_story": 10.0}
        if far:
            m["recall 32-79"] = 0.6 + base
        return {"metrics": m}

    seeds = {"0": {"softmax": metrics(0.0), "state": metrics(0.01)},
             "1": {"softmax": metrics(0.02), "state": metrics(0.03, far=False)}}
    return {"experiments": {"linear": {"steps": 10, "seeds": seeds}}}


def test_a_button_per_relation_rewrites_every_trace_with_the_bins_on_x():
    fig = distance_figure("linear", _results())
    assert len(fig.data) == 4  # per variant: the seeds' dots and the means
    assert [t.name for t in fig.data if t.showlegend is not False] == ["softmax", "state"]
    (menu,) = fig.layout.updatemenus
    assert [b.label for b in menu.buttons] == list(RELATIONS) and all(b.method == "update" for b in menu.buttons)
    views = {b.label: b.args[0] for b in menu.buttons}
    recall = views["recall"]
    assert recall["x"][0] == ["all links"] * 2 + ["16-31"] * 2 + ["32-79"] * 2  # softmax: both seeds in each bin
    assert recall["y"][0] == [0.8, 0.82, 0.7, 0.72, 0.6, 0.62]
    assert recall["x"][2] == ["all links"] * 2 + ["16-31"] * 2 + ["32-79"]  # seed 1 has no far bin
    assert recall["text"][2][-1] == "seed 0"
    assert recall["x"][3] == ["all links", "16-31", "32-79"]
    assert recall["y"][3] == [pytest.approx(0.82), pytest.approx(0.72), pytest.approx(0.61)]  # the means
    assert views["antecedent"]["x"][1] == ["all links", "1-15"]
    assert views["possession"]["x"][1] == ["all links", "1-15", "16-31", "32-79"]
    first = menu.buttons[RELATIONS.index("possession")].args  # drawn first: possession, the chapter's claim
    assert list(fig.data[0].x) == first[0]["x"][0] and fig.layout.title.text == first[1]["title.text"]
    assert menu.active == RELATIONS.index("possession") and "possession" in fig.layout.title.text
    recall = distance_figure("linear", _results(), relation="recall")
    assert recall.layout.updatemenus[0].active == RELATIONS.index("recall") and "recall" in recall.layout.title.text
    assert fig.layout.xaxis.type == "category" and fig.layout.scattermode == "group"


def test_colour_blind_safe_colours_no_width_and_a_text_alternative():
    fig = distance_figure("linear", _results())
    assert [fig.data[i].marker.color for i in (0, 2)] == list(_COLOURS[:2])
    assert fig.data[0].marker.symbol != fig.data[2].marker.symbol
    assert fig.layout.width is None and fig.layout.yaxis.range == (-0.04, 1.04)
    assert "2 seeds" in fig.layout.meta["description"] and "softmax, state" in fig.layout.meta["description"]


def test_the_shipped_runs_draw_every_variant_when_they_ship():
    results = load_results()
    for name in ("linear", "linear_deep"):
        if name not in results["experiments"]:
            continue
        fig = distance_figure(name, results)
        variants = list(next(iter(results["experiments"][name]["seeds"].values())))
        assert [t.name for t in fig.data[1::2]] == variants


@pytest.mark.parametrize("call, word", [
    (lambda: distance_figure("mla", _results()), "name"),
    (lambda: distance_figure("linear_deep", _results()), "results"),
    (lambda: distance_figure("linear", []), "results"),
    (lambda: distance_figure("linear", _results(), relation="who"), "relation"),
])
def test_bad_input_is_a_value_error_naming_the_argument(call, word):
    with pytest.raises(ValueError, match=word):
        call()
