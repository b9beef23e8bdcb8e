"""vllm_patches.hooks.config_patch and the proposer's set-up on stand-in configs: what an asymspec engine refuses."""

import types

import pytest

from vllm_patches.hooks import config_patch


def engine_config(dp: int, moe):
    return types.SimpleNamespace(
        speculative_config=types.SimpleNamespace(method="asymspec"),
        parallel_config=types.SimpleNamespace(data_parallel_size=dp, is_moe_model=moe),
    )


@pytest.mark.parametrize(
    "dp, moe, refused",
    [(1, True, False), (2, False, False), (2, True, True), (2, None, True)],
)
def test_data_parallel_with_a_moe_verifier_is_refused(dp, moe, refused):
    """DP > 1 with a MoE verifier makes every drafter pass a DP collective that the ranks run unequally often."""
    args = types.SimpleNamespace(
        speculative_config={"method": "asymspec"}, worker_extension_cls="x"
    )
    config = engine_config(dp, moe)
    if refused:
        with pytest.raises(ValueError, match="dense"):
            config_patch.create_engine_config(lambda a: config, args)
    else:
        assert config_patch.create_engine_config(lambda a: config, args) is config


def test_the_drafters_vllm_config_is_built_once(monkeypatch):
    """Built when the model loads; the attention set-up after the CUDA-graph sizes reuses it (no rebuild)."""
    from vllm.v1.spec_decode.draft_model import DraftModelProposer

    from vllm_patches.drafter.proposer import AsymSpecProposer

    built = []
    monkeypatch.setattr(
        DraftModelProposer,
        "_create_draft_vllm_config",
        lambda self: built.append(1) or object(),
    )
    proposer = AsymSpecProposer.__new__(AsymSpecProposer)
    first = proposer._create_draft_vllm_config()
    assert proposer._create_draft_vllm_config() is first and built == [1]
