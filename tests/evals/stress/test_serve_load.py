"""evals/stress/serve_load.py without a server (a server load run starts the embedded pair's engines: minutes on
the CPU build; issue 33's figures come from the full run): the request mix it sends, what it compares of a reply,
the resident memory it reads, and the exit status its checks give."""

import json
import sys
import types

import httpx
import psutil
import pytest
from asymspec_vl.evals.stress import serve_load


def test_the_good_mix_is_every_method_times_every_request_kind():
    good = serve_load.good_bodies(5)
    assert len(good) == 3 * 7
    assert {b["method"] for b in good} == {"asymspec", "sd", "floor"}
    assert all(b["model"] == "asymspec-vl" and b["max_tokens"] == 5 for b in good)
    assert len({json.dumps(b, sort_keys=True) for b in good}) == len(good)  # distinct
    sd = [b for b in good if b["method"] == "sd"]
    assert [b.get("seed") for b in sd if "temperature" in b] == [7, 11]
    assert sum("response_format" in b for b in sd) == 1
    assert sum(len(b["messages"]) == 3 for b in sd) == 1  # one conversation


def test_the_bad_mix_carries_each_broken_constraint_once():
    bad = serve_load.bad_bodies(5)
    assert len(bad) == len(serve_load.BAD) == 5
    for body, broken in zip(bad, serve_load.BAD):
        assert body["max_tokens"] == 5 and body["messages"][0]["role"] == "user"
        assert {k: body[k] for k in broken} == broken


def reply(status: int, body: dict) -> httpx.Response:
    return httpx.Response(status, json=body)


def test_a_good_reply_is_compared_by_text_finish_and_logprob_tokens():
    choice = {
        "message": {"content": "4"},
        "finish_reason": "stop",
        "logprobs": {"content": [{"token": "4", "logprob": -0.1}]},
    }
    assert serve_load.summary(reply(200, {"choices": [choice]})) == (
        200,
        "4",
        "stop",
        ["4"],
    )
    choice["logprobs"] = None
    assert serve_load.summary(reply(200, {"choices": [choice]}))[3] == []


def test_a_refusal_is_compared_by_status_type_and_whether_it_names_the_field():
    named = {
        "error": {
            "type": "UnsupportedRequestError",
            "message": "bad response_format / structured_outputs: $ref cycle",
        }
    }
    assert serve_load.summary(reply(400, named)) == (
        400,
        "UnsupportedRequestError",
        True,
    )
    vague = {"error": {"type": "InternalServerError", "message": "boom"}}
    assert serve_load.summary(reply(500, vague)) == (500, "InternalServerError", False)


def test_the_memory_read_is_the_process_and_its_children_in_gb(monkeypatch):
    class Proc:
        def __init__(self, pid, rss=3_000_000_000):
            self.pid, self.rss = pid, rss

        def memory_info(self):
            return types.SimpleNamespace(rss=self.rss)

        def children(self, recursive=False):
            assert (
                recursive
            )  # the engine core's and workers' processes are grandchildren
            return [Proc(2, 1_000_000_000), Proc(3, 123_456_789)]

    monkeypatch.setattr(psutil, "Process", Proc)
    assert serve_load.rss_gb(1) == 4.123  # GB (1e9 bytes), rounded to MB


RESULT = {
    "good_mismatches": [],
    "bad_wrong": [],
    "health_after": 200,
    "reference_statuses": [200],
    "server_exit_code": 0,
}


@pytest.mark.parametrize(
    "change, status",
    [
        ({}, 0),
        ({"good_mismatches": [{"body": 3}]}, 1),
        ({"bad_wrong": [{"body": 22}]}, 1),
        ({"health_after": 503}, 1),
        ({"reference_statuses": [200, 400]}, 1),
        ({"server_exit_code": -9}, 1),
    ],
)
def test_the_exit_status_fails_on_any_failed_check(
    monkeypatch, tmp_path, capsys, change, status
):
    result = {**RESULT, **change}
    seen = []

    async def run(args):
        seen.append((args.concurrency, args.requests, args.tokens))
        return dict(result)

    out = tmp_path / "load.json"
    monkeypatch.setattr(serve_load, "run", run)
    monkeypatch.setattr(
        sys,
        "argv",
        ["serve_load", "--concurrency", "4", "--requests", "8", "--out", str(out)],
    )
    assert serve_load.main() == status
    assert seen == [(4, 8, 8)]
    assert json.loads(capsys.readouterr().out) == result == json.loads(out.read_text())
