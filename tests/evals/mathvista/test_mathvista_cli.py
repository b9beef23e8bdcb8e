"""evals/mathvista/cli.py in process: `eval mathvista`'s options reach run_eval (a recording stand-in here) as the
protocol and decoding config they name, bad ones are refused before any run; `eval score`'s MathVista part checks
each saved record, picks the extractor, and re-scores responses by rule under either protocol."""

import json
from types import SimpleNamespace

import pytest
from asymspec_vl.evals.mathvista import cli as mathvista_cli
from asymspec_vl.evals.mathvista import llm_extract, run
from asymspec_vl.evals.mathvista.extraction import RuleExtractor
from asymspec_vl.evals.mathvista.protocol import PAPER_DECODING, EvalProtocol

from asymspec_vl.cli import main
from asymspec_vl.commands import parse_methods
from asymspec_vl.core.config import AsymSpecConfig
from asymspec_vl.core.errors import ConfigError


@pytest.fixture
def runs(monkeypatch):
    """run_eval and set_threads replaced by recorders: -> the list of (args, cfg, protocol, threads)."""
    calls, threads = [], []
    monkeypatch.setattr(
        mathvista_cli, "set_threads", lambda n, device: threads.append((n, device))
    )

    def run_eval(args, cfg, protocol):
        calls.append((args, cfg, protocol, threads[-1]))
        return 0

    monkeypatch.setattr(run, "run_eval", run_eval)
    return calls


def test_defaults_are_the_papers_protocol(runs):
    assert main(["eval", "mathvista"]) == 0
    [(args, cfg, protocol, _)] = runs
    assert protocol == EvalProtocol() and protocol.tasks == ("GPS", "VQA", "FQA")
    assert cfg == AsymSpecConfig(**PAPER_DECODING)
    assert args.methods == parse_methods("floor,sd,drafter,asymspec")
    assert (args.out, args.batch, args.extract, args.limit) == (
        "runs/mathvista",
        1,
        "rule",
        None,
    )


