"""The toy verifier of another family: a tiny LlamaForCausalLM with its own tokenizer (a SentencePiece-style BPE:
"▁" for spaces, single digits, punctuation kept on its word, as Llama-2's) and Llama-3's chat template and turn
markers (<|start_header_id|>, <|eot_id|>). Trained on the toy text, its vocabulary shares only part of the toy
drafter's (digits and words: " the" is "Ġthe" there and "▁the" here), so the pair runs across the vocabulary map."""

from __future__ import annotations

import string
from pathlib import Path

from .tiny import TinySizes

LLAMA_SPECIAL_TOKENS = [
    "<unk>",
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<|finetune_right_pad_id|>",
]
# Llama-3's chat template (no system prompt unless given; content as text parts or a string).
LLAMA_CHAT_TEMPLATE = (
    "{{- '<|begin_of_text|>' -}}"
    "{%- for message in messages -%}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- else -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'text' -%}{{- part['text'] -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{- '<|eot_id|>' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}{%- endif -%}"
)
SPACE = "▁"
# Every printable ASCII character but the space (read as "▁"), the newline and the toy world's "×": one token
# each, so no text of the toy world is unknown.
ALPHABET = [c for c in string.printable if c not in string.whitespace] + [
    "\n",
    "×",
    SPACE,
]


def train_llama_tokenizer(corpus: list[str], vocab_size: int = 300):
    """A SentencePiece-style BPE tokenizer trained on corpus, wrapped as PreTrainedTokenizerFast with Llama-3's
    special tokens and chat template (EOS <|eot_id|>: the end of a chat turn, as Llama-3-Instruct stops)."""
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        trainers,
    )  # lazy: loads tokenizers
    from transformers import PreTrainedTokenizerFast  # lazy: loads transformers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.Replace(" ", SPACE)
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(SPACE, behavior="merged_with_next"),
            pre_tokenizers.Digits(individual_digits=True),
        ]
    )
    # Llama-2's decoder without its Strip (which drops a leading token's space: decode(["▁the"]) would be "the"):
    # the same strings as a bare Replace (this vocabulary has no "<0xNN>" pieces), and the shape by which
    # xgrammar (vLLM's structured outputs) types the vocabulary BYTE_FALLBACK, "▁" read as a space.
    tok.decoder = decoders.Sequence(
        [decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    )
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=LLAMA_SPECIAL_TOKENS,
        initial_alphabet=ALPHABET,
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|begin_of_text|>",
        eos_token="<|eot_id|>",
        unk_token="<unk>",
        pad_token="<|finetune_right_pad_id|>",
        additional_special_tokens=LLAMA_SPECIAL_TOKENS[1:],
    )
    wrapped.chat_template = LLAMA_CHAT_TEMPLATE
    return wrapped


def llama_model(tokenizer, sizes: TinySizes, seed: int = 0):
    """A random LlamaForCausalLM (transformers' own initialisation) over the tokenizer's vocabulary."""
    import torch  # lazy: loads torch
    from transformers import LlamaConfig, LlamaForCausalLM  # lazy: loads transformers

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=sizes.hidden,
        intermediate_size=sizes.intermediate,
        num_hidden_layers=sizes.layers,
        num_attention_heads=sizes.heads,
        num_key_value_heads=sizes.kv_heads,
        head_dim=sizes.head_dim,
        max_position_embeddings=sizes.max_position,
        rope_theta=500_000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        hidden_act="silu",
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        dtype="float32",
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)


def write_llama_model(
    out: Path, tokenizer, sizes: TinySizes, seed: int = 0, model=None
) -> Path:
    """A LlamaForCausalLM folder with its tokenizer: random, or `model` (e.g. trained)."""
    model = model if model is not None else llama_model(tokenizer, sizes, seed)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
