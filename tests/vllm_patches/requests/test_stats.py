"""vllm_patches.requests.stats: a request's counters and token labels, step by step."""

from asymspec_vl.core import trace as T
from vllm_patches.requests.stats import EngineStats


def test_labels_are_cut_with_the_tokens_at_a_stop():
    """A step commits 3 tokens (2 accepted drafts + the bonus) but a stop token at the first cuts the output to
    1: one label, the first draft's."""
    stats = EngineStats(K=2, mode="asymspec")
    stats.record(num_drafts=2, num_generated=3, num_emitted=1)
    assert len(stats.sources) == 1 == stats.stats.emitted
    assert stats.sources == T.step_sources(T.LABELS["asymspec"], 2, 2)[:1]
    stats.record(num_drafts=0, num_generated=1, num_emitted=1)
    assert stats.sources[1:] == [T.VERIFIER] and stats.to_dict()["emitted"] == 2
