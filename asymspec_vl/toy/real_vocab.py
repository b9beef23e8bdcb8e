"""Real-shape fixtures: the real Qwen3 / Qwen3-VL, Llama-3, Mistral Tekken and SentencePiece v3 tokenizers (built
offline from packages) in tiny random-weight model folders with each family's real row count, special ids, chat
template and generation config, loadable by transformers and vLLM. Gemma's tokenizer ships in no package we reach
offline, so no Gemma family here."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from ..core.errors import ConfigError
from . import real_sources as src
from . import real_templates as tpl

FAMILIES = ("qwen3", "llama3", "mistral-tekken", "mistral-sp")
# name -> (drafter family, verifier family)
REAL_PAIRS = {
    "real-qwen3": ("qwen3", "qwen3"),
    "real-llama3": ("qwen3", "llama3"),
    "real-tekken": ("qwen3", "mistral-tekken"),
    "real-mistral-sp": ("qwen3", "mistral-sp"),
}
# The family's embedding rows (config.json vocab_size of its real models).
ROWS = {
    "qwen3": 151_936,
    "llama3": 128_256,
    "mistral-tekken": 131_072,
    "mistral-sp": 32_768,
}
MANIFEST = Path(__file__).with_name("real_manifest.json")

# generation_config.json of the real models (Qwen3-8B, Qwen3-VL-2B-Instruct, Llama-3.1-8B-Instruct,
# Mistral-7B-Instruct-v0.3, Mistral-Nemo-Instruct-2407), their sampling defaults included.
GENERATION = {
    "qwen3": {
        "bos_token_id": 151643,
        "do_sample": True,
        "eos_token_id": [151645, 151643],
        "pad_token_id": 151643,
        "temperature": 0.6,
        "top_k": 20,
        "top_p": 0.95,
    },
    "qwen3-vl": {
        "bos_token_id": 151643,
        "do_sample": True,
        "eos_token_id": [151645, 151643],
        "pad_token_id": 151643,
        "temperature": 0.7,
        "top_k": 20,
        "top_p": 0.8,
        "repetition_penalty": 1.0,
    },
    "llama3": {
        "bos_token_id": 128000,
        "do_sample": True,
        "eos_token_id": [128001, 128008, 128009],
        "temperature": 0.6,
        "top_p": 0.9,
    },
    "mistral-tekken": {"bos_token_id": 1, "eos_token_id": 2},
    "mistral-sp": {"bos_token_id": 1, "eos_token_id": 2},
}


# config.json's transformers_version of those real models (transformers 4.57.3+ warns of "an incorrect regex
# pattern" for any local folder over 100,000 tokens that a 4.57.3+ saved: kept as the real folders have it).
SAVED_BY = {
    "qwen3": "4.51.0",
    "qwen3-vl": "4.57.0.dev0",
    "llama3": "4.43.0.dev0",
    "mistral-tekken": "4.43.0.dev0",
    "mistral-sp": "4.42.0.dev0",
}


def _check_family(family: str) -> None:
    if family not in FAMILIES:
        raise ConfigError(
            f"unknown real family {family!r}; choose one of {', '.join(FAMILIES)}"
        )


def manifest() -> dict:
    """{family: {"tokenizer_json_sha256", "source"}} as checked in."""
    return json.loads(MANIFEST.read_text())["tokenizers"]


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _wrap(tok, family: str):
    """The family's PreTrainedTokenizerFast (special-token roles, chat template) around a tokenizers.Tokenizer."""
    from transformers import (  # lazy: loads transformers
        PreTrainedTokenizerFast,
        Qwen2TokenizerFast,
    )

    if family == "qwen3":
        specials = [name for name, special in src.QWEN_ADDED if special]
        wrapped = Qwen2TokenizerFast(
            tokenizer_object=tok,
            bos_token=None,
            eos_token="<|im_end|>",
            pad_token="<|endoftext|>",
            unk_token=None,
            additional_special_tokens=specials[1:],
            errors="replace",
            clean_up_tokenization_spaces=False,
            split_special_tokens=False,
            model_max_length=131072,
        )
        wrapped.chat_template = tpl.QWEN3_CHAT_TEMPLATE
    elif family == "llama3":
        wrapped = PreTrainedTokenizerFast(
            tokenizer_object=tok,
            bos_token="<|begin_of_text|>",
            eos_token="<|eot_id|>",
            clean_up_tokenization_spaces=True,
            model_input_names=["input_ids", "attention_mask"],
            model_max_length=131072,
        )
        wrapped.chat_template = tpl.LLAMA3_CHAT_TEMPLATE
    else:
        wrapped = PreTrainedTokenizerFast(
            tokenizer_object=tok,
            bos_token="<s>",
            eos_token="</s>",
            unk_token="<unk>",
            clean_up_tokenization_spaces=False,
            model_max_length=32768 if family == "mistral-sp" else 1024000,
        )
        wrapped.chat_template = (
            tpl.MISTRAL_SP_CHAT_TEMPLATE
            if family == "mistral-sp"
            else tpl.MISTRAL_TEKKEN_CHAT_TEMPLATE
        )
    return wrapped


