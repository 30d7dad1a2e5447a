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


def test_the_static_figure_shows_the_data_range_masked_cells_apart_and_stacks_on_a_phone():
    from mha_lib.masks import sinks, sliding_window
    from mha_lib.viz.masks import MASKED_COLOUR, mask_lab_figure

    fig = mask_lab_figure(sliding_window(4) | sinks(2), 12, block_size=4)
    keep, weights, _ = fig.data
    masked = [(i, j) for i, row in enumerate(keep.z) for j, k in enumerate(row) if not k]
    assert masked and all(weights.z[i][j] is None for i, j in masked)  # no weight, not 0
    assert fig.layout.shapes[0].fillcolor == MASKED_COLOUR and fig.layout.shapes[0].layer == "below"
    assert list(fig.layout.yaxis.range) == [11.5, -0.5] and list(fig.layout.xaxis3.range) == [-0.5, 2.5]
    phone = fig.layout.meta["narrow"]
    tops = [phone[f"yaxis{a}"]["domain"][1] for a in ("", "2", "3")]
    assert tops == sorted(tops, reverse=True) and phone["xaxis"]["domain"] == [0.0, 1.0]  # one above the other
