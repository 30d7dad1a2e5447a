"""The browser tests' check of the explorer's pictures (``mha_lib.book.browser._picture_problems``)
finds what it is for: a wrong colour, a masked cell drawn, a missing or misshapen picture."""

from __future__ import annotations

import plotly.colors as pc

from mha_lib.book.browser import _picture_problems

Z = [[0.0, 0.25, None], [1.0, 0.5, None]]  # (Lq, Lk) = (2, 3), key 2 masked


def _picture(z, shift=0):
    """What the page's picture of ``z`` decodes to: plotly's colour per weight, masked transparent."""
    rgba = []
    for row in z:
        for w in row:
            if w is None:
                rgba += [0, 0, 0, 0]
            else:
                r, g, b = pc.unlabel_rgb(pc.sample_colorscale("Viridis", [w])[0])
                rgba += [round(r) + shift, round(g), round(b), 255]
    return {"width": len(z[0]), "height": len(z), "rgba": rgba}


def test_a_right_picture_has_no_problem():
    assert _picture_problems(_picture(Z), Z) == []
    assert _picture_problems(None, [[None, None]]) == []  # every key masked: no picture


def test_wrong_pictures_are_named():
    assert _picture_problems(_picture(Z, shift=3), Z)  # a colour 3 off in red
    drawn = _picture(Z)
    drawn["rgba"][4 * 2 + 3] = 255  # masked cell (0, 2) opaque
    assert _picture_problems(drawn, Z) == ["cell (0, 2) is masked but not transparent"]
    assert _picture_problems(None, Z) == ["no picture, but some keys are not masked"]
    assert _picture_problems(_picture([[0.5, 0.5]]), Z)[0].startswith("picture 1 x 2")
    swapped = _picture([[0.25, 0.0, None], [1.0, 0.5, None]])
    assert len(_picture_problems(swapped, Z)) == 2
