"""The demo's sampling controls on the vLLM backend (tiny models, CPU build): a sampled answer is the library's on
that backend for every method the page runs, and a greedy answer after it is the library's greedy one."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from asymspec_vl import AsymSpecConfig
from tests.backends.vllm.test_bad_input import vl  # noqa: F401  (the tiny pair on the vLLM backend)

pytestmark = pytest.mark.vllm
CHART = Path(__file__).resolve().parents[2] / "demo" / "examples" / "chart.png"
QUESTION, CAPTION = (
    "What is the value of the tallest bar?",
    "A bar chart of sales per year.",
)
SETTINGS = dict(K=2, beta=1.0, gamma=0.5, gate="cda", max_new_tokens=8)


def test_a_sampled_answer_on_the_vllm_backend_is_the_librarys(vl):
    from asymspec_vl.demo.handlers import Handlers
    from asymspec_vl.demo.service import DemoService

    handlers = Handlers(DemoService(vl, AsymSpecConfig()))
    request = SimpleNamespace(session_hash="vllm")
    message, asym, floor, drafter, table, _, results, button = list(
        handlers.answer(
            str(CHART),
            QUESTION,
            CAPTION,
            "",
            *SETTINGS.values(),
            ["floor", "drafter"],
            0.8,
            1.0,
            3,
            request,
        )
    )[-1]
    cfg = AsymSpecConfig(**SETTINGS, temperature=0.8, seed=3)
    assert not isinstance(message, str), (
        message
    )  # no error text: the message box is only updated
    for method in ("asymspec", "floor", "drafter"):
        ref = vl.generate(
            str(CHART), QUESTION, caption=CAPTION, method=method, config=cfg
        )
        assert results[method]["token_ids"] == ref.token_ids
    assert 'seed <b class="seed">3</b>' in table
    assert button["interactive"] is True
    greedy = list(
        handlers.answer(
            str(CHART),
            QUESTION,
            CAPTION,
            "",
            *SETTINGS.values(),
            ["floor"],
            0.0,
            1.0,
            None,
            request,
        )
    )[-1]
    ref = vl.generate(
        str(CHART),
        QUESTION,
        caption=CAPTION,
        method="asymspec",
        config=AsymSpecConfig(**SETTINGS),
    )
    assert (
        greedy[6]["asymspec"]["token_ids"] == ref.token_ids
        and "greedy (temperature 0)" in greedy[4]
    )
