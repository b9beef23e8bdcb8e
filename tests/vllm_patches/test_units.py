"""vLLM path, no engine: M-RoPE positions (patch 3) against vLLM's and transformers' own functions, the
extra_args validation, the version guard and the patch switches."""

import types

import numpy as np
import pytest
import torch
from PIL import Image

pytestmark = pytest.mark.vllm

SIZES = [(32, 32), (48, 128), (128, 64), (90, 50), (128, 128), (33, 77)]
TEMPLATES = {  # text before the image, after it, around it, two images
    "before": "describe this please {img}",
    "after": "{img} what is the value of the largest bar?",
    "around": "first some text {img} and then a question about it?",
    "two": "compare {img} with {img} now",
}
PAD = "<|vision_start|><|image_pad|><|vision_end|>"


@pytest.fixture(scope="module")
def vl_parts(tiny_models):
    from transformers import AutoModelForImageTextToText, AutoProcessor
    from vllm.config import ModelConfig
    from vllm.multimodal import MULTIMODAL_REGISTRY

    path = str(tiny_models["vl_drafter"])
    hf = AutoModelForImageTextToText.from_pretrained(path, dtype=torch.float32).eval()
    mc = ModelConfig(
        model=path, dtype="float32", limit_mm_per_prompt={"image": 2, "video": 0}
    )
    return types.SimpleNamespace(
        hf=hf,
        processor=AutoProcessor.from_pretrained(path),
        config=mc.hf_config,
        vllm_processor=MULTIMODAL_REGISTRY.create_processor(mc),
    )


def _image(seed, size):
    h, w = size
    return Image.fromarray(
        (np.random.RandomState(seed).rand(h, w, 3) * 255).astype("uint8")
    )


@pytest.mark.parametrize("template", sorted(TEMPLATES))
@pytest.mark.parametrize("size", SIZES)
def test_mrope_positions_bit_identical_to_vllm_and_transformers(
    vl_parts, template, size
):
    from vllm.model_executor.layers.rotary_embedding import MRotaryEmbedding
    from vllm.model_executor.models.qwen3_vl import Qwen3VLForConditionalGeneration as V
    from vllm.multimodal.inputs import MultiModalFeatureSpec

    from vllm_patches.requests.mrope import generated_positions, prompt_positions

    n_img = TEMPLATES[template].count("{img}")
    images = [_image(i, size if i == 0 else size[::-1]) for i in range(n_img)]
    text = TEMPLATES[template].format(img=PAD)
    enc = vl_parts.processor(text=[text], images=images, return_tensors="pt")
    ids, grid = enc["input_ids"][0].tolist(), enc["image_grid_thw"]
    cfg = vl_parts.config

    # ours: features built from x_full's image_pad runs, positions by the drafter model's method
    drafter = types.SimpleNamespace(
        get_mrope_input_positions=lambda toks, feats: V._get_mrope_input_positions(
            input_tokens=toks, mm_features=feats, config=cfg
        )
    )
    ours, delta = prompt_positions(
        drafter, ids, grid, cfg.image_token_id, uses_mrope=True
    )

    # vLLM's own multimodal processor and position function (as its runner does for a multimodal target)
    out = vl_parts.vllm_processor(
        text, vl_parts.vllm_processor.data_parser.parse_mm_data({"image": images})
    )
    assert out["prompt_token_ids"] == ids
    feats = [
        MultiModalFeatureSpec(
            data=item, modality="image", identifier=str(i), mm_position=pos
        )
        for i, (item, pos) in enumerate(
            zip(out["mm_kwargs"]["image"], out["mm_placeholders"]["image"])
        )
    ]
    official, official_delta = V._get_mrope_input_positions(
        input_tokens=ids, mm_features=feats, config=cfg
    )

    # transformers
    t_ids = torch.tensor([ids])
    hf_pos, hf_delta = vl_parts.hf.model.get_rope_index(
        t_ids, grid, None, torch.ones_like(t_ids)
    )

    assert ours.dtype == torch.int64 and ours.shape == (3, len(ids))
    assert torch.equal(ours, official.to(torch.int64)) and delta == official_delta
    assert torch.equal(ours, hf_pos[:, 0].to(torch.int64)) and delta == int(hf_delta)
    if int(grid[:, 1:].prod(-1).max()) > 4:  # more than one merged image token
        assert not torch.equal(ours[1], ours[2])  # the image really spreads over h/w
    # decode positions of the drafted tokens: vLLM's rule and transformers' (cache_position + delta)
    P = len(ids)
    expected = torch.tensor(MRotaryEmbedding.get_next_input_positions(delta, P, P + 5))
    assert torch.equal(generated_positions(P, 5, delta, uses_mrope=True), expected)
    assert torch.equal(expected[0], torch.arange(P, P + 5) + int(hf_delta))


