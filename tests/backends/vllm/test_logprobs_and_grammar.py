"""Two small modules of the vLLM backend, without an engine: backends/vllm/logprobs.py (vLLM's per-token logprobs
-> TokenLogprob: the top list cut at the request's rank, the emitted token's own logprob kept when it ranks lower,
each token's distribution named from its source, a missing entry refused) and backends/vllm/grammar.py (xgrammar
pinned where "auto" would fall back; a constraint xgrammar cannot compile is a ConfigError naming the field)."""

import pytest
from vllm.logprobs import Logprob

from asymspec_vl.backends.vllm import grammar
from asymspec_vl.backends.vllm.sample_logprobs import MissingLogprobsError, from_vllm
from asymspec_vl.core.config import AsymSpecConfig
from asymspec_vl.core.errors import ConfigError
from asymspec_vl.core.structured import structured_output_of

CFG = AsymSpecConfig(logprobs=2)


def entry(*ranked, emitted=None):
    """{token: Logprob} of tokens in rank order (rank 1 first), plus the emitted token at a lower rank."""
    out = {tok: Logprob(-0.5 * r, rank=r) for r, tok in enumerate(ranked, 1)}
    if emitted is not None:
        out[emitted[0]] = Logprob(-9.0, rank=emitted[1])
    return out


def test_the_top_list_is_cut_at_the_requests_rank_and_the_emitted_token_keeps_its_own_logprob():
    entries = [entry(5, 6, 7), entry(8, 9, emitted=(4, 40))]
    got = from_vllm(entries, [6, 4], ["draft", "fused"], "asymspec", CFG)
    assert [(t.token_id, t.logprob) for t in got] == [(6, -1.0), (4, -9.0)]
    assert got[0].top == [(5, -0.5), (6, -1.0)]  # rank 3 (token 7) is past logprobs=2
    assert got[1].top == [
        (8, -0.5),
        (9, -1.0),
    ]  # the emitted token at rank 40 is not in the top list
    assert [t.distribution for t in got] == ["a", "fused"]


def test_each_tokens_distribution_follows_its_source_and_method():
    entries = [entry(1, 2), entry(1, 2), entry(1, 2)]
    assert [
        t.distribution
        for t in from_vllm(
            entries, [1, 2, 1], ["draft", "bonus", "verifier"], "asymspec", CFG
        )
    ] == ["a", "t", "t"]
    assert {
        t.distribution
        for t in from_vllm(entries, [1, 2, 1], ["draft", "fused", "bonus"], "sd", CFG)
    } == {"t"}


def test_a_missing_entry_is_refused_never_an_empty_list():
    with pytest.raises(MissingLogprobsError, match="1 logprobs entries for 2 tokens"):
        from_vllm([entry(1)], [1, 2], ["draft", "draft"], "asymspec", CFG)
    with pytest.raises(MissingLogprobsError, match="lacks that token"):
        from_vllm([entry(1, 2)], [3], ["draft"], "asymspec", CFG)
    assert from_vllm(None, [], [], "asymspec", CFG) == []


def test_xgrammar_is_pinned_where_auto_would_fall_back_and_an_explicit_backend_is_kept():
    from vllm.config import StructuredOutputsConfig

    assert grammar.pinned(None) == {"backend": "xgrammar"}
    assert grammar.pinned({"backend": "auto", "disable_any_whitespace": True}) == {
        "backend": "xgrammar",
        "disable_any_whitespace": True,
    }
    assert grammar.pinned({"backend": "guidance"}) == {"backend": "guidance"}
    assert grammar.pinned(StructuredOutputsConfig(backend="auto")).backend == "xgrammar"
    assert (
        grammar.pinned(StructuredOutputsConfig(backend="outlines")).backend
        == "outlines"
    )


@pytest.mark.parametrize(
    "constraint",
    [
        {
            "json": {
                "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
                "$ref": "#/$defs/a",
            }
        },
        {"regex": "(abc"},
        {"grammar": "root ::= ("},
    ],
)
def test_a_constraint_xgrammar_cannot_compile_is_a_config_error_naming_the_field(
    constraint,
):
    with pytest.raises(
        ConfigError,
        match=r"^response_format: the \w+ constraint cannot be compiled \(xgrammar",
    ):
        grammar.check_compiles(
            structured_output_of(constraint), field="response_format"
        )


def test_a_good_constraint_compiles():
    grammar.check_compiles(
        structured_output_of(
            {"json": {"type": "object", "properties": {"n": {"type": "integer"}}}}
        )
    )
    grammar.check_compiles(structured_output_of({"regex": "[0-9]+"}))
