"""The website's mask lab (``mha_lib.viz.mask_lab_site``): the page's example is the seeded
layer's, its controls are labelled, its spec follows Python's precedence, bad input is refused.
(The page's script against the library: tests/browser/test_mask_lab_site.py.)"""

import json
import re

import pytest
import torch

from mha_lib.masks import causal, sinks, sliding_window
from mha_lib.viz.mask_lab_site import (
    _DEFAULT_SPEC,
    _KINDS,
    _MODS,
    _example,
    _lab_data,
    _lab_mask,
    _lab_score_mod,
    _reference,
    site_mask_lab_html,
)


@pytest.mark.parametrize("mod", list(_MODS))
def test_the_pages_weights_are_the_seeded_layers(mod):
    spec = {**_DEFAULT_SPEC, "mod": mod, "head": 3, "terms": [["causal", 0], ["sliding_window", 5]],
            "ops": ["&"]}
    data = _lab_data()
    _, _, mha, x = _example(data["max_len"], data["num_heads"], data["head_dim"], data["seed"])
    mha.score_mod = _lab_score_mod(spec, data["num_heads"])
    L = spec["L"]
    with torch.no_grad():
        _, weights = mha(x[:, :L], x[:, :L], x[:, :L], mask=_lab_mask(spec), need_weights=True)
    got = torch.tensor(_reference(spec, data)["weights"], dtype=torch.float64)
    torch.testing.assert_close(got, weights[0, 3], atol=1e-3, rtol=0)  # queries, keys rounded to 1e-4


def test_and_binds_tighter_than_or():
    L = 10
    spec = {**_DEFAULT_SPEC, "L": L, "terms": [["sinks", 2], ["causal", 0], ["sliding_window", 3]],
            "ops": ["|", "&"]}
    want = sinks(2) | (causal() & sliding_window(3))
    assert torch.equal(_lab_mask(spec).dense(1, L, L), want.dense(1, L, L))
    assert repr(_lab_mask(spec)) == "sinks(2) | (causal() & sliding_window(3))"


def test_every_kind_and_modification_has_its_control():
    page = site_mask_lab_html()
    for name in list(_KINDS) + list(_MODS):
        assert f'value="{name}"' in page
    ids = re.findall(r'<(?:input|select)[^>]* id="([^"]+)"', page)
    assert len(ids) == 15  # 3 kinds, 3 sizes, 2 joins, modification, cap, floor_scale, L, block, head, panel
    for i in ids:
        assert f'<label for="{i}">' in page  # every control has its label
    data = json.loads(re.search(r'<script type="application/json"[^>]*>(.*?)</script>', page).group(1))
    assert data["spec"] == _DEFAULT_SPEC and len(data["data"]["q"]) == data["data"]["num_heads"]
    assert "src=" not in page and "http" not in page  # nothing from the network


@pytest.mark.parametrize("spec, word", [
    ({"terms": [["diagonal", 1]], "ops": []}, "kind"),
    ({"terms": [["causal", 0], ["sinks", 1]], "ops": []}, "spec"),
    ({"mod": "rope"}, "mod"),
    ({"L": 17}, "spec"),
    ({"terms": [["sliding_window", 0]], "ops": []}, "window"),
])
def test_bad_specs_are_refused(spec, word):
    with pytest.raises(ValueError, match=word):
        site_mask_lab_html(spec)


def test_the_live_lab_adds_a_score_modification():
    from mha_lib.viz.masks import mask_lab

    lab = mask_lab(L=8)
    out = lab.children[2]
    plain = out.outputs[0]
    lab.children[1].children[-1].value = "ALiBi"  # the score modification
    assert len(out.outputs) == 1 and out.outputs[0] != plain
    assert "alibi(2" in out.outputs[0]["data"]["application/vnd.plotly.v1+json"]["layout"]["title"]["text"]
