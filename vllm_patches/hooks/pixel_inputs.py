"""Qwen-VL images as the transformers processor's tensors: multi_modal_data {"image": {"pixel_values",
"image_grid_thw"}} enters a plain engine (the drafter alone's) as it is, and the engine's own vision tower turns it
into embeddings on the worker, inside the prefill. vLLM's parser takes a dict of tensors only as
{"image_embeds", "image_grid_thw"} (Qwen2VLMultiModalDataParser._parse_image_data, which Qwen3-VL uses): the
embeddings would be made by an RPC and carried through the client and back into the engine. This parser reads a
dict holding pixel_values the same way, with vLLM's own field layout (_create_qwen2vl_field_factory: pixel_values
flat by grid patches), so the model's `embed_multimodal(pixel_values=..., image_grid_thw=...)` runs in the engine
(vLLM's processor is still bypassed: the pixels are exactly the transformers processor's)."""

from __future__ import annotations

from ._patching import install

FIELDS = {
    "pixel_values",
    "image_grid_thw",
}  # [num_patches, C*T*P*P] float, [num_images, 3] int


def parse_image_data(orig, parser, data):
    """vLLM's parse of one request's images; a dict holding pixel_values -> vLLM's dict items over those fields."""
    if not (isinstance(data, dict) and "pixel_values" in data):
        return orig(parser, data)
    from vllm.model_executor.models.qwen2_vl import (  # lazy: loads vLLM
        _create_qwen2vl_field_factory,
    )
    from vllm.multimodal.parse import DictEmbeddingItems  # lazy: loads vLLM

    return DictEmbeddingItems(
        data,
        modality="image",
        required_fields=FIELDS,
        fields_factory=_create_qwen2vl_field_factory(parser._spatial_merge_size),
    )


def patch_pixel_inputs() -> None:
    from vllm.model_executor.models.qwen2_vl import (  # lazy: loads vLLM
        Qwen2VLMultiModalDataParser,
    )

    install(Qwen2VLMultiModalDataParser, "_parse_image_data", parse_image_data)
