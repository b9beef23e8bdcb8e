"""Loading transformers models by hub id or local path onto a device in a dtype (the backends, the VLM captioner
and the LLM answer extractor share it), and a model's context length."""

from __future__ import annotations

import torch


def resolve_device_dtype(
    device: str | None, dtype: str | torch.dtype
) -> tuple[torch.device, torch.dtype]:
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if dtype == "auto":
        return dev, torch.bfloat16 if dev.type == "cuda" else torch.float32
    return dev, getattr(torch, dtype) if isinstance(dtype, str) else dtype


def load_causal_lm(
    path: str, device: torch.device, dtype: torch.dtype, trust_remote_code: bool = False
):
    """Qwen3-VL checkpoints load as Qwen3VLForConditionalGeneration, any other as AutoModelForCausalLM."""
    from transformers import (
        AutoConfig,
        AutoModelForCausalLM,
        AutoModelForImageTextToText,
    )  # lazy: loads transformers

    config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    auto = (
        AutoModelForImageTextToText
        if hasattr(config, "vision_config")
        else AutoModelForCausalLM
    )
    model = auto.from_pretrained(path, dtype=dtype, trust_remote_code=trust_remote_code)
    return model.to(device).eval()


def context_length(model) -> int:
    cfg = getattr(model.config, "text_config", model.config)
    return int(cfg.max_position_embeddings)
