"""The mask lab of the website (``mha_lib.viz.mask_lab_site``, ``_static/mha-masklab.js``)
computes in the page what the library computes, and a reader can drive it.

A small standalone page is written here (the lab's fragment, plotly.js and the book's scripts
and stylesheet from ``_static``), so no book build is needed. For a few hundred seeded specs
(every kind of mask alone, with & and | and with every modification, lengths 1 to 16, blocks
1 to 8, every head) the page's ``mhaMaskLab.compute`` is compared with the library
(``mask_lab_site._reference``: ``Mask.dense``, ``Mask.tiles``, ``Visible.modify``,
``Visible.softmax``): the mask and the tile states exactly, the modified scores and the weights
to 1e-6, the mask's repr; the FlexAttention
``mask_mod`` and ``score_mod`` the page names are run with torch and give the library's mask and
modified scores. Then a reader composes a mask with the keyboard and the mouse at 1366 x 900 and
390 x 844: the page shows the library's answer, fits the phone's width, and axe-core finds
nothing serious in the light and the dark theme.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
import torch

from conftest import SCREENSHOTS, serious_axe_violations
from mha_lib.book.loopback import serve
from mha_lib.book.sphinx_ext import FIGURES_JS, MASKLAB_JS, PLOTLY_JS, SITE_CSS, STATIC
from mha_lib.viz.mask_lab_site import _KINDS, _MODS, _lab_data, _lab_score_mod, _reference, site_mask_lab_html

_PAGE = """<!DOCTYPE html>
<html lang="en" data-theme="{theme}"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>The mask lab</title>
<link rel="stylesheet" href="_static/{css}">
<script src="_static/plotly.js"></script><script src="_static/{figures}"></script>
<script src="_static/{lab}"></script>
<style>
html {{ --pst-color-background: #ffffff; --pst-color-text-base: #222832; --pst-color-border: #d1d5da;
        --pst-color-accent: #c3410b; --pst-font-family-monospace: monospace; }}
html[data-theme="dark"] {{ --pst-color-background: #121212; --pst-color-text-base: #ced6dd;
                           --pst-color-border: #48566b; }}
body {{ font-family: sans-serif; margin: 0 auto; max-width: 52rem; padding: 0 1rem;
        color: var(--pst-color-text-base); background: var(--pst-color-background); }}
</style>
</head><body><main><h1>The mask lab</h1>
{fragment}
</main></body></html>
"""


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("mask-lab")
    static = folder / "_static"
    static.mkdir()
    shutil.copy(STATIC / PLOTLY_JS, static / "plotly.js")
    for name in (FIGURES_JS, MASKLAB_JS, SITE_CSS):
        shutil.copy(STATIC / name, static / name)
    fragment = site_mask_lab_html()
    for theme in ("light", "dark"):
        (folder / f"{theme}.html").write_text(_PAGE.format(
            theme=theme, css=SITE_CSS, figures=FIGURES_JS, lab=MASKLAB_JS, fragment=fragment),
            encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def site_url(pages):  # overrides conftest's: open_context then serves these pages
    with serve(pages) as url:
        yield url


def _open(open_context, site_url, viewport="desktop", theme="light"):
    page = open_context(viewport)
    response = page.goto(f"{site_url}{theme}.html", wait_until="load")
    assert response is not None and response.ok
    page.wait_for_function("() => document.getElementById('mha-masklab').dataset.drawn")
    return page


def _specs(data: dict, count: int = 300, seed: int = 0) -> list[dict]:
    """Every kind alone, with causal (&), with sinks (|), with every modification; then seeded
    random specs of one to three terms."""
    rng = random.Random(seed)
    H, max_len = data["num_heads"], data["max_len"]

    def size(kind, L):
        lo = _KINDS[kind][2]
        return 0 if _KINDS[kind][1] is None else rng.randint(lo, max(lo, L))

    def spec(terms, ops, mod, L=None):
        L = L or rng.randint(1, max_len)
        return {"L": L, "block": rng.randint(1, 8), "head": rng.randrange(H),
                "terms": [[k, size(k, L)] for k in terms], "ops": ops, "mod": mod,
                "cap": float(rng.randint(1, 10)), "floor_scale": float(rng.randint(1, 8)), "scale": 0.5}

    out = []
    for kind in _KINDS:
        for mod in _MODS:
            out.append(spec([kind], [], mod, L=12))
            out.append(spec(["causal", kind], ["&"], mod))
            out.append(spec([kind, "sinks"], ["|"], mod))
    kinds = list(_KINDS)
    while len(out) < count:
        n = rng.randint(1, 3)
        out.append(spec([rng.choice(kinds) for _ in range(n)], [rng.choice("&|") for _ in range(n - 1)],
                        rng.choice(list(_MODS))))
    return out


def _flex_checks(spec: dict, data: dict, got: dict) -> None:
    """FlexAttention's mask_mod and score_mod as the page names them, run with torch."""
    L, H, d = spec["L"], data["num_heads"], data["head_dim"]
    q_idx, kv_idx = torch.arange(L)[:, None], torch.arange(L)[None, :]
    mask_mod = eval(got["mask_mod"], {"torch": torch})  # noqa: S307 (the page's own text)
    kept = torch.as_tensor(mask_mod(0, 0, q_idx, kv_idx)).expand(L, L)
    assert kept.tolist() == got["keep"], (spec, got["mask_mod"])
    score_mod = _lab_score_mod(spec, H)
    assert (got["score_mod"] is None) == (score_mod is None), spec
    if score_mod is not None:
        q = torch.tensor(data["q"], dtype=torch.float64)[None, :, :L]  # (1, H, L, d)
        k = torch.tensor(data["k"], dtype=torch.float64)[None, :, :L]
        scores = q @ k.transpose(-1, -2) / d ** 0.5  # (1, H, L, L)
        want = score_mod(scores, q_idx[None, None], kv_idx[None, None])
        flex = eval(got["score_mod"], {"torch": torch})  # noqa: S307
        h = torch.arange(H)[None, :, None, None]  # (1, H, 1, 1)
        torch.testing.assert_close(flex(scores, 0, h, q_idx, kv_idx) + 0 * scores, want,
                                   atol=1e-5, rtol=0, msg=lambda m: f"{spec}: {got['score_mod']}: {m}")


_COMPUTE_JS = """([data, specs]) => specs.map((s) => {
  const out = window.mhaMaskLab.compute(data, s);
  return {keep: out.keep, weights: out.weights, scores: out.scores, tiles: out.tiles, computed: out.computed,
          total: out.total, repr: out.repr, mask_mod: out.mask_mod, score_mod: out.score_mod};
})"""


@pytest.mark.browser
def test_the_page_computes_what_the_library_computes(open_context, site_url):
    page = _open(open_context, site_url)
    data = _lab_data()
    specs = _specs(data)
    results = page.evaluate(_COMPUTE_JS, [data, specs])
    from mha_lib.viz.mask_lab_site import _lab_mask

    for spec, got in zip(specs, results):
        want = _reference(spec, data)
        assert got["keep"] == want["keep"], spec
        assert got["tiles"] == want["tiles"], spec
        assert (got["computed"], got["total"]) == (want["computed"], want["total"]), spec
        assert got["repr"] == repr(_lab_mask(spec)), spec
        torch.testing.assert_close(torch.tensor(got["weights"], dtype=torch.float64),
                                   torch.tensor(want["weights"], dtype=torch.float64),
                                   atol=1e-6, rtol=0, msg=lambda m: f"{spec}: {m}")
        torch.testing.assert_close(torch.tensor(got["scores"], dtype=torch.float64),
                                   torch.tensor(want["scores"], dtype=torch.float64),
                                   atol=1e-6, rtol=0, msg=lambda m: f"{spec}: scores: {m}")
        _flex_checks(spec, data, got)
    assert page.console_errors == [] and page.external_requests == []


# What the page shows: the spec drawn, the three panels' z, the texts
_SHOWN_JS = """() => {
  const box = document.getElementById("mha-masklab"), gd = box.querySelector(".mha-masklab-figure");
  const text = (n) => box.querySelector(`[data-lab-out=${n}]`).textContent;
  return {spec: JSON.parse(box.dataset.drawn), z: gd.data.map((t) => t.z), library: text("library"),
          flex: text("flex"), counts: text("counts"), layout: gd.dataset.mhaLayout || null,
          height: gd.getBoundingClientRect().height,
          overflow: document.documentElement.scrollWidth - window.innerWidth};
}"""

_DRAWN_JS = """(want) => {
  const d = document.getElementById("mha-masklab").dataset.drawn;
  if (!d) return false;
  const got = JSON.parse(d);
  return Object.keys(want).every((k) => JSON.stringify(got[k]) === JSON.stringify(want[k]));
}"""


def _wait(page, **want) -> dict:
    page.wait_for_function(_DRAWN_JS, arg=want)
    return page.evaluate(_SHOWN_JS)


@pytest.mark.browser
@pytest.mark.parametrize("viewport", ["desktop", "phone"])
def test_a_reader_composes_a_mask_and_a_score_modification(open_context, site_url, viewport):
    page = _open(open_context, site_url, viewport)
    data = _lab_data()
    shown = page.evaluate(_SHOWN_JS)
    assert shown["spec"]["terms"] == [["sliding_window", 4], ["sinks", 2]] and shown["overflow"] <= 0
    # causal & sliding_window(3), chosen with the keyboard and the mouse
    page.select_option("#mha-masklab-kind0", "causal")
    assert page.locator("#mha-masklab-size0").is_hidden()  # causal has no size
    page.select_option("#mha-masklab-op1", "&")
    page.select_option("#mha-masklab-kind1", "sliding_window")  # its default window: 4
    page.focus("#mha-masklab-size1")
    page.keyboard.press("ArrowLeft")  # 4 -> 3
    shown = _wait(page, terms=[["causal", 0], ["sliding_window", 3]], ops=["&"])
    # a third term, | sinks(1), and ALiBi on head 1 (slope 1/4)
    assert page.locator("#mha-masklab-op2").is_hidden()  # no third term yet
    page.select_option("#mha-masklab-kind2", "sinks")
    page.select_option("#mha-masklab-op2", "|")
    page.focus("#mha-masklab-size2")
    page.keyboard.press("ArrowLeft")  # 2 -> 1
    page.select_option("#mha-masklab-mod", "alibi")
    page.focus("#mha-masklab-head")
    page.keyboard.press("ArrowRight")
    spec = {"L": 12, "block": 4, "head": 1, "terms": [["causal", 0], ["sliding_window", 3], ["sinks", 1]],
            "ops": ["&", "|"], "mod": "alibi", "cap": 5.0, "floor_scale": 4.0, "scale": 0.5,
            "panel": "weights"}
    shown = _wait(page, terms=spec["terms"], ops=spec["ops"], mod="alibi", head=1)
    want = _reference(spec, data)
    assert shown["z"][0] == [[int(v) for v in row] for row in want["keep"]]
    weights = [[w if keep else None for w, keep in zip(*rows)] for rows in zip(want["weights"], want["keep"])]
    for got_row, want_row in zip(shown["z"][1], weights):
        assert [g is None for g in got_row] == [w is None for w in want_row]
        assert max(abs(g - w) for g, w in zip(got_row, want_row) if w is not None) < 1e-6
    assert shown["z"][2] == want["tiles"]
    assert "mask = (causal() & sliding_window(3)) | sinks(1)" in shown["library"]
    assert "score_mod = alibi(8)" in shown["library"] and "score_mod = lambda score" in shown["flex"]
    assert f"{want['computed']} of {want['total']} computed" in shown["counts"]
    # the bias itself: the second panel shows the scores after ALiBi
    page.focus("#mha-masklab-panel")
    page.keyboard.press("ArrowDown")  # the weights -> the scores, from the keyboard
    shown = _wait(page, panel="scores", mod="alibi")
    for got_row, want_row, keep in zip(shown["z"][1], want["scores"], want["keep"]):
        assert max(abs(g - w) for g, w, k in zip(got_row, want_row, keep) if k) < 1e-6
        assert all((g is None) == (not k) for g, k in zip(got_row, keep))
    # soft-capping shows its cap; a shorter sequence, larger blocks
    page.select_option("#mha-masklab-mod", "softcap")
    assert page.locator("#mha-masklab-cap").is_visible()
    page.focus("#mha-masklab-L")
    page.keyboard.press("Home")  # L = 2
    page.focus("#mha-masklab-block")
    page.keyboard.press("End")  # blocks of 8
    shown = _wait(page, mod="softcap", L=2, block=8)
    assert shown["z"][2] == [[1]] and "1 of 1 computed" in shown["counts"]
    assert shown["overflow"] <= 0 and shown["layout"] == ("narrow" if viewport == "phone" else "wide")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"mask-lab-{viewport}.png"), full_page=True)
    assert page.console_errors == [] and page.external_requests == []


@pytest.mark.browser
@pytest.mark.parametrize("theme", ["light", "dark"])
@pytest.mark.parametrize("viewport", ["desktop", "phone"])
def test_axe_finds_nothing_serious(open_context, site_url, viewport, theme):
    page = _open(open_context, site_url, viewport, theme)
    page.select_option("#mha-masklab-mod", "temperature")
    _wait(page, mod="temperature")
    assert page.locator("#mha-masklab-floor_scale").is_visible()
    assert serious_axe_violations(page, [".js-plotly-plot"]) == []
    if theme == "dark":
        page.screenshot(path=str(SCREENSHOTS / f"mask-lab-{viewport}-dark.png"), full_page=True)
