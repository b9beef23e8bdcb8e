"""What a model needs, checked before any weight loads (asymspec_vl/pair/preflight.py): each gap is its own typed
error naming the fix. Every broken folder below holds garbage where its weights were, so an error about the gap
(not safetensors') proves the weights were never read."""

import json
import shutil
from pathlib import Path

import pytest

from asymspec_vl import AsymSpecVL
from asymspec_vl.core.errors import (
    ChatTemplateError,
    HeadSizeError,
    InputError,
    ModelFilesError,
    UnsupportedModelError,
)
from asymspec_vl.pair import preflight
from asymspec_vl.pair.defaults import embedded_models


def broken_copy(
    src: str, out: Path, drop=(), config=None, tokenizer_config=None
) -> str:
    """`src` copied to `out` without its weights (garbage in their place) and the files `drop`; `config` /
    `tokenizer_config`: functions editing those JSON files in place."""
    shutil.copytree(src, out, ignore=shutil.ignore_patterns("*.safetensors", *drop))
    (out / "model.safetensors").write_bytes(b"not a safetensors file" * 100)
    for name, edit in (
        ("config.json", config),
        ("tokenizer_config.json", tokenizer_config),
    ):
        if edit is not None:
            data = json.loads((out / name).read_text())
            edit(data)
            (out / name).write_text(json.dumps(data))
    return str(out)


def no_template(cfg: dict) -> None:
    cfg.pop("chat_template", None)


def ends_without_a_special_token(cfg: dict) -> None:
    # a template that writes the assistant's answer and a blank line: nothing special closes its turn
    cfg["chat_template"] = (
        "{%- for m in messages -%}{{- m['role'] + ': ' + m['content'] + '\\n\\n' -}}{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{- 'assistant: ' -}}{%- endif -%}"
    )


@pytest.fixture(scope="module")
def models():
    return embedded_models()


def load(drafter, verifier, backend="hf", **kwargs):
    return AsymSpecVL.from_pretrained(
        drafter=drafter, verifier=verifier, backend=backend, device="cpu", **kwargs
    )


def test_a_verifier_without_a_chat_template_is_refused_before_its_weights(
    tmp_path, models
):
    folder = broken_copy(
        models["verifier"],
        tmp_path / "v",
        drop=("chat_template.jinja",),
        tokenizer_config=no_template,
    )
    with pytest.raises(ChatTemplateError) as e:
        load(models["drafter"], folder)
    assert "verifier" in str(e.value) and folder in str(e.value)
    assert "no chat template" in str(e.value) and "\n" not in str(e.value)


def test_a_template_that_closes_no_answer_is_refused_before_the_weights(
    tmp_path, models
):
    folder = broken_copy(
        models["verifier"],
        tmp_path / "v",
        drop=("chat_template.jinja",),
        tokenizer_config=ends_without_a_special_token,
    )
    with pytest.raises(ChatTemplateError) as e:
        load(models["drafter"], folder)
    assert "closes the assistant's turn with no special token" in str(e.value)


@pytest.mark.parametrize("role", ["verifier", "verifier-llama"])
def test_the_answer_end_is_the_token_closing_the_assistant_turn(role):
    from transformers import AutoTokenizer

    path = embedded_models("embedded-llama" if role.endswith("llama") else "embedded")[
        "verifier"
    ]
    tok = AutoTokenizer.from_pretrained(path)
    want = "<|eot_id|>" if role.endswith("llama") else "<|im_end|>"
    assert tok.convert_ids_to_tokens(preflight.answer_end(tok)) == want


@pytest.mark.parametrize("which", ["verifier", "llama"])
def test_a_text_only_model_as_drafter_is_refused_before_its_weights(tmp_path, which):
    """A text-only Qwen3 (the toy verifier's folder) or a Llama folder given as the drafter: today's
    `AttributeError ... image_processor` or a vocabulary error, now the drafter's family named."""
    src = embedded_models("embedded-llama" if which == "llama" else "embedded")[
        "verifier"
    ]
    folder = broken_copy(src, tmp_path / "d")
    with pytest.raises(UnsupportedModelError) as e:
        load(folder, "embedded")
    text = str(e.value)
    assert folder in text and "text-only" in text and "Qwen3-VL" in text
    assert "images=False" in text


