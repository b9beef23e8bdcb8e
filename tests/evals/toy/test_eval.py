"""The shipped toy pair (the embedded default) does what the toy world is for, on a fixed held-out sample:
AsymSpec recovers what the caption leaves out (at least 20 points above the Floor), the drafter alone is
well above the Floor, the cached loop equals Algorithm 1 from scratch, no structural token is emitted under
forced rejections, and `asymspec-vl eval toy` writes its table and resumes."""

import json

import pytest
from asymspec_vl.evals.toy.eval import BASE, VARIANTS, request_of
from helpers import ON_TEST_DEVICE

from asymspec_vl import AsymSpecConfig
from asymspec_vl.toy import world

N = 60  # the fixed held-out sample: 20 questions of each type


@pytest.fixture(scope="module")
def toy_vl():
    from asymspec_vl import AsymSpecVL

    return AsymSpecVL.from_pretrained(
        drafter="embedded", verifier="embedded", **ON_TEST_DEVICE
    )


@pytest.fixture(scope="module")
def results(toy_vl):
    """Per variant: the responses on the first N held-out questions (decoded in one batch)."""
    examples = world.heldout(N)
    reqs = [request_of(e) for e in examples]
    out = {}
    for key in ("floor", "drafter", "asymspec-K2-b1", "asymspec-K2-b1-fused"):
        v = VARIANTS[key]
        out[key] = toy_vl.generate_batch(reqs, v.method, v.config())
    return examples, out


def _accuracy(examples, res, qtype=None):
    pairs = [(e, r) for e, r in zip(examples, res) if qtype in (None, e.qtype)]
    return 100.0 * sum(world.is_correct(r.text, e) for e, r in pairs) / len(pairs)


def test_embedded_is_the_shipped_toy_pair():
    from asymspec_vl.pair.defaults import embedded_models, resolve
    from asymspec_vl.toy import PAIR_DIR

    paths = embedded_models()
    assert paths == {
        "drafter": str(PAIR_DIR / "drafter"),
        "verifier": str(PAIR_DIR / "verifier"),
        "text_drafter": None,
    }
    assert resolve("text_drafter", "embedded") is None
    manifest = json.loads((PAIR_DIR / "manifest.json").read_text())
    assert (
        manifest["heldout"]["asymspec-K2-b1"]["Overall"]
        >= manifest["heldout"]["floor"]["Overall"] + 20
    )


def test_asymspec_recovers_what_the_caption_leaves_out(results):
    examples, res = results
    floor, drafter = (
        _accuracy(examples, res["floor"]),
        _accuracy(examples, res["drafter"]),
    )
    asymspec = _accuracy(examples, res["asymspec-K2-b1"])
    assert floor <= 25.0  # the caption has no digits: the verifier alone guesses
    assert asymspec - floor >= 20.0
    assert drafter - floor >= 20.0
    # the verifier's arithmetic: AsymSpec (with the fused bonus) beats the drafter alone on products
    assert _accuracy(examples, res["asymspec-K2-b1-fused"], "mult") > _accuracy(
        examples, res["drafter"], "mult"
    )


def test_responses_follow_the_answer_format(results):
    examples, res = results
    for r in res["asymspec-K2-b1"]:
        assert r.finish_reason == "stop" and world.extract_answer(r.text) is not None
        assert r.stats.drafted > 0 and r.stats.accepted > 0


def test_cached_loop_equals_algorithm_1_on_the_toy_pair(toy_vl):
    """Trained models make a fused token equal to the draft it replaced (a case random ones rarely hit)."""
    from asymspec_vl.backends.hf.reference import reference_asymspec
    from asymspec_vl.inputs.prompts import encode_request

    pair, be = toy_vl.pair, toy_vl.backend
    reqs = [request_of(e) for e in world.heldout(9)]
    for cfg in (
        BASE.replace(gate="fixed", gamma=1.0),
        BASE.replace(K=4, bonus="fused"),
    ):
        cached = [r.token_ids for r in toy_vl.generate_batch(reqs, "asymspec", cfg)]
        ref = []
        for r in reqs:
            enc = encode_request(r, pair.processor, pair.tokenizer)
            ref.append(
                reference_asymspec(
                    be.drafter,
                    be.verifier,
                    enc.full,
                    enc.comp,
                    cfg,
                    pair.banned_mask(be.device),
                    pair.stop_ids(cfg),
                    cfg.max_new_tokens,
                )
            )
        assert cached == ref


