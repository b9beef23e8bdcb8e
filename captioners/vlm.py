"""A captioner that asks a local vision-language model (by default the drafter itself) to describe the image."""

from __future__ import annotations

import hashlib

import torch

from asymspec_vl.core.errors import InvalidImageError
from asymspec_vl.inputs.images import load_image
from asymspec_vl.inputs.vocab import STRUCTURAL_TOKENS
from asymspec_vl.pair.defaults import resolve
from asymspec_vl.pair.model_names import check_captioning_model
from asymspec_vl.pair.models import load_causal_lm, resolve_device_dtype

from .base import CaptionerError, ImageText

DEFAULT_PROMPT = (
    "Describe this image in detail for someone who cannot see it: what it shows, and every number, "
    "label, axis, legend and piece of text in it."
)


class VLMCaptioner:
    """Greedy caption from a transformers vision-language model (e.g. Qwen3-VL) given image + prompt.

    model: hub id, local path or "embedded" (the offline default drafter); its config is checked at once,
    its weights load on the first describe() (a cache hit never loads them). Or build it around models
    already in memory with VLMCaptioner.from_pipeline(vl) (reuses the pipeline's drafter, no second copy).
    """

    def __init__(
        self,
        model: str = "embedded",
        device: str | None = None,
        dtype="auto",
        max_new_tokens: int = 256,
        prompt: str = DEFAULT_PROMPT,
        trust_remote_code: bool = False,
        _loaded: tuple | None = None,
    ):
        if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise CaptionerError(
                f"max_new_tokens={max_new_tokens!r} is invalid: expected an integer >= 1"
            )
        if not isinstance(prompt, str) or not prompt.strip():
            raise CaptionerError("the caption prompt is empty")
        self.max_new_tokens, self.prompt = max_new_tokens, prompt.strip()
        self._load_args = (device, dtype, trust_remote_code)
        if _loaded is not None:
            self.model_name, self._processor, self._model = _loaded
            self._path = None
        else:
            self.model_name, self._processor, self._model = str(model), None, None
            self._path = _vl_path(model, trust_remote_code)
        digest = hashlib.sha256(
            f"{self.prompt}\n{max_new_tokens}".encode()
        ).hexdigest()[:12]
        self.name = f"vlm:{self.model_name}:{digest}"

    @classmethod
    def from_pipeline(cls, vl, **kwargs) -> VLMCaptioner:
        """Reuse an AsymSpecVL pipeline's VL drafter (transformers backend) or load it again by name. The
        embedded toy drafter is refused (ConfigError): it writes toy answers, not captions."""

        check_captioning_model(
            str(vl.names["drafter"]),
            "VLMCaptioner(model=...)",
            "pass the caption text yourself",
        )
        model = getattr(vl.backend, "drafter", None)
        if isinstance(model, torch.nn.Module) and hasattr(
            model.config, "vision_config"
        ):
            return cls(
                _loaded=(str(vl.names["drafter"]), vl.pair.processor, model), **kwargs
            )
        return cls(model=str(vl.names["drafter"]), **kwargs)

    @property
    def model(self):
        if self._model is None:
            from transformers import AutoProcessor  # lazy: loads transformers

            device, dtype, trust = self._load_args
            dev, dt = resolve_device_dtype(device, dtype)
            self._processor = AutoProcessor.from_pretrained(
                self._path, trust_remote_code=trust
            )
            self._model = load_causal_lm(self._path, dev, dt, trust)
        return self._model

    @property
    def processor(self):
        self.model  # noqa: B018 - loads the processor with the model
        return self._processor

    @torch.inference_mode()
    def describe(self, image=None, key: str | None = None) -> ImageText:
        img = load_image(image)
        model, processor = self.model, self.processor
        messages = [
            {
                "role": "user",
                "content": [{"type": "image"}, {"type": "text", "text": self.prompt}],
            }
        ]
        text = processor.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )
        try:
            inputs = processor(
                text=[text], images=[img], return_tensors="pt", add_special_tokens=False
            )
        except ValueError as e:
            raise InvalidImageError(
                f"the image processor refused the image: {e}"
            ) from e
        inputs = {k: v.to(model.device) for k, v in inputs.items()}
        if "pixel_values" in inputs:
            inputs["pixel_values"] = inputs["pixel_values"].to(model.dtype)
        vocab = getattr(processor, "tokenizer", processor).get_vocab()
        # structural vision tokens must never be generated: the next forward would expect image features
        suppress = [vocab[t] for t in STRUCTURAL_TOKENS if t in vocab] or None
        out = model.generate(
            **inputs,
            max_new_tokens=self.max_new_tokens,
            do_sample=False,
            suppress_tokens=suppress,
            top_p=None,
            top_k=None,
            temperature=None,
        )  # [1, prompt + new]
        new = out[0, inputs["input_ids"].shape[1] :]
        caption = processor.batch_decode([new], skip_special_tokens=True)[0].strip()
        return ImageText(caption=caption, source=self.name)


def _vl_path(model: str, trust_remote_code: bool) -> str:
    """The local path or hub id of `model` ("embedded" resolved), after checking it is vision-language."""
    from transformers import AutoConfig  # lazy: loads transformers

    path = resolve("drafter", model)
    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as e:
        raise CaptionerError(f"cannot load the captioning model {model!r}: {e}") from e
    if not hasattr(config, "vision_config"):
        raise CaptionerError(
            f"{model!r} is not a vision-language model (its config has no vision_config)"
        )
    return path