def _build_tokenizer(family: str):
    """The family's tokenizers.Tokenizer, its ids the real ones."""
    from tokenizers import AddedToken, processors  # lazy: loads tokenizers

    if family == "qwen3":
        tok = src.byte_level_bpe(src.qwen_ranks(), src.QWEN_PATTERN)
        assert tok.get_vocab_size() == src.QWEN_FIRST_ADDED
        tok.add_tokens(
            [AddedToken(n, special=s, normalized=False) for n, s in src.QWEN_ADDED]
        )
        return tok
    if family == "llama3":
        ranks, specials = src.llama3_ranks()
        tok = src.byte_level_bpe(ranks, src.LLAMA3_PATTERN)
        assert [i for i, _ in specials] == list(
            range(len(ranks), len(ranks) + len(specials))
        )
        tok.add_special_tokens(
            [AddedToken(n, special=True, normalized=False) for _, n in specials]
        )
        # Llama-3's tokenizer.json prepends <|begin_of_text|> (add_special_tokens=True), as transformers' converter
        tok.post_processor = processors.Sequence(
            [
                processors.ByteLevel(trim_offsets=False),
                processors.TemplateProcessing(
                    single="<|begin_of_text|> $A",
                    pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                    special_tokens=[("<|begin_of_text|>", 128000)],
                ),
            ]
        )
        return tok
    if family == "mistral-tekken":
        ranks, names, pattern = src.tekken_ranks()
        tok = src.byte_level_bpe(ranks, pattern, offset=len(names), leading=names)
        tok.add_special_tokens(
            [AddedToken(n, special=True, normalized=False) for n in names]
        )
        tok.post_processor = processors.TemplateProcessing(
            single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)]
        )
        return tok
    from transformers import (
        LlamaTokenizerFast,
    )  # lazy: loads transformers (and sentencepiece's converter)

    # SentencePiece v3 through LlamaTokenizerFast (legacy=False, "▁" prepended to the first word, as
    # Mistral-7B-Instruct-v0.3's tokenizer.json does)
    fast = LlamaTokenizerFast(
        vocab_file=str(src.mistral_sp_file()),
        legacy=False,
        from_slow=True,
        add_bos_token=True,
        add_prefix_space=True,
    )
    return fast.backend_tokenizer


