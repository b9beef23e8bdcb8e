"""The result's per-token trace: texts join to the decoded answer, multi-byte characters stay whole."""

import pytest
from helpers import first_fresh_position, random_request
from transformers import AutoTokenizer

from asymspec_vl import AsymSpecConfig
from asymspec_vl.api import token_pieces


def test_token_pieces_keep_characters_whole(tiny_models):
    tok = AutoTokenizer.from_pretrained(tiny_models["verifier"])
    ids = tok("héllo wörld → 12 ✓ done<|im_end|>", add_special_tokens=False)[
        "input_ids"
    ]
    assert any(
        "\ufffd" in tok.decode([i]) for i in ids
    )  # single-token decoding splits characters here
    pieces = token_pieces(tok, ids)
    assert len(pieces) == len(ids) and "".join(pieces) == tok.decode(ids)
    assert not any("\ufffd" in p for p in pieces) and "→" in pieces


def test_result_trace_and_stats_are_consistent(tiny_vl):
    res = tiny_vl.generate_batch(
        [random_request(7)], config=AsymSpecConfig(K=2, max_new_tokens=20)
    )[0]
    assert [t.token_id for t in res.trace] == res.token_ids
    assert (
        "".join(t.text for t in res.trace) == res.text == tiny_vl.decode(res.token_ids)
    )
    s = res.stats
    assert s.emitted == len(res.token_ids) and s.drafted == 2 * s.steps
    assert s.accepted == sum(t.source == "draft" for t in res.trace)
    assert s.steps == sum(t.source in ("fused", "bonus") for t in res.trace) + (
        res.trace[-1].source == "draft"
    )
    assert abs(s.mean_accepted_length - s.emitted / s.steps) < 1e-12
    assert s.accepted_at[0] >= s.accepted_at[1] and sum(s.accepted_at) == s.accepted
    d = res.to_dict()
    assert (
        d["stats"]["acceptance_rate"] == s.acceptance_rate
        and d["prompts"]["x_comp"] == res.prompts.x_comp
    )


@pytest.mark.parametrize("method", ["asymspec", "floor", "scd"])
def test_a_stop_token_exactly_at_the_budget_is_a_stop(tiny_vl, method):
    """The max_new-th token is a stop token: the answer ends there with finish_reason "stop" (as vLLM, which
    checks stop tokens before the length); the same budget without that stop token ends with "length"."""
    for seed in range(3):
        req = random_request(seed)
        free = tiny_vl.generate_batch(
            [req], method, AsymSpecConfig(K=2, max_new_tokens=16, ignore_eos=True)
        )[0]
        i = first_fresh_position(free.token_ids, 3 + seed)
        budget = AsymSpecConfig(
            K=2, max_new_tokens=i + 1, stop_token_ids=(free.token_ids[i],)
        )
        res = tiny_vl.generate_batch([req], method, budget)[0]
        assert (res.token_ids, res.finish_reason) == (free.token_ids[: i + 1], "stop")
        assert res.stats.emitted == len(
            res.token_ids
        )  # a step cut by the stop counts what it emitted
        res = tiny_vl.generate_batch(
            [req], method, budget.replace(stop_token_ids=None, ignore_eos=True)
        )[0]
        assert (res.token_ids, res.finish_reason) == (free.token_ids[: i + 1], "length")


def test_a_step_cut_by_a_stop_token_or_the_budget_counts_the_tokens_it_emitted():
    from asymspec_vl.core.trace import Stats

    s = Stats(accepted_at=[0, 0, 0])
    s.record(
        num_drafts=3, num_accepted=3, num_emitted=4
    )  # a whole step: 3 drafts kept + the bonus token
    s.record(
        num_drafts=3, num_accepted=2, num_emitted=1
    )  # cut: the first kept draft was a stop token
    assert (s.steps, s.drafted, s.accepted, s.emitted, s.accepted_at) == (
        2,
        6,
        5,
        5,
        [2, 2, 1],
    )
    assert s.mean_accepted_length == 2.5
