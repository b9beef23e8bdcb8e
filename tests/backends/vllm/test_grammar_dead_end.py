"""A structured output's dead end across a vocabulary map on the vLLM engine (vllm_patches/grammar_dead_end.py): a
position that allows only unshared tokens ends that request alone with a GrammarDeadEndError naming the position
and the grammar, its answer so far kept (the accepted drafts before the dead end included); another request of the
same batch gives exactly its run alone, and the engine serves a later request."""

import re

import pytest
from asymspec_vl.evals.toy.eval import request_of
from xfamily_models import write_renamed_token

from asymspec_vl import AsymSpecConfig, AsymSpecVL
from asymspec_vl.backends.vllm.engine import generate
from asymspec_vl.inputs.conversation import encode
from asymspec_vl.toy import pair_paths, world

pytestmark = pytest.mark.vllm

OMEGA = "Ω"  # the renamed verifier's token: no drafter token spells it


@pytest.fixture(scope="module")
def renamed(tmp_path_factory):
    """embedded-llama with its verifier's "^" spelled OMEGA: that token is outside the shared set, and a grammar
    asking for OMEGA allows it alone (xgrammar reads the piece as its text)."""
    folder = write_renamed_token(
        pair_paths("llama")["verifier"],
        tmp_path_factory.mktemp("omega"),
        "^",
        OMEGA,
    )
    vl = AsymSpecVL.from_pretrained(
        drafter="embedded", verifier=str(folder), backend="vllm", block_size=16
    )
    yield vl
    vl.backend.close()


def _mixed_batch(vl, reqs, cfgs):
    """One engine batch of requests with their own configs (one method, one engine): the backend's rows."""
    backend, pair = vl.backend, vl.pair
    plans = [backend.plan_request("asymspec", AsymSpecConfig(**cfg)) for cfg in cfgs]
    encoded = [encode(r, pair.processor, pair.tokenizer, pair.cross_map) for r in reqs]
    prompts, params = zip(
        *(backend.engine_request(e, p) for e, p in zip(encoded, plans))
    )
    finals = generate(backend.engine(plans[0].engine), list(prompts), list(params))
    return [backend.row(o, p, 0.0) for o, p in zip(finals, plans)]


def test_a_dead_end_ends_that_request_alone_with_its_answer_so_far(renamed):
    omega = renamed.pair.tokenizer.convert_tokens_to_ids(OMEGA)
    assert omega not in renamed.pair.vmap.verifier_ids.tolist()  # unshared
    reqs = [request_of(e) for e in world.heldout(3)]
    digits = {"K": 2, "max_new_tokens": 12, "structured_output": {"regex": "[0-9]+"}}
    alone = _mixed_batch(renamed, reqs[1:2], [digits])[0]
    rows = _mixed_batch(
        renamed,
        reqs,
        [
            {**digits, "structured_output": {"regex": f"[0-9]{OMEGA}"}},
            digits,
            {**digits, "structured_output": {"regex": OMEGA}},
        ],
    )
    shared = set(renamed.pair.vmap.verifier_ids.tolist())
    for row, position in ((rows[0], 1), (rows[2], 0)):
        assert row.finish_reason == "error"
        assert "GrammarDeadEndError" in row.error and OMEGA in row.error, row.error
        assert f"at output position {position} " in row.error, row.error
        assert len(row.token_ids) == position and set(row.token_ids) <= shared
    assert (rows[1].token_ids, rows[1].sources, rows[1].finish_reason) == (
        alone.token_ids,
        alone.sources,
        alone.finish_reason,
    )
    assert rows[1].finish_reason == "stop" and rows[1].token_ids
    # through the API: every request at the dead end after its first digit, the digit kept (as a draft the gate
    # accepted, where it was: that step committed its accepted draft only); a later request is served
    cut = renamed.generate_batch(
        [request_of(e) for e in world.heldout(6)],
        "asymspec",
        {**digits, "structured_output": {"regex": f"[0-9]{OMEGA}"}},
    )
    for r in cut:
        assert r.finish_reason == "error" and "GrammarDeadEndError" in r.error
        assert re.fullmatch("[0-9]", r.text), r.text
        assert r.stats.emitted == 1 and r.stats.accepted in (0, 1)
    accepted = [r for r in cut if r.stats.accepted]
    assert accepted and all([t.source for t in r.trace] == ["draft"] for r in accepted)
    later = renamed.generate_batch(reqs, "asymspec", digits)
    assert all(r.finish_reason in ("stop", "length") and not r.error for r in later)