def test_ledger_keeps_the_last_committed_token_pending():
    """The regression behind the test above: y ends with a token equal to a cached speculative one."""
    from asymspec_vl.core.sources import RowLedger

    row = RowLedger(prompt=[1, 2, 3], n_cached=2, speculative=[(2, 3), (3, 7), (4, 8)])
    assert row.commit([7]) == [
        3,
        4,
    ]  # 7 (the emitted token) equals the draft at slot 3: still re-read
    assert row.pending([7]) == [7] and row.n_cached == 3


@pytest.mark.parametrize(
    "cfg",
    [
        AsymSpecConfig(K=2, gate="fixed", gamma=1.0, beta=10.0, max_new_tokens=24),
        AsymSpecConfig(
            K=4, gate="fixed", gamma=1.0, beta=1.0, bonus="fused", max_new_tokens=24
        ),
    ],
)
def test_forced_rejections_fuse_and_never_emit_a_structural_token(toy_vl, cfg):
    """Nor a thinking marker: x_comp closes an empty think block that x_full lacks, so delta = a - b is large
    on <think> / </think>, and without the ban a fused argmax emitted them."""
    from asymspec_vl.inputs.vocab import STRUCTURAL_TOKENS, THINK_MARKERS

    vocab = toy_vl.pair.tokenizer.get_vocab()
    structural = {vocab[t] for t in STRUCTURAL_TOKENS + THINK_MARKERS}
    res = toy_vl.generate_batch(
        [request_of(e) for e in world.heldout(12)], "asymspec", cfg
    )
    assert not structural & {t for r in res for t in r.token_ids}
    assert (
        sum(t.source == "fused" for r in res for t in r.trace) >= 12
    )  # rejections happened


def test_eval_toy_command_writes_the_table_and_resumes(tmp_path, capsys):
    from asymspec_vl.cli import main

    args = [
        "eval",
        "toy",
        "--n",
        "6",
        "--variants",
        "floor,asymspec-K2-b1",
        "--batch",
        "4",
        "--out",
        str(tmp_path),
        "--no-progress",
    ]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "| Floor |" in printed and "| AsymSpec K=2 β=1 |" in printed
    for f in (
        "results.jsonl",
        "table.md",
        "table.csv",
        "table.json",
        "table.png",
        "manifest.json",
    ):
        assert (tmp_path / f).is_file()
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert len(lines) == 12 and {json.loads(x)["qtype"] for x in lines} == set(
        world.QTYPES
    )
    assert main(args) == 0  # resumed: nothing left to do
    assert (tmp_path / "results.jsonl").read_text().splitlines() == lines
    assert main(["eval", "score", str(tmp_path / "results.jsonl")]) == 0
    assert "| AsymSpec K=2 β=1 |" in capsys.readouterr().out


def test_eval_toy_refuses_bad_options(tmp_path):
    from asymspec_vl.cli import main

    assert (
        main(["eval", "toy", "--n", "0", "--out", str(tmp_path), "--no-progress"]) == 2
    )
    with pytest.raises(SystemExit):
        main(["eval", "toy", "--variants", "asymspec-K3", "--out", str(tmp_path)])


def test_the_demo_opens_on_toy_examples_the_pair_answers(toy_vl):
    """The demo's default models are the toy pair: its first examples are toy scenes (examples.json records
    their answers) where AsymSpec gets the answer the caption cannot give, and on the mult one the drafter
    alone gets it wrong (the verifier's arithmetic)."""
    from asymspec_vl.demo.page import EXAMPLES_DIR
    from asymspec_vl.demo.service import DemoService

    service = DemoService(toy_vl, BASE)
    toy = [
        e
        for e in json.loads((EXAMPLES_DIR / "examples.json").read_text())
        if e["image"].startswith("toy-")
    ]
    assert [e["image"] for e in toy] == ["toy-mult.png", "toy-sum.png", "toy-read.png"]
    for e in toy:
        *_, results = list(
            service.answer(
                str(EXAMPLES_DIR / e["image"]),
                e["question"],
                e["caption"],
                e["ocr"],
                2,
                1.0,
                0.5,
                "cda",
                48,
            )
        )[-1]
        got = {
            m: world.extract_answer(results[m]["text"])
            for m in ("asymspec", "floor", "drafter")
        }
        assert got["asymspec"] == e["answer"] != got["floor"], (e["question"], got)
        if e["image"] == "toy-mult.png":
            assert got["drafter"] != e["answer"], got
