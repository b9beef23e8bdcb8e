"""Speculative method "asymspec": accepted by SpeculativeConfig and treated as a draft-model method.

vLLM validates `method` against a Literal, so "asymspec" is built as "draft_model" (the draft ModelConfig,
parallel config and max_model_len come out exactly as for a draft model) and then renamed. The drafter's
proposals are consumed after the runner's bookkeeping (disable_padded_drafter_batch), where the committed
tokens are plain lists; async scheduling stays off (vLLM allows it for EAGLE/draft_model only).
"""

from __future__ import annotations

from ._patching import wrap

METHOD = "asymspec"


def is_asymspec(vllm_config) -> bool:
    spec = getattr(vllm_config, "speculative_config", None)
    return spec is not None and spec.method == METHOD


def patch_speculative_config() -> None:
    from vllm.config.speculative import SpeculativeConfig

    def make_init(orig):
        def __init__(self, *args, **kwargs):
            if kwargs.get("method") != METHOD:
                return orig(self, *args, **kwargs)
            orig(self, *args, **{**kwargs, "method": "draft_model", "disable_padded_drafter_batch": True})
            self.method = METHOD
            _check(self)
        return __init__

    def make_uses_draft_model(orig):
        def uses_draft_model(self) -> bool:
            return self.method == METHOD or orig(self)
        return uses_draft_model

    wrap(SpeculativeConfig, "__init__", make_init)
    wrap(SpeculativeConfig, "uses_draft_model", make_uses_draft_model)


def _check(spec) -> None:
    target, draft = spec.target_model_config, spec.draft_model_config
    if target is None or draft is None:
        return
    if target.is_multimodal_model:
        raise ValueError(f"speculative method {METHOD!r}: the target (verifier) must be a text-only model; "
                         f"{target.model} is multimodal. The drafter reads the images.")
    if target.get_vocab_size() != draft.get_vocab_size():
        raise ValueError(f"speculative method {METHOD!r}: the verifier ({target.get_vocab_size()} logits) and "
                         f"the drafter ({draft.get_vocab_size()} logits) must share one vocabulary: "
                         "delta-fusion adds drafter logits to verifier logits token by token.")