def test_text_drafter_positions_are_1d():
    from vllm_patches.requests.mrope import prompt_positions, view_positions

    pos, delta = prompt_positions(None, [5, 6, 7], None, None, uses_mrope=False)
    assert pos.tolist() == [0, 1, 2] and delta == 0
    assert view_positions(pos, 0, 2, 3, uses_mrope=False).tolist() == [2, 3, 4]


# -- extra_args validation -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def facts():
    from vllm_patches.requests.request_args import EngineFacts

    return EngineFacts(
        K=2,
        vocab_size=100,
        max_model_len=64,
        image_token_id=7,
        patch_dim=12,
        merge_size=2,
    )


def _args(**over):
    base = {
        "mode": "asymspec",
        "config": {"beta": 1.0},
        "x_full": [1, 2, 7, 7, 3],
        "pixel_values": torch.zeros(8, 12),
        "image_grid_thw": torch.tensor([[1, 2, 4]]),
    }
    base.update(over)
    return {"asymspec": {k: v for k, v in base.items() if v is not None}}


def test_valid_args_parse(facts):
    from vllm_patches.requests.request_args import parse_request_args

    a = parse_request_args(_args(), facts)
    assert (
        a.method.name == "asymspec"
        and a.cfg.K == 2
        and a.K == 2
        and a.x_full == [1, 2, 7, 7, 3]
    )
    assert a.pixel_values.shape == (8, 12) and a.image_grid_thw.tolist() == [[1, 2, 4]]


@pytest.mark.parametrize(
    "over, error, words",
    [
        (
            {"pixel_values": torch.zeros(8, 5)},
            "InvalidImageError",
            "pixel_values must be float",
        ),
        (
            {"pixel_values": torch.full((8, 12), float("nan"))},
            "InvalidImageError",
            "NaN",
        ),
        (
            {"image_grid_thw": torch.tensor([[1, 2, 2]])},
            "InvalidImageError",
            "covers 4 patches",
        ),
        (
            {"image_grid_thw": torch.tensor([[1, 3, 4]])},
            "InvalidImageError",
            "not a grid",
        ),
        ({"x_full": [1, 7, 3, 7, 3]}, "InvalidImageError", "runs [1, 1]"),
        (
            {
                "x_full": [1, 2, 3],
                "pixel_values": None,
                "image_grid_thw": None,
                "mode": "sd",
            },
            None,
            None,
        ),
        ({"x_full": [1, 7, 7]}, None, None),
        ({"pixel_values": None}, "RequestArgsError", "together"),
        ({"x_full": None}, "RequestArgsError", "x_full"),
        ({"x_full": [1, 2, 500]}, "RequestArgsError", "outside [0, 100)"),
        ({"x_full": list(range(64))}, "PromptTooLongError", "max_model_len"),
        ({"mode": "fast"}, "RequestArgsError", "mode"),
        ({"config": {"K": 3}}, "ConfigError", "num_speculative_tokens=2"),
        ({"config": {"gamma": 2.0}}, "ConfigError", "gamma"),
        ({"config": {"speed": 1}}, "ConfigError", "unknown"),
        ({"banned": ["a"]}, "RequestArgsError", "banned"),
    ],
)
def test_bad_args_raise_typed_errors(facts, over, error, words):
    from vllm_patches.requests.request_args import parse_request_args

    if error is None:
        parse_request_args(_args(**over), facts)
        return
    with pytest.raises(Exception) as e:
        parse_request_args(_args(**over), facts)
    assert type(e.value).__name__ == error and words in str(e.value)
    from asymspec_vl.core.errors import AsymSpecError

    assert isinstance(e.value, AsymSpecError)


def test_args_must_be_a_dict(facts):
    from vllm_patches.requests.request_args import RequestArgsError, parse_request_args

    with pytest.raises(RequestArgsError, match="must be a dict"):
        parse_request_args({"asymspec": [1, 2]}, facts)
    with pytest.raises(RequestArgsError, match="unknown field"):
        parse_request_args({"asymspec": {"mode": "sd", "pixels": 1}}, facts)


