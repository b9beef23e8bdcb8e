"""Structured output across a vocabulary map on the vLLM engine (docs/cross-family.md, "Structured output across
the map"; a grammar's dead end: test_grammar_dead_end.py):
- xgrammar reads `embedded-llama`'s verifier "▁" as a space (its decoder is Llama-2's, without Strip);
- on `embedded-llama`, batched, a regex, a choice, a JSON-shaped regex and a regex with spaces: every answer follows
  its grammar and holds shared tokens only (greedy and sampled rules choose over shared ∩ allowed);
- the permuted-verifier oracle holds under a grammar (compiled for each verifier's own tokenizer): a verifier whose
  ids are permuted answers exactly as the one-vocabulary pair, under the permutation;
- Floor runs on the speculative engine across a map (library and server alike) and follows it; the drafter
  alone's plain engine follows it in shared tokens, and a position its grammar leaves no shared token fails that
  request alone (vllm_patches/requests/plain_dead_ends.py)."""

import json
import re

import jsonschema
import pytest
from asymspec_vl.evals.toy.eval import request_of
from helpers import random_request, summary
from xfamily_models import write_other_vocabulary

from asymspec_vl import AsymSpecConfig, AsymSpecVL
from asymspec_vl.backends.vllm.engine import generate
from asymspec_vl.inputs.conversation import encode
from asymspec_vl.toy import world

pytestmark = pytest.mark.vllm

SCHEMA = {
    "type": "object",
    "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99}},
    "required": ["n"],
    "additionalProperties": False,
}
# a grammar with spaces ("▁" is a space to xgrammar: test_xgrammar_reads_...), and a JSON-shaped regex (a JSON
# schema's whitespace the toy fills with "\n" up to max_new_tokens)
SPACED = "The answer is [0-9]{1,3}"
CONSTRAINTS = {
    "regex": {"regex": "[0-9]+"},
    "choice": {"choice": ["12", "7", "yes", "no"]},
    "json": {"regex": '\\{"n":[0-9]{1,2}\\}'},
    "spaced": {"regex": SPACED},
}
# the permuted oracle's pair (byte-level tokenizers) answers a JSON schema itself
SCHEMA_CONSTRAINTS = {
    **{k: c for k, c in CONSTRAINTS.items() if k != "spaced"},
    "json": {"json": SCHEMA},
}
NO_WHITESPACE = {"backend": "xgrammar", "disable_any_whitespace": True}


def follows(kind: str, text: str) -> bool:
    """The answer follows the constraint (a regex answer may be cut by max_new_tokens: [0-9]+ holds for its
    prefixes)."""
    if kind == "regex":
        return re.fullmatch(CONSTRAINTS["regex"]["regex"], text) is not None
    if kind == "choice":
        return text in CONSTRAINTS["choice"]["choice"]
    if kind == "spaced":
        return re.fullmatch(SPACED, text) is not None
    jsonschema.validate(json.loads(text), SCHEMA)
    return True


