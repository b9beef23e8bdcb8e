"""pair/models.py: a device and dtype resolved as the backends use them ("auto": bfloat16 on CUDA, float32 on the
CPU), a Qwen3-VL checkpoint loaded as an image-text model and a text one as a causal LM, in eval mode on the device,
and a model's context length read from its text config."""

import torch

from asymspec_vl.pair.models import context_length, load_causal_lm, resolve_device_dtype


def test_the_device_and_dtype_resolve_as_the_backends_take_them():
    assert resolve_device_dtype("cpu", "auto") == (torch.device("cpu"), torch.float32)
    assert resolve_device_dtype("cpu", "bfloat16") == (
        torch.device("cpu"),
        torch.bfloat16,
    )
    assert resolve_device_dtype("cpu", torch.float16) == (
        torch.device("cpu"),
        torch.float16,
    )
    assert resolve_device_dtype("cuda:1", "auto") == (
        torch.device("cuda:1"),
        torch.bfloat16,
    )
    if not torch.cuda.is_available():
        assert resolve_device_dtype(None, "auto")[0] == torch.device("cpu")


def test_each_checkpoint_loads_as_its_kind_with_its_context(tiny_models):
    vl = load_causal_lm(
        str(tiny_models["vl_drafter"]), torch.device("cpu"), torch.float32
    )
    lm = load_causal_lm(
        str(tiny_models["verifier"]), torch.device("cpu"), torch.bfloat16
    )
    assert type(vl).__name__ == "Qwen3VLForConditionalGeneration" and not vl.training
    assert (
        type(lm).__name__ == "Qwen3ForCausalLM"
        and next(lm.parameters()).dtype == torch.bfloat16
    )
    assert context_length(vl) == vl.config.text_config.max_position_embeddings
    assert context_length(lm) == lm.config.max_position_embeddings
