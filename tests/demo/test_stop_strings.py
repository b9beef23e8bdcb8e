"""Stop strings on the demo's page (issue 33): for every method, each text the page shows while an answer
decodes is a prefix of its final text (nothing a stop string cuts is ever shown, then taken back), and the final
text is the library's (`vl.stream`'s pieces joined, `generate`'s text), on the embedded pair."""

import html
import json
import re
from pathlib import Path

import pytest
from asymspec_vl.demo.board import PANELS
from asymspec_vl.demo.service import DemoService

from asymspec_vl import AsymSpecConfig
from tests.demo.test_units import spans

pytestmark = pytest.mark.usefixtures("one_torch_thread")
EXAMPLES = Path(__file__).resolve().parents[2] / "demo" / "examples"
MULT = json.loads((EXAMPLES / "examples.json").read_text())[
    0
]  # 9 × 14 on the yellow triangle
# stop sets seen on the three methods' answers ("9 × 14 = 126. ...", "6 × 14 = 84. ...", "9 × 44 = 440. ..."):
# inside a token, overlapping, multi-token, a long one the stream must hold back, one never found; min_tokens
# (no stop in the first tokens' text) and include_stop_str_in_output
STOPS = [
    dict(stop=("26",)),
    dict(stop=("12", "26", "84")),
    dict(stop=("The answer is",)),
    dict(stop=("×", "The"), min_tokens=4),
    dict(stop=("= 1", "4."), include_stop_str_in_output=True),
    dict(stop=("§§",)),
]


@pytest.fixture(scope="module")
def vl():
    from asymspec_vl import AsymSpecVL

    return AsymSpecVL.from_pretrained(drafter="embedded", verifier="embedded")


def _shown(markup: str) -> tuple[str, str]:
    """(the panel's tokens joined, its plain answer text) as the page shows them."""
    text = re.search(r'class="answer-text">(.*?)</div>', markup)
    return "".join(t for _, _, t in spans(markup)), html.unescape(
        text.group(1)
    ) if text else ""


@pytest.mark.parametrize("stops", STOPS, ids=lambda s: repr(s))
def test_what_the_page_shows_while_decoding_never_goes_past_the_final_text(vl, stops):
    cfg = AsymSpecConfig(K=2, max_new_tokens=20, **stops)
    service = DemoService(vl, cfg)
    image = str(EXAMPLES / MULT["image"])
    seen = {m: [] for m in PANELS}
    for out in service.answer(
        image,
        MULT["question"],
        MULT["caption"],
        "",
        cfg.K,
        cfg.beta,
        cfg.gamma,
        cfg.gate,
        cfg.max_new_tokens,
        ["floor", "drafter"],
    ):
        for method, markup in zip(PANELS, out[:3]):
            seen[method].append(_shown(markup))
    results = out[5]
    ends = vl.pair.stop_ids(
        cfg
    )  # a stop string ended an answer: "stop" without an end token
    cut = [
        m
        for m in PANELS
        if results[m]["finish_reason"] == "stop"
        and results[m]["token_ids"][-1] not in ends
    ]
    assert bool(cut) == (stops["stop"] != ("§§",)), cut
    for method in PANELS:
        final = results[method]["text"]
        stream = vl.stream(
            image, MULT["question"], caption=MULT["caption"], method=method, config=cfg
        )
        assert (
            "".join(stream)
            == final
            == vl.generate(
                image,
                MULT["question"],
                caption=MULT["caption"],
                method=method,
                config=cfg,
            ).text
        )
        assert seen[method][-1] == (final, final.strip()), method
        for tokens, text in seen[method]:
            assert final.startswith(tokens) and final.strip().startswith(text), (
                method,
                tokens,
                final,
            )
