"""The vLLM backend's labels while a request streams: one step per token for a mode without drafts, K + 1 at most
per step for a speculative one (no engine needed)."""

from asymspec_vl.backends.vllm.vllm_backend import StreamedStats
from asymspec_vl.core import trace as T
from asymspec_vl.core.methods import METHODS


def test_floor_on_the_speculative_engine_streams_one_verifier_token_per_step():
    labels = StreamedStats(
        METHODS["floor"], "floor", 2, 1
    )  # the server's K stays in the config
    sources, stats = labels.step(0, 4)  # four tokens arrived at once
    assert sources == [T.VERIFIER] * 4 and (
        stats.steps,
        stats.drafted,
        stats.emitted,
    ) == (4, 0, 4)


def test_asymspec_streams_at_most_k_plus_one_tokens_a_step():
    labels = StreamedStats(METHODS["asymspec"], "asymspec", 2, 1)
    sources, stats = labels.step(0, 5)  # one full step (3 tokens) and one of 2
    assert (stats.steps, stats.drafted, stats.accepted, stats.emitted) == (2, 4, 3, 5)
    assert len(sources) == 5
