"""The Python API as transformers / vLLM users expect it: keyword overrides of AsymSpecConfig fields on generate
(unknown ones a ConfigError), Request(image, question) in generate's order, vl.stream(...) yielding text deltas
that stop on `break`, Stats' repr with its headline figures (None for methods that never draft), a trace whose
text is the answer's (the end token adds none), close() and `with`, vl.tokenizer."""

import json
from pathlib import Path

import pytest

from asymspec_vl import AsymSpecConfig, AsymSpecVL, ConfigError, Request

EXAMPLES = Path(__file__).resolve().parents[1] / "demo" / "examples"
TOY = next(
    e
    for e in json.loads((EXAMPLES / "examples.json").read_text())
    if e["image"] == "toy-read.png"
)
IMAGE = str(EXAMPLES / TOY["image"])


@pytest.fixture(scope="module")
def vl():
    with AsymSpecVL.from_pretrained("embedded", device="cpu") as pipeline:
        yield pipeline


def ask(vl, **kwargs):
    return vl.generate(IMAGE, TOY["question"], caption=TOY["caption"], **kwargs)


def test_keyword_overrides_are_config_fields(vl):
    short = ask(vl, max_new_tokens=3, K=3)
    assert (
        short.config == AsymSpecConfig(K=3, max_new_tokens=3)
        and len(short.token_ids) == 3
    )
    assert (
        ask(vl, config={"K": 3}, max_new_tokens=3).config == short.config
    )  # overrides replace config's fields
    with pytest.raises(
        ConfigError, match="temprature"
    ):  # a misspelt field, not a silently ignored keyword
        ask(vl, temprature=0.7)
    with pytest.raises(ConfigError, match="AsymSpecConfig.K"):
        ask(vl, K=0)


def test_an_unknown_config_field_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown AsymSpecConfig field.*temprature"):
        AsymSpecConfig(temprature=0.7)
    with pytest.raises(ConfigError, match="unknown"):
        AsymSpecConfig().replace(topk=3)


def test_request_takes_generate_s_order(vl):
    batch = vl.generate_batch(
        [Request(IMAGE, TOY["question"], caption=TOY["caption"])], max_new_tokens=8
    )[0]
    assert batch.token_ids == ask(vl, max_new_tokens=8).token_ids


def test_the_trace_text_is_the_answer_and_the_end_token_adds_none(vl):
    res = ask(vl)
    assert res.finish_reason == "stop" and res.token_ids[-1] in vl.pair.eos_ids
    assert "".join(t.text for t in res.trace) == res.text and res.trace[-1].text == ""
    assert [t.token_id for t in res.trace] == res.token_ids


def test_stream_yields_the_answer_in_deltas(vl):
    stream = vl.stream(IMAGE, TOY["question"], caption=TOY["caption"])
    deltas = list(stream)
    assert (
        len(deltas) > 1
        and all(deltas)
        and "".join(deltas) == ask(vl).text == stream.result.text
    )


def test_breaking_out_of_a_stream_stops_the_decoding(vl, monkeypatch):
    from asymspec_vl.stream import TextStream

    steps, real = [], TextStream._on_step
    monkeypatch.setattr(
        TextStream,
        "_on_step",
        lambda self, rows: (steps.append(len(rows[0].token_ids)), real(self, rows)),
    )
    with vl.stream(
        IMAGE, TOY["question"], caption=TOY["caption"], method="floor"
    ) as stream:
        for _ in stream:
            break
    assert stream.result is None and max(steps) < len(ask(vl, method="floor").token_ids)


def test_a_bad_stream_argument_raises_at_once(vl):
    with pytest.raises(ConfigError):
        vl.stream(IMAGE, TOY["question"], K=99)


def test_stats_repr_shows_the_headline_figures(vl):
    spec, floor = ask(vl).stats, ask(vl, method="floor").stats
    assert f"acceptance_rate={spec.acceptance_rate:.2f}" in repr(spec)
    assert f"mean_accepted_length={spec.mean_accepted_length:.2f}" in repr(
        spec
    ) and "tokens_per_s=" in repr(spec)
    assert (
        floor.acceptance_rate is None
        and floor.mean_accepted_length is None
        and floor.tokens_per_s > 0
    )
    assert "acceptance_rate=None, mean_accepted_length=None" in repr(floor)


def test_the_tokenizer_is_at_hand_and_close_releases(vl, monkeypatch):
    assert vl.tokenizer is vl.pair.tokenizer
    closed = []
    monkeypatch.setattr(vl.backend, "close", lambda: closed.append(True))
    with vl:
        pass
    assert closed == [True]


def test_from_pretrained_decodes_on_one_cpu_thread_unless_told():
    """The API's default matches the command line's --threads 1 (torch's default pool made tiny-model decoding
    10x slower); threads=None keeps torch's setting; a bad count is a ConfigError."""
    import torch

    from asymspec_vl import AsymSpecVL, ConfigError

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        AsymSpecVL.from_pretrained(
            drafter="embedded", verifier="embedded", device="cpu"
        )
        assert torch.get_num_threads() == 1
        from asymspec_vl import timing

        calls, real = [], timing.set_threads
        timing.set_threads = lambda n, device: calls.append(n) or real(n, device)
        try:  # threads=None: torch's setting left alone (0: set_threads changes nothing)
            AsymSpecVL.from_pretrained(
                drafter="embedded", verifier="embedded", device="cpu", threads=None
            )
        finally:
            timing.set_threads = real
        assert set(calls) <= {0}, calls
        with pytest.raises(ConfigError, match="threads"):
            AsymSpecVL.from_pretrained(
                drafter="embedded", verifier="embedded", device="cpu", threads=-1
            )
    finally:
        torch.set_num_threads(before)
