"""The demo's settings line says whether the pair is cross-family and what its vocabularies share (render.settings_html
with the pair's SharedVocabulary line; the service on the embedded pairs: `embedded` one family, `embedded-llama`
two vocabularies)."""

import html
from pathlib import Path

import pytest
from asymspec_vl.demo import render
from asymspec_vl.demo.service import DemoService

from asymspec_vl import AsymSpecConfig, AsymSpecVL

CHART = Path(__file__).resolve().parents[2] / "demo" / "examples" / "chart.png"


def test_the_settings_line_carries_the_pairs_vocabulary_escaped():
    line = render.settings_html(AsymSpecConfig(), "", "", "cross-family: 3 shared <x>")
    assert 'class="vocabulary">pair: cross-family: 3 shared &lt;x&gt;</span>' in line
    assert "pair:" not in render.settings_html(AsymSpecConfig(), "", "")


@pytest.mark.parametrize("verifier", ["embedded", "embedded-llama"])
def test_each_answers_settings_line_says_what_the_pair_shares(verifier):
    vl = AsymSpecVL.from_pretrained(drafter="embedded", verifier=verifier, device="cpu")
    frames = list(
        DemoService(vl, AsymSpecConfig()).answer(
            str(CHART), "What is shown?", "a chart", "", 2, 1.0, 0.5, "cda", 3, []
        )
    )
    table = html.unescape(frames[-1][3])
    vmap = vl.pair.vmap
    if verifier == "embedded":
        assert "pair: same family: one vocabulary (426 tokens)" in table
    else:
        assert f"pair: cross-family: {vmap.size} shared tokens" in table
        assert "answer end <|im_end|> -> <|eot_id|>" in table
