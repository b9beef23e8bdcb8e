"""What a drafter and a verifier must have, checked from their folders before any weight loads (docs/models.md):
each gap is one typed error naming the fix, instead of a traceback after both models loaded.

check_folders reads config.json and the file names (before the tokenizers load): the drafter is Qwen3-VL with its
image processor, every model has a complete tokenizer, and on vLLM every model's head size is one the platform's
attention runs. check_tokenizers reads the loaded tokenizers (still before the weights): each chat template frames
a user message, and the verifier's closes an assistant turn with a special token (its answer end)."""

from __future__ import annotations

import json

from ..core.errors import (
    ChatTemplateError,
    HeadSizeError,
    ModelFilesError,
    UnsupportedModelError,
    VocabularyMismatchError,
)
from ..inputs import vocab_map
from ..inputs.user_text import SENTINEL, template_pieces

# config.json model_type -> the family name of each drafter the toolkit drafts with
DRAFTERS = {"qwen3_vl": "Qwen3-VL"}
# A tokenizer is complete with one of these sets of files (tokenizer.json: fast; the others convert to it).
TOKENIZER_SETS = (
    ("tokenizer.json",),
    ("vocab.json", "merges.txt"),
    ("tokenizer.model",),
)
# The image processor of a Qwen3-VL drafter (AutoProcessor reads it).
PROCESSOR_FILE = "preprocessor_config.json"
# The attention backends vLLM 0.19 selects on a CUDA GPU for a decoder (platforms/cuda.py, priority order) that
# this toolkit's drafter passes plan metadata for (docs/gpu-and-vllm.md; the doctor runs each).
GPU_ATTENTION = ("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN")
MODELS_DOC = "docs/models.md"


def check_folders(
    drafter: str,
    verifier: str,
    text_drafter: str | None,
    backend: str,
    images: bool = True,
) -> None:
    """The checks on config.json and the files present; raises the first gap's typed error. images=False: the
    pair serves text-only requests, and the drafter may be a text-only model."""
    roles = {"drafter": drafter, "verifier": verifier, "text_drafter": text_drafter}
    roles = {role: name for role, name in roles.items() if name is not None}
    configs = {role: read_config(role, name) for role, name in roles.items()}
    check_drafter_family(drafter, configs["drafter"], images)
    reads_images = "vision_config" in configs["drafter"]
    if reads_images and model_file(drafter, PROCESSOR_FILE) is None:
        raise ModelFilesError(
            f"drafter {drafter!r} has no {PROCESSOR_FILE}: the Qwen3-VL image processor reads the image "
            f"from it; copy {PROCESSOR_FILE} from the model's release "
            "(e.g. Qwen/Qwen3-VL-2B-Instruct) into the folder"
        )
    for role, name in roles.items():
        check_tokenizer_files(role, name)
    if backend == "vllm":
        check_head_sizes({role: (roles[role], cfg) for role, cfg in configs.items()})


def check_tokenizers(
    drafter_processor, verifier_tokenizer, drafter: str, verifier: str
) -> None:
    """The chat templates, read from the loaded tokenizers (no weights): each frames a user message verbatim
    once, and the verifier's closes an assistant turn with a special token (answer_end)."""
    # the drafter frames x_full (an image and text; a text-only drafter text alone), the verifier x_comp (text)
    image_and_text = [{"type": "image"}, {"type": "text", "text": SENTINEL}]
    reads_images = hasattr(drafter_processor, "image_processor")
    for role, name, owner, content in (
        (
            "drafter",
            drafter,
            drafter_processor,
            image_and_text if reads_images else SENTINEL,
        ),
        ("verifier", verifier, verifier_tokenizer, SENTINEL),
    ):
        if not getattr(owner, "chat_template", None):
            raise ChatTemplateError(
                f"{role} {name!r} has no chat template (tokenizer_config.json's chat_template, or "
                f"chat_template.jinja): its prompts are framed by it; copy the template of the model's "
                f"instruct release into the folder (a base model without one cannot be a {role}; {MODELS_DOC})"
            )
        try:
            template_pieces(owner, content)
        except ChatTemplateError as e:
            raise ChatTemplateError(f"{role} {name!r}: {e} ({MODELS_DOC})") from None
        except (
            Exception
        ) as e:  # the template itself raised (a jinja error, raise_exception)
            raise ChatTemplateError(
                f"the chat template of {role} {name!r} cannot frame a one-turn user message: "
                f"{type(e).__name__}: {e} ({MODELS_DOC})"
            ) from None
    answer_end(verifier_tokenizer, verifier)


def answer_end(tokenizer, name: str = "verifier") -> int:
    """The special token the chat template closes an assistant turn with (Qwen <|im_end|>, Llama-3 <|eot_id|>,
    Mistral </s>, Gemma <end_of_turn>), read as the vocabulary map reads it (vocab_map.answer_end).
    ChatTemplateError when there is none (the answer could never end at the turn's end)."""
    try:
        end, _ = vocab_map.answer_end(tokenizer, repr(name), len(tokenizer))
    except VocabularyMismatchError as e:
        raise ChatTemplateError(f"{e} ({MODELS_DOC})") from None
    return end