def test_options_reach_the_protocol_and_the_config(runs):
    argv = [
        "eval",
        "mathvista",
        "--protocol",
        "release",
        "--tasks",
        "gps,MWP,vqa",
        "--all-problems",
    ]
    argv += ["--caption-chars", "100", "--ocr-chars", "50", "--cot-suffix", "Think."]
    argv += [
        "-K",
        "3",
        "--gamma",
        "0.25",
        "--max-new-tokens",
        "64",
        "--device",
        "cpu",
        "--threads",
        "1",
    ]
    argv += [
        "--methods",
        "floor,asymspec",
        "--pids",
        "2,5",
        "--limit",
        "4",
        "--batch",
        "2",
    ]
    assert main(argv) == 0
    [(args, cfg, protocol, threads)] = runs
    assert protocol == EvalProtocol(
        name="release",
        tasks=("GPS", "MWP", "VQA"),
        require_caption=False,
        caption_chars=100,
        ocr_chars=50,
        cot_suffix="Think.",
    )
    assert cfg == AsymSpecConfig(
        **{**PAPER_DECODING, "K": 3, "gamma": 0.25, "max_new_tokens": 64}
    )
    assert threads == (1, "cpu")
    assert (args.pids, args.limit, args.batch) == (["2", "5"], 4, 2)
    assert args.methods == parse_methods("floor,asymspec")


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--tasks", "GPS,XYZ"], "unknown MathVista task 'XYZ'"),
        (["-K", "0"], "-K"),
    ],
)
def test_bad_settings_are_one_error_line_before_the_run(runs, capsys, extra, words):
    assert main(["eval", "mathvista", *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("asymspec-vl: error: ") and words in err
    assert runs == []


@pytest.mark.parametrize(
    "extra",
    [
        ["--batch", "0"],
        ["--protocol", "paper"],
        ["--extract", "regex"],
        ["--methods", "floor,nope"],
    ],
)
def test_bad_values_are_usage_errors(runs, capsys, extra):
    with pytest.raises(SystemExit) as e:
        main(["eval", "mathvista", *extra])
    assert e.value.code == 2 and runs == []


GOOD = dict(question="q", answer="3", question_type="free_form", answer_type="integer")


@pytest.mark.parametrize(
    "change, problem",
    [
        ({}, None),
        ({"query": None, "choices": None, "precision": None}, None),
        ({"precision": 2, "choices": ["a", "b"]}, None),
        ({"answer": 3}, "has answer=3 (int); expected text"),
        ({"response": ["x"]}, "has response=['x'] (list); expected text"),
        ({"query": 1}, "has query=1 (int); expected text"),
        ({"answer_type": None}, "has answer_type=None (NoneType); expected text"),
        ({"verdicts": {"official": {"extraction": 1}}}, "has verdicts="),
        ({"verdicts": []}, "has verdicts=[]"),
        ({"choices": "a,b"}, "has choices=a,b; expected a list of texts or null"),
        ({"choices": ["a", 2]}, "has choices="),
        ({"precision": True}, "has precision=True; expected a number or null"),
        ({"precision": "2"}, "has precision=2; expected a number or null"),
    ],
)
def test_check_record(change, problem):
    found = mathvista_cli.check_record({**GOOD, **change})
    assert found == problem if problem is None else found.startswith(problem)


def test_check_record_names_the_missing_fields():
    assert (
        mathvista_cli.check_record({"question": "q"})
        == "lacks answer, question_type, answer_type"
    )


def test_the_score_extractor(monkeypatch, tmp_path):
    extractor = mathvista_cli._score_extractor
    assert extractor(SimpleNamespace(extract="keep"), []) is None
    assert isinstance(extractor(SimpleNamespace(extract="rule"), []), RuleExtractor)
    llm = SimpleNamespace(extract="llm", verifier=None, device="cpu", dtype="float32")
    results = tmp_path / "run" / "results.jsonl"
    with pytest.raises(ConfigError, match="--extract llm needs --verifier"):
        extractor(llm, [results])
    loads = []
    monkeypatch.setattr(
        llm_extract.LLMExtractor,
        "from_pretrained",
        classmethod(lambda cls, *a, **k: loads.append((a, k)) or "llm"),
    )
    results.parent.mkdir()
    (results.parent / "manifest.json").write_text(
        json.dumps({"models": {"verifier": "the/verifier"}})
    )
    assert extractor(llm, [results]) == "llm"
    assert (
        extractor(SimpleNamespace(**{**vars(llm), "verifier": "mine"}), [results])
        == "llm"
    )
    assert loads == [
        (
            ("the/verifier",),
            {"device": "cpu", "dtype": "float32"},
        ),  # the run's own verifier
        (("mine",), {"device": "cpu", "dtype": "float32"}),  # --verifier wins
    ]


def record(i, response, answer, method="floor", **extra):
    return dict(
        id=str(i),
        method=method,
        benchmark="mathvista",
        task="GPS",
        response=response,
        question="What is x?",
        query="What is x?",
        answer=answer,
        question_type="free_form",
        answer_type="integer",
        precision=None,
        choices=None,
        stats={"emitted": 3, "elapsed_s": 1.0, "steps": 3, "drafted": 0, "accepted": 0},
        **extra,
    )


RECORDS = [
    record(1, "The answer is 5.", "5"),
    record(2, "The answer is 7.", "3"),
    record(3, "The answer is 3.", "3", method="sd"),
    record(4, "", "3", method="sd", error={"type": "X", "message": "m"}),
]


@pytest.mark.parametrize("protocol", [None, "release"])
def test_rescore_by_rule_under_either_protocol(protocol):
    args = SimpleNamespace(protocol=protocol, extract="rule")
    text = mathvista_cli.rescore(
        [dict(r) for r in RECORDS], args, ["floor", "sd"], None, []
    )
    scoring = protocol or "official"
    assert text.startswith(
        f"MathVista, re-scored (prompts: official, scoring: {scoring})\n\n"
    )
    rows = {
        line.split(" | ")[0].strip("| "): line.split(" | ")
        for line in text.splitlines()
        if line.startswith("| ")
    }
    assert rows["Floor"][1:5] == ["50.0", "", "", "50.0"]
    assert rows["Floor"][1] == "50.0" and rows["SD"][1] == "100.0"
    assert rows["SD"][6] == "1"  # the errored record counted as an error


def test_rescore_writes_its_outputs(tmp_path):
    args = SimpleNamespace(protocol=None, extract="rule")
    mathvista_cli.rescore(
        [dict(r) for r in RECORDS], args, ["floor", "sd"], tmp_path / "out", []
    )
    lines = [
        json.loads(x)
        for x in (tmp_path / "out" / "rescored.jsonl").read_text().splitlines()
    ]
    assert [r.get("correct") for r in lines[:3]] == [True, False, True]
    assert (
        lines[0]["verdicts"]["official"]["extraction"] == "5"
        and lines[0]["scored_by"] == "official"
    )
    assert (
        lines[3]["scored_by"] == "official" and "verdicts" not in lines[3]
    )  # an error is not re-extracted
