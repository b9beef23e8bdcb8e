"""A structured output's dead end on a plain engine (vLLM's own Sampler; vllm_patches/requests/plain_dead_ends.py), on
the same-family toy pair: Floor (the verifier alone) with min_tokens longer than its choice constraint meets a
position where the grammar allows only the stop token min_tokens holds. That request ends alone with a
GrammarDeadEndError naming the grammar and the position, its answer so far kept (the old engine committed id 0
there, [91, 92, 0, 0, 0, 2] with finish_reason "stop"); another request of the same batch gives exactly its run
alone; the engine serves a later request."""

import pytest
from asymspec_vl.evals.toy.eval import request_of

from asymspec_vl import AsymSpecConfig, AsymSpecVL
from asymspec_vl.backends.vllm.engine import generate
from asymspec_vl.inputs.conversation import encode
from asymspec_vl.toy import world

pytestmark = pytest.mark.vllm

CHOICE = {"choice": ["yes", "no"]}
HELD = {"max_new_tokens": 8, "min_tokens": 5, "structured_output": CHOICE}


@pytest.fixture(scope="module")
def vl():
    vl = AsymSpecVL.from_pretrained(
        drafter="embedded", verifier="embedded", backend="vllm", dtype="float32"
    )
    yield vl
    vl.backend.close()


def mixed_batch(vl, method, reqs, cfgs):
    """One plain-engine batch of requests with their own configs: the backend's rows."""
    backend, pair = vl.backend, vl.pair
    plans = [backend.plan_request(method, AsymSpecConfig(**cfg)) for cfg in cfgs]
    assert {p.mode for p in plans} == {"plain"}
    encoded = [encode(r, pair.processor, pair.tokenizer, pair.cross_map) for r in reqs]
    prompts, params = zip(
        *(backend.engine_request(e, p) for e, p in zip(encoded, plans))
    )
    finals = generate(backend.engine(plans[0].engine), list(prompts), list(params))
    return [backend.row(o, p, 0.0, pair.vmap) for o, p in zip(finals, plans)]


def test_floor_with_min_tokens_past_its_choice_fails_alone_with_the_answer_kept(vl):
    reqs = [request_of(e) for e in world.heldout(2)]
    other = {"max_new_tokens": 6, "structured_output": {"regex": "[a-z]+"}}
    alone = mixed_batch(vl, "floor", reqs[1:], [other])[0]
    held, row = mixed_batch(vl, "floor", reqs, [HELD, other])
    answer = vl.pair.tokenizer.decode(held.token_ids)
    assert held.finish_reason == "error", (held.token_ids, answer)
    assert "GrammarDeadEndError" in held.error and '"yes" | "no"' in held.error, (
        held.error
    )
    position = len(held.token_ids)
    assert f"at output position {position} " in held.error, held.error
    assert answer in CHOICE["choice"] and 0 not in held.token_ids  # the choice, kept
    assert (row.token_ids, row.finish_reason) == (alone.token_ids, alone.finish_reason)
    assert row.finish_reason in ("stop", "length") and row.token_ids
    # through the API (every row held), and a later request is served
    for r in vl.generate_batch(reqs, "floor", HELD):
        assert r.finish_reason == "error" and "GrammarDeadEndError" in r.error
        assert r.text in CHOICE["choice"]
    later = vl.generate_batch(reqs, "floor", {"max_new_tokens": 8, "min_tokens": 5})
    assert all(r.finish_reason in ("stop", "length") and not r.error for r in later)
    assert all(len(r.token_ids) >= 5 for r in later)
