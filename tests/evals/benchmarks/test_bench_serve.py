"""evals/benchmarks/bench_serve.py against a server it starts (the embedded pair on the transformers backend), two
requests of at most four tokens at concurrency 1 and 2: a row per method and concurrency whose rates are its counts
over one wall time, the Floor without acceptance, AsymSpec's acceptance and MAL in range, and every request's first
token no later than its last; row() checked on fixed results; a server that cannot start and bad counts are errors.
Never timed: no figure is compared with a speed."""

import base64
import io
import json

import pytest
from asymspec_vl.evals.benchmarks import bench_serve
from PIL import Image

from asymspec_vl.serve.settings import ServeSettings
from asymspec_vl.toy import world

HF_PAIR = "--backend hf --device cpu --drafter embedded --verifier embedded --ocr none"


def test_row_divides_the_counts_by_the_wall_time_and_the_steps():
    results = [
        {
            "ttft": 0.1,
            "latency": 1.0,
            "emitted": 4,
            "drafted": 6,
            "accepted": 3,
            "steps": 2,
        },
        {
            "ttft": 0.3,
            "latency": 3.0,
            "emitted": 2,
            "drafted": 2,
            "accepted": 0,
            "steps": 2,
        },
    ]
    row = bench_serve.row("asymspec", 2, 2.0, results)
    assert row["requests"] == 2 and row["requests_per_s"] == 1.0
    assert row["tokens_per_s"] == 3.0
    assert row["ttft_p50_s"] == pytest.approx(0.2)
    assert row["latency_p50_s"] == pytest.approx(2.0)
    assert row["latency_p99_s"] == pytest.approx(1.0 + 2.0 * 0.99)
    assert row["acceptance_rate"] == 3 / 8 and row["mean_accepted_length"] == 6 / 4
    floor = bench_serve.row(
        "floor", 1, 1.0, [{**r, "drafted": 0, "accepted": 0} for r in results]
    )
    assert "acceptance_rate" not in floor and "mean_accepted_length" not in floor


def test_bodies_carry_the_held_out_scenes_images_and_captions():
    examples = world.heldout(3)
    bodies = bench_serve.bodies(3, 7)
    assert len(bodies) == 3
    for body, ex in zip(bodies, examples):
        assert body["stream"] is True and body["max_tokens"] == 7
        assert body["caption"] == ex.caption
        image, text = body["messages"][0]["content"]
        assert text == {"type": "text", "text": ex.question}
        data = image["image_url"]["url"].removeprefix("data:image/png;base64,")
        sent = Image.open(io.BytesIO(base64.b64decode(data)))
        assert sent.tobytes() == ex.image().convert(sent.mode).tobytes()


def test_a_started_server_is_measured_row_by_row(tmp_path, capsys):
    bench_serve.main(
        [
            "--server-args",
            HF_PAIR + " --max-tokens 4",
            "--requests",
            "2",
            "--tokens",
            "4",
            "--concurrency",
            "1,2",
            "--out",
            str(tmp_path),
        ]
    )
    out = capsys.readouterr().out
    rows = json.loads((tmp_path / "bench_serve.json").read_text())["rows"]
    assert [(r["method"], r["concurrency"]) for r in rows] == [
        (m, c) for m in ("floor", "asymspec") for c in (1, 2)
    ]
    for r in rows:
        assert r["requests"] == 2
        per_request = r["tokens_per_s"] / r["requests_per_s"]  # the same wall time
        assert 1 <= per_request <= 4  # max_tokens 4
        assert r["ttft_p50_s"] <= r["latency_p50_s"] <= r["latency_p99_s"]
        assert out.count(f"| {r['method']} | {r['concurrency']} | 2 |") == 2
    for r in rows[:2]:
        assert "acceptance_rate" not in r
    for r in rows[2:]:
        assert 0 <= r["acceptance_rate"] <= 1
        assert 1 <= r["mean_accepted_length"] <= ServeSettings("", "").K + 1


def test_a_server_that_cannot_start_is_an_error():
    with pytest.raises(RuntimeError, match="the server exited with 2"):
        with bench_serve.started_server("--backend nowhere", None):
            pass


@pytest.mark.parametrize(
    "args", [["--requests", "0"], ["--tokens", "x"], ["--concurrency", "1,0"]]
)
def test_bad_counts_are_argument_errors(capsys, args):
    with pytest.raises(SystemExit) as e:
        bench_serve.main(args)
    assert e.value.code == 2 and args[0] in capsys.readouterr().err


def test_an_unknown_method_is_an_argparse_error_before_any_server_starts(
    monkeypatch, capsys
):
    monkeypatch.setattr(bench_serve, "started_server", pytest.fail)
    monkeypatch.setattr(bench_serve, "run", pytest.fail)
    with pytest.raises(SystemExit) as exit_:
        bench_serve.main(["--methods", "floor,asymspek"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "--methods" in err and "'asymspek'" in err
    assert "asymspec, sd, scd, floor, drafter" in err
