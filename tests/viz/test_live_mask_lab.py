"""The live mask lab (ipywidgets) redraws into its Output widget's state when a control moves,
without captured output (which can leave a notebook runner waiting for the cell's end)."""

from mha_lib.viz.masks import mask_lab


def test_the_live_lab_draws_once_and_redraws_when_a_control_moves():
    lab = mask_lab(L=8)
    out = lab.children[2]
    assert len(out.outputs) == 1  # drawn once, before any control moves
    first = out.outputs[0]
    lab.children[0].children[1].value = 3  # the window slider
    assert len(out.outputs) == 1 and out.outputs[0] != first  # replaced, not appended
    assert "application/vnd.plotly.v1+json" in out.outputs[0]["data"]