def test_a_vision_language_drafter_of_another_family_is_refused(tmp_path, models):
    def qwen25(cfg):
        cfg["model_type"], cfg["architectures"] = (
            "qwen2_5_vl",
            ["Qwen2_5_VLForConditionalGeneration"],
        )

    folder = broken_copy(models["drafter"], tmp_path / "d", config=qwen25)
    with pytest.raises(UnsupportedModelError) as e:
        load(folder, "embedded")
    assert "qwen2_5_vl" in str(e.value) and "docs/models.md" in str(e.value)


def test_a_drafter_without_its_image_processor_config_is_refused(tmp_path, models):
    folder = broken_copy(
        models["drafter"], tmp_path / "d", drop=("preprocessor_config.json",)
    )
    with pytest.raises(ModelFilesError) as e:
        load(folder, "embedded")
    assert "preprocessor_config.json" in str(e.value) and folder in str(e.value)


def test_a_half_copied_tokenizer_is_refused_naming_what_is_missing(tmp_path, models):
    """vocab.json without merges.txt or tokenizer.json: today 'expected str, bytes or os.PathLike object, not
    NoneType'."""
    folder = broken_copy(
        models["verifier"], tmp_path / "v", drop=("tokenizer.json", "merges.txt")
    )
    with pytest.raises(ModelFilesError) as e:
        load(models["drafter"], folder)
    text = str(e.value)
    assert "no complete tokenizer" in text and "merges.txt" in text and folder in text


def test_a_text_drafter_loads_with_images_off_and_an_image_request_is_a_typed_error(
    tiny_models,
):
    from helpers import random_image

    vl = load(
        str(tiny_models["text_drafter"]), str(tiny_models["verifier"]), images=False
    )
    with pytest.raises(InputError) as e:
        vl.generate(
            random_image(0), "What is shown?", caption="a chart", max_new_tokens=2
        )
    assert "text-only" in str(e.value) and "full_context" in str(e.value)
    r = vl.generate(
        question="What?", full_context="a b", compressed_context="a", max_new_tokens=2
    )
    assert r.finish_reason in ("stop", "length")


def test_a_text_drafters_template_is_checked_on_text_alone(tmp_path, models):
    """With images=False a text-only drafter frames text only: a template that takes string content alone (as
    many text models' do) passes; with images it is refused for the model it is."""
    from asymspec_vl.pair.model_pair import ModelPair

    def strings_only(cfg):
        cfg["chat_template"] = (
            "{%- for m in messages -%}{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + "
            "'<|im_end|>\\n' -}}{%- endfor -%}"
            "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
        )

    folder = broken_copy(
        models["verifier"],
        tmp_path / "d",
        drop=("chat_template.jinja",),
        tokenizer_config=strings_only,
    )
    pair = ModelPair.load(folder, models["verifier"], images=False)
    assert not pair.vocabulary.cross_family
    with pytest.raises(UnsupportedModelError):
        ModelPair.load(folder, models["verifier"])


@pytest.mark.parametrize(
    "config, size",
    [
        ({"head_dim": 48, "hidden_size": 64, "num_attention_heads": 2}, 48),
        ({"hidden_size_per_head": 80, "hidden_size": 64, "num_attention_heads": 2}, 80),
        ({"hidden_size": 96, "num_attention_heads": 2}, 48),
        ({"text_config": {"head_dim": 128}, "vision_config": {"hidden_size": 32}}, 128),
    ],
)
def test_head_size_is_read_as_vllm_reads_it(config, size):
    assert preflight.head_size(config) == size


def head_dim_48(cfg: dict) -> None:
    (cfg.get("text_config") or cfg)["head_dim"] = 48