def test_xgrammar_reads_the_embedded_llama_verifiers_space_mark_as_a_space():
    """The toy Llama tokenizer's decoder is Llama-2's (Replace "▁" -> " ", ByteFallback, Fuse; no Strip), which
    xgrammar (vLLM's structured outputs) types BYTE_FALLBACK: after "The" the regex allows "▁answer". A bare
    Replace decoder was typed RAW ("▁answer" the literal string): no token allowed there."""
    import xgrammar as xgr
    from transformers import AutoTokenizer

    from asymspec_vl.toy import pair_paths

    tok = AutoTokenizer.from_pretrained(pair_paths("llama")["verifier"])
    info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=len(tok))
    assert (info.vocab_type, info.add_prefix_space) == (
        xgr.VocabType.BYTE_FALLBACK,
        False,  # "The" at the start is "The", not "▁The"
    )
    matcher = xgr.GrammarMatcher(xgr.GrammarCompiler(info).compile_regex(SPACED))
    ids = tok("The answer is 126", add_special_tokens=False)["input_ids"]
    assert tok.convert_ids_to_tokens(ids[:4]) == ["The", "▁answer", "▁is", "▁"]
    assert matcher.accept_token(ids[0])
    bitmask = xgr.allocate_token_bitmask(1, len(tok))  # [1, ceil(V / 32)] int32
    matcher.fill_next_token_bitmask(bitmask)
    words = bitmask[0].tolist()
    allowed = [i for i in range(len(tok)) if (words[i // 32] >> (i % 32)) & 1]
    assert ids[1] in allowed
    assert all(
        " answer is ".startswith(tok.decode([i])) for i in allowed
    )  # prefixes of the rest
    for i in ids[1:]:
        assert matcher.accept_token(i), tok.convert_ids_to_tokens(i)
    assert matcher.accept_token(tok.eos_token_id) and matcher.is_terminated()


@pytest.fixture(scope="class")
def llama():
    vl = AsymSpecVL.from_pretrained(
        verifier="embedded-llama", backend="vllm", block_size=16
    )
    yield vl
    vl.backend.close()


class TestEmbeddedLlama:  # a class: its engine is closed before the next class starts its two
    @pytest.mark.parametrize(
        "method, changes",
        [
            ("asymspec", {}),
            ("sd", {}),
            ("scd", {}),
            ("asymspec", {"temperature": 1.5, "seed": 7}),
        ],
    )
    def test_embedded_llama_answers_follow_the_grammar_in_shared_tokens(
        self, llama, method, changes
    ):
        reqs = [request_of(e) for e in world.heldout(6)]
        shared = set(llama.pair.vmap.verifier_ids.tolist())
        for kind, constraint in CONSTRAINTS.items():
            cfg = {
                "K": 2,
                # SPACED's "The" opens no toy answer (they begin with a digit): the toy spells it piece by
                # piece ("T", "he", "▁", "an", "s", "w", "er", ...), up to 17 tokens with the end of turn
                "max_new_tokens": 32 if kind == "spaced" else 16,
                "structured_output": constraint,
                **changes,
            }
            for r in llama.generate_batch(reqs, method, cfg):
                assert r.finish_reason == "stop" or kind == "regex", (
                    kind,
                    r.text,
                    r.error,
                )
                assert r.finish_reason in ("stop", "length"), (kind, r.text, r.error)
                assert follows(kind, r.text), (kind, r.text)
                assert set(r.token_ids) <= shared

    @pytest.mark.parametrize("speculative", [False, True])
    def test_floor_on_the_speculative_engine_follows_it(self, llama, speculative):
        """Floor across a map runs in mode "floor" on the speculative engine (the same rules, no drafts), for the
        library as for a server."""
        backend, pair = llama.backend, llama.pair
        cfg = AsymSpecConfig(
            K=2, max_new_tokens=16, structured_output=CONSTRAINTS["json"]
        )
        plan = backend.plan_request("floor", cfg, speculative=speculative)
        assert plan.mode == "floor"
        reqs = [request_of(e) for e in world.heldout(4)]
        encoded = [
            encode(r, pair.processor, pair.tokenizer, pair.cross_map) for r in reqs
        ]
        shared = set(pair.vmap.verifier_ids.tolist())
        for row in backend.run(encoded, plan):
            text = pair.tokenizer.decode(row.token_ids, skip_special_tokens=True)
            assert row.finish_reason == "stop" and follows("json", text), (
                text,
                row.error,
            )
            assert set(row.token_ids) <= shared

    def test_the_drafter_alone_follows_it_in_shared_tokens(self, llama):
        """The drafter alone's plain engine: the grammar compiled for the drafter's tokenizer, its allowed_token_ids
        mask banning the unshared drafter ids, its answer in verifier ids (drafter_answer.py)."""
        reqs = [request_of(e) for e in world.heldout(4)]
        shared = set(llama.pair.vmap.verifier_ids.tolist())
        for kind, constraint in CONSTRAINTS.items():
            cfg = {"max_new_tokens": 16, "structured_output": constraint}
            for r in llama.generate_batch(reqs, "drafter", cfg):
                assert r.finish_reason in ("stop", "length"), (kind, r.text, r.error)
                assert follows(kind, r.text), (kind, r.text)
                assert set(r.token_ids) <= shared

    def test_the_drafter_alones_dead_end_fails_alone(self, llama):
        """A tab is a drafter token outside the shared set (and no other drafter token spells it): after its
        digit, `[0-9]\t` allows nothing the drafter alone may commit. That request ends alone with a
        GrammarDeadEndError, its digit kept; the other row of the batch gives its run alone."""
        reqs = [request_of(e) for e in world.heldout(2)]
        digits = {"max_new_tokens": 8, "structured_output": CONSTRAINTS["regex"]}
        tab = {"max_new_tokens": 8, "structured_output": {"regex": "[0-9]\t"}}
        alone = llama.generate_batch(reqs[1:], "drafter", digits)[0]
        held, other = mixed_drafter_batch(llama, reqs, [tab, digits])
        assert held.finish_reason == "error" and "GrammarDeadEndError" in held.error
        assert "at output position 1 " in held.error, held.error
        assert len(held.token_ids) == 1 and set(held.token_ids) <= set(
            llama.pair.vmap.verifier_ids.tolist()
        )
        assert re.fullmatch("[0-9]", llama.pair.tokenizer.decode(held.token_ids))
        assert (other.token_ids, other.finish_reason) == (
            alone.token_ids,
            alone.finish_reason,
        )
        later = llama.generate_batch(reqs, "drafter", digits)
        assert all(follows("regex", r.text) and not r.error for r in later)


def mixed_drafter_batch(vl, reqs, cfgs):
    """One batch of the drafter alone's plain engine, each request with its own config: the backend's rows (in
    verifier ids)."""
    backend, pair = vl.backend, vl.pair
    plans = [backend.plan_request("drafter", AsymSpecConfig(**cfg)) for cfg in cfgs]
    encoded = [encode(r, pair.processor, pair.tokenizer, pair.cross_map) for r in reqs]
    prompts, params = zip(
        *(backend.engine_request(e, p) for e, p in zip(encoded, plans))
    )
    finals = generate(backend.engine(plans[0].engine), list(prompts), list(params))
    return [backend.row(o, p, 0.0, pair.vmap) for o, p in zip(finals, plans)]


@pytest.fixture(scope="class")
def one_and_permuted(tiny_models, tmp_path_factory):
    folder, new_of = write_other_vocabulary(
        tiny_models["verifier"], tmp_path_factory.mktemp("perm-grammar"), seed=5
    )
    pipes = [
        AsymSpecVL.from_pretrained(
            drafter=str(tiny_models["vl_drafter"]),
            verifier=str(verifier),
            backend="vllm",
            block_size=16,
            structured_outputs_config=NO_WHITESPACE,
        )
        for verifier in (tiny_models["verifier"], folder)
    ]
    yield *pipes, new_of
    for vl in pipes:
        vl.backend.close()


class TestPermutedVerifier:
    @pytest.mark.parametrize("method", ["asymspec", "sd", "scd"])
    def test_permuted_verifier_under_a_grammar_answers_as_one_vocabulary(
        self, one_and_permuted, method
    ):
        one, permuted, new_of = one_and_permuted
        assert one.pair.vmap.identity and not permuted.pair.vmap.identity
        reqs = [random_request(s) for s in range(4)]
        for constraint in SCHEMA_CONSTRAINTS.values():
            cfg = {"K": 2, "gamma": 0.02, "max_new_tokens": 12}
            cfg["structured_output"] = constraint
            expected = one.generate_batch(reqs, method, cfg)
            got = permuted.generate_batch(reqs, method, cfg)
            assert all(r.finish_reason in ("stop", "length") for r in expected)
            assert [(r.text, r.finish_reason) for r in got] == [
                (r.text, r.finish_reason) for r in expected
            ]
            assert [[new_of[i] for i in r.token_ids] for r in expected] == [
                r.token_ids for r in got
            ]
            assert [s[1:] for s in summary(got)] == [s[1:] for s in summary(expected)]
