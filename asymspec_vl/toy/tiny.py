"""Write tiny random Qwen3 / Qwen3-VL model folders (shared tokenizer, processor files) that load offline."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the doctor's help reads TinySizes without torch
    import torch

QWEN_SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
THINK_TOKENS = ["<think>", "</think>"]  # ordinary added tokens in Qwen3, as here

# Qwen-style chat templates (ChatML). The verifier's honours enable_thinking=False like Qwen3's.
TEXT_CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- else -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'text' -%}{{- part['text'] -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}"
    "{{- '<think>\\n\\n</think>\\n\\n' -}}{%- endif -%}{%- endif -%}"
)
VL_CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- else -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'image' or 'image' in part -%}"
    "{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}"
    "{%- elif part['type'] == 'text' -%}{{- part['text'] -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

_WORDS = (
    "the a an of to in is are what which how many much value number image picture figure chart "
    "table graph bar line plot axis label title caption text question answer choice choices option "
    "hint please think step by step then give final first second third left right top bottom "
    "color red green blue yellow black white shape circle square triangle angle degree length "
    "area sum total difference largest smallest more less than equal and or not this that there "
    "shown below above given find measure point points segment side sides digit digits year percent"
)


@dataclass(frozen=True)
class TinySizes:
    """Widths of the tiny models (head_dim 32: vLLM's CPU attention accepts it)."""

    hidden: int = 64
    layers: int = 2
    heads: int = 2
    kv_heads: int = 1
    head_dim: int = 32
    intermediate: int = 128
    vision_hidden: int = 32
    vision_depth: int = 2
    max_position: int = 4096
    image_min_pixels: int = 32 * 32
    image_max_pixels: int = 128 * 128


# Qwen2/Qwen3's pre-tokenization pattern: every digit is its own piece (so numbers are digit sequences).
QWEN_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def train_tokenizer(
    corpus: list[str], vocab_size: int = 1024, qwen_split: bool = False
):
    """A byte-level BPE tokenizer with Qwen's special tokens, wrapped as Qwen2TokenizerFast.
    qwen_split: pre-tokenize with Qwen's own pattern (single-digit number tokens) instead of GPT-2's."""
    from tokenizers import (
        Regex,
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        trainers,
    )  # lazy: loads tokenizers
    from transformers import Qwen2TokenizerFast  # lazy: loads transformers

    tok = Tokenizer(models.BPE())
    if qwen_split:
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(
                    Regex(QWEN_SPLIT_PATTERN), behavior="isolated", invert=False
                ),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(
            add_prefix_space=False, use_regex=True
        )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=QWEN_SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    wrapped = Qwen2TokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        additional_special_tokens=QWEN_SPECIAL_TOKENS[1:],
    )
    wrapped.add_tokens(THINK_TOKENS)
    wrapped.chat_template = TEXT_CHAT_TEMPLATE
    return wrapped


def default_corpus() -> list[str]:
    words = _WORDS.split()
    lines = [" ".join(words[i : i + 12]) for i in range(0, len(words), 5)]
    lines += [f"{i} + {i + 7} = {2 * i + 7}. The answer is {i}." for i in range(200)]
    lines += ["Question: " + w + "? Answer: " + w.upper() for w in words]
    return lines


def _text_config(
    tokenizer, s: TinySizes, vocab_size: int | None = None, **extra
) -> dict:
    return dict(
        vocab_size=vocab_size or len(tokenizer),
        hidden_size=s.hidden,
        intermediate_size=s.intermediate,
        num_hidden_layers=s.layers,
        num_attention_heads=s.heads,
        num_key_value_heads=s.kv_heads,
        head_dim=s.head_dim,
        max_position_embeddings=s.max_position,
        rope_theta=1_000_000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        hidden_act="silu",
        bos_token_id=None,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.pad_token_id,
        **extra,
    )


def text_model(
    tokenizer, sizes: TinySizes = TinySizes(), seed: int = 0, wide_init: bool = True
):
    """A random Qwen3ForCausalLM (wide_init=False: transformers' own initialisation, for training)."""
    import torch  # lazy: loads torch
    from transformers import Qwen3Config, Qwen3ForCausalLM  # lazy: loads transformers

    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(
        Qwen3Config(**_text_config(tokenizer, sizes), dtype="float32")
    )
    if wide_init:
        _init_weights(model, seed)
    return model