def _write_tokenizer(family: str, out: Path) -> None:
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    wrapped = _wrap(_build_tokenizer(family), family)
    wrapped.save_pretrained(tmp)
    gen = GENERATION[family]
    (tmp / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def real_tokenizer_dir(family: str, cache: Path) -> Path:
    """A folder with the family's tokenizer.json, tokenizer_config.json (its real chat template),
    special_tokens_map.json and generation_config.json (its real EOS ids); built offline under `cache`, reused
    while its tokenizer.json's sha256 is the manifest's."""
    _check_family(family)
    out = Path(cache) / "tokenizers" / family
    want = manifest()[family]["tokenizer_json_sha256"]
    if not (
        (out / "tokenizer.json").is_file() and sha256(out / "tokenizer.json") == want
    ):
        _write_tokenizer(family, out)
    return out


def real_tokenizer(family: str, cache: Path):
    """The family's PreTrainedTokenizerFast, loaded from real_tokenizer_dir."""
    from transformers import AutoTokenizer  # lazy: loads transformers

    return AutoTokenizer.from_pretrained(real_tokenizer_dir(family, cache))


def _sizes():
    from .tiny import TinySizes

    # head_dim 32 (vLLM's CPU attention runs it); narrow: a real vocabulary is most of the weights
    return TinySizes(
        hidden=64, layers=2, heads=2, kv_heads=1, head_dim=32, intermediate=128
    )


def _verifier_config(family: str, tokenizer, seed: int):
    """A random verifier of the family's architecture and row count."""
    import torch  # lazy: loads torch
    from transformers import (  # lazy: loads transformers
        LlamaConfig,
        LlamaForCausalLM,
        MistralConfig,
        MistralForCausalLM,
        Qwen3Config,
        Qwen3ForCausalLM,
    )

    s = _sizes()
    gen = GENERATION[family]
    eos = gen["eos_token_id"]
    common = dict(
        vocab_size=ROWS[family],
        hidden_size=s.hidden,
        intermediate_size=s.intermediate,
        num_hidden_layers=s.layers,
        num_attention_heads=s.heads,
        num_key_value_heads=s.kv_heads,
        head_dim=s.head_dim,
        max_position_embeddings=s.max_position,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        hidden_act="silu",
        bos_token_id=gen["bos_token_id"],
        eos_token_id=eos,
        dtype="float32",
    )
    if family == "qwen3":
        cls, cfg = (
            Qwen3ForCausalLM,
            Qwen3Config(**{**common, "rms_norm_eps": 1e-6}, rope_theta=1_000_000.0),
        )
        cfg.eos_token_id, cfg.pad_token_id = 151645, None
    elif family == "llama3":
        cls = LlamaForCausalLM
        rope = {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        }
        # Llama-3.1's rope scaling needs a context past its original 8,192
        cfg = LlamaConfig(
            **{**common, "max_position_embeddings": 16384},
            rope_theta=500_000.0,
            rope_scaling=rope,
        )
    else:
        cls = MistralForCausalLM
        theta = 1_000_000.0
        cfg = MistralConfig(**common, rope_theta=theta, sliding_window=None)
    torch.manual_seed(seed)
    return cls(cfg)


def _write_generation_config(out: Path, family: str) -> None:
    (out / "generation_config.json").write_text(
        json.dumps(GENERATION[family], indent=2) + "\n"
    )


def real_model_dir(family: str, role: str, cache: Path, seed: int = 0) -> Path:
    """A tiny random model folder of the family with its real tokenizer and rows. role "drafter" (qwen3 only): a
    Qwen3VLForConditionalGeneration (151,936 rows, Qwen3-VL's chat template and special ids, a small pixel budget);
    "verifier": Qwen3ForCausalLM / LlamaForCausalLM / MistralForCausalLM. Seeded; built once under `cache`."""
    _check_family(family)
    if role not in ("drafter", "verifier"):
        raise ConfigError(f"role must be 'drafter' or 'verifier', got {role!r}")
    if role == "drafter" and family != "qwen3":
        raise ConfigError(
            f"a real drafter is a Qwen3-VL model: family must be 'qwen3' for role 'drafter', got {family!r}"
        )
    tok_dir = real_tokenizer_dir(family, cache)
    out = Path(cache) / "models" / f"{family}-{role}-{seed}"
    stamp = {
        "family": family,
        "role": role,
        "seed": seed,
        "tokenizer_json_sha256": sha256(tok_dir / "tokenizer.json"),
    }
    if (out / "real_model.json").is_file() and json.loads(
        (out / "real_model.json").read_text()
    ) == stamp:
        return out
    from transformers import AutoTokenizer  # lazy: loads transformers

    from .tiny import _init_weights, write_vl_model

    tokenizer = AutoTokenizer.from_pretrained(tok_dir)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    if role == "drafter":
        write_vl_model(
            tmp,
            tokenizer,
            _sizes(),
            seed=seed,
            vocab_size=ROWS[family],
            chat_template=tpl.QWEN3_VL_CHAT_TEMPLATE,
        )
        _write_generation_config(tmp, "qwen3-vl")
    else:
        model = _verifier_config(family, tokenizer, seed)
        _init_weights(model, seed)
        tmp.mkdir(parents=True)
        model.save_pretrained(tmp)
        for f in tok_dir.iterdir():
            shutil.copy(f, tmp / f.name)
    config = json.loads((tmp / "config.json").read_text())
    config["transformers_version"] = SAVED_BY["qwen3-vl" if role == "drafter" else family]
    (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (tmp / "real_model.json").write_text(json.dumps(stamp, indent=2) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out