@pytest.mark.vllm
@pytest.mark.parametrize("role", ["verifier", "drafter"])
def test_a_head_size_the_cpu_build_cannot_run_is_refused_before_the_engine(
    tmp_path, models, role
):
    """Today the pair reports ready and its engine dies on the first request ('Unsupported CPU attention
    configuration: head_dim=48'); vLLM's CPU build runs CPU_ATTN's sizes only."""
    folder = broken_copy(models[role], tmp_path / role, config=head_dim_48)
    names = {"drafter": models["drafter"], "verifier": models["verifier"], role: folder}
    with pytest.raises(HeadSizeError) as e:
        load(names["drafter"], names["verifier"], backend="vllm")
    text = str(e.value)
    assert folder in text and "head size 48" in text and "CPU_ATTN" in text
    assert "backend='hf'" in text
    # the transformers backend runs every head size: its preflight passes the same folders
    preflight.check_folders(names["drafter"], names["verifier"], None, "hf")


@pytest.mark.vllm
def test_the_cpu_list_is_vllms_own():
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    class CPU:
        def is_cpu(self):
            return True

    runs = preflight.attention_backends(CPU())
    assert list(runs) == ["CPU_ATTN"]
    assert runs["CPU_ATTN"].get_supported_head_sizes() == (
        CPUAttentionBackend.get_supported_head_sizes()
    )


@pytest.mark.vllm
def test_on_a_gpu_a_head_size_no_gpu_backend_takes_is_refused():
    """On CUDA vLLM 0.19 picks FLASH_ATTN (multiples of 8 up to 256), FLASHINFER (64/128/256) or TRITON_ATTN
    (32 and up): 16 runs (FLASH_ATTN), 20 none."""

    class GPU:
        def is_cpu(self):
            return False

    ok = {"verifier": ("v", {"head_dim": 16})}
    preflight.check_head_sizes(ok, platform=GPU())
    with pytest.raises(HeadSizeError) as e:
        preflight.check_head_sizes(
            {"verifier": ("v", {"head_dim": 20})}, platform=GPU()
        )
    assert "GPU" in str(e.value) and "TRITON_ATTN" in str(e.value)


def test_the_embedded_pairs_pass_the_preflight(models):
    for name in ("embedded", "embedded-llama"):
        m = embedded_models(name)
        preflight.check_folders(m["drafter"], m["verifier"], None, "hf")


@pytest.mark.parametrize(
    "family, end",
    [
        ("qwen3", "<|im_end|>"),
        ("llama3", "<|eot_id|>"),
        ("mistral-tekken", "</s>"),
        ("mistral-sp", "</s>"),
    ],
)
def test_each_real_familys_template_frames_a_message_and_ends_its_answer(
    real_shapes, models, family, end
):
    from transformers import AutoProcessor

    tok = real_shapes.tokenizer(family)
    processor = AutoProcessor.from_pretrained(models["drafter"])
    preflight.check_tokenizers(processor, tok, models["drafter"], family)
    assert tok.convert_ids_to_tokens(preflight.answer_end(tok, family)) == end


def test_generate_and_the_demo_get_the_preflights_error_in_one_line(
    tmp_path, models, capsys
):
    from helpers import random_image
    from serve_support import free_port

    from asymspec_vl.cli import main

    folder = broken_copy(
        models["verifier"],
        tmp_path / "v",
        drop=("chat_template.jinja",),
        tokenizer_config=no_template,
    )
    image = tmp_path / "img.png"
    random_image(0).save(image)
    pair = ["--drafter", "embedded", "--verifier", folder, "--device", "cpu"]
    for argv in (
        ["generate", "--image", str(image), "--question", "What?", *pair],
        ["demo", "--ocr", "none", "--port", str(free_port()), *pair],
    ):
        assert main(argv) == 2, argv[0]
        err = capsys.readouterr().err
        assert "no chat template" in err and folder in err, argv[0]
        assert "Traceback" not in err, argv[0]


@pytest.mark.vllm
def test_serve_on_vllm_refuses_the_head_size_before_starting_its_engines(
    tmp_path, models
):
    import asyncio

    from asymspec_vl.serve.settings import ServeSettings
    from asymspec_vl.serve.vllm_runner import VLLMRunner

    folder = broken_copy(models["verifier"], tmp_path / "v", config=head_dim_48)
    settings = ServeSettings(models["drafter"], folder, backend="vllm")
    with pytest.raises(HeadSizeError, match="head size 48"):
        VLLMRunner.load(settings, asyncio.new_event_loop())