def write_text_model(
    out: Path, tokenizer, sizes: TinySizes = TinySizes(), seed: int = 0, model=None
) -> Path:
    """A Qwen3ForCausalLM folder (the verifier, or a text drafter): random, or `model` (e.g. trained)."""
    model = model if model is not None else text_model(tokenizer, sizes, seed)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def vl_model(
    tokenizer,
    sizes: TinySizes = TinySizes(),
    seed: int = 0,
    wide_init: bool = True,
    vocab_size: int | None = None,
):
    """A random Qwen3VLForConditionalGeneration (wide_init=False: transformers' own initialisation; vocab_size:
    its rows, default one per token)."""
    import torch  # lazy: loads torch
    from transformers import (
        Qwen3VLConfig,
        Qwen3VLForConditionalGeneration,
    )  # lazy: loads transformers

    ids = tokenizer.convert_tokens_to_ids
    half = (
        sizes.head_dim // 2
    )  # mrope sections (t, h, w) sum to head_dim / 2, interleaved as in Qwen3-VL
    section = [half - 2 * (half * 5 // 16), half * 5 // 16, half * 5 // 16]
    text = _text_config(
        tokenizer,
        sizes,
        vocab_size,
        rope_scaling={
            "rope_type": "default",
            "mrope_section": section,
            "mrope_interleaved": True,
        },
    )
    vision = dict(
        depth=sizes.vision_depth,
        hidden_size=sizes.vision_hidden,
        intermediate_size=2 * sizes.vision_hidden,
        num_heads=2,
        patch_size=16,
        spatial_merge_size=2,
        temporal_patch_size=2,
        out_hidden_size=sizes.hidden,
        num_position_embeddings=576,
        deepstack_visual_indexes=list(range(min(2, sizes.vision_depth))),
    )
    config = Qwen3VLConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=ids("<|image_pad|>"),
        video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"),
        vision_end_token_id=ids("<|vision_end|>"),
        tie_word_embeddings=True,
        dtype="float32",
    )
    torch.manual_seed(seed)
    model = Qwen3VLForConditionalGeneration(config)
    if wide_init:
        _init_weights(model, seed)
    return model


def write_vl_model(
    out: Path,
    tokenizer,
    sizes: TinySizes = TinySizes(),
    seed: int = 0,
    model=None,
    vocab_size: int | None = None,
    chat_template: str = VL_CHAT_TEMPLATE,
) -> Path:
    """A Qwen3VLForConditionalGeneration folder with processor files (the drafter): random, or `model`
    (vocab_size: its rows, default one per token; chat_template: the processor's)."""
    # lazy: loads transformers
    from transformers import (
        Qwen2VLImageProcessorFast,
        Qwen3VLProcessor,
        Qwen3VLVideoProcessor,
    )

    if model is None:
        model = vl_model(tokenizer, sizes, seed, vocab_size=vocab_size)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)

    pixels = {
        "shortest_edge": sizes.image_min_pixels,
        "longest_edge": sizes.image_max_pixels,
    }
    image_processor = Qwen2VLImageProcessorFast(
        patch_size=16,
        temporal_patch_size=2,
        merge_size=2,
        size=pixels,
        image_mean=[0.5] * 3,
        image_std=[0.5] * 3,
    )
    video_processor = Qwen3VLVideoProcessor(
        patch_size=16,
        temporal_patch_size=2,
        merge_size=2,
        size=pixels,
        image_mean=[0.5] * 3,
        image_std=[0.5] * 3,
    )
    processor = Qwen3VLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        chat_template=chat_template,
    )
    processor.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "chat_template.jinja").write_text(chat_template)
    return out


def _init_weights(model: torch.nn.Module, seed: int, std: float = 0.5) -> None:
    """Wider-than-default random weights so the tiny models' distributions are far from uniform."""
    import torch  # lazy: loads torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.copy_(
                    torch.randn(p.shape, generator=g) * std / p.shape[-1] ** 0.5 * 4
                )


def write_tiny_models(
    out_dir: str | Path,
    seed: int = 0,
    sizes: TinySizes = TinySizes(),
    corpus: list[str] | None = None,
    verifier_sizes: TinySizes | None = None,
) -> dict[str, Path]:
    """Write verifier/, text_drafter/ and vl_drafter/ under out_dir; return their paths. verifier_sizes: the
    verifier's own widths (default: sizes), e.g. more query heads than the drafter as in Qwen3-32B (64 query /
    8 KV heads) against Qwen3-VL-2B (16 / 8)."""
    out = Path(out_dir)
    tokenizer = train_tokenizer(corpus or default_corpus())
    paths = {
        "verifier": write_text_model(
            out / "verifier", tokenizer, verifier_sizes or sizes, seed=seed + 1
        ),
        "text_drafter": write_text_model(
            out / "text_drafter",
            tokenizer,
            TinySizes(**{**sizes.__dict__, "layers": 1}),
            seed=seed + 2,
        ),
        "vl_drafter": write_vl_model(
            out / "vl_drafter", tokenizer, sizes, seed=seed + 3
        ),
    }
    (out / "tiny_models.json").write_text(
        json.dumps(
            {
                "seed": seed,
                "sizes": sizes.__dict__,
                "verifier_sizes": (verifier_sizes or sizes).__dict__,
                "vocab_size": len(tokenizer),
                "paths": {k: str(v.name) for k, v in paths.items()},
            },
            indent=2,
        )
    )
    return paths