def check_drafter_family(drafter: str, config: dict, images: bool = True) -> None:
    """The drafter is a model the toolkit drafts with (DRAFTERS), or with images=False a text-only model (text-only
    AsymSpec); otherwise one UnsupportedModelError."""
    kind = config.get("model_type")
    if kind in DRAFTERS:
        return
    arch = ", ".join(config.get("architectures") or []) or "no architectures"
    if "vision_config" not in config:
        if not images:
            return
        raise UnsupportedModelError(
            f"drafter {drafter!r} is a text-only {kind} model ({arch}); the drafter must be a Qwen3-VL model "
            "(config.json model_type qwen3_vl, e.g. Qwen/Qwen3-VL-2B-Instruct), since it reads the image. A "
            "text-only model of the drafter's vocabulary drafts for SD as the text drafter (text_drafter=, "
            "--text-drafter); any text-only model drafts for text-only requests with "
            f"from_pretrained(..., images=False); {MODELS_DOC}"
        )
    raise UnsupportedModelError(
        f"drafter {drafter!r} is a {kind} vision-language model ({arch}); the drafter must be Qwen3-VL today "
        "(config.json model_type qwen3_vl): its image inputs, M-RoPE positions and vLLM hooks are Qwen3-VL's. "
        f"{MODELS_DOC} says what another family would need"
    )


def check_tokenizer_files(role: str, name: str) -> None:
    """One of TOKENIZER_SETS is present whole; otherwise one ModelFilesError naming what is there and missing."""
    present = {f for files in TOKENIZER_SETS for f in files if model_file(name, f)}
    if any(all(f in present for f in files) for files in TOKENIZER_SETS):
        return
    found = f"it has only {', '.join(sorted(present))}" if present else "it has none"
    raise ModelFilesError(
        f"{role} {name!r} has no complete tokenizer ({found}; a tokenizer is tokenizer.json, or vocab.json "
        "with merges.txt, or tokenizer.model): copy the tokenizer files of the model's release "
        "(tokenizer.json, tokenizer_config.json) into the folder"
    )


def head_size(config: dict) -> int:
    """The attention head size of a model's text stack as vLLM reads it (model_arch_config_convertor.py
    get_head_size): head_dim, else hidden_size_per_head, else hidden_size // num_attention_heads."""
    text = config.get("text_config") or config
    for key in ("head_dim", "hidden_size_per_head"):
        if text.get(key) is not None:
            return int(text[key])
    heads = int(text.get("num_attention_heads") or 0)
    return int(text["hidden_size"]) // heads if heads else 0


def check_head_sizes(models: dict[str, tuple[str, dict]], platform=None) -> None:
    """Every model's head size runs on this vLLM platform's attention (runs_head_size); models: role -> (name,
    config). platform: vLLM's current_platform, or a stand-in."""
    if platform is None:
        from vllm.platforms import current_platform  # lazy: loads vLLM

        platform = current_platform
    backends = attention_backends(platform)
    for role, (name, config) in models.items():
        size = head_size(config)
        if any(b.supports_head_size(size) for b in backends.values()):
            continue
        if platform.is_cpu():
            sizes = backends["CPU_ATTN"].get_supported_head_sizes()
            runs = f"vLLM 0.19's CPU attention (CPU_ATTN) runs head sizes {sizes}"
        else:
            tried = ", ".join(backends) or "none importable"
            runs = (
                f"no attention backend vLLM 0.19 selects on this GPU takes it ({tried}: FLASH_ATTN "
                "multiples of 8 up to 256, FLASHINFER 64/128/256, TRITON_ATTN 32 and up)"
            )
        raise HeadSizeError(
            f"{role} {name!r} has attention head size {size}; {runs}, so the engine would fail on its first "
            "request: use the transformers backend (backend='hf', --backend hf), which runs every head size, "
            f"or a model of a supported head size ({MODELS_DOC})"
        )


def attention_backends(platform) -> dict:
    """Name -> vLLM attention backend class this platform may select for a decoder layer: CPU_ATTN on the CPU
    build (platforms/cpu.py returns it for every model, validating nothing), GPU_ATTENTION on CUDA (those that
    import here)."""
    from vllm.v1.attention.backends.registry import (  # lazy: loads vLLM
        AttentionBackendEnum,
    )

    names = ("CPU_ATTN",) if platform.is_cpu() else GPU_ATTENTION
    out = {}
    for n in names:
        try:
            out[n] = AttentionBackendEnum[n].get_class()
        except ImportError:  # e.g. flashinfer not installed: vLLM skips it too
            continue
    return out


def read_config(role: str, name: str) -> dict:
    """config.json of a folder or a hub id (the file alone; locate already checked it exists)."""
    path = model_file(name, "config.json")
    if path is None:
        raise ModelFilesError(
            f"{role} {name!r} has no config.json: pass the model's folder or hub id ({MODELS_DOC})"
        )
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise ModelFilesError(
            f"{role} {name!r}: config.json cannot be read as JSON ({e}): copy it again from the model's release"
        ) from None


def model_file(name: str, filename: str) -> str | None:
    """The local path of `filename` in a model folder or a hub id's snapshot (fetched if the hub answers), or
    None where the model has no such file."""
    from transformers.utils import cached_file  # lazy: loads transformers

    return cached_file(
        name,
        filename,
        _raise_exceptions_for_missing_entries=False,
        _raise_exceptions_for_connection_errors=False,
    )
