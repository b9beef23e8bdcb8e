"""The Python API's result and `generate`'s output say whether the pair is cross-family and what it shares
(`GenerationResult.vocabulary`, its to_dict()'s "vocabulary", `generate`'s "pair:" line), on the embedded pairs:
`embedded` one family, `embedded-llama` two vocabularies."""

import json

import pytest
from helpers import random_image

from asymspec_vl import AsymSpecVL
from asymspec_vl.cli import main


@pytest.mark.parametrize("verifier", ["embedded", "embedded-llama"])
def test_each_result_carries_the_pairs_vocabulary(verifier):
    vl = AsymSpecVL.from_pretrained(drafter="embedded", verifier=verifier, device="cpu")
    r = vl.generate(
        random_image(0), "What is shown?", caption="a chart", max_new_tokens=2
    )
    assert r.vocabulary == vl.pair.vocabulary
    assert r.vocabulary.cross_family is (verifier != "embedded")
    assert r.to_dict()["vocabulary"] == vl.pair.vocabulary.to_dict()
    json.dumps(r.to_dict())  # JSON as it is


@pytest.mark.parametrize("verifier", ["embedded", "embedded-llama"])
def test_generate_prints_what_the_pair_shares(verifier, tmp_path, capsys):
    image = tmp_path / "img.png"
    random_image(1).save(image)
    ask = ["generate", "--image", str(image), "--question", "What is shown?"]
    ask += ["--caption", "a chart", "--verifier", verifier, "--max-new-tokens", "2"]
    assert main([*ask, "--device", "cpu"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    if verifier == "embedded":
        assert first == "pair: same family: one vocabulary (426 tokens)"
    else:
        assert first.startswith("pair: cross-family: ") and "shared tokens" in first
        assert first.endswith("answer end <|im_end|> -> <|eot_id|>")
    assert main([*ask, "--device", "cpu", "--json"]) == 0
    row = json.loads(capsys.readouterr().out.splitlines()[0])
    assert row["vocabulary"]["cross_family"] is (verifier != "embedded")