def test_make_extra_args_round_trips(facts):
    from asymspec_vl import AsymSpecConfig
    from vllm_patches import make_extra_args
    from vllm_patches.requests.request_args import parse_request_args

    cfg = AsymSpecConfig(
        K=2, beta=0.5, gamma=0.3, gate="fixed", bonus="fused", max_new_tokens=9
    )
    args = parse_request_args(
        make_extra_args(
            "asymspec",
            cfg,
            [1, 7, 7],
            torch.ones(8, 12),
            torch.tensor([[1, 2, 4]]),
            banned=[3, 1],
        ),
        facts,
    )
    assert args.cfg == cfg.replace(
        max_new_tokens=AsymSpecConfig().max_new_tokens
    ) and args.banned == (1, 3)


# -- version guard, idempotence, switches ---------------------------------------------------------
def test_unsupported_vllm_version_is_refused(monkeypatch, caplog):
    import vllm

    import vllm_patches
    from vllm_patches.version import check_vllm_version

    assert check_vllm_version("0.19.1+cu129") == "0.19.1+cu129"
    monkeypatch.setattr(vllm, "__version__", "0.20.0")
    with pytest.raises(vllm_patches.UnsupportedVLLMVersionError) as e:
        vllm_patches.apply()
    assert (
        "0.19.0" in str(e.value)
        and "0.19.1" in str(e.value)
        and "0.20.0" in str(e.value)
    )
    vllm_patches.register()  # in every vLLM process: warns, never breaks vLLM itself
    assert "not available" in caplog.text


def test_apply_is_idempotent_and_leaves_other_methods_alone():
    from vllm.config.speculative import SpeculativeConfig
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    import vllm_patches

    vllm_patches.apply()
    before = (
        SpeculativeConfig.__init__,
        GPUModelRunner._sample,
        GPUModelRunner.propose_draft_token_ids,
    )
    vllm_patches.apply()
    from vllm_patches.hooks._patching import wrap

    wrap(
        GPUModelRunner, "_sample", lambda orig: lambda *a: None
    )  # already patched: no second layer
    assert (
        SpeculativeConfig.__init__,
        GPUModelRunner._sample,
        GPUModelRunner.propose_draft_token_ids,
    ) == before
    assert vllm_patches.is_applied()


def test_switches():
    from vllm_patches import switches

    assert switches.enabled("mm_embeds") and switches.enabled("no_length_gate")
    with switches.disabled("mm_embeds"):
        assert not switches.enabled("mm_embeds") and switches.enabled("no_length_gate")
    assert switches.enabled("mm_embeds")
    with pytest.raises(KeyError):
        switches.enabled("nope")


def test_server_json_form_round_trips(facts):
    """Through the OpenAI server, vllm_xargs values are flat: the args travel as one JSON string."""
    import json

    from asymspec_vl import AsymSpecConfig
    from vllm_patches.requests.request_args import (
        RequestArgsError,
        make_extra_args,
        parse_request_args,
        serve_xargs,
    )

    pixels = torch.randn(8, 12)
    xargs = serve_xargs(
        make_extra_args(
            "asymspec",
            AsymSpecConfig(K=2),
            [1, 7, 7],
            pixels,
            torch.tensor([[1, 2, 4]]),
        )
    )
    assert (
        isinstance(xargs["asymspec"], str)
        and json.loads(xargs["asymspec"])["mode"] == "asymspec"
    )
    args = parse_request_args(xargs, facts)
    assert torch.equal(args.pixel_values, pixels) and args.image_grid_thw.tolist() == [
        [1, 2, 4]
    ]
    assert args.method.name == "asymspec"
    with pytest.raises(RequestArgsError, match="not JSON"):
        parse_request_args({"asymspec": "{"}, facts)


def test_sized_benchmark_models_have_the_published_shapes(tmp_path):
    from asymspec_vl.evals.benchmarks.bench_vllm import VOCAB, write_sized_models
    from transformers import AutoConfig

    paths = write_sized_models(tmp_path, "32b", "2b")
    v, d = (
        AutoConfig.from_pretrained(paths["verifier"]),
        AutoConfig.from_pretrained(paths["drafter"]),
    )
    assert (
        v.hidden_size,
        v.num_hidden_layers,
        v.num_attention_heads,
        v.num_key_value_heads,
    ) == (5120, 64, 64, 8)
    t = d.text_config
    assert (
        t.hidden_size,
        t.num_hidden_layers,
        t.num_key_value_heads,
        t.vocab_size,
    ) == (2048, 28, 8, VOCAB)
    assert (
        d.vision_config.deepstack_visual_indexes == [5, 11, 17]
        and d.vision_config.out_hidden_size == 2048
    )
    assert v.vocab_size == VOCAB and not list(
        paths["verifier"].glob("*.safetensors")
    )  # weights: dummy loader
