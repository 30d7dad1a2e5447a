"""mha_lib.viz.experiments: the training and pruning figures of chapters 7 and 8."""

import pytest
import torch

from mha_lib.viz.experiments import pruning_figure, training_curves


def test_training_curves_draw_one_line_per_curve():
    fig = training_curves(torch.tensor([0, 25, 50]), {"repeated half": torch.tensor([3.4, 1.0, 0.1]),
                                                      "random half": [3.4, 3.5, 3.4]}, title="Loss")
    assert [t.name for t in fig.data] == ["repeated half", "random half"]
    assert list(fig.data[0].x) == [0, 25, 50] and list(fig.data[0].y) == pytest.approx([3.4, 1.0, 0.1])
    assert fig.data[0].line.color != fig.data[1].line.color and fig.data[0].line.dash != fig.data[1].line.dash
    assert fig.layout.xaxis.title.text == "training step" and fig.layout.yaxis.type == "linear"
    assert fig.layout.width is None  # fits a phone screen
    one = training_curves(range(1, 4), {"loss": [2.3, 0.5, 0.01]}, title="Loss", log_y=True)
    assert one.layout.yaxis.type == "log" and one.layout.showlegend is False


@pytest.mark.parametrize("args, kwargs, match", [
    (([0, 1], {"a": [1.0]}), {}, r"curves\['a'\] must hold 2 values"),
    (([0, 1], {"a": [1.0, float("nan")]}), {}, r"curves\['a'\] must be a sequence or 1-D tensor of finite numbers"),
    (([0, 1], {}), {}, "curves must be a non-empty mapping"),
    (([0, 1], [[1.0, 2.0]]), {}, "curves must be a non-empty mapping"),
    (([], {"a": []}), {}, "steps must hold non-empty"),
    ((torch.zeros(2, 2), {"a": [1.0, 2.0]}), {}, "steps must be 1-D"),
    (("ab", {"a": [1.0, 2.0]}), {}, "steps must be a sequence"),
    (([0, 1], {"a": [1.0, 0.0]}), {"log_y": True}, "positive on a log axis"),
    (([0, 1], {"a": [1.0, 2.0]}), {"log_y": 1}, "log_y must be True or False"),
])
def test_training_curves_reject_bad_input(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        training_curves(*args, title="t", **kwargs)


def test_pruning_figure():
    fig = pruning_figure([4, 3, 2, 1], {"least important first": [1.0, 0.98, 0.5, 0.1],
                                        "most important first": [1.0, 0.1, 0.1, 0.1]}, chance=0.1)
    assert [t.name for t in fig.data] == ["least important first", "most important first"]
    assert fig.layout.xaxis.autorange == "reversed" and tuple(fig.layout.yaxis.range) == (0, 1.05)
    assert [shape.y0 for shape in fig.layout.shapes] == [0.1]  # the chance line
    assert not pruning_figure([2, 1], {"a": [1.0, 0.5]}).layout.shapes
    with pytest.raises(ValueError, match="chance must be an accuracy in"):
        pruning_figure([2, 1], {"a": [1.0, 0.5]}, chance=2)
    with pytest.raises(ValueError, match=r"curves\['a'\] must hold 2 values"):
        pruning_figure([2, 1], {"a": [1.0]})
